"""One test subprocess: run one ``test.test_asyncio`` module on one loop.

Started by `run.py`, never by hand (but it can be, for debugging):

    python tests/stdlib/child.py --loop tideloop --module test_locks \\
        --events /tmp/events.jsonl [--poller epoll] [--exclude FILE] [--only PATTERN]

It installs the loop (`inject.py`), imports the module, adds the variant
classes (`variants.py`), drops the not-applicable tests (`not_applicable.py`)
and runs the rest with unittest, writing one JSON object per line to
``--events`` as it goes (flushed each time, so a crash or a timeout loses
nothing already finished):

    {"event": "collected", "tests": [...], "not_applicable": {id: reason}}
    {"event": "start", "id": ...}
    {"event": "end", "id": ..., "outcome": ..., "time": s, "message": ..., "loops": [...]}
    {"event": "fixture", "id": ..., "outcome": "error", "message": ...}
    {"event": "done", "stray_loops": [...]}

A test that runs longer than ``--test-timeout`` seconds makes faulthandler
dump every thread's stack to stderr and exit the process; the parent records
that test as a timeout and starts a new process for the tests left.
"""

from __future__ import annotations

import argparse
import faulthandler
import fnmatch
import importlib
import json
import os
import signal
import sys
import time
import traceback
import unittest
import warnings
from collections.abc import Iterator
from types import TracebackType
from typing import Any, TextIO

import inject
import not_applicable
import variants

PACKAGE = "test.test_asyncio."


def _missing_testcapi_is_an_import_error() -> None:
    """Make a ``_testcapi`` that cannot load fail to import as a missing module does.

    CPython's test.support (which every test_asyncio module imports) copes
    with a Python built without ``_testcapi``: it catches ImportError (and
    tests that need the module skip through ``import_helper.import_module``).
    Debian's pypy3 ships PyPy's ``_testcapi.py`` shim, which compiles
    ``_testcapimodule.c`` at import, but not that file: the import raises
    FileNotFoundError, which nothing catches. A None in sys.modules makes
    every later import raise ImportError instead (ModuleNotFoundError).
    """
    try:
        import _testcapi  # noqa: F401
    except ImportError:
        pass
    except Exception:
        sys.modules["_testcapi"] = None  # type: ignore[assignment]


if sys.implementation.name == "pypy":
    _missing_testcapi_is_an_import_error()
#: Traceback text kept per failure, from the end (where the error is).
MAX_MESSAGE = 4000

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]

# Outcome ranks: a test's final outcome is the worst one reported for it (a
# failing subtest makes the test fail even though unittest calls no addFailure
# for the test itself).
RANK = {"pass": 0, "skip": 1, "xfail": 1, "xpass": 2, "fail": 3, "error": 4}


def short_id(test_id: str) -> str:
    return test_id.removeprefix(PACKAGE)


def iter_tests(suite: unittest.TestSuite | unittest.TestCase) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestSuite):
        for item in suite:
            yield from iter_tests(item)
    else:
        yield suite


