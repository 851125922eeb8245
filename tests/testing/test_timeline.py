"""The timeline: made from the loop's one recorder, in a real headless browser, and as text.

tideloop.testing's own output (nothing of asyncio's to compare with). A
recorded replay takes the loop's events from ``tideloop.Recorder`` and
adds testing's own through it (`Recorder.note`): the timeline must show
what the program did (its steps and lines, timers, I/O, executor jobs and
their runs, subprocesses, the loop's errors) and what the schedule did
(deviations, held results), and recording must change nothing: every
planted race's tape replays recorded with the same decisions and the same
failure as unrecorded, and a run without a recording has no recorder
attached at all.

The page a tape's timeline writes is loaded from a file in Debian's
chromium, driven by playwright (``executable_path=/usr/bin/chromium``; no
browser of playwright's own): it must load with no console error and
request nothing but itself, show the run's hosts and tasks as lanes, its
deviations and its failure, the details of a mark on hover, and zoom. Few
and fast: three pages, one browser.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_reports import recorded_sim_tape

import scenarios.races
from needs import chromium
from scenarios.races import two_clients_in_order
from tideloop import testing
from tideloop._loop import Loop
from tideloop._recorder import Event, _tap_of
from tideloop.testing import ReplayStrategy, Tape
from tideloop.testing._explore import attempt, record
from tideloop.testing._recording import Recording
from tideloop.testing._strategy import DecisionLog
from tideloop.testing._timeline import render_html, render_text

HERE = Path(__file__)
TAPES = HERE.parent / "tapes"


def line_of(marker: str) -> int:
    """The line of this file that holds *marker* (a comment)."""
    for number, text in enumerate(HERE.read_text().splitlines(), 1):
        if marker in text and "line_of(" not in text:
            return number
    raise AssertionError(marker)


def _checksum(data: bytes) -> int:
    time.sleep(0.002)
    return sum(data) % 251


def _bad_callback() -> None:
    raise ValueError("a callback failed")


async def everything_the_loop_does() -> None:
    """A job in a thread, a child process, a failing callback, a sleep, then a failure."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    total = await asyncio.to_thread(_checksum, b"abc")  # marker: to-thread
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")  # marker: spawn
    await proc.wait()
    loop.call_soon(_bad_callback)
    await asyncio.sleep(0.001)  # marker: sleep
    await asyncio.gather(asyncio.sleep(0.002))  # a task whose coroutine is asyncio.sleep
    assert len(errors) == 1 and total == 0, total  # marker: fails


@pytest.fixture(scope="module")
def race_tape() -> Tape:
    found = testing.explore(two_clients_in_order, schedules=50, name="races:two_clients_in_order")
    assert found.tape is not None and found.tape.timeline is not None
    return found.tape


@pytest.fixture(scope="module")
def sim_tape() -> Tape:
    base = recorded_sim_tape({})
    assert base.timeline is not None
    return base


@pytest.fixture(scope="module")
def loop_tape() -> Tape:
    found = testing.explore(everything_the_loop_does, schedules=5, name="everything")
    assert found.tape is not None and found.tape.timeline is not None
    return found.tape


def _where(text: str) -> int:
    """The line of this file an event's text names."""
    found = re.search(r"test_timeline\.py:(\d+)", text)
    assert found is not None, text
    return int(found.group(1))


