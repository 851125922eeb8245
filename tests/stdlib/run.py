"""Run CPython's own ``test_asyncio`` on tideloop and on the stdlib loop, side by side.

    python tests/stdlib/run.py [--python PY] [--loop both|tideloop|stdlib]
                               [--check [--update]] [-j 2] [MODULE | TEST-PATTERN ...]

For each selected module of the target Python's ``test/test_asyncio`` and each
loop, a subprocess (`child.py`) runs the module's tests on that loop and
streams per-test outcomes back. A test that hangs is killed after
``--test-timeout`` seconds and recorded as ``timeout``; the module then
continues in a fresh subprocess with the tests left, so one hang costs one
test, not a module. Up to ``--jobs`` subprocesses run at once.

Results go to ``tests/stdlib/results/<python>-<loop>.json`` (outcome, time
and, for failures, the traceback of every test) and a per-module table is
printed and written as markdown (``results/<python>-report.md``).

``--check`` compares the tideloop results with the committed expected-results
file of the Python minor version (``expected/<minor>.json``) and exits
non-zero if a test expected to pass no longer does, or if any test ran on a
stdlib loop during the tideloop run (an injection failure). Newly passing
tests are printed; ``--update`` records them (and drops tests that stopped
passing, after printing them).

``--report-only`` re-renders the table from saved results without running.
See README.md in this directory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gate
import not_applicable
import report

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHILD = HERE / "child.py"
RESULTS = HERE / "results"

#: Modules whose run takes longest go first, so that the pool stays busy.
SLOW_FIRST = ("test_tasks", "test_subprocess", "test_ssl", "test_events", "test_taskgroups")

#: The core's modules (scheduling, tasks, synchronisation; no networking):
#: ``--core``, a quick check after touching the core.
CORE_MODULES = (
    "test_locks",
    "test_queues",
    "test_taskgroups",
    "test_timeouts",
    "test_waitfor",
    "test_threads",
    "test_context",
    "test_futures2",
    "test_events",
    "test_tasks",
)

_print_lock = threading.Lock()

#: What faulthandler.dump_traceback_later prints first when a test times out.
FAULTHANDLER_TIMEOUT = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.MULTILINE)


def log(message: str) -> None:
    with _print_lock:
        print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Target:
    """The Python whose test_asyncio is run, and how to run it."""

    python: str
    version: str
    minor: str
    test_dir: str
    modules: tuple[str, ...]
    #: ``sys.implementation.name``: "cpython" or "pypy".
    implementation: str = "cpython"

    @property
    def key(self) -> str:
        """The expected-results key: "3.11", or "pypy3.11" (PyPy's results are its own).

        ``minor`` stays the language version: not_applicable.py's entries for
        a minor version apply to PyPy's copy of that version's tests.
        """
        return f"pypy{self.minor}" if self.implementation == "pypy" else self.minor

    @property
    def label(self) -> str:
        """Names the results files: "3.13.0", or "pypy3.11.17"."""
        return f"pypy{self.version}" if self.implementation == "pypy" else self.version

    @property
    def title(self) -> str:
        return f"PyPy {self.version}" if self.implementation == "pypy" else f"Python {self.version}"

    @classmethod
    def probe(cls, python: str) -> Target:
        # Absolute, but not resolved: a venv's python is a symlink whose
        # target would not see the venv's packages. Children run elsewhere.
        found = shutil.which(python) if os.sep not in python else python
        if found is None:
            raise SystemExit(f"no interpreter {python!r}")
        python = os.path.abspath(found)
        # find_spec, not an import: test.test_asyncio imports test.support,
        # which fails on Debian's PyPy until child.py deals with _testcapi.
        code = (
            "import importlib.util, json, os, sys\n"
            "d = importlib.util.find_spec('test.test_asyncio').submodule_search_locations[0]\n"
            "print(json.dumps({'version': '.'.join(map(str, sys.version_info[:3])),"
            " 'implementation': sys.implementation.name,"
            " 'dir': d, 'modules': sorted(f[:-3] for f in os.listdir(d)"
            " if f.startswith('test_') and f.endswith('.py'))}))\n"
        )
        out = subprocess.run(
            [python, "-c", code], check=True, capture_output=True, text=True
        ).stdout
        info = json.loads(out)
        version = info["version"]
        return cls(
            python=python,
            version=version,
            minor=".".join(version.split(".")[:2]),
            test_dir=info["dir"],
            modules=tuple(info["modules"]),
            implementation=info["implementation"],
        )


@dataclass
class Options:
    test_timeout: float
    module_timeout: float
    max_restarts: int
    poller: str | None
    only: dict[str, list[str]]
    logs: Path


@dataclass
class ModuleRun:
    """Everything recorded for one module on one loop."""

    module: str
    loop: str
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    fixtures: list[dict[str, Any]] = field(default_factory=list)
    stray_loops: list[Any] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    attempts: int = 0
    wall: float = 0.0
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "wall": round(self.wall, 2),
            "attempts": self.attempts,
            "problems": self.problems,
            "fixtures": self.fixtures,
            "stray_loops": self.stray_loops,
            "not_applicable": self.not_applicable,
            "tests": self.tests,
        }


def _read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    try:
        with path.open() as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by a crash
    except FileNotFoundError:
        pass
    return events


def _summarise_loops(loops: list[list[Any]]) -> dict[str, Any]:
    stdlib = sorted({name for name, is_tideloop in loops if not is_tideloop})
    return {"tideloop": sum(1 for _, t in loops if t), "stdlib": stdlib}


def run_module(target: Target, module: str, loop: str, opts: Options) -> ModuleRun:
    """Run one module on one loop, restarting after hangs and crashes."""
    result = ModuleRun(module, loop)
    log_path = opts.logs / f"{module}.log"
    log_path.unlink(missing_ok=True)
    started = time.monotonic()
    only = opts.only.get(module, [])
    while True:
        result.attempts += 1
        remaining = opts.module_timeout - (time.monotonic() - started)
        with tempfile.TemporaryDirectory(prefix=f"tl-{module}-") as tmp:
            tmpdir = Path(tmp)
            events_path = tmpdir / "events.jsonl"
            exclude_path = tmpdir / "exclude.json"
            exclude_path.write_text(json.dumps(sorted(result.tests)))
            cmd = [
                target.python,
                str(CHILD),
                "--loop",
                loop,
                "--module",
                module,
                "--events",
                str(events_path),
                "--exclude",
                str(exclude_path),
                "--test-timeout",
                str(opts.test_timeout),
            ]
            if opts.poller and loop == "tideloop":
                cmd += ["--poller", opts.poller]
            for pattern in only:
                cmd += ["--only", pattern]
            workdir = tmpdir / "cwd"
            workdir.mkdir()
            with log_path.open("a") as logf:
                logf.write(f"===== attempt {result.attempts}: {' '.join(cmd)}\n")
                logf.flush()
                log_start = logf.tell()
                # A session of its own: a hung child and whatever it spawned
                # can be killed as one process group.
                proc = subprocess.Popen(
                    cmd,
                    cwd=workdir,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                killed = not _wait_unreaped(proc.pid, max(remaining, 1.0))
                # Kill the group: the child if it is still running, and any
                # process a test left behind. The child is not reaped yet, so
                # its pid (the group's id) cannot have been reused.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            events = _read_events(events_path)
        with log_path.open() as f:
            f.seek(log_start)
            attempt_log = f.read()

        finished = _absorb(result, events, loop)
        if finished:
            break
        # The child died: a test timed out (faulthandler exits the process),
        # crashed the interpreter, or the module budget ran out.
        running = _running_test(events)
        if running is None:
            result.problems.append(
                f"attempt {result.attempts}: subprocess exited with {proc.returncode} "
                f"outside any test{' (module timeout)' if killed else ''}"
            )
            break
        timed_out = killed or FAULTHANDLER_TIMEOUT.search(attempt_log) is not None
        if killed:
            verdict = "killed: the module's time budget ran out during this test"
        elif timed_out:
            verdict = f"timed out after {opts.test_timeout:g}s (stacks of all threads above)"
        else:
            verdict = f"the test process died (exit status {proc.returncode}; log above)"
        result.tests[running] = {
            "outcome": "timeout" if timed_out else "crash",
            "time": None,
            "message": attempt_log[-6000:] + "\n" + verdict,
        }
        if killed:
            result.problems.append("module time budget exhausted")
            break
        if result.attempts > opts.max_restarts:
            result.problems.append(f"gave up after {result.attempts} attempts")
            break
        log(f"  {module} [{loop}]: {running} {result.tests[running]['outcome']}; restarting")

    _finish(result)
    result.wall = time.monotonic() - started
    return result


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait up to *timeout* seconds for *pid* to exit, leaving it unreaped.

    True if it exited. (``waitid`` with ``WNOWAIT`` keeps the zombie, so its
    process group can still be killed safely afterwards.)"""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if _exited_unreaped(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _exited_unreaped(pid: int) -> bool:
    """Has child *pid* exited? Asked without reaping it."""
    if hasattr(os, "waitid"):
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    # PyPy has no os.waitid: the child's state in /proc ("Z": exited, not reaped).
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def _running_test(events: list[dict[str, Any]]) -> str | None:
    running = None
    for event in events:
        if event["event"] == "start":
            running = event["id"]
        elif event["event"] == "end":
            running = None
    return running


def _absorb(result: ModuleRun, events: list[dict[str, Any]], loop: str) -> bool:
    """Fold one attempt's events into *result*; True if the child finished."""
    finished = False
    for event in events:
        kind = event["event"]
        if kind == "collected":
            if not result.collected:
                result.collected = list(event["tests"])
            result.not_applicable.update(event["not_applicable"])
        elif kind == "end":
            record: dict[str, Any] = {"outcome": event["outcome"], "time": event["time"]}
            if event["outcome"] != "pass":
                record["message"] = event["message"]
            loops = _summarise_loops(event["loops"])
            record["loops"] = loops
            if loop == "tideloop" and loops["stdlib"]:
                # The injection did not reach this test: its outcome says
                # nothing about tideloop.
                record["raw_outcome"] = record["outcome"]
                record["outcome"] = "stdlib-loop"
                record["message"] = f"ran on stdlib loop(s) {loops['stdlib']}\n" + record.get(
                    "message", ""
                )
            result.tests[event["id"]] = record
        elif kind == "fixture":
            result.fixtures.append(
                {"id": event["id"], "outcome": event["outcome"], "message": event["message"]}
            )
        elif kind == "stray_loops":
            result.stray_loops.append(event)
        elif kind == "done":
            if event["stray_loops"]:
                result.stray_loops.append({"before": "(end)", "loops": event["stray_loops"]})
            finished = True
    return finished


def _finish(result: ModuleRun) -> None:
    """Give every collected test an outcome."""
    fixture_errors = [f for f in result.fixtures if f["outcome"] == "error"]
    for test_id in result.collected:
        if test_id in result.tests:
            continue
        if fixture_errors:
            cls = test_id.rsplit(".", 1)[0]
            related = [f for f in fixture_errors if cls.rsplit(".", 1)[-1] in f["id"]]
            if related or any("Module" in f["id"] for f in fixture_errors):
                result.tests[test_id] = {
                    "outcome": "error",
                    "time": None,
                    "message": "not run: a class or module fixture failed\n"
                    + (related or fixture_errors)[0]["message"],
                }
                continue
        result.tests[test_id] = {
            "outcome": "not-run",
            "time": None,
            "message": "; ".join(result.problems) or "not run",
        }


def _git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {
        "commit": git("rev-parse", "HEAD"),
        "src_modified": bool(git("status", "--porcelain", "--", "src")),
    }


def select(target: Target, args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Modules to run, and per module the test-id patterns (empty = all)."""
    if not args:
        return list(target.modules), {}
    modules: list[str] = []
    only: dict[str, list[str]] = {}
    for arg in args:
        module, _, rest = arg.partition(".")
        if module not in target.modules:
            raise SystemExit(f"no module {module} in {target.test_dir}")
        if module not in modules:
            modules.append(module)
        if rest:
            only.setdefault(module, []).append(arg)
    return modules, only


def run_name(target: Target, loop: str, poller: str | None = None) -> str:
    """The name of a run's results and logs: 3.13.0-tideloop, pypy3.11.17-tideloop-poll...

    A tideloop run with ``--poller`` is a run of its own (its results do not
    overwrite the default poller's); the stdlib loop has no poller of ours.
    """
    suffix = f"-{poller}" if poller and loop == "tideloop" else ""
    return f"{target.label}-{loop}{suffix}"


def results_path(target: Target, loop: str, poller: str | None = None) -> Path:
    return RESULTS / f"{run_name(target, loop, poller)}.json"


def save(
    target: Target,
    loop: str,
    runs: dict[str, ModuleRun],
    meta: dict[str, Any],
    partial: set[str],
) -> Path:
    """Write results; modules not run this time keep their previous results, and
    modules run only in part (*partial*) keep the results of the other tests."""
    path = results_path(target, loop, meta["poller"])
    data: dict[str, Any] = {"modules": {}}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    if meta["complete"] or "date" not in data:
        # Run-level facts describe full runs; a partial run only stamps the
        # modules it ran (below).
        data.update(meta)
    data["python"] = target.version
    data["implementation"] = target.implementation
    data["loop"] = loop
    data.setdefault("modules", {})
    for module, run in runs.items():
        new = run.as_json()
        new["date"] = meta["date"]
        new["tideloop"] = meta["tideloop"]
        old = data["modules"].get(module)
        if module in partial and old is not None:
            old["tests"].update(new["tests"])
            old["not_applicable"].update(new["not_applicable"])
            new["tests"] = dict(sorted(old["tests"].items()))
            new["not_applicable"] = old["not_applicable"]
        data["modules"][module] = new
    data["modules"] = dict(sorted(data["modules"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run CPython's test_asyncio on tideloop and on the stdlib loop.",
    )
    parser.add_argument("tests", nargs="*", help="modules (test_tasks) or test-id patterns")
    parser.add_argument("--python", default=sys.executable, help="interpreter (default: this)")
    parser.add_argument("--loop", choices=["both", "tideloop", "stdlib"], default="both")
    parser.add_argument("--poller", default=None, help="tideloop poller (default: platform's)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="parallel subprocesses")
    parser.add_argument("--test-timeout", type=float, default=30.0, help="seconds per test")
    parser.add_argument("--module-timeout", type=float, default=300.0, help="seconds per module")
    parser.add_argument("--max-restarts", type=int, default=25)
    parser.add_argument("--core", action="store_true", help="only the core's modules")
    parser.add_argument("--check", action="store_true", help="regression gate (tideloop)")
    parser.add_argument("--update", action="store_true", help="record the expected results")
    parser.add_argument("--report-only", action="store_true", help="render saved results")
    parser.add_argument("--markdown", type=Path, default=None, help="markdown report path")
    parser.add_argument("-v", "--verbose", action="store_true", help="list failing tests")
    args = parser.parse_args(argv)

    target = Target.probe(args.python)
    selection = list(args.tests)
    if args.core:
        selection += [m for m in CORE_MODULES if m in target.modules]
    modules, only = select(target, selection)
    loops = ["tideloop", "stdlib"] if args.loop == "both" else [args.loop]
    if (args.check or args.update) and "tideloop" not in loops:
        parser.error("--check/--update need the tideloop run")

    wall = 0.0
    if not args.report_only:
        log(
            f"test_asyncio of {target.title} ({target.python}): "
            f"{len(modules)} modules on {', '.join(loops)}, {args.jobs} at a time"
        )
        order = sorted(
            modules,
            key=lambda m: (m not in SLOW_FIRST, SLOW_FIRST.index(m) if m in SLOW_FIRST else 0, m),
        )
        jobs = [(m, lp) for m in order for lp in loops]
        runs: dict[str, dict[str, ModuleRun]] = {lp: {} for lp in loops}
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {}
            for module, lp in jobs:
                logs = RESULTS / "logs" / run_name(target, lp, args.poller)
                logs.mkdir(parents=True, exist_ok=True)
                opts = Options(
                    test_timeout=args.test_timeout,
                    module_timeout=args.module_timeout,
                    max_restarts=args.max_restarts,
                    poller=args.poller,
                    only=only,
                    logs=logs,
                )
                futures[pool.submit(run_module, target, module, lp, opts)] = (module, lp)
            for fut in concurrent.futures.as_completed(futures):
                module, lp = futures[fut]
                run = fut.result()
                runs[lp][module] = run
                counts = report.count(run.tests)
                log(
                    f"{module:<24} {lp:<8} {run.wall:6.1f}s  "
                    + " ".join(f"{k}={v}" for k, v in counts.items() if v)
                    + (f"  PROBLEMS: {run.problems}" if run.problems else "")
                )
        wall = time.monotonic() - t0
        meta = {
            "tideloop": _git_state(),
            "poller": args.poller,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_time": round(wall, 1),
            "test_timeout": args.test_timeout,
            "complete": not args.tests and not args.core,
        }
        for lp in loops:
            save(target, lp, runs[lp], meta, partial=set(only))
        log(f"wall time {wall:.1f}s")

    loaded = {
        lp: report.load(results_path(target, lp, args.poller)) for lp in ("tideloop", "stdlib")
    }
    if not args.tests and not args.core:
        warn_stale_entries(target, loaded["tideloop"] or loaded["stdlib"])
    shown = modules if (args.tests or args.core) else None
    table = report.Table.build(loaded["tideloop"], loaded["stdlib"], shown)
    print(table.render_terminal(title=f"test_asyncio, {target.title}"), flush=True)
    if args.verbose:
        print(report.list_failures(loaded["tideloop"], shown))
    # The markdown report always covers every module with saved results.
    full_table = report.Table.build(loaded["tideloop"], loaded["stdlib"])
    name = run_name(target, "tideloop", args.poller).replace("-tideloop", "")
    markdown = args.markdown or RESULTS / f"{name}-report.md"
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(full_table.render_markdown(title=target.title) + "\n")
    log(f"markdown: {markdown}")

    status = 0
    if args.check or args.update:
        ran = set(modules)
        comparison = gate.compare(target.key, loaded["tideloop"], ran)
        if comparison.regressions and not args.report_only:
            # Rule out flakes: run each regressed test once more, alone.
            log(f"re-running {len(comparison.regressions)} regressed tests once")
            rerun = rerun_tests(target, list(comparison.regressions), args)
            for test_id, record in rerun.items():
                module = loaded["tideloop"]["modules"][test_id.partition(".")[0]]
                if record["outcome"] in report.PASSING:
                    record["flaky"] = module["tests"].get(test_id, {}).get("outcome")
                    log(f"  flaky: {test_id} passed on the re-run")
                module["tests"][test_id] = record
            comparison = gate.compare(target.key, loaded["tideloop"], ran)
        print(gate.report(comparison, update=args.update))
        if args.update:
            meta = {
                "version": target.version,
                "tideloop": loaded["tideloop"].get("tideloop"),
                "date": loaded["tideloop"].get("date"),
            }
            gate.write_expected(target.key, comparison, ran, meta)
            log(f"expected results: {gate.expected_path(target.key)}")
        elif comparison.regressions or comparison.leaks:
            status = 1
        if comparison.leaks:
            status = 1
    return status


def warn_stale_entries(target: Target, data: dict[str, Any]) -> None:
    """Report not-applicable entries that match no test of this Python."""
    ids: set[str] = set()
    for module in data["modules"].values():
        ids.update(module["tests"])
        ids.update(module["not_applicable"])
    if not ids:
        return
    for entry in not_applicable.stale_entries(ids, target.minor):
        log(f"not_applicable.py: entry {entry.pattern!r} matches no test on {target.version}")


def rerun_tests(target: Target, test_ids: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Run *test_ids* again on tideloop, one subprocess per module; new records."""
    by_module: dict[str, list[str]] = {}
    for test_id in test_ids:
        by_module.setdefault(test_id.partition(".")[0], []).append(test_id)
    logs = RESULTS / "logs" / f"{run_name(target, 'tideloop', args.poller)}-rerun"
    logs.mkdir(parents=True, exist_ok=True)
    records: dict[str, Any] = {}
    for module, ids in by_module.items():
        opts = Options(
            test_timeout=args.test_timeout,
            module_timeout=args.module_timeout,
            max_restarts=args.max_restarts,
            poller=args.poller,
            only={module: ids},
            logs=logs,
        )
        run = run_module(target, module, "tideloop", opts)
        records.update({t: r for t, r in run.tests.items() if t in ids})
    return records


if __name__ == "__main__":
    sys.exit(main())
