"""The pytest plugin's seeds on an executor: batches of seeds, each a pytest run in a worker.

Layer: top (``tideloop.testing``; below the pytest plugin, which calls
`spread` for ``--tideloop-executor MODULE:FACTORY``, and beside ``_scale``,
whose executors, `BATCH` and first-failure rule it shares). A test's
schedules under a seeded strategy are numbers (``_search.Recipe.seeded``),
so a batch of them is two numbers: `spread` cuts the seeds after the first
into consecutive ranges of `BATCH`, submits one `BatchWork` per range to
the executor, and merges the `BatchRun` each sends back, in seed order.

A worker (`run_batch`, any process that can import tideloop: a process
pool's, a Dask worker) runs one batch as a pytest run of its own, in a
subprocess (``sys.executable -m pytest NODEID ...``, in the directory the
session was started in, with its rootdir and ini file), so no long-lived
worker process runs pytest twice. That run loads this module as a plugin
(``-p tideloop.testing._pytest_scale``): its options
(``--tideloop-batch-result FILE``, ``--tideloop-batch-length N``, not for
users) put the pytest plugin in batch mode (`batch_length`: the seeds given, no
unperturbed run first, no shrinking, no budget, no executor of its own)
and make `_Reporter` write, at the end, what the test's exploration
reported (the `EXPLORED_PROPERTY` of its report: schedules run, the
failing one's place) and the failure's first line into FILE. Its tapes go
to a temporary directory, removed with FILE: a worker writes nothing into
the project.

Invariants:
- The failing seed `spread` returns is the lowest failing seed of the
  batches that ran: once a batch fails, the batches after it are cancelled
  (or, running, no longer waited for), the ones before it are waited for.
  A failure found in a worker is the caller's to run again in its own
  process; a batch that did not run (no result file, an exception) is an
  error, never a pass.
- Nothing but numbers, the test's node id, the command line's tideloop
  settings and paths travels to a worker; a `BatchRun` is as small.
- At most twice the executor's workers' batches are in flight (an
  executor that does not say how many workers it has: `WORKERS`), and
  none is submitted once the budget has passed.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pytest

from ._scale import BATCH

#: The report property that carries a test's exploration (``_Explored``).
EXPLORED_PROPERTY: Final = "tideloop_explored"
#: Workers assumed of an executor that does not say (a Dask client's).
WORKERS: Final = 4
#: Lines of a batch's pytest output kept when it did not run.
OUTPUT_TAIL: Final = 15
_RESULT: Final = "tideloop_batch_result"
_LENGTH: Final = "tideloop_batch_length"


@dataclass(frozen=True)
class BatchWork:
    """One batch for a worker: the seeds ``first .. first + count - 1`` of one test."""

    #: The test: its file's absolute path, ``::``, the rest of its node id.
    target: str
    #: The node id the run must report (relative to *rootdir*).
    nodeid: str
    #: Where the session was started; its rootdir and ini file.
    cwd: str
    rootdir: str
    inifile: str | None
    #: The session's tideloop settings, as options (and its ``-p``, ``-o``).
    args: tuple[str, ...]
    #: pct: the decisions the unperturbed run met (its change points spread
    #: over them); 0 for a strategy that measures nothing.
    length: int = 0
    first: int = 0
    count: int = 0


@dataclass(frozen=True)
class BatchRun:
    """What a worker sends back for a `BatchWork`."""

    first: int
    count: int
    #: Schedules run (up to the failing one).
    ran: int = 0
    failed_seed: int | None = None
    #: The failure's first line ("AssertionError: assert ...").
    failure: str = ""
    #: Why the batch did not run as asked ("" if it did).
    error: str = ""
    seconds: float = 0.0


def run_batch(work: BatchWork) -> BatchRun:
    """A worker's body: one pytest run of *work*'s test under its seeds."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tideloop-batch-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "pytest", work.target, "-p", "no:cacheprovider", "-q"]
        argv += ["--rootdir", work.rootdir]
        if work.inifile is not None:
            argv += ["-c", work.inifile]
        argv += [
            *work.args,
            "-p",
            __name__,
            f"--tideloop-seed={work.first}",
            f"--tideloop-seeds={work.count}",
            "--tideloop-shrink=0",
            f"--tideloop-tape-dir={Path(tmp) / 'tapes'}",
            f"--tideloop-batch-result={result}",
            f"--tideloop-batch-length={work.length}",
        ]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(
            argv,
            cwd=work.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError):
            data = {}
    seconds = time.perf_counter() - start
    explored = data.get("explored")
    ran = BatchRun(work.first, work.count, seconds=seconds)
    if isinstance(explored, dict) and explored.get("nodeid") == work.nodeid:
        failure = explored.get("failure")
        if isinstance(failure, dict):
            seed = work.first + int(failure["passed_before"])
            text = str(data.get("failure") or "")
            return replace(ran, ran=int(explored["ran"]), failed_seed=seed, failure=text)
        if data.get("exitstatus") == 0:
            return replace(ran, ran=int(explored["ran"]))
    output = (proc.stdout + proc.stderr).strip().splitlines()[-OUTPUT_TAIL:]
    error = f"pytest exited with status {proc.returncode}: " + "\n".join(output)
    return replace(ran, error=error)