def test_the_timeline_shows_what_the_loops_recorder_recorded(loop_tape: Tape) -> None:
    assert loop_tape.timeline is not None
    events = loop_tape.timeline["events"]

    def of(kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e["kind"] == kind]

    # The executor job: submitted at its line, run in a thread (for how
    # long), its result arriving and delivered, all on the submitting task's
    # lane, in that order.
    (job,) = [e for e in of("job") if "_checksum" in e["text"]]
    assert _where(job["text"]) == line_of("marker: to-thread")
    (ran,) = [e for e in of("ran") if e["job"] == job["job"]]
    assert re.search(r"job _checksum runs in thread '[^']+', returns after [\d.]+ ms", ran["text"])
    (arrived,) = [e for e in of("arrived") if e.get("job") == job["job"]]
    (delivered,) = [e for e in of("delivered") if e.get("job") == job["job"]]
    assert job["seq"] < ran["seq"] and job["seq"] < arrived["seq"] < delivered["seq"]
    assert job["lane"] == ran["lane"] == arrived["lane"] == delivered["lane"]
    assert job["lane"].startswith("task:")
    # Where the task waited meanwhile, and in what.
    waits = f"then waits at tests/testing/test_timeline.py:{line_of('marker: to-thread')} "
    steps = [e["text"] for e in of("step") if e["lane"] == job["lane"]]
    assert any(waits in text and text.endswith("in asyncio.to_thread") for text in steps), steps
    # The child process: started at its line, and its exit.
    (spawn,) = of("spawn")
    assert sys.executable in spawn["text"] and _where(spawn["text"]) == line_of("marker: spawn")
    (ended,) = of("exit")
    assert ended["text"] == f"pid {spawn['detail']['pid']} exits with 0"
    assert spawn["lane"] == ended["lane"] == job["lane"]
    # The loop's error, the timer the sleep armed and its firing.
    (error,) = of("error")
    assert "ValueError('a callback failed')" in error["text"]
    (armed,) = [e for e in of("armed") if "asyncio.sleep for 1 ms" in e["text"]]
    assert _where(armed["text"]) == line_of("marker: sleep")
    assert any(e["timer"] == armed["timer"] and e["seq"] > armed["seq"] for e in of("timer"))
    # A task of gather's sleeps: no line of the program's armed it, but its
    # timer is the program's, on its own lane; explore's own time limit is not.
    (gathered,) = [e for e in of("armed") if e["text"] == "arms asyncio.sleep for 2 ms"]
    assert gathered["lane"] not in (job["lane"], "loop:0")
    assert all(e["detail"]["delay"] < 1 for e in of("armed")), of("armed")
    # The failure, at its line, last of the task's.
    (failure,) = of("failure")
    assert failure["text"].startswith("fails: AssertionError")
    assert _where(failure["text"]) == line_of("marker: fails")


def test_testings_own_events_go_through_the_loops_recorder() -> None:
    """One stream of events: the loop's and testing's notes, linked by their causes."""
    recording = Recording()
    seen: list[Event] = []
    recording.recorder.subscribe(seen.append)
    loops: list[Loop] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, Loop)
        loops.append(loop)
        assert _tap_of(loop) is not None  # attached before anything ran
        await everything_the_loop_does()

    log = DecisionLog(ReplayStrategy({}, recording=recording))
    with pytest.raises(AssertionError) as failed:
        testing.run(main(), strategy=log)
    recording.finish(failed.value)
    # Detached at the end: the loop is as it was built.
    assert _tap_of(loops[0]) is None and "call_soon" not in vars(loops[0])
    kinds = {e.kind for e in seen}
    assert {"step", "callback", "timer", "io", "job", "job-run", "spawn", "exit", "error"} <= kinds
    assert {"arrived", "failure"} <= kinds
    # A held result's arrival (testing's) is what the callback that delivers
    # it names as its cause (the recorder's).
    arrival = next(e for e in seen if e.kind == "arrived" and e.args["job"] is not None)
    delivery = next(e for e in seen if e.kind == "callback" and e.cause == arrival.seq)
    assert delivery.args["source"] == "thread" and delivery.seq > arrival.seq
    # The failure names the step that raised it.
    failure = next(e for e in seen if e.kind == "failure")
    (step,) = [e for e in seen if e.seq == failure.cause and e.loop == failure.loop]
    assert step.kind == "step" and step.args["outcome"] == "error"
    assert recording.failure is not None and "AssertionError" in recording.failure["exception"]
    # Every mark of the timeline but the tasks' first came from one of them.
    timeline = recording.to_json()["events"]
    assert len([e for e in timeline if e["kind"] != "task"]) <= len(seen)


def test_a_run_without_a_recording_attaches_no_recorder() -> None:
    async def main() -> bool:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        return isinstance(loop, Loop) and _tap_of(loop) is None and "call_soon" not in vars(loop)

    assert testing.run(main(), strategy=DecisionLog(ReplayStrategy({})))
    assert testing.run(main(), seed=3)


