"""The pytest plugin's ``--tideloop-executor``: a test's seeds on a process pool, as a user runs it.

Each test writes a small project into a temporary directory (its tests, a
pytest.ini, and ``executors.py``, the factories) and runs pytest on it in a
subprocess (``children.run_pytest``). The factories make a spawned
``ProcessPoolExecutor`` of 2 workers that writes to ``$POOL_LOG`` when it
is made and when it is shut down, so a test sees that the plugin called the
factory once and shut its pool down; the pool's workers run each batch of
seeds as a pytest run of their own (``tideloop.testing._pytest_scale``).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import textwrap
from pathlib import Path

import children
from needs import missing

INI = "[pytest]\n" + (
    "asyncio_default_fixture_loop_scope = function\n"
    if importlib.util.find_spec("pytest_asyncio") is not None
    else ""
)

EXECUTORS = """\
import concurrent.futures
import multiprocessing
import os


def _log(line):
    with open(os.environ["POOL_LOG"], "a") as f:
        f.write(line + "\\n")


class Pool(concurrent.futures.ProcessPoolExecutor):
    def shutdown(self, wait=True, *, cancel_futures=False):
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        _log("shutdown")


def _on_a_worker():
    os.environ["ON_A_WORKER"] = "1"


def pool():
    _log("made")
    return Pool(2, mp_context=multiprocessing.get_context("spawn"))


def marked_pool():
    _log("made")
    return Pool(2, mp_context=multiprocessing.get_context("spawn"), initializer=_on_a_worker)


def _deselecting():
    os.environ["PYTEST_ADDOPTS"] = "-k no_such_test"


def deselecting_pool():
    _log("made")
    return Pool(2, mp_context=multiprocessing.get_context("spawn"), initializer=_deselecting)


def not_an_executor():
    return 3


def loop_noting_pool():
    # The loop a factory gets (a Dask client makes its own, in a thread).
    import asyncio

    loop = asyncio.new_event_loop()
    _log("loop:" + type(loop).__module__.split(".")[0])
    loop.close()
    return pool()


def dask():
    # A LocalCluster's worker processes; the plugin shuts the executor
    # down, which leaves the cluster to its client: closed at exit.
    from distributed import Client, LocalCluster

    _log("made")
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return Client(cluster).get_executor()
"""

#: Two timers due at one virtual instant, and a test that assumes they run
#: in the order they were armed: some seeds run them the other way.
RACE = """\
import asyncio
import pytest

@pytest.mark.tideloop(virtual_time=True)
def test_assumes_timer_order():
    async def main():
        order = []
        loop = asyncio.get_running_loop()
        when = loop.time() + 1
        loop.call_at(when, order.append, "first")
        loop.call_at(when, order.append, "second")
        await asyncio.sleep(2)
        return order
    assert asyncio.run(main()) == ["first", "second"]
"""

#: The same timers, and tests that assume nothing about their order; each
#: run writes its test and process to $RUNS_LOG.
CONTROL = """\
import asyncio, os
import pytest

def ran(name):
    with open(os.environ["RUNS_LOG"], "a") as f:
        f.write(f"{name} {os.getpid()}\\n")

async def two_timers():
    order = []
    loop = asyncio.get_running_loop()
    when = loop.time() + 1
    loop.call_at(when, order.append, "a")
    loop.call_at(when, order.append, "b")
    await asyncio.sleep(2)
    return order

@pytest.mark.tideloop(virtual_time=True)
def test_either_order():
    assert sorted(asyncio.run(two_timers())) == ["a", "b"]
    ran("either")

@pytest.mark.tideloop(virtual_time=True)
def test_both_fire():
    assert len(asyncio.run(two_timers())) == 2
    ran("both")

def test_sync_runs_once():
    ran("sync")
"""

#: Passes here, fails wherever the pool's initializer has set ON_A_WORKER
#: (the workers' batches inherit it; this process does not have it).
WORKER_ONLY = """\
import asyncio, os
import pytest

@pytest.mark.tideloop
def test_fails_only_on_a_worker():
    async def main():
        await asyncio.sleep(0)
    asyncio.run(main())
    assert os.environ.get("ON_A_WORKER") != "1", "this process is a worker's"
