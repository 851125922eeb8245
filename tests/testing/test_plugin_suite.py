"""The pytest plugin on a whole suite: ini settings, --no-tideloop, progress, budgets,
the sleep warning, pytest-asyncio's loop factories, pytest-xdist, tapes kept.

Each test writes a small project with pytest's ``pytester`` and runs pytest
on it in a subprocess (the plugin installs an event loop policy for its
session: a run in this process would leave it to the next test). The
projects never import the plugin: it comes through the ``pytest11`` entry
point, as for a user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_plugin import TIMER_RACE

from tideloop.testing.pytest_plugin import _OPTIONS

pytest_plugins = ["pytester"]

#: A helper each project imports: which loop is running, and a count of runs.
HELPERS = """\
import asyncio, os

def kind():
    loop = asyncio.get_running_loop()
    return "tideloop" if type(loop).__module__.startswith("tideloop") else type(loop).__name__

def count(name):
    path = os.path.join(os.environ["RUNS_DIR"], name)
    with open(path, "a") as f:
        f.write("x")

def counted(name):
    path = os.path.join(os.environ["RUNS_DIR"], name)
    return len(open(path).read()) if os.path.exists(path) else 0
"""


@pytest.fixture
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the project's tests count their runs (`helpers.count`)."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture
def project(
    pytester: pytest.Pytester, runs: Path, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    pytester.makepyfile(helpers=HELPERS)
    monkeypatch.setenv("RUNS_DIR", str(runs))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return pytester


def counts(runs: Path) -> dict[str, int]:
    return {p.name: len(p.read_text()) for p in runs.iterdir()}


def ini(pytester: pytest.Pytester, **settings: object) -> None:
    lines = ["[pytest]", "asyncio_default_fixture_loop_scope = function"]
    lines += [f"{name} = {value}" for name, value in settings.items()]
    pytester.makefile(".ini", pytest="\n".join(lines) + "\n")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args, timeout=120)


KIND_SUITE = """\
import asyncio
import pytest
from helpers import kind

def test_asyncio_run():
    async def main():
        return kind()
    assert asyncio.run(main()) == {expected!r}

@pytest.mark.tideloop
def test_marked():
    async def main():
        return kind()
    assert asyncio.run(main()) == {marked!r}

def test_clock(tideloop_clock):
    async def main():
        await asyncio.sleep(100)
        return kind(), asyncio.get_running_loop().time()
    assert asyncio.run(main()) == ("tideloop", 100)
