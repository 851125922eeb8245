"""Liveness: leads_to properties, and livelocks told apart from deadlocks.

tideloop.testing's own API. The planted bug is `scenarios.sim_retry`: two
workers whose fixed back-off makes them meet the same way forever. Only
the livelock watch names it: no deadlock is ever reported (a timer is
always pending), and a plain timeout says nothing about who cycles. The
same watch leaves a correct program (the jittered back-off, a long idle
sleep, a heartbeat between progress points) alone, and a real deadlock is
still a Deadlock.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from children import run_pytest
from scenarios import sim_retry
from tideloop import testing
from tideloop.testing import Deadlock, Livelock, PropertyViolation, leads_to, progress
from tideloop.testing._liveness import LivelockWatch

SCENARIO = Path(sim_retry.__file__).name


def test_the_retry_livelock_is_found_and_its_cycle_named() -> None:
    net = testing.SimNetwork(seed=0)
    with pytest.raises(Livelock) as caught:
        testing.run(sim_retry.scenario(net, jitter=False), network=net, livelock_after=2.0)
    report = str(caught.value)
    assert report.startswith("livelock at loop time 2.0")
    assert "no progress point for 2.0" in report
    # Both workers, on their hosts, cycling through the lock request and the
    # back-off, with where each waits now; the lock service's handlers too.
    for host in ("w1", "w2"):
        entry = re.search(rf"- Task-\d+ \(on host {host}\): (\d+) step\(s\), waiting", report)
        assert entry is not None and int(entry.group(1)) > 50, report
    assert re.search(rf"worker\.<locals>\.ask at .*{SCENARIO}:\d+  x\d+", report)
    assert re.search(rf"worker at .*{SCENARIO}:\d+  x\d+", report)
    assert "(on host locks)" in report
    assert "no progress point was reached in this run (testing.progress())" in report


def test_without_the_watch_nothing_names_it() -> None:
    # What a test has without livelock_after: no Deadlock (timers are always
    # pending), only its own timeout, which names nobody.
    net = testing.SimNetwork(seed=0)

    async def bounded() -> list[str]:
        async with asyncio.timeout(60):
            return await sim_retry.scenario(net, jitter=False)

    with pytest.raises(TimeoutError):
        testing.run(bounded(), network=net)


@pytest.mark.parametrize("seed", range(4))
def test_the_jittered_backoff_makes_progress(seed: int) -> None:
    net = testing.SimNetwork(seed=seed)
    done = testing.run(sim_retry.scenario(net, jitter=True), network=net, livelock_after=2.0)
    assert sorted(done) == ["w1", "w2"]


def test_explore_finds_the_livelock_and_its_tape_replays(tmp_path: Path) -> None:
    def scenario(net: testing.SimNetwork) -> object:
        return sim_retry.scenario(net, jitter=False)

    found = testing.explore(scenario, network=True, livelock_after=2.0, schedules=3)
    assert found.tape is not None
    assert found.tape.failure.startswith("tideloop.testing.Livelock: livelock")
    saved = found.tape.save(tmp_path / "retry.tape.json")
    tape = testing.Tape.load(saved)
    assert (tape.network, tape.livelock_after) == ({}, 2.0)
    with pytest.raises(Livelock):
        testing.replay(scenario, saved)

    def fixed(net: testing.SimNetwork) -> object:
        return sim_retry.scenario(net, jitter=True)

    assert not testing.explore(fixed, network=True, livelock_after=2.0, schedules=5).found


def test_a_deadlock_is_still_a_deadlock() -> None:
    async def main() -> None:
        first, second = asyncio.Event(), asyncio.Event()

        async def one() -> None:
            await first.wait()
            second.set()

        async def two() -> None:
            await second.wait()
            first.set()

        await asyncio.gather(one(), two())

    with pytest.raises(Deadlock):
        testing.run(main(), virtual_time=True, livelock_after=1.0)


def test_progress_points_and_idle_waits_are_no_livelock() -> None:
    async def main() -> int:
        served = 0

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(0.1)

        beat = asyncio.create_task(heartbeat())
        for _ in range(20):
            await asyncio.sleep(0.5)  # busy with heartbeats in between
            served += 1
            progress("served")
        beat.cancel()
        await asyncio.sleep(100)  # one long idle wait, then one step
        return served

    assert testing.run(main(), virtual_time=True, livelock_after=1.0) == 20


def test_no_progress_for_long_enough_is_a_livelock_even_with_earlier_progress() -> None:
    async def main() -> None:
        for _ in range(3):
            await asyncio.sleep(0.1)
            progress("warm-up")
        while True:
            await asyncio.sleep(0.1)

    with pytest.raises(Livelock) as caught:
        testing.run(main(), virtual_time=True, livelock_after=1.0)
    assert "the last progress point: warm-up at loop time 0.3" in str(caught.value)


def test_a_busy_loop_at_one_instant_is_a_livelock() -> None:
    async def main() -> None:
        while True:
            await asyncio.sleep(0)  # virtual time can never move

    loop = testing.new_event_loop(virtual_time=True)
    LivelockWatch(loop, 1.0, spin=500)
    try:
        with pytest.raises(Livelock, match=r"500 task steps at loop time 0\.0 without a progress"):
            loop.run_until_complete(main())
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_progress_outside_a_watched_loop_does_nothing() -> None:
    progress("not in a loop")

    async def main() -> str:
        progress("a loop without a watch")
        return "fine"

    assert testing.run(main()) == "fine"
    assert asyncio.run(main()) == "fine"


def test_livelock_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="livelock_after must be > 0 seconds, not 0"):
        testing.new_event_loop(livelock_after=0)


# ----------------------------------------------------------------------
# leads_to


async def elections(elected_after: float | None) -> None:
    """A leader steps down at 1.0; another is elected *elected_after* later."""
    state = {"leader": "n1"}
    stop = leads_to(
        lambda: state["leader"] is None,
        lambda: state["leader"] is not None,
        within=0.5,
        name="no leader, a leader",
    )

    async def step_down() -> None:
        await asyncio.sleep(1.0)
        state["leader"] = None

    async def elect() -> None:
        if elected_after is not None:
            await asyncio.sleep(1.0 + elected_after)
            state["leader"] = "n2"

    await asyncio.gather(
        asyncio.create_task(step_down(), name="step-down"),
        asyncio.create_task(elect(), name="elect"),
    )
    await asyncio.sleep(2)
    stop()


def test_leads_to_holds_when_q_comes_in_time() -> None:
    testing.run(elections(0.3), virtual_time=True)


@pytest.mark.parametrize("elected_after", [0.8, None], ids=["late", "never"])
def test_leads_to_names_when_p_held_and_q_was_due(elected_after: float | None) -> None:
    with pytest.raises(PropertyViolation) as caught:
        testing.run(elections(elected_after), virtual_time=True)
    message = str(caught.value)
    assert message.startswith(
        "leads_to(no leader, a leader, within=0.5): the first held after a step of task 'step-down'"
    )
    assert "at loop time 1.0, and the second did not hold by 1.5 (checked until 1.5)" in message


def test_leads_to_stops_checking() -> None:
    async def main() -> None:
        state = {"up": True}
        stop = leads_to(lambda: not state["up"], lambda: state["up"], within=0.1)
        stop()
        state["up"] = False
        await asyncio.sleep(1)  # owed nothing: the property is gone

    testing.run(main(), virtual_time=True)


# ----------------------------------------------------------------------
# The pytest plugin: the marker's livelock_after and --tideloop-livelock-after

PLUGIN_SUITE = """\
import asyncio
import pytest

async def spin(seconds):
    loop = asyncio.get_running_loop()
    while loop.time() < seconds:
        await asyncio.sleep(0.1)

@pytest.mark.tideloop(livelock_after=1.0)
def test_marked(tideloop_net):
    asyncio.run(spin(5))

def test_unmarked(tideloop_net):
    asyncio.run(spin(5))
"""


@pytest.mark.parametrize("option", [False, True], ids=["marker", "option"])
def test_the_plugin_watches_for_livelocks(tmp_path: Path, option: bool) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "test_spin.py").write_text(PLUGIN_SUITE)
    args = ["--tideloop-livelock-after=2"] if option else []
    out = run_pytest(tmp_path, *args).stdout
    assert "FAILED test_spin.py::test_marked - tideloop.testing.Livelock" in out, out
    assert ("FAILED" if option else "PASSED") + " test_spin.py::test_unmarked" in out, out
    assert "no progress point for 1" in out and (not option or "no progress point for 2" in out)
