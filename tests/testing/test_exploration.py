"""Strategies, exploration, shrinking, tapes, the command line, and thread timing.

Each planted race in ``scenarios.races`` is a plain asyncio program; these tests
check that every strategy finds one, that a failure shrinks to the fewest
deviations and replays from its tape (also from the tapes recorded on
CPython 3.11 in ``tapes/``, on whatever interpreter runs this: thread
races too, since a thread's result is held by timer firings, not by real
time), that a
correct program never fails and a bounded systematic search says so, and
that thread results are ordered as a slow thread's would be, never more.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from children import python_env, run_python
from scenarios.races import CONTROL, LATENT, RACES, Planted, two_clients_in_order
from tideloop import testing
from tideloop.testing import (
    DecisionLog,
    PCTStrategy,
    RandomStrategy,
    ReplayStrategy,
    Strategy,
    Tape,
)
from tideloop.testing._explore import RunTimeout, attempt, shrink_deviations
from tideloop.testing._search import STRATEGIES, Options, Recipe
from tideloop.testing._strategy import Point

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
TAPES = HERE / "tapes"

# ----------------------------------------------------------------------
# Strategies


def test_a_seed_makes_the_same_decisions_and_replay_makes_only_its_own() -> None:
    points = [("fd", 0, i % 3, i) for i in range(200)]
    weights = [0.2, 0.1, 0.05]

    def values(strategy: Strategy) -> list[int]:
        return [strategy.choose(p, 4, weights) for p in points]

    first = values(RandomStrategy(5))
    assert first == values(RandomStrategy(5))
    assert first != values(RandomStrategy(6))
    # Close to the weights: about 35% deviate.
    assert 40 < sum(1 for v in first if v) < 110
    replay = ReplayStrategy({points[7]: 2, points[9]: 9})
    assert values(replay) == [2 if i == 7 else 3 if i == 9 else 0 for i in range(200)]


def test_pct_deviates_at_exactly_depth_points() -> None:
    for seed in range(20):
        strategy = PCTStrategy(seed, depth=3, length=50)
        chosen = [strategy.choose(("tie", 0, i), 3, [0.5, 0.5]) for i in range(50)]
        assert sum(1 for v in chosen if v) == 3
        assert all(0 <= v < 3 for v in chosen)
    with pytest.raises(ValueError):
        PCTStrategy(0, depth=0)


def test_a_strategy_out_of_range_is_refused() -> None:
    class Broken(Strategy):
        def choose(self, point: tuple[object, ...], n: int, weights: object) -> int:
            return n

    log = DecisionLog(Broken())
    with pytest.raises(ValueError, match="chose 2 of 2"):
        log.choose(("tie", 0, 0), 2, [0.5], lambda v: "")


def test_every_strategy_of_a_search_is_one_entry_of_the_registry() -> None:
    assert STRATEGIES.names == ("random", "pct", "systematic", "coverage")
    assert STRATEGIES.seeded_names() == ("random", "pct")
    for name in STRATEGIES.names:
        recipe = STRATEGIES.get(name)
        search = recipe.search(Options())
        assert isinstance(search.next(7, None), recipe.cls), name
        search.close()  # coverage measures from its first schedule on: stopped
        assert name in STRATEGIES.described()
    with pytest.raises(
        ValueError, match="strategy must be one of random, pct, systematic, coverage, not 'x'"
    ):
        testing.explore(_echo_once, strategy="x")
    with pytest.raises(ValueError, match="one of make"):
        Recipe("neither", RandomStrategy, "")
    systematic = STRATEGIES.get("systematic")
    with pytest.raises(ValueError, match="one of make"):
        Recipe(
            "both",
            ReplayStrategy,
            "",
            make=STRATEGIES.get("random").make,
            enumerate=systematic.enumerate,
        )


def test_the_pct_recipe_measures_an_unperturbed_run_then_keeps_the_longest() -> None:
    recipe = STRATEGIES.get("pct")
    search = recipe.search(Options(depth=3))
    first = search.first()
    assert isinstance(first, ReplayStrategy) and not first.deviations

    def ran(count: int) -> DecisionLog:
        log = DecisionLog(ReplayStrategy({}))
        log.count = count
        return log

    made = search.next(5, ran(40))
    assert isinstance(made, PCTStrategy) and (made.seed, made.depth, made.length) == (5, 3, 40)
    later = search.next(6, ran(10))  # a shorter run does not shorten the spread
    assert isinstance(later, PCTStrategy) and later.length == 40
    # A worker process given the first run's count makes the same schedule.
    again = recipe.strategy(5, Options(depth=3), 40)
    assert isinstance(again, PCTStrategy) and again.describe() == made.describe()
    assert STRATEGIES.get("random").first() is None


def test_ties_are_decisions_only_when_deadlines_are_equal() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + 0.001
        for i in range(20):
            loop.call_at(when + i * 0.001, lambda: None)  # distinct: no decision
        loop.call_at(when, lambda: None)  # ties the first one
        await asyncio.sleep(0.03)

    log = DecisionLog(RandomStrategy(1))
    testing.run(main(), strategy=log)
    assert [d.point[0] for d in log.decisions].count("tie") == 1


# ----------------------------------------------------------------------
# Exploration, shrinking, tapes


@pytest.mark.parametrize("strategy", ["random", "pct", "systematic"])
def test_every_strategy_finds_a_socket_race_and_shrinks_it(strategy: str, tmp_path: Path) -> None:
    found = testing.explore(two_clients_in_order, strategy=strategy, schedules=300)
    assert found.tape is not None, found
    tape = found.tape
    assert len(tape.deviations) == 1  # 1-minimal: the one reordering that matters
    assert "everything else in order" in tape.words()
    assert "AssertionError" in tape.failure
    path = tape.save(tmp_path / "race.json")
    loaded = Tape.load(path)
    assert loaded.to_json() == tape.to_json()
    for _ in range(3):
        with pytest.raises(AssertionError):
            testing.replay(two_clients_in_order, path)
    trace = loaded.trace()
    assert sum(1 for line in trace.splitlines() if line.startswith("*")) == 1
    assert testing.diff(loaded, loaded) == f"the same {len(loaded.decisions)} decisions"


async def _echo_once() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hi\n")
    assert await reader.readline() == b"hi\n"
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()


def test_systematic_search_exhausts_a_correct_program() -> None:
    baseline, exc = attempt(_echo_once, ReplayStrategy({}))
    assert exc is None
    result = testing.explore(_echo_once, strategy="systematic", bound=1, schedules=10_000)
    assert not result.found
    assert result.exhausted
    # Bound 1: the unperturbed run, then each other value of each of its points.
    assert result.schedules == 1 + sum(d.n - 1 for d in baseline.decisions)
    bounded = testing.explore(_echo_once, strategy="systematic", bound=2, schedules=5)
    assert bounded.schedules == 5
    assert not bounded.exhausted  # stopped at the limit: not said to be exhausted


def test_the_control_never_fails() -> None:
    for strategy, n in (("random", 60), ("pct", 40), ("systematic", 60), ("coverage", 60)):
        result = testing.explore(CONTROL.race, strategy=strategy, schedules=n)
        assert result.tape is None, result.tape and result.tape.words()


@pytest.mark.parametrize("planted", RACES, ids=lambda p: p.name)
def test_the_recorded_tape_replays(planted: Planted) -> None:
    """Tapes recorded on CPython 3.11 fail again here, whatever this interpreter."""
    tape = Tape.load(TAPES / f"{planted.name}.json")
    assert tape.python.startswith("3.11") and len(tape.deviations) == 1
    for _ in range(2):
        with pytest.raises(AssertionError):
            testing.replay(planted.race, tape)


def test_a_reused_fd_number_is_a_new_fd_with_its_own_words() -> None:
    """Identity is per open file: a closed number reused by a new socket is a new fd."""
    clients: list[tuple[int, str]] = []

    async def two_connections_one_after_the_other() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"x")
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            sock = writer.get_extra_info("socket")
            clients.append((sock.fileno(), f"127.0.0.1:{sock.getsockname()[1]}"))
            assert await reader.read() == b"x"
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()

    log, exc = attempt(two_connections_one_after_the_other, ReplayStrategy({}))
    assert exc is None
    (fd, first), (fd_again, second) = clients
    assert fd == fd_again  # the kernel gives the lowest free number: reused
    idents = []
    for name in (first, second):
        # The client's points name its own address, with one identity each.
        points = {d.point for d in log.decisions if f"fd {fd} ({name} <- " in d.words}
        assert points, [d.words for d in log.decisions]
        assert len({p[2] for p in points}) == 1
        idents.append(next(iter(points))[2])
    assert idents[0] != idents[1]


def test_a_run_that_hangs_is_a_failure() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()  # nobody sets it; a timer keeps it from a deadlock

    async def scenario() -> None:
        asyncio.get_running_loop().call_later(1000, lambda: None)
        await hangs()

    _, exc = attempt(scenario, ReplayStrategy({}), virtual_time=True, timeout=5)
    assert isinstance(exc, RunTimeout)


# ----------------------------------------------------------------------
# The opt-in wake-up mode: latent races


@pytest.mark.parametrize("planted", LATENT, ids=lambda p: p.name)
def test_a_latent_race_is_found_only_with_wakeups(planted: Planted, tmp_path: Path) -> None:
    # No schedule asyncio can produce of it fails: a bounded search says so.
    assert not testing.explore(planted.race, schedules=100).found
    space = testing.explore(planted.race, strategy="systematic", bound=2, schedules=500)
    assert not space.found and space.exhausted
    for strategy in ("random", "pct", "systematic"):
        found = testing.explore(planted.race, strategy=strategy, schedules=200, wakeups=True)
        assert found.tape is not None, strategy
        tape = found.tape
        assert tape.latent and tape.wakeups
        assert [d.point[0] for d in tape.deviations] == ["wake"]
        assert " late (latent: as if it awaited" in tape.words() and "latent: " in tape.words()
    loaded = Tape.load(tape.save(tmp_path / "latent.json"))
    assert loaded.wakeups and loaded.latent
    for _ in range(2):
        with pytest.raises(AssertionError):
            testing.replay(planted.race, loaded)


def test_a_race_asyncio_can_produce_is_never_called_latent() -> None:
    """The replica race fails on plain schedules too: with the wake-up mode a
    seed may first fail it through a late step, and shrinking then looks for
    the same failure without late steps, finds it, and reports that."""
    replica = next(p for p in RACES if p.name == "read_your_writes_on_a_replica")
    for seed in (0, 2000, 3000):
        found = testing.explore(
            replica.race, strategy="random", schedules=300, seed=seed, wakeups=True
        )
        assert found.tape is not None, seed
        assert not found.tape.latent, found.tape.words()
        assert "latent" not in found.tape.words()
        assert all(d.point[0] != "wake" for d in found.tape.deviations)
        for _ in range(2):
            with pytest.raises(AssertionError):
                testing.replay(replica.race, found.tape)


def fake_run(points: dict[Point, int], failing: Callable[[dict[Point, int]], bool]) -> Any:
    """A `shrink_deviations` *fails* over a run that meets *points* (point -> n)
    and fails when *failing(deviations)*."""

    def fails(candidate: dict[Point, int]) -> DecisionLog | None:
        log = DecisionLog(ReplayStrategy(candidate))
        for point, n in points.items():
            log.choose(point, n, [1.0] * n, lambda v, point=point: f"{point} = {v}")
        devs = {p: d.value for p, d in log.deviations.items()}
        return log if failing(devs) else None

    return fails


def test_latent_only_when_no_plain_schedule_fails() -> None:
    wake: Point = ("wake", 0, 1, 0)
    fd: Point = ("fd", 0, 0, 0)
    tie: Point = ("tie", 0, 0)
    points: dict[Point, int] = {wake: 4, fd: 4, tie: 2}
    # It fails with the late step, and also with the fd deferred twice.
    fails = fake_run(points, lambda d: d.get(wake, 0) > 0 or d.get(fd) == 2)
    start = fails({wake: 1})
    assert start is not None
    best, _ = shrink_deviations(start, fails)
    assert set(best.deviations) == {fd} and best.deviations[fd].value == 2
    assert not Tape.from_log(best).latent
    # Only the late step makes it fail: latent, and every plain single and
    # pair (3 fd values, 1 tie value: 4 singles, 3 pairs) was tried.
    fails = fake_run(points, lambda d: d.get(wake, 0) > 0)
    start = fails({wake: 3, tie: 1})
    assert start is not None
    best, _ = shrink_deviations(start, fails)
    tape = Tape.from_log(best)
    assert set(best.deviations) == {wake} and tape.latent
    assert (tape.plain_tried, tape.plain_space) == (7, 7)
    assert "tried: all 7 single and paired deviations" in tape.words()
    loaded = Tape.from_json(json.loads(json.dumps(tape.to_json())))
    assert loaded.latent and loaded.plain_tried == 7
    # Unchecked (not shrunk): not called latent.
    unchecked = Tape.from_log(start)
    assert not unchecked.latent and "was not checked" in unchecked.words()


def test_the_control_never_fails_with_wakeups() -> None:
    for strategy, n in (("random", 60), ("pct", 40), ("systematic", 60), ("coverage", 60)):
        result = testing.explore(CONTROL.race, strategy=strategy, schedules=n, wakeups=True)
        assert result.tape is None, result.tape and result.tape.words()


def test_a_late_step_keeps_the_order_of_everything_else() -> None:
    """Only task steps move; plain callbacks keep FIFO, and a late step runs."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        for name in "abc":
            loop.call_soon(order.append, name)
        task = asyncio.create_task(asyncio.sleep(0, "step"))
        for name in "de":
            loop.call_soon(order.append, name)
        assert await task == "step"
        await asyncio.sleep(0)
        assert order == list("abcde"), order

    for seed in range(30):
        log = DecisionLog(RandomStrategy(seed))
        testing.run(scenario(), strategy=log, wakeups=True)
        assert all(d.point[0] == "wake" for d in log.decisions)
    late = ReplayStrategy({("wake", 0, 1, 0): 3})
    log, exc = attempt(scenario, late, wakeups=True, virtual_time=True)
    assert exc is None and list(log.deviations) == [("wake", 0, 1, 0)]