"""


# ----------------------------------------------------------------------
# Every option is an ini setting; --no-tideloop


def test_every_option_is_an_ini_setting_named_like_it(project: pytest.Pytester) -> None:
    result = run(project, "--help")
    text = result.stdout.str()
    ini_part = text[text.index("[pytest] ") :]  # "ini-options" before pytest 9
    flat = " ".join(text.split())  # help texts wrap
    for option in _OPTIONS:
        name = option.flag.lstrip("-").replace("-", "_")
        assert option.name == name
        assert f"[ini: {name}]" in flat, option.flag
        assert re.search(rf"^\s+{name} \(string\):", ini_part, re.M), name
    assert "--no-tideloop" in text


def test_the_ini_file_turns_tideloop_on(project: pytest.Pytester) -> None:
    ini(project, tideloop="true")
    project.makepyfile(test_kind=KIND_SUITE.format(expected="tideloop", marked="tideloop"))
    run(project).assert_outcomes(passed=3)


def test_no_tideloop_turns_it_off_whatever_the_ini_says(project: pytest.Pytester) -> None:
    ini(project, tideloop="true", tideloop_virtual_time="true")
    expected = "_UnixSelectorEventLoop"
    project.makepyfile(test_kind=KIND_SUITE.format(expected=expected, marked=expected))
    # The marker is off too; tideloop_clock still gets the loop it needs.
    run(project, "--no-tideloop").assert_outcomes(passed=3)
    result = run(project, "--no-tideloop", "--tideloop-seeds=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--no-tideloop turns tideloop off: drop --tideloop-seeds*"])


def test_no_tideloop_leaves_a_marked_test_its_clock_fixture(project: pytest.Pytester) -> None:
    """A marked test that uses tideloop_clock: --no-tideloop voids the marker,
    but the fixture still needs (and gets) tideloop, with virtual time."""
    project.makepyfile(
        test_marked=(
            "import asyncio\n"
            "import pytest\n"
            "@pytest.mark.asyncio\n"
            "@pytest.mark.tideloop(virtual_time=True, seed=3)\n"
            "async def test_clock(tideloop_clock):\n"
            "    await asyncio.sleep(30)\n"
            "    assert type(asyncio.get_running_loop()).__module__.startswith('tideloop')\n"
            "    assert asyncio.get_running_loop().time() == 30\n"
        )
    )
    run(project, "--no-tideloop").assert_outcomes(passed=1)


def test_ini_settings_search_and_the_command_line_wins(project: pytest.Pytester) -> None:
    ini(project, tideloop_seeds="30", tideloop_tape_dir="tapes")
    project.makepyfile(test_race=TIMER_RACE)
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 deviation(s) from the unperturbed schedule*"])
    # The ini file's path is relative to the ini file's directory.
    # (each tape with its timeline beside it)
    assert sorted(p.name for p in (project.path / "tapes").iterdir()) == [
        "test_race__test_assumes_timer_order.html",
        "test_race__test_assumes_timer_order.json",
    ]
    # The command line's setting wins over the ini file's.
    run(project, "--tideloop-tape-dir=elsewhere").assert_outcomes(failed=1)
    assert sorted(p.name for p in (project.path / "elsewhere").iterdir()) == [
        "test_race__test_assumes_timer_order.html",
        "test_race__test_assumes_timer_order.json",
    ]


def test_bad_ini_values_are_usage_errors(project: pytest.Pytester) -> None:
    project.makepyfile(test_x="def test_x(): pass\n")
    for name, value, words in [
        ("tideloop_seeds", "many", "expected an integer"),
        ("tideloop", "perhaps", "expected true or false"),
        ("tideloop_strategy", "clever", "expected one of random, pct, systematic"),
        ("tideloop_seeds_budget", "10", "give --tideloop-seeds"),
    ]:
        ini(project, **{name: value})
        result = run(project)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (name, result.stderr.str())
        assert words in result.stderr.str(), (name, result.stderr.str())


def test_a_strategys_option_given_to_one_that_ignores_it_is_an_error(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_race=TIMER_RACE)
    result = run(project, "--tideloop-seeds=5", "--tideloop-depth=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--tideloop-depth is for --tideloop-strategy=pct: the random strategy does not use it*"]
    )
    result = run(project, "--tideloop-seeds=5", "--tideloop-strategy=pct", "--tideloop-bound=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tideloop-bound is for --tideloop-strategy=systematic*"])
    ini(project, tideloop_depth="3")
    assert run(project, "--tideloop-seeds=5").ret == pytest.ExitCode.USAGE_ERROR
    result = run(project, "--tideloop-seeds=50", "--tideloop-strategy=pct")
    result.assert_outcomes(failed=1)


# ----------------------------------------------------------------------
# Progress, budgets, time asleep


SLOW_SUITE = """\
import asyncio
import pytest

@pytest.mark.tideloop
def test_sleeps():
    async def main():
        await asyncio.sleep(0.1)
    asyncio.run(main())

@pytest.mark.tideloop
def test_quick():
    async def main():
        await asyncio.sleep(0)
    asyncio.run(main())