"""

#: With --tideloop-seed=FIRST_SEED, the first schedule (run here) passes and a
#: later one (run on the pool) fails: the test checks both. (Seed 20 fails,
#: in the first batch, 13..32; so does 34, in the second: the lowest wins.)
FIRST_SEED = 12


def run(
    project: Path, files: dict[str, str], *args: str, ini: str = ""
) -> subprocess.CompletedProcess[str]:
    (project / "pytest.ini").write_text(INI + ini)
    (project / "executors.py").write_text(EXECUTORS)
    for name, text in files.items():
        (project / name).write_text(textwrap.dedent(text))
    return children.run_pytest(
        project,
        *args,
        path=["."],
        POOL_LOG=str(project / "pool.log"),
        RUNS_LOG=str(project / "runs.log"),
    )


def outcome(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|error|skipped)", last)}


def pool_log(project: Path) -> list[str]:
    path = project / "pool.log"
    return path.read_text().split() if path.exists() else []


def failing_seed(proc: subprocess.CompletedProcess[str]) -> int:
    match = re.search(r"schedule seed (\d+); replay: pytest \S+ --tideloop-seed=\1", proc.stdout)
    assert match, proc.stdout + proc.stderr
    return int(match.group(1))


def projects(tmp_path: Path) -> tuple[Path, Path]:
    """Two project folders, side by side: one run on the pool, one here."""
    for name in ("pool", "here"):
        (tmp_path / name).mkdir()
    return tmp_path / "pool", tmp_path / "here"


def test_a_race_found_on_the_pool_fails_here_with_its_seed_and_replays(tmp_path: Path) -> None:
    files = {"test_race.py": RACE}
    seeds = ["--tideloop-seeds=40", f"--tideloop-seed={FIRST_SEED}"]
    project, here_project = projects(tmp_path)
    # Without an executor: the first failing seed, in this process.
    here = run(here_project, files, *seeds)
    assert outcome(here) == {"failed": 1}, here.stdout + here.stderr
    expected = failing_seed(here)
    assert expected > FIRST_SEED, "the race's first seed fails here: pick another FIRST_SEED"
    # On the pool: the same seed, found there and failed again here.
    proc = run(project, files, *seeds, "--tideloop-executor=executors:pool")
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    assert failing_seed(proc) == expected
    assert re.search(
        rf"test_race.py::test_assumes_timer_order: seed {expected} failed "
        rf"\({expected - FIRST_SEED} schedules passed before it\)",
        proc.stdout,
    ), proc.stdout
    assert (
        "found on the executor (--tideloop-executor=executors:pool); failed here again"
        in proc.stdout
    )
    # Shrunk and taped here, as without an executor; the workers wrote no tape.
    assert "1 deviation(s) from the unperturbed schedule" in proc.stdout, proc.stdout
    tapes = project / ".tideloop-tapes"
    assert sorted(p.name for p in tapes.iterdir()) == [
        "test_race__test_assumes_timer_order.html",
        "test_race__test_assumes_timer_order.json",
    ]
    assert pool_log(project) == ["made", "shutdown"]
    # Its replay commands fail here, in one process.
    tape = re.search(r"replay: pytest \S+ (--tideloop-tape=\S+)", proc.stdout)
    assert tape, proc.stdout
    for option in (tape.group(1), f"--tideloop-seed={expected}"):
        replay = run(project, files, "test_race.py::test_assumes_timer_order", option)
        assert outcome(replay) == {"failed": 1}, replay.stdout + replay.stderr
    assert pool_log(project) == ["made", "shutdown"]  # the replays made no pool


def test_a_dask_cluster_runs_the_seeds_and_the_failure_is_shrunk_here(tmp_path: Path) -> None:
    """The same race on a dask.distributed LocalCluster (real worker processes)."""
    if importlib.util.find_spec("distributed") is None:
        missing(
            "dask.distributed is not installed (the test extra has it)", "TIDELOOP_REQUIRE_DASK"
        )
    files = {"test_race.py": RACE}
    seeds = ["--tideloop-seeds=40", f"--tideloop-seed={FIRST_SEED}"]
    project, here_project = projects(tmp_path)
    expected = failing_seed(run(here_project, files, *seeds))
    proc = run(project, files, *seeds, "--tideloop-executor=executors:dask")
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    assert failing_seed(proc) == expected
    assert (
        "found on the executor (--tideloop-executor=executors:dask); failed here again"
        in proc.stdout
    ), proc.stdout
    assert "1 deviation(s) from the unperturbed schedule" in proc.stdout, proc.stdout
    assert pool_log(project) == ["made"]


def test_a_correct_suite_passes_with_every_seed_run_on_the_pool(tmp_path: Path) -> None:
    # The executor from the ini file, the seeds from the command line.
    proc = run(
        tmp_path,
        {"test_control.py": CONTROL},
        "--tideloop-seeds=40",
        ini="tideloop_executor = executors:pool\n",
    )
    assert outcome(proc) == {"passed": 3}, proc.stdout + proc.stderr
    for name in ("test_either_order", "test_both_fire"):
        assert (
            f"test_control.py::{name}: 40 schedules passed: 1 here, 39 on the executor "
            "(--tideloop-executor=executors:pool) in 2 batch(es)" in proc.stdout
        ), proc.stdout
    runs = [line.split() for line in (tmp_path / "runs.log").read_text().splitlines()]
    for name in ("either", "both"):
        pids = [pid for test, pid in runs if test == name]
        # 40 runs: 1 in pytest's process, 19 and 20 in two batches' processes.
        assert len(pids) == 40 and len(set(pids)) == 3, runs
        assert sorted(pids.count(pid) for pid in set(pids)) == [1, 19, 20], runs
    assert [test for test, _ in runs].count("sync") == 1
    # One pool for the session, shut down at its end.
    assert pool_log(tmp_path) == ["made", "shutdown"]


def test_the_factory_runs_under_the_policy_the_session_had_before_tideloops(
    tmp_path: Path,
) -> None:
    """An executor's own loops are not testing loops: a Dask client's loop
    thread, made under tideloop's policy, was taken for deadlocked."""
    proc = run(
        tmp_path,
        {"test_control.py": CONTROL},
        "--tideloop-seeds=21",
        "--tideloop-executor=executors:loop_noting_pool",
        "test_control.py::test_either_order",
    )
    assert outcome(proc) == {"passed": 1}, proc.stdout + proc.stderr
    assert pool_log(tmp_path) == ["loop:asyncio", "made", "shutdown"]