def test_wakeups_need_a_schedule() -> None:
    coro = asyncio.sleep(0)
    with pytest.raises(ValueError, match="needs a seed or a strategy"):
        testing.run(coro, wakeups=True)
    coro.close()


def test_shrinking_prefers_a_failure_asyncio_can_produce() -> None:
    """When the other deviations fail without the late steps, they are the report."""
    real: Point = ("fd", 0, 0, 0)
    wake: Point = ("wake", 0, 0, 0)
    tried: list[dict[Point, int]] = []

    def fails(candidate: dict[Point, int]) -> DecisionLog | None:
        tried.append(dict(candidate))
        log = DecisionLog(ReplayStrategy(candidate))
        for point in (real, wake):
            log.choose(point, 4, [0.1] * 3, lambda v: "")
        return log if real in candidate else None  # the fd deviation is the bug

    start = fails({real: 2, wake: 1})
    assert start is not None
    best, _ = shrink_deviations(start, fails)
    assert list(best.deviations) == [real]
    assert tried[1] == {real: 2}  # tried first: the deviations without late steps


# ----------------------------------------------------------------------
# Thread results: ordered as a slow thread's, within the horizon


def _result_vs_timer(delay: float) -> object:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        loop.call_later(delay, order.append, "timer")
        order.append(await asyncio.to_thread(str, "result"))
        await asyncio.sleep(delay + 0.01)
        assert order == ["result", "timer"], order

    return scenario