"""


def test_progress_budget_and_the_sleep_warning(project: pytest.Pytester) -> None:
    project.makepyfile(test_slow=SLOW_SUITE)
    result = run(project, "--tideloop-seeds=200", "--tideloop-seeds-budget=3")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    # Progress shows for the slow test only, schedules done of the total.
    assert re.search(
        r"tideloop: test_slow.py::test_sleeps: \d+/200 schedules in \d+\.\d s "
        r"\(about \d+ s to go, budget 3 s\)",
        out,
    ), out
    assert "test_slow.py::test_quick: " not in out.split("short test summary")[0]
    # The budget stopped it, and the summary says how far it got.
    ran = re.search(
        r"test_slow.py::test_sleeps: (\d+) of 200 schedules passed in (\d+\.\d) s, then the "
        r"budget \(--tideloop-seeds-budget\) stopped it",
        out,
    )
    assert ran, out
    assert 10 <= int(ran.group(1)) < 200 and float(ran.group(2)) >= 3.0
    # It slept in timers on real time: the warning names it, with the remedy.
    assert "tideloop: warning: real time asleep under seeds" in out
    assert re.search(r"test_slow.py::test_sleeps: slept \d+\.\d s of its \d+\.\d s", out), out
    assert "--tideloop-virtual-time" in out and "virtual_time=True" in out
    assert "test_slow.py::test_quick: slept" not in out


def test_virtual_time_sleeps_no_real_time_and_is_not_warned_about(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_slow=SLOW_SUITE)
    result = run(project, "--tideloop-seeds=30", "--tideloop-virtual-time")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "real time asleep" not in out
    assert "tideloop: test_slow.py" not in out  # quick: no progress lines


def test_the_summary_under_xdist_comes_from_the_workers(project: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    project.makepyfile(test_slow=SLOW_SUITE, test_race=TIMER_RACE)
    result = run(project, "-n", "1", "--tideloop-seeds=200", "--tideloop-seeds-budget=1.5")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "tideloop: failing schedules" in out
    assert "test_race.py::test_assumes_timer_order: seed" in out
    assert re.search(r"test_sleeps: \d+ of 200 schedules passed .* budget", out), out
    assert "real time asleep under seeds" in out


# ----------------------------------------------------------------------
# Sync tests with tideloop_net repeat under seeds


NET_SUITE = """\
import asyncio
from helpers import count

def test_sync_network(tideloop_net):
    count("net")
    async def main():
        return tideloop_net.seed, asyncio.get_running_loop().time()
    seed, now = asyncio.run(main())
    count(f"seed{seed}")

def test_sync_plain():
    count("plain")
"""


def test_a_sync_test_with_tideloop_net_runs_under_every_seed(
    project: pytest.Pytester, runs: Path
) -> None:
    project.makepyfile(test_net=NET_SUITE)
    run(project, "--tideloop-seeds=7", "--tideloop-seed=10").assert_outcomes(passed=2)
    seen = counts(runs)
    assert seen.pop("net") == 7 and seen.pop("plain") == 1
    assert seen == {f"seed{s}": 1 for s in range(10, 17)}  # the network's seed is the run's


# ----------------------------------------------------------------------
# pytest-asyncio's loop factories: the project's own, with tideloop beside


FACTORY_CONFTEST = """\
import asyncio

class CustomLoop(asyncio.SelectorEventLoop):
    pass

def pytest_asyncio_loop_factories(config, item):
    return {"custom": CustomLoop}
"""

FACTORY_SUITE = """\
import asyncio
import pytest
from helpers import count, kind

@pytest.mark.asyncio
async def test_every_factory():
    count(f"every-{kind()}")

@pytest.mark.asyncio(loop_factories=["custom"])
async def test_named_custom():
    count(f"custom-{kind()}")
    assert kind() == "CustomLoop"

@pytest.mark.asyncio(loop_factories=["tideloop"])
async def test_named_tideloop():
    count(f"tideloop-{kind()}")
    assert kind() == "tideloop"