def _same(exc: BaseException | None) -> tuple[str, str]:
    # Real times in a message (a lease's expiry on the real clock) and
    # objects' addresses (pytest's assertion rewriting) differ run to run.
    return type(exc).__name__, re.sub(r"0x[0-9a-f]+|\d+\.\d+", "#", str(exc))


#: The planted races' tapes (the folder also holds the simulated-network
#: bugs' tapes of test_sim_tapes.py, which need their network to replay).
RACE_TAPES = sorted(p for p in TAPES.glob("*.json") if hasattr(scenarios.races, p.stem))


def test_every_planted_race_has_its_tape() -> None:
    assert len(RACE_TAPES) >= 12, RACE_TAPES


@pytest.mark.parametrize("path", RACE_TAPES, ids=lambda p: p.stem)
def test_a_recorded_replay_makes_the_same_decisions_and_fails_the_same(path: Path) -> None:
    tape = Tape.load(path)
    scenario = getattr(scenarios.races, path.stem)
    deviations = {d.point: d.value for d in tape.deviations}
    # A race against a real thread's timing makes the decisions the thread's
    # timing allows (its result in or not yet in at a point): a pair of runs
    # may see the thread at different times, on a loaded machine. For those,
    # one pair in three must agree.
    pairs = 3 if path.stem in scenarios.races.REAL_THREAD_TIMING else 1
    seen = []
    for _ in range(pairs):
        plain, exc = attempt(
            scenario,
            ReplayStrategy(deviations),
            virtual_time=tape.virtual_time,
            wakeups=tape.wakeups,
        )
        recorded = record(
            scenario, deviations, virtual_time=tape.virtual_time, wakeups=tape.wakeups
        )
        assert exc is not None and recorded.exception is not None
        assert _same(recorded.exception) == _same(exc)
        assert recorded.recording.failure is not None
        made = [(d.point, d.n, d.value) for d in recorded.log.decisions]
        replayed = [(d.point, d.n, d.value) for d in plain.decisions]
        if made == replayed:
            return
        seen.append((made, replayed))
    raise AssertionError(f"the recorded run's decisions differ from the plain run's: {seen}")


def test_the_page_is_self_contained(race_tape: Tape) -> None:
    page = render_html(race_tape)
    # Nothing loaded from elsewhere: no src/href, no @import, no url() but a
    # fragment, no fetch of any kind.
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "<link" not in page
    assert not re.search(r"url\((?!#)", page)
    for call in ("fetch(", "XMLHttpRequest", "WebSocket", "EventSource", "import("):
        assert call not in page
    # The data cannot close its <script>: a failure text with "</script>" in it.
    race_tape.failure = "AssertionError: </script><script>alert(1)</script>"
    try:
        assert "</script><script>alert(1)" not in render_html(race_tape)
    finally:
        race_tape.failure = "AssertionError"


def test_the_text_trace_speaks_the_same_terms(race_tape: Tape) -> None:
    text = render_text(race_tape)
    lines = text.splitlines()
    assert lines[2].startswith("ordering: ")
    (deviation,) = [line for line in lines if line.startswith("* ")]
    assert "read by task" in deviation and "reported 1 poll late" in deviation
    (failure,) = [line for line in lines if line.startswith("! ")]
    assert "fails: AssertionError" in failure and "scenarios/races.py:" in failure
    assert any("then waits at scenarios/races.py:" in line for line in lines)