def test_the_budget_stops_submitting_batches(tmp_path: Path) -> None:
    suite = """\
    import asyncio, time
    import pytest

    @pytest.mark.tideloop
    def test_slow():
        async def main():
            await asyncio.sleep(0)
        asyncio.run(main())
        time.sleep(0.06)
    """
    # A batch of 20 schedules sleeps 1.2 s, longer than the whole budget: no
    # batch can end before the budget has passed, so none is submitted after
    # the first window, however fast the workers start (with 0.02 s, CI's
    # Debian 3.13 stage finished batches within the budget and ran 121).
    proc = run(
        tmp_path,
        {"test_slow.py": suite},
        "--tideloop-seeds=400",
        "--tideloop-seeds-budget=1",
        "--tideloop-executor=executors:pool",
    )
    assert outcome(proc) == {"passed": 1}, proc.stdout + proc.stderr
    stopped = re.search(
        r"test_slow.py::test_slow: (\d+) of 400 schedules passed in [\d.]+ s, then the "
        r"budget \(--tideloop-seeds-budget\) stopped it",
        proc.stdout,
    )
    assert stopped, proc.stdout
    # The first here, then whole batches of 20: at most the 4 in flight (twice
    # the pool's 2 workers) when the budget passed, none after.
    ran = int(stopped.group(1))
    assert ran <= 1 + 4 * 20 and (ran - 1) % 20 == 0, ran
    assert pool_log(tmp_path) == ["made", "shutdown"]


def test_a_bad_executor_is_a_usage_error_as_on_the_command_line(tmp_path: Path) -> None:
    files = {"test_race.py": RACE}
    cases = {
        "nocolon": "--tideloop-executor takes MODULE:FACTORY, not 'nocolon'",
        "no_such_module:pool": "No module named 'no_such_module'",
        "executors:not_an_executor": (
            "--tideloop-executor=executors:not_an_executor: executors:not_an_executor "
            "returned int, not a concurrent.futures.Executor"
        ),
    }
    for spec, message in cases.items():
        proc = run(tmp_path, files, "--tideloop-seeds=5", f"--tideloop-executor={spec}")
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert f"ERROR: {message}" in proc.stderr, proc.stderr
    # The command line's --executor says the same of the same spec.
    cli = children.run_python(
        "-m",
        "tideloop.testing",
        "explore",
        "test_race:test_assumes_timer_order",
        "--executor",
        "executors:not_an_executor",
        cwd=tmp_path,
        env=children.python_env(tmp_path),
    )
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "executors:not_an_executor returned int, not a concurrent.futures.Executor" in (
        cli.stderr
    )
    proc = run(tmp_path, files, "--tideloop-executor=executors:pool")
    assert proc.returncode == 4 and "give --tideloop-seeds" in proc.stderr, proc.stderr
    assert pool_log(tmp_path) == []