"""


def test_the_projects_loop_factories_are_honoured(project: pytest.Pytester, runs: Path) -> None:
    pytest.importorskip("pytest_asyncio")
    ini(project)
    project.makeconftest(FACTORY_CONFTEST)
    project.makepyfile(test_factories=FACTORY_SUITE)
    # Without tideloop: the project's factory only; naming tideloop skips.
    result = run(project)
    result.assert_outcomes(passed=2, skipped=1)
    # With it: tideloop joins beside the project's factory, nothing skipped.
    result = run(project, "--tideloop", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_every_factory?custom? PASSED*",
            "*test_every_factory?tideloop? PASSED*",
        ]
    )
    assert counts(runs) == {
        "every-CustomLoop": 2,
        "every-tideloop": 1,
        "custom-CustomLoop": 2,
        "tideloop-tideloop": 1,
    }
    # Under seeds, only the tests on tideloop's factory repeat.
    result = run(project, "--tideloop-seeds=5")
    result.assert_outcomes(passed=4)
    seen = counts(runs)
    assert seen["every-CustomLoop"] == 3 and seen["custom-CustomLoop"] == 3
    assert seen["every-tideloop"] == 6 and seen["tideloop-tideloop"] == 6


# ----------------------------------------------------------------------
# Tapes are never overwritten silently


def test_a_second_failure_gets_a_tape_of_its_own(project: pytest.Pytester) -> None:
    project.makepyfile(test_race=TIMER_RACE)
    first = run(project, "--tideloop-seeds=30")
    first.assert_outcomes(failed=1)
    second = run(project, "--tideloop-seeds=30", "--tideloop-seed=100")
    second.assert_outcomes(failed=1)
    tapes = sorted(p.name for p in (project.path / ".tideloop-tapes").iterdir())
    assert tapes == [
        "test_race__test_assumes_timer_order.1.html",
        "test_race__test_assumes_timer_order.1.json",
        "test_race__test_assumes_timer_order.html",
        "test_race__test_assumes_timer_order.json",
    ]
    second.stdout.fnmatch_lines(
        [
            "*test_race__test_assumes_timer_order.json exists (another failure's tape): saved as "
            "test_race__test_assumes_timer_order.1.json*"
        ]
    )


# ----------------------------------------------------------------------
# Warning filters written for the stdlib loop


CLOSING_SUITE = """\
import asyncio
import pytest

@pytest.fixture
def closes_the_loop():
    loops = []
    yield loops
    loops[0].close()  # before pytest-asyncio's runner closes it

@pytest.mark.asyncio
async def test_closes_its_loop(closes_the_loop):
    closes_the_loop.append(asyncio.get_running_loop())
"""


def test_pytest_asyncios_warning_filter_matches_on_tideloop(project: pytest.Pytester) -> None:
    pytest.importorskip("pytest_asyncio")
    ini(project)
    project.makepyfile(test_closing=CLOSING_SUITE)
    for args in ((), ("--tideloop",)):
        result = run(project, "-W", "error", *args)
        result.assert_outcomes(passed=1)
        assert "shutdown_asyncgens" not in result.stdout.str(), args


CLOCKS_SUITE = """\
import asyncio, time
from time import monotonic
import pytest

@pytest.mark.tideloop
def test_clocks():
    async def main():
        loop = asyncio.get_running_loop()
        stored, before = loop.time(), time.time()
        await asyncio.sleep(3600)
        assert abs(monotonic() - loop.time()) < 0.05
        assert monotonic() - stored >= 3600 and time.time() - before >= 3600
    asyncio.run(main())

@pytest.mark.tideloop
def test_before_in_and_after_the_loop():
    # aiohttp's test_shutdown_timeout_not_reached: a time read in the loop,
    # compared with one read after it, on the test's thread.
    before = monotonic()
    async def main():
        await asyncio.sleep(3600)
        return time.monotonic()
    inside = asyncio.run(main())
    after = monotonic()
    assert inside - before == 3600 and 0 <= after - inside < 1
"""


@pytest.mark.parametrize("seeds", [[], ["--tideloop-seeds=3"]])
def test_virtual_time_moves_the_process_clocks_on_the_loops_thread(
    project: pytest.Pytester, seeds: list[str]
) -> None:
    """An hour's sleep moves ``time.monotonic()`` (also as bound by ``from
    time import monotonic``) and ``time.time()`` by an hour, at once; the
    test's thread reads the test's clock before and after its loop too."""
    project.makepyfile(test_clocks=CLOCKS_SUITE)
    result = run(project, "--tideloop-virtual-time", *seeds)
    result.assert_outcomes(passed=2)