@pytest.mark.parametrize("virtual_time", [False, True])
def test_a_thread_result_can_come_after_a_timer_within_the_horizon(virtual_time: bool) -> None:
    found = testing.explore(
        _result_vs_timer(0.05),  # type: ignore[arg-type]
        strategy="random",
        schedules=100,
        virtual_time=virtual_time,
    )
    assert found.tape is not None
    # A timing failure, named by the job's function and line and the timer's line.
    tape = found.tape
    assert tape.kind == "timing", tape.words()
    words = tape.words()
    assert "needs `str` (tests/testing/test_exploration.py:" in words, words
    assert "to take more than" in words, words
    assert '`loop.call_later(delay, order.append, "timer")`' in words, words


@pytest.mark.parametrize("virtual_time", [False, True])
def test_a_thread_result_never_comes_after_a_timer_past_the_horizon(virtual_time: bool) -> None:
    # Each real-time schedule sleeps 0.51 s: 20 of them (a held result past
    # the horizon would show within a few: the test above finds its race in
    # 1-4 schedules from each of ten base seeds).
    found = testing.explore(
        _result_vs_timer(0.5),  # type: ignore[arg-type]
        strategy="random",
        schedules=60 if virtual_time else 20,
        virtual_time=virtual_time,
    )
    assert found.tape is None


