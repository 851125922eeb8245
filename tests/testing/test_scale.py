"""Searches over an executor: a process pool, a Dask cluster, shards and a resumable state.

`explore(executor=...)`, ``jobs=`` and the command line's ``-j``,
``--executor MODULE:FACTORY``, ``--shard K/N`` and ``--state`` run a seeded
strategy's seeds, or the coverage strategy's proposals, in other processes
(``tideloop.testing._scale``); the results are merged here, and the first
failure is run again here, shrunk, and written as a tape. The Dask test
runs a real ``LocalCluster`` (two worker processes); it skips only where
dask.distributed is not installed and ``TIDELOOP_REQUIRE_DASK`` is not 1
(CI sets it: ``.ci/run``).
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import multiprocessing.resource_tracker
import sys
from pathlib import Path

import pytest

from children import python_env, run_python
from needs import missing
from scenarios.races import DEEP, timers_at_the_same_instant, two_clients_in_order
from tideloop import testing
from tideloop.testing._scale import parse_shard

ROOT = Path(__file__).parent.parent.parent

# A spawned process pool starts multiprocessing's resource tracker, which
# keeps a pipe open for the rest of this process: started now, before the
# leak check of any test counts it.
multiprocessing.resource_tracker.ensure_running()

FINE = "import asyncio\nasync def ok():\n    await asyncio.sleep(0)\n"

DASK_FACTORY = """\
from distributed import Client, LocalCluster

def executor():
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return Client(cluster).get_executor()
"""


def _cli(*args: str, cwd: Path = ROOT) -> tuple[int, str]:
    env = python_env(ROOT, *sys.path)
    proc = run_python("-m", "tideloop.testing", *args, cwd=cwd, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_process_pool_runs_the_coverage_search_and_the_failure_is_shrunk_here() -> None:
    planted = DEEP[0]
    result = testing.explore(
        planted.race, strategy="coverage", schedules=1000, virtual_time=True, jobs=2
    )
    assert result.tape is not None, result
    # 2 deviations make the race. Results arrive in any order, so the corpus
    # (and the schedule found) varies; the shrink is 1-minimal, not minimal,
    # and may keep deviations whose removal moves the others' points (seen:
    # 2 to 4). What holds: at least the 2, and the tape fails on replay.
    assert len(result.tape.deviations) >= 2
    assert result.worker_seconds > 0
    with pytest.raises(AssertionError):
        testing.replay(planted.race, result.tape)


def test_a_given_executor_is_used_and_left_to_its_owner() -> None:
    # spawn, as explore's own pool: from 3.14 the default is forkserver,
    # whose server (and its socket) outlives the pool, for the process.
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn) as pool:
        result = testing.explore(
            timers_at_the_same_instant, strategy="random", virtual_time=True, executor=pool
        )
        assert result.tape is not None and len(result.tape.deviations) == 1
        assert pool.submit(int, "7").result() == 7  # still open
    with pytest.raises(ValueError, match="walks its space in order"):
        testing.explore(two_clients_in_order, strategy="systematic", jobs=2)


def test_shards_split_the_seeds(tmp_path: Path) -> None:
    (tmp_path / "fine.py").write_text(FINE)
    passed = []
    for k in (1, 2, 3):
        state = tmp_path / f"shard{k}.json"
        code, out = _cli(
            "explore",
            "fine:ok",
            "--schedules",
            "30",
            "--shard",
            f"{k}/3",
            "--state",
            str(state),
            cwd=tmp_path,
        )
        assert code == 0, out
        seeds = json.loads(state.read_text())["passed"]
        assert seeds == list(range(k - 1, 30, 3))
        passed += seeds
    assert sorted(passed) == list(range(30))
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/2", "3/2", "x", "1-2"):
        with pytest.raises(ValueError, match="K/N"):
            parse_shard(bad)
    code, out = _cli("explore", "fine:ok", "--shard", "5/2", cwd=tmp_path)
    assert code == 2 and "1 <= K <= N" in out


def test_the_state_holds_the_corpus_and_the_failure_and_runs_resume(tmp_path: Path) -> None:
    (tmp_path / "fine.py").write_text(FINE)
    state = tmp_path / "state.json"
    args = ["explore", "fine:ok", "--strategy", "coverage", "--state", str(state)]
    code, out = _cli(*args, "--schedules", "12", cwd=tmp_path)
    assert code == 0, out
    saved = json.loads(state.read_text())
    assert saved["schedules"] == 12 and saved["corpus"]["corpus"], saved
    code, out = _cli(*args, "--schedules", "20", cwd=tmp_path)
    assert code == 0 and "resuming: 12 schedule(s) passed before, 8 to go" in out, out
    assert json.loads(state.read_text())["schedules"] == 20
    # A failure found is recorded, and a rerun tries it first.
    race_state = tmp_path / "race.json"
    race = [
        "explore",
        "scenarios.races:timers_at_the_same_instant",  # virtual time: it replays exactly
        "--virtual-time",
        "--state",
        str(race_state),
    ]
    code, out = _cli(*race, "--tape", str(tmp_path / "t1.json"))
    assert code == 1 and "tape:" in out, out
    failures = json.loads(race_state.read_text())["failures"]
    assert len(failures) == 1 and "AssertionError" in failures[0]["failure"]
    code, out = _cli(*race, "--tape", str(tmp_path / "t2.json"))
    assert code == 1 and "records fails again" in out, out
    assert (tmp_path / "t2.json").exists(), out


def test_a_dask_cluster_runs_the_search(tmp_path: Path) -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        missing(
            "dask.distributed is not installed (the test extra has it)", "TIDELOOP_REQUIRE_DASK"
        )
    (tmp_path / "cluster.py").write_text(DASK_FACTORY)
    tape = tmp_path / "deep.json"
    code, out = _cli(
        "explore",
        "scenarios.races:handover_after_a_clean_epoch",
        "--strategy",
        "coverage",
        "--virtual-time",
        "--executor",
        "cluster:executor",
        "-j",
        "2",
        "--tape",
        str(tape),
        "--state",
        str(tmp_path / "state.json"),
        cwd=tmp_path,
    )
    assert code == 1, out
    recorded = json.loads(tape.read_text())
    assert recorded["found_by"].startswith("coverage, a schedule of")
    # Shrunk here: the planted race needs 2 deviations; the workers' results
    # come back in any order, so the schedule found varies, and its 1-minimal
    # shrink may hold more that the others' positions depend on (as above).
    assert len(recorded["deviations"]) >= 2, out
    assert f"{len(recorded['deviations'])} deviation(s) from the unperturbed schedule" in out, out
    code, out = _cli(
        "replay", "scenarios.races:handover_after_a_clean_epoch", str(tape), cwd=tmp_path
    )
    assert code == 1 and "fails" in out, out
    code, out = _cli(
        "explore",
        "scenarios.races:timers_at_the_same_instant",  # virtual time: replays exactly here
        "--virtual-time",
        "--executor",
        "cluster:executor",
        "--tape",
        str(tmp_path / "seeded.json"),
        cwd=tmp_path,
    )
    assert code == 1 and "found by random, seed" in out, out
    (tmp_path / "bad.py").write_text("def executor():\n    return 3\n")
    code, out = _cli(
        "explore",
        "scenarios.races:two_clients_in_order",
        "--executor",
        "bad:executor",
        cwd=tmp_path,
    )
    assert code == 2 and "not a concurrent.futures.Executor" in out, out
