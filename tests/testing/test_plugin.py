"""The pytest plugin, run as a user would: pytest in a subprocess on a small suite.

Each test writes a suite into a temporary directory (a project that has
never heard of tideloop: no conftest, no import of the plugin) and runs
pytest on it with the plugin's options, through the ``pytest11`` entry
point. The suites check from the inside which loop they run on.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

import children

HAS_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None
needs_pytest_asyncio = pytest.mark.skipif(
    not HAS_PYTEST_ASYNCIO, reason="pytest-asyncio is not installed"
)

INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
"""

#: A helper every suite imports: which loop is running?
LOOPKIND = """\
import asyncio, os

def on_tideloop():
    loop = asyncio.get_running_loop()
    return type(loop).__module__.startswith("tideloop")

def expected():
    return os.environ.get("EXPECT_TIDELOOP") == "1"
"""

PYTEST_ASYNCIO_SUITE = """\
import asyncio
import pytest
import pytest_asyncio
from loopkind import expected, on_tideloop

@pytest.mark.asyncio
async def test_loop_kind():
    assert on_tideloop() == expected()

@pytest_asyncio.fixture
async def server():
    srv = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    yield srv
    srv.close()
    await srv.wait_closed()

@pytest.mark.asyncio
async def test_async_fixture_same_loop(server):
    assert on_tideloop() == expected()
    assert server.get_loop() is asyncio.get_running_loop()
"""

ANYIO_SUITE = """\
import pytest
from loopkind import expected, on_tideloop

pytestmark = pytest.mark.anyio

@pytest.fixture(params=["asyncio", ("asyncio", {"debug": True})], ids=["str", "tuple"])
def anyio_backend(request):
    return request.param

async def test_loop_kind(anyio_backend):
    assert on_tideloop() == expected()
    if isinstance(anyio_backend, str):
        assert anyio_backend == "asyncio"  # the plugin leaves the value alone
"""

UNITTEST_SUITE = """\
import unittest
from loopkind import expected, on_tideloop

class T(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.kind = on_tideloop()

    async def test_loop_kind(self):
        assert self.kind == on_tideloop() == expected()
"""

PLAIN_SUITE = """\
import asyncio
from loopkind import expected, on_tideloop

def test_asyncio_run():
    async def main():
        return on_tideloop()
    assert asyncio.run(main()) == expected()

def test_new_event_loop():
    loop = asyncio.new_event_loop()
    try:
        assert type(loop).__module__.startswith("tideloop") == expected()
    finally:
        loop.close()
"""

VIRTUAL_SUITE = """\
import asyncio, time
import pytest

@pytest.mark.tideloop(virtual_time=True)
def test_marker_hour():
    async def main():
        t0 = asyncio.get_running_loop().time()
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time() - t0
    start = time.perf_counter()
    assert asyncio.run(main()) == 3600
    assert time.perf_counter() - start < 2

def test_clock_fixture(tideloop_clock):
    async def main():
        loop = asyncio.get_running_loop()
        assert loop._clock is tideloop_clock
        async with asyncio.timeout(30):
            await asyncio.sleep(10)
        return loop.time()
    assert asyncio.run(main()) == 10
    assert tideloop_clock.now() == 10

def test_unmarked_is_real():
    async def main():
        return type(asyncio.get_running_loop()).__module__
    assert not asyncio.run(main()).startswith("tideloop")
"""

#: A project's test module with a race: two timers due at one instant, and a
#: test that assumes they run in the order they were armed (`RUNS` counts its
#: runs). The unperturbed schedule passes; seeds find the other order. The
#: plugin's reports name lines 10 and 11 (the two ``call_at``).
TIMER_RACE = """\
import asyncio
import pytest

RUNS = []

async def two_timers():
    order = []
    loop = asyncio.get_running_loop()
    when = loop.time() + 0.001
    loop.call_at(when, order.append, "first")
    loop.call_at(when, order.append, "second")
    await asyncio.sleep(0.01)
    return order

@pytest.mark.tideloop  # asyncio.run() inside: the marker makes it an async test
def test_assumes_timer_order():
    RUNS.append(1)
    assert asyncio.run(two_timers()) == ["first", "second"]
"""