@pytest.fixture(scope="module")
def pages(
    race_tape: Tape, sim_tape: Tape, loop_tape: Tape, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each tape's timeline page, written before the browser opens."""
    where = tmp_path_factory.mktemp("timelines")
    return {
        "race": race_tape.save_timeline(where / "race.html"),
        "sim": sim_tape.save_timeline(where / "sim.html"),
        "loop": loop_tape.save_timeline(where / "loop.html"),
    }


@pytest.fixture(scope="module")
def browser(pages: dict[str, Path]) -> Iterator[Any]:
    # The tapes and their pages are made first: playwright's sync API runs
    # an event loop in this thread while the browser is open (and tideloop's
    # file writes on a loop's thread are what blockbuster fails).
    with chromium("TIDELOOP_REQUIRE_CHROMIUM", "the timeline's browser tests") as browser:
        yield browser


def _open(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, errors, requests


def test_a_race_in_the_browser(browser: Any, pages: dict[str, Path]) -> None:
    path = pages["race"]
    page, errors, requests = _open(browser, path)
    try:
        assert requests == [path.as_uri()]
        # The verdict, the failure, the deviation in words.
        assert page.inner_text("#tl-verdict").startswith("ordering: ")
        assert "AssertionError" in page.inner_text("#tl-failure")
        (item,) = page.query_selector_all("#tl-devlist li")
        assert "read by task" in item.inner_text()
        # One lane per task: the server's handlers and the test itself.
        labels = [el.inner_text() for el in page.query_selector_all(".lane-label")]
        assert sum("_Server._handle" in label for label in labels) == 2, labels
        assert any("two_clients_in_order" in label for label in labels), labels
        # Steps, I/O, the deviation highlighted across the lanes, the failure line.
        for selector in (".ev-step", ".ev-io", ".ev-deferred", ".ev-deviation", ".devband"):
            assert page.query_selector(selector) is not None, selector
        assert "AssertionError" in page.text_content(".faillabel")
        # Details on hover.
        assert page.is_hidden("#tl-tip")
        page.hover(".ev-deviation")
        tip = page.inner_text("#tl-tip")
        assert page.is_visible("#tl-tip") and "deviation" in tip and "read by task" in tip
        page.hover(".ev-step")
        assert "step" in page.inner_text("#tl-tip") and "then waits at" in page.inner_text(
            "#tl-tip"
        )
        # Zoom: twice as wide, and back.
        width = float(page.get_attribute("#tl-svg", "width") or 0)
        page.click("#tl-zoom-in")
        assert float(page.get_attribute("#tl-svg", "width") or 0) > 1.8 * width - 30
        page.click("#tl-zoom-out")
        assert abs(float(page.get_attribute("#tl-svg", "width") or 0) - width) < 2
        # A deviation listed is a click away.
        item.click()
        assert page.query_selector(".devband.hot") is not None
        assert errors == []
    finally:
        page.close()


def test_hosts_and_messages_in_the_browser(browser: Any, pages: dict[str, Path]) -> None:
    path = pages["sim"]
    page, errors, requests = _open(browser, path)
    try:
        assert requests == [path.as_uri()]
        hosts = [el.inner_text() for el in page.query_selector_all(".lane-label.host")]
        assert {"host db", "host app0", "host app1"} <= set(hosts), hosts
        # Messages between hosts are arrows, ending at a mark on the receiving
        # host's lane; hovering it says where the message left.
        arrows = page.query_selector_all("line.arrow")
        assert len(arrows) >= 4
        seq = arrows[0].get_attribute("data-seq")
        page.hover(f'.ev-message[data-seq="{seq}"]')
        tip = page.inner_text("#tl-tip")
        assert "message" in tip and "sent at event #" in tip and " -> " in tip, tip
        assert "none: the unperturbed schedule" in page.inner_text("#tl-devlist")
        assert errors == []
    finally:
        page.close()


def test_jobs_subprocesses_and_errors_in_the_browser(browser: Any, pages: dict[str, Path]) -> None:
    path = pages["loop"]
    page, errors, requests = _open(browser, path)
    try:
        assert requests == [path.as_uri()]
        marks = (".ev-job", ".ev-ran", ".ev-spawn", ".ev-exit", ".ev-error", "line.span-job")
        for selector in marks:
            assert page.query_selector(selector) is not None, selector
        page.hover(".ev-ran")
        tip = page.inner_text("#tl-tip")
        assert "ran" in tip and "runs in thread" in tip and "_checksum" in tip, tip
        page.hover(".ev-error")
        assert "a callback failed" in page.inner_text("#tl-tip")
        assert "subprocess" in page.inner_text("#tl-legend")
        assert errors == []
    finally:
        page.close()