@dataclass
class Spread:
    """What `spread` did: schedules the workers ran, and the first failure."""

    ran: int = 0
    batches: int = 0
    #: The lowest failing seed and its failure's first line (None: none failed).
    failed_seed: int | None = None
    failure: str = ""
    #: Of the seeds spread, how many passed before the failing one.
    passed_before: int = 0
    #: A batch that did not run: its seeds (first, count) and why.
    error: str = ""
    error_seeds: tuple[int, int] | None = None
    #: The budget stopped it before every seed ran (none failed).
    budget_stopped: bool = False
    #: The workers' own seconds, summed.
    worker_seconds: float = 0.0


def spread(
    executor: cf.Executor,
    work: BatchWork,
    seeds: Sequence[int],
    *,
    left: Callable[[], float | None],
    tick: Callable[[int], None],
) -> Spread:
    """Run *seeds* (consecutive) in batches of `BATCH` on *executor*, each a
    copy of *work*; stop at the lowest failing seed.

    *left*: the real seconds left of the test's budget (None: no budget);
    once none are, no batch is submitted and those not started are
    cancelled (those running are waited for: their failure still counts).
    *tick*: called with the schedules run so far, after each batch.
    """
    batches = [tuple(seeds[i : i + BATCH]) for i in range(0, len(seeds), BATCH)]
    workers = getattr(executor, "_max_workers", None)
    window = 2 * (workers if isinstance(workers, int) and workers > 0 else WORKERS)
    inflight: dict[cf.Future[BatchRun], int] = {}
    runs: dict[int, BatchRun] = {}
    result = Spread()
    found: int | None = None  # the lowest batch that failed, or did not run
    stopped = False
    handed = 0
    try:
        while True:
            if not stopped and found is None:
                remaining = left()
                if remaining is not None and remaining <= 0:
                    stopped = True
                    for other in list(inflight):
                        if other.cancel():
                            del inflight[other]
            while not stopped and found is None and handed < len(batches):
                if len(inflight) >= window:
                    break
                batch = batches[handed]
                try:
                    future = executor.submit(
                        run_batch, replace(work, first=batch[0], count=len(batch))
                    )
                except Exception as exc:  # a broken pool, one shut down
                    error = f"{type(exc).__name__}: {exc}"
                    runs[handed] = BatchRun(batch[0], len(batch), error=error)
                    found = handed
                    break
                inflight[future] = handed
                handed += 1
            # Once a batch failed, only the ones before it matter.
            waiting = [f for f, i in inflight.items() if found is None or i < found]
            if not waiting:
                break
            remaining = None if stopped else left()
            timeout = None if remaining is None else max(remaining, 0.0)
            done, _ = cf.wait(waiting, timeout=timeout, return_when=cf.FIRST_COMPLETED)
            for future in done:
                i = inflight.pop(future)
                run = _outcome(future, batches[i])
                runs[i] = run
                result.ran += run.ran
                result.batches += 1
                result.worker_seconds += run.seconds
                if (run.failed_seed is not None or run.error) and (found is None or i < found):
                    found = i
                    for other, j in list(inflight.items()):
                        if j > i and other.cancel():
                            del inflight[other]
            tick(result.ran)
    finally:
        for future in inflight:
            future.cancel()
    if found is None:
        result.budget_stopped = stopped and result.ran < len(seeds)
        return result
    run = runs[found]
    result.passed_before = sum(r.ran for i, r in runs.items() if i < found)
    if run.failed_seed is not None:
        result.failed_seed, result.failure = run.failed_seed, run.failure
        result.passed_before += run.failed_seed - run.first
    else:
        result.error, result.error_seeds = run.error, (run.first, run.count)
    return result


def _outcome(future: cf.Future[BatchRun], batch: tuple[int, ...]) -> BatchRun:
    """A finished batch's run; one that raised (a broken pool) did not run."""
    try:
        return future.result()
    except Exception as exc:
        return BatchRun(batch[0], len(batch), error=f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------
# In the worker's pytest run (``-p tideloop.testing._pytest_scale``)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tideloop-batch", "tideloop: a batch of --tideloop-executor's")
    group.addoption(
        "--tideloop-batch-result",
        dest=_RESULT,
        default=None,
        metavar="FILE",
        help="(run by --tideloop-executor's workers) write the batch's outcome to FILE",
    )
    group.addoption(
        "--tideloop-batch-length",
        dest=_LENGTH,
        type=int,
        default=0,
        metavar="N",
        help="(run by --tideloop-executor's workers) pct: the unperturbed run's decisions",
    )


def batch_length(config: pytest.Config) -> int | None:
    """In a worker's pytest run: the unperturbed run's decisions (pct's
    *length*, 0 if not measured); None in any other run."""
    if config.getoption(_RESULT, None) is None:
        return None
    return int(config.getoption(_LENGTH, 0) or 0)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption(_RESULT, None)
    if path is not None:
        config.pluginmanager.register(_Reporter(Path(path)), "tideloop-batch-reporter")


class _Reporter:
    """Writes what the test's exploration reported into the result file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._explored: dict[str, Any] | None = None
        self._failure = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == EXPLORED_PROPERTY and isinstance(value, dict):
                self._explored = dict(value)
        if report.failed and not self._failure:
            self._failure = _first_line(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        data = {"exitstatus": int(exitstatus), "explored": self._explored, "failure": self._failure}
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._path)


def _first_line(report: pytest.TestReport) -> str:
    """A failed report's failure in one line ("AssertionError: assert ...")."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    if message.strip():
        return message.strip().splitlines()[0]
    lines = str(report.longrepr).strip().splitlines()
    return lines[-1] if lines else ""