#: The race and a sync test beside it, which seeds must run once only.
SEEDS_SUITE = (
    TIMER_RACE
    + """
def test_sync_runs_once():
    RUNS.append(2)
    assert RUNS.count(2) == 1
"""
)

MARKED_SUITE = """\
import asyncio, unittest
import pytest

@pytest.mark.asyncio
@pytest.mark.tideloop(virtual_time=True)
async def test_pytest_asyncio_marked():
    await asyncio.sleep(1000)
    assert asyncio.get_running_loop().time() == 1000

@pytest.mark.asyncio
async def test_pytest_asyncio_unmarked():
    assert not type(asyncio.get_running_loop()).__module__.startswith("tideloop")

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
@pytest.mark.tideloop
async def test_anyio_marked(tideloop_clock):
    import anyio
    await anyio.sleep(50)
    assert tideloop_clock.now() == 50

class T(unittest.IsolatedAsyncioTestCase):
    @pytest.mark.tideloop(virtual_time=True)
    async def test_unittest_marked(self):
        await asyncio.sleep(100)
        assert asyncio.get_running_loop().time() == 100
"""


def run_pytest(
    tmp_path: Path, files: dict[str, str], *args: str, expect_tideloop: bool
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text(INI if HAS_PYTEST_ASYNCIO else "[pytest]\n")
    (tmp_path / "loopkind.py").write_text(LOOPKIND)
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    expect = "1" if expect_tideloop else "0"
    return children.run_pytest(tmp_path, *args, path=["."], EXPECT_TIDELOOP=expect)


def outcome(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|error|skipped)", last)}


@needs_pytest_asyncio
@pytest.mark.parametrize("on", [False, True], ids=["inactive", "tideloop"])
def test_pytest_asyncio(tmp_path: Path, on: bool) -> None:
    args = ["--tideloop"] if on else []
    proc = run_pytest(tmp_path, {"test_pa.py": PYTEST_ASYNCIO_SUITE}, *args, expect_tideloop=on)
    assert outcome(proc) == {"passed": 2}, proc.stdout + proc.stderr


@pytest.mark.parametrize("on", [False, True], ids=["inactive", "tideloop"])
def test_anyio(tmp_path: Path, on: bool) -> None:
    args = ["--tideloop"] if on else []
    proc = run_pytest(tmp_path, {"test_any.py": ANYIO_SUITE}, *args, expect_tideloop=on)
    assert outcome(proc) == {"passed": 2}, proc.stdout + proc.stderr


@pytest.mark.parametrize("on", [False, True], ids=["inactive", "tideloop"])
def test_unittest_and_asyncio_run(tmp_path: Path, on: bool) -> None:
    args = ["--tideloop"] if on else []
    files = {"test_ut.py": UNITTEST_SUITE, "test_plain.py": PLAIN_SUITE}
    proc = run_pytest(tmp_path, files, *args, expect_tideloop=on)
    assert outcome(proc) == {"passed": 3}, proc.stdout + proc.stderr


def test_marker_and_clock_fixture_without_options(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, {"test_v.py": VIRTUAL_SUITE}, expect_tideloop=False)
    assert outcome(proc) == {"passed": 3}, proc.stdout + proc.stderr


@needs_pytest_asyncio
def test_marker_reaches_every_kind_of_test(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, {"test_marked.py": MARKED_SUITE}, expect_tideloop=False)
    assert outcome(proc) == {"passed": 4}, proc.stdout + proc.stderr


def test_virtual_time_option(tmp_path: Path) -> None:
    suite = """\
    import asyncio, time

    def test_day():
        async def main():
            await asyncio.sleep(86400)
            return asyncio.get_running_loop().time()
        start = time.perf_counter()
        assert asyncio.run(main()) == 86400
        assert time.perf_counter() - start < 2
    """
    proc = run_pytest(
        tmp_path, {"test_day.py": suite}, "--tideloop-virtual-time", expect_tideloop=True
    )
    assert outcome(proc) == {"passed": 1}, proc.stdout + proc.stderr
    proc = run_pytest(tmp_path, {"test_day.py": suite}, "--timeout=3", expect_tideloop=False)
    assert "failed" in outcome(proc) or proc.returncode != 0


def replayed_twice(tmp_path: Path, files: dict[str, str], option: str) -> list[str]:
    """Run SEEDS_SUITE's racy test twice more with *option* (a tape or a seed): it fails
    both times; what each run printed."""
    outs = []
    for _ in range(2):
        replay = run_pytest(
            tmp_path, files, "test_race.py::test_assumes_timer_order", option, expect_tideloop=True
        )
        assert outcome(replay) == {"failed": 1}, replay.stdout
        outs.append(replay.stdout)
    return outs


def test_seeds_find_the_race_and_replay_it(tmp_path: Path) -> None:
    files = {"test_race.py": SEEDS_SUITE}
    # The fixed order: passes.
    proc = run_pytest(tmp_path, files, "--tideloop", expect_tideloop=True)
    assert outcome(proc) == {"passed": 2}, proc.stdout + proc.stderr
    # Seeds: the first failing one is named, with the command that replays it.
    proc = run_pytest(tmp_path, files, "--tideloop-seeds=50", expect_tideloop=True)
    assert outcome(proc) == {"failed": 1, "passed": 1}, proc.stdout + proc.stderr
    match = re.search(r"schedule seed (\d+); replay: pytest \S+ --tideloop-seed=\1", proc.stdout)
    assert match, proc.stdout
    assert "failing schedules" in proc.stdout
    # The failing schedule, shrunk to one deviation, in words and on a tape.
    assert "1 deviation(s) from the unperturbed schedule" in proc.stdout
    assert "everything else in order" in proc.stdout
    # In the program's terms (the lines that armed the two timers), classified,
    # and printed once.
    assert proc.stdout.count("ordering: the failure needs no duration") == 1, proc.stdout
    # (Under load, the second timer's time can be past when it is armed.)
    timer = (
        r"the timer list\.append \((?:for|due) [\d.]+ .s(?: before it was armed)?\) "
        r"at test_race\.py:"
    )
    assert re.search(
        timer + r'11 `loop\.call_at\(when, order\.append, "second"\)` '
        r"in task '\S+' runs before " + timer + "10 ",
        proc.stdout,
    ), proc.stdout
    tape = re.search(r"replay: pytest \S+ --tideloop-tape=(\S+)", proc.stdout)
    assert tape, proc.stdout
    assert Path(tape.group(1)).parent == tmp_path / ".tideloop-tapes"
    # Its timeline, next to it.
    page = Path(tape.group(1)).with_suffix(".html")
    assert page.exists() and f"timeline: {page}" in proc.stdout
    assert "test_assumes_timer_order" in page.read_text()
    replayed_twice(tmp_path, files, f"--tideloop-tape={tape.group(1)}")
    seed = match.group(1)
    for out in replayed_twice(tmp_path, files, f"--tideloop-seed={seed}"):
        assert f"schedule seed {seed}" in out


LATENT_SUITE = """\
import asyncio
import pytest

@pytest.mark.tideloop
def test_assumes_one_yield_starts_a_task():
    async def main():
        started = []

        async def worker():
            started.append(1)

        task = asyncio.create_task(worker())
        await asyncio.sleep(0)
        assert started == [1]
        await task
    asyncio.run(main())
"""


def test_wakeups_find_a_latent_race_and_say_so(tmp_path: Path) -> None:
    files = {"test_latent.py": LATENT_SUITE}
    # No schedule asyncio can produce fails it.
    proc = run_pytest(tmp_path, files, "--tideloop-seeds=50", expect_tideloop=True)
    assert outcome(proc) == {"passed": 1}, proc.stdout + proc.stderr
    proc = run_pytest(
        tmp_path, files, "--tideloop-seeds=50", "--tideloop-wakeups", expect_tideloop=True
    )
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    assert "comes 1 iteration late (latent: as if it awaited 1 more time)" in proc.stdout
    # The report is printed once (in the test's section; the summary points to it).
    assert proc.stdout.count("latent: this schedule") == 1, proc.stdout
    assert "latent failure: see its report above; timeline: " in proc.stdout
    seed = re.search(
        r"schedule seed (\d+); replay: pytest \S+ --tideloop-seed=\1 "
        r"--tideloop-wakeups",
        proc.stdout,
    )
    assert seed, proc.stdout
    tape = re.search(r"replay: pytest \S+ --tideloop-tape=(\S+)", proc.stdout)
    assert tape, proc.stdout
    assert json.loads(Path(tape.group(1)).read_text())["wakeups"] is True
    # The tape carries the mode: it replays without the option.
    replay = run_pytest(tmp_path, files, f"--tideloop-tape={tape.group(1)}", expect_tideloop=True)
    assert outcome(replay) == {"failed": 1}, replay.stdout
    # The mode varies schedules: without any, it is a usage error.
    proc = run_pytest(tmp_path, files, "--tideloop-wakeups", expect_tideloop=True)
    assert proc.returncode == 4 and "give --tideloop-seed" in proc.stderr, proc.stderr


def test_bad_marker_is_a_usage_error(tmp_path: Path) -> None:
    suite = """\
    import pytest

    @pytest.mark.tideloop(virtual=True)
    def test_x():
        pass
    """
    proc = run_pytest(tmp_path, {"test_bad.py": suite}, expect_tideloop=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "takes only the keyword arguments" in proc.stderr


@pytest.mark.parametrize("strategy", ["pct", "systematic", "coverage"])
def test_other_strategies_find_the_race_and_save_its_tape(tmp_path: Path, strategy: str) -> None:
    files = {"test_race.py": SEEDS_SUITE}
    tapes = tmp_path / "tapes"
    proc = run_pytest(
        tmp_path,
        files,
        "--tideloop-seeds=50",
        f"--tideloop-strategy={strategy}",
        f"--tideloop-tape-dir={tapes}",
        expect_tideloop=True,
    )
    assert outcome(proc) == {"failed": 1, "passed": 1}, proc.stdout + proc.stderr
    assert "runs before the timer list.append" in proc.stdout, proc.stdout
    assert sorted(path.name for path in tapes.iterdir()) == [
        "test_race__test_assumes_timer_order.html",
        "test_race__test_assumes_timer_order.json",
    ]


def test_systematic_search_says_when_it_exhausted_the_space(tmp_path: Path) -> None:
    suite = """\
    import asyncio
    import pytest

    @pytest.mark.tideloop
    def test_fine():
        async def main():
            loop = asyncio.get_running_loop()
            when = loop.time() + 0.001
            loop.call_at(when, lambda: None)
            loop.call_at(when, lambda: None)
            await asyncio.sleep(0.01)
        asyncio.run(main())
    """
    proc = run_pytest(
        tmp_path,
        {"test_fine.py": suite},
        "--tideloop-seeds=100",
        "--tideloop-strategy=systematic",
        expect_tideloop=True,
    )
    assert outcome(proc) == {"passed": 1}, proc.stdout + proc.stderr
    # One tie point with two values: the unperturbed run and one deviation.
    assert "at most 2 deviation(s) passed (2 schedules: exhausted)" in proc.stdout