def test_a_failure_on_a_worker_that_passes_here_still_fails_the_test(tmp_path: Path) -> None:
    proc = run(
        tmp_path,
        {"test_worker.py": WORKER_ONLY},
        "--tideloop-seeds=10",
        "--tideloop-executor=executors:marked_pool",
    )
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    # Seed 0 ran here and passed; seed 1, the first on the pool, failed there.
    assert (
        "tideloop: seed 1 failed on a worker of the executor "
        "(--tideloop-executor=executors:marked_pool):" in proc.stdout
    ), proc.stdout
    assert "AssertionError: this process is a worker's" in proc.stdout
    assert "and passed when run again here" in proc.stdout
    assert "test_worker.py::test_fails_only_on_a_worker: seed 1 failed (1 schedules passed" in (
        proc.stdout
    )
    assert (
        "found on the executor (--tideloop-executor=executors:marked_pool) (AssertionError: "
        "this process is a worker's); passed when run again here" in proc.stdout
    )
    assert not (tmp_path / ".tideloop-tapes").exists()
    assert pool_log(tmp_path) == ["made", "shutdown"]


def test_a_batch_that_did_not_run_fails_the_test(tmp_path: Path) -> None:
    # The pool's workers deselect every test (PYTEST_ADDOPTS): no batch runs.
    proc = run(
        tmp_path,
        {"test_worker.py": WORKER_ONLY},
        "--tideloop-seeds=30",
        "--tideloop-executor=executors:deselecting_pool",
    )
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    assert (
        "tideloop: the executor (--tideloop-executor=executors:deselecting_pool) did not run "
        "seeds 1..20 of this test:\npytest exited with status 5: " in proc.stdout
    ), proc.stdout
    assert "1 deselected" in proc.stdout
    assert (
        "test_worker.py::test_fails_only_on_a_worker: seeds 1..20 failed (1 schedules passed"
        in proc.stdout
    )
    assert pool_log(tmp_path) == ["made", "shutdown"]


def test_a_strategy_that_is_not_seeded_is_a_usage_error(tmp_path: Path) -> None:
    files = {"test_race.py": RACE}
    for strategy in ("systematic", "coverage"):
        proc = run(
            tmp_path,
            files,
            "--tideloop-seeds=5",
            f"--tideloop-strategy={strategy}",
            "--tideloop-executor=executors:pool",
        )
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert (
            "--tideloop-executor is for --tideloop-strategy=random, pct (a seed each): "
            f"the {strategy} strategy picks each schedule from the runs before it"
        ) in proc.stderr, proc.stderr
    # An empty --tideloop-executor= drops the ini file's: the search runs here.
    proc = run(
        tmp_path,
        files,
        "--tideloop-seeds=20",
        "--tideloop-strategy=systematic",
        "--tideloop-executor=",
        ini="tideloop_executor = executors:pool\n",
    )
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    assert re.search(
        r"test_assumes_timer_order: systematic \(bound 2\), schedule \d+ failed", proc.stdout
    ), proc.stdout
    assert pool_log(tmp_path) == []


def test_pct_spreads_its_seeds_over_the_unperturbed_runs_length(tmp_path: Path) -> None:
    files = {"test_race.py": RACE}
    args = ["--tideloop-seeds=30", "--tideloop-strategy=pct", "--tideloop-depth=1"]
    project, here_project = projects(tmp_path)
    proc = run(project, files, *args, "--tideloop-executor=executors:pool")
    assert outcome(proc) == {"failed": 1}, proc.stdout + proc.stderr
    found = re.search(r"test_race.py::test_assumes_timer_order: (pct[^\n]*) failed", proc.stdout)
    assert found, proc.stdout
    assert "found on the executor (--tideloop-executor=executors:pool); failed here again" in (
        proc.stdout
    )
    # The same schedule as here without an executor (the unperturbed run's
    # length is every run's: the test meets the same decisions each time).
    here = run(here_project, files, *args)
    assert outcome(here) == {"failed": 1}, here.stdout + here.stderr
    assert f"test_race.py::test_assumes_timer_order: {found.group(1)} failed" in here.stdout