# ----------------------------------------------------------------------
# Virtual time and threads the loop did not start (ThreadWatch)


def test_virtual_time_waits_for_a_busy_thread() -> None:
    """The issue's case: a thread's 1 ms event under a 20 ms wait_for."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()

        def work() -> None:
            time.sleep(0.001)
            loop.call_soon_threadsafe(event.set)

        thread = threading.Thread(target=work)
        thread.start()
        await asyncio.wait_for(event.wait(), 0.02)
        await asyncio.to_thread(thread.join)
        return loop.time()

    for _ in range(20):
        assert testing.run(main(), virtual_time=True) < 0.02


def test_virtual_time_does_not_wait_for_an_idle_or_endless_thread() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        idle = threading.Thread(target=stop.wait)  # blocked: not a waker by itself

        def spin() -> None:  # busy forever: waited for one grace period, then not
            while not stop.is_set():
                time.sleep(0.005)

        busy = threading.Thread(target=spin)
        idle.start()
        busy.start()
        try:
            for _ in range(3):
                await asyncio.sleep(3600)
        finally:
            stop.set()
            await asyncio.to_thread(idle.join)
            await asyncio.to_thread(busy.join)
        return loop.time()

    # The spinning thread: tideloop cannot tell it waits (it polls), says
    # so once, and moves on.
    with pytest.warns(testing.VirtualTimeWarning, match=r"thread 'Thread-\d+ \(spin\)'"):
        assert testing.run(main(), virtual_time=True) == 3 * 3600


# ----------------------------------------------------------------------
# The command line


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # The repository root first: the scenarios are named ``scenarios.races:...``.
    env = python_env(ROOT, *sys.path)
    return run_python("-m", "tideloop.testing", *args, cwd=cwd, env=env)


def test_the_command_line_finds_a_latent_race_only_with_wakeups(tmp_path: Path) -> None:
    tape = tmp_path / "latent.json"
    spec = "scenarios.races:started_after_one_yield"
    quiet = _cli("explore", spec, "--schedules", "50", "--tape", str(tape))
    assert quiet.returncode == 0 and "50 schedule(s) passed" in quiet.stdout, quiet.stdout
    assert not tape.exists()
    found = _cli("explore", spec, "--wakeups", "--tape", str(tape))
    assert found.returncode == 1, found.stdout + found.stderr
    assert "latent: this schedule" in found.stdout
    assert json.loads(tape.read_text())["wakeups"] is True
    replayed = _cli("replay", spec, str(tape))  # the mode comes from the tape
    assert replayed.returncode == 1 and "fails" in replayed.stdout, replayed.stdout
    parallel = _cli("explore", spec, "--wakeups", "-j", "2", "--tape", str(tmp_path / "j.json"))
    assert parallel.returncode == 1 and "latent: " in parallel.stdout, parallel.stdout


def test_the_command_line_explores_replays_traces_and_diffs(tmp_path: Path) -> None:
    tape = tmp_path / "race.json"
    found = _cli("explore", "scenarios.races:check_then_act_across_io", "--tape", str(tape))
    assert found.returncode == 1, found.stdout + found.stderr
    assert "1 deviation(s) from the unperturbed schedule" in found.stdout
    assert json.loads(tape.read_text())["tideloop_tape"] == 1
    replayed = _cli("replay", "scenarios.races:check_then_act_across_io", str(tape))
    assert replayed.returncode == 1 and "fails" in replayed.stdout
    # The run, recorded when the tape was made: its events in the program's
    # terms, the deviation marked * and the failure !, and its timeline beside it.
    trace = _cli("trace", str(tape))
    assert trace.returncode == 0, trace.stderr
    lines = trace.stdout.splitlines()
    deviation = [line for line in lines if line.startswith("* ")]
    assert len(deviation) == 1 and "read by task" in deviation[0], trace.stdout
    assert any(line.startswith("! ") and "AssertionError" in line for line in lines)
    assert "ordering: " in trace.stdout
    decisions = _cli("trace", "--decisions", str(tape))
    assert decisions.returncode == 0 and "\n* #" in decisions.stdout
    page = tmp_path / "race.html"
    assert page.exists() and f"timeline: {page}" in found.stdout
    shown = _cli("show", str(tape), "-o", str(tmp_path / "shown.html"))
    assert shown.returncode == 0 and (tmp_path / "shown.html").read_text() == page.read_text()
    other = tmp_path / "other.json"
    _cli("explore", "scenarios.races:two_clients_in_order", "--tape", str(other))
    diff = _cli("diff", str(tape), str(other))
    assert diff.returncode == 0 and "first divergence at decision #" in diff.stdout
    bad = _cli("explore", "scenarios.races:no_such_race")
    assert bad.returncode == 2


def test_parallel_exploration_resumes_from_its_state(tmp_path: Path) -> None:
    (tmp_path / "fine.py").write_text(
        "import asyncio\nasync def ok():\n    await asyncio.sleep(0)\n"
    )
    state = tmp_path / "state.json"
    args = ["explore", "fine:ok", "-j", "2", "--state", str(state)]
    first = _cli(*args, "--schedules", "30", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(state.read_text())["passed"] == list(range(30))
    second = _cli(*args, "--schedules", "40", cwd=tmp_path)
    assert second.returncode == 0
    assert "resuming: 30 schedule(s) passed before, 10 to go" in second.stdout
    assert json.loads(state.read_text())["passed"] == list(range(40))
    race = "scenarios.races:two_clients_in_order"
    found = _cli("explore", race, "-j", "2", "--tape", str(tmp_path / "t.json"))
    assert found.returncode == 1 and "tape:" in found.stdout, found.stdout + found.stderr