class Recorder(unittest.TestResult):
    """Streams per-test outcomes to the events file."""

    def __init__(self, out: TextIO, test_timeout: float, tideloop: bool) -> None:
        super().__init__()
        self.tideloop = tideloop
        self.out = out
        self.test_timeout = test_timeout
        self.current: dict[str, Any] | None = None
        self.started = 0.0

    def emit(self, **event: Any) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def _format(self, err: ExcInfo) -> str:
        if err[0] is None:
            return ""
        text = "".join(traceback.format_exception(*err))
        return text[-MAX_MESSAGE:]

    def _set(self, outcome: str, message: str = "") -> None:
        cur = self.current
        if cur is not None and RANK[outcome] > RANK[cur["outcome"]]:
            cur["outcome"] = outcome
            cur["message"] = message

    # -- unittest.TestResult protocol

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        # A loop left over from a previous test, or built at class setup,
        # must not be charged to this test.
        stray = inject.take_created_loops()
        if stray:
            self.emit(event="stray_loops", before=short_id(test.id()), loops=stray)
        if self.tideloop:
            inject.route_tideloop_logging()
        self.current = {"id": short_id(test.id()), "outcome": "pass", "message": ""}
        self.emit(event="start", id=self.current["id"])
        if self.test_timeout > 0:
            faulthandler.dump_traceback_later(self.test_timeout, exit=True)
        self.started = time.monotonic()

    def stopTest(self, test: unittest.TestCase) -> None:
        elapsed = time.monotonic() - self.started
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)
        cur = self.current
        if cur is None:
            return
        self.current = None
        self.emit(
            event="end",
            id=cur["id"],
            outcome=cur["outcome"],
            time=round(elapsed, 4),
            message=cur["message"],
            loops=inject.take_created_loops(),
        )

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._set("pass")

    def addFailure(self, test: unittest.TestCase, err: ExcInfo) -> None:
        self._set("fail", self._format(err))

    def addError(self, test: unittest.TestCase, err: ExcInfo) -> None:
        if self.current is None or not isinstance(test, unittest.TestCase):
            # setUpModule / setUpClass / tearDownClass / tearDownModule: unittest
            # reports them with an _ErrorHolder whose description names them.
            self.emit(
                event="fixture",
                id=str(getattr(test, "description", test)),
                outcome="error",
                message=self._format(err),
            )
            return
        self._set("error", self._format(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        if self.current is None:
            if isinstance(test, unittest.TestCase) and test.id() != str(test):
                # Python 3.12.0-3.12.x report a skipped test (class or method
                # decorator) without calling startTest/stopTest.
                self.emit(event="start", id=short_id(test.id()))
                self.emit(
                    event="end",
                    id=short_id(test.id()),
                    outcome="skip",
                    time=0.0,
                    message=reason,
                    loops=[],
                )
                return
            # A skip raised by a class or module fixture.
            self.emit(event="fixture", id=str(test), outcome="skip", message=reason)
            return
        self._set("skip", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: ExcInfo) -> None:
        self._set("xfail", self._format(err))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self._set("xpass", "unexpected success")

    def addSubTest(
        self,
        test: unittest.TestCase,
        subtest: unittest.TestCase,
        err: ExcInfo | None,
    ) -> None:
        if err is None or err[0] is None:
            return
        kind = "fail" if issubclass(err[0], test.failureException) else "error"
        self._set(kind, f"subtest {subtest.id()}:\n" + self._format(err))


def build_suite(
    module_name: str,
    loop: str,
    exclude: set[str],
    only: list[str],
) -> tuple[list[unittest.TestCase], dict[str, str], list[dict[str, str]]]:
    """Import the module, add variants, and select the tests to run.

    Returns (tests to run, not-applicable id -> reason, loader errors).
    """
    module = importlib.import_module(PACKAGE + module_name)
    variants.add_variants(module, loop)
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromModule(module)
    errors: list[dict[str, str]] = []
    tests: list[unittest.TestCase] = []
    skipped_na: dict[str, str] = {}
    for test in iter_tests(suite):
        test_id = short_id(test.id())
        if type(test).__name__ in ("_FailedTest", "ModuleImportFailure"):
            errors.append({"id": test_id, "message": str(getattr(test, "_exception", ""))})
            continue
        if only and not any(fnmatch.fnmatchcase(test_id, p) for p in only):
            continue
        reason = not_applicable.reason_for(test_id)
        if reason is not None:
            skipped_na[test_id] = reason
            continue
        if test_id in exclude:
            continue
        tests.append(test)
    return tests, skipped_na, errors


#: Set by `main` for the processes the tests start: multiprocessing workers
#: (spawn / forkserver) import this file as ``__mp_main__`` and must run
#: asyncio on the same loop as the test that started them.
ENV_LOOP = "TIDELOOP_STDLIB_SUITE_LOOP"
ENV_POLLER = "TIDELOOP_STDLIB_SUITE_POLLER"

if __name__ == "__mp_main__" and os.environ.get(ENV_LOOP) == "tideloop":
    inject.install_tideloop(os.environ.get(ENV_POLLER) or None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=["tideloop", "stdlib"], required=True)
    parser.add_argument("--module", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--poller", default=None)
    parser.add_argument("--exclude", default=None, help="JSON file: test ids not to run")
    parser.add_argument("--only", action="append", default=[], help="test id pattern")
    parser.add_argument("--test-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    # A process started in the background by a non-interactive shell (CI, a
    # job runner) inherits SIGINT ignored; Python then installs no
    # KeyboardInterrupt handler, and the tests of Ctrl-C handling
    # (asyncio.Runner, _thread.interrupt_main) would wait forever.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    os.environ[ENV_LOOP] = args.loop
    os.environ[ENV_POLLER] = args.poller or ""

    exclude: set[str] = set()
    if args.exclude:
        with open(args.exclude) as f:
            exclude = set(json.load(f))

    with open(args.events, "a", buffering=1) as out:
        recorder = Recorder(out, args.test_timeout, args.loop == "tideloop")
        # Test modules may warn at import (deprecated APIs); warnings must not
        # become errors here, unittest's own rules apply inside tests.
        warnings.simplefilter("default")
        inject.track_stdlib_loops()
        patched: dict[str, str] = {}
        if args.loop == "tideloop":
            patched = inject.install_tideloop(args.poller)
        variants.configure(args.poller)
        try:
            tests, na, errors = build_suite(args.module, args.loop, exclude, args.only)
        except unittest.SkipTest as exc:
            recorder.emit(event="collected", tests=[], not_applicable={}, patched=patched)
            recorder.emit(
                event="fixture", id=f"{args.module} (module)", outcome="skip", message=str(exc)
            )
            recorder.emit(event="done", stray_loops=inject.take_created_loops())
            return 0
        recorder.emit(
            event="collected",
            tests=[short_id(t.id()) for t in tests],
            not_applicable=na,
            patched=patched,
            pid=os.getpid(),
        )
        for err in errors:
            recorder.emit(event="fixture", id=err["id"], outcome="error", message=err["message"])
        stray = inject.take_created_loops()
        if stray:
            recorder.emit(event="stray_loops", before="(import)", loops=stray)
        suite = unittest.TestSuite(tests)
        suite.run(recorder)
        recorder.emit(event="done", stray_loops=inject.take_created_loops())
    # Skip interpreter teardown: a test may leave non-daemon threads behind,
    # and the parent has everything it needs.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
