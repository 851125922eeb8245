"""A pytest plugin that runs each test several times and watches the interpreter's refcount.

Loaded by ``refleaks.py`` on a debug CPython (``sys.gettotalrefcount``
exists only there). Each test runs ``TIDELOOP_REFLEAK_RUNS`` times (setup,
call, teardown each time; default 6), after a collection before and after
each run; the first ``TIDELOOP_REFLEAK_WARMUP`` runs (default 3) fill the
caches (typing, re, the stdlib's lazily built tables). A test *leaks* when
the total reference count grew in every run after the warm-up: CPython's
own test runner (``regrtest -R``) uses the same rule. Each test's deltas go
to the file named by ``TIDELOOP_REFLEAK_OUT`` (one JSON line per test).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

RUNS = int(os.environ.get("TIDELOOP_REFLEAK_RUNS", "6"))
WARMUP = int(os.environ.get("TIDELOOP_REFLEAK_WARMUP", "3"))
OUT = os.environ.get("TIDELOOP_REFLEAK_OUT")


def _clear_caches() -> None:
    """What regrtest -R clears between runs, and tideloop's own bounded cache
    (the native transports' datagram address table)."""
    # 3.13 renamed it (the old name warns, and warnings are errors here).
    clear = getattr(sys, "_clear_internal_caches", None) or sys._clear_type_cache
    clear()
    try:
        from tideloop._transports import native
    except ImportError:  # pragma: no cover
        return
    if native.transports is not None:
        native.transports.clear_caches()


def _total() -> int:
    _clear_caches()
    gc.collect()
    gc.collect()
    return sys.gettotalrefcount()  # type: ignore[attr-defined,no-any-return]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    deltas: list[int] = []
    reports: list[Any] = []
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for i in range(RUNS):
        before = _total()
        # Module and session fixtures stay up between runs: only the
        # test's own are set up and torn down each time.
        reports = runtestprotocol(
            item,
            nextitem=item.parent if i < RUNS - 1 else nextitem,
            log=False,  # type: ignore[arg-type]
        )
        after = _total()
        if i >= WARMUP:
            deltas.append(after - before)
        if any(r.failed for r in reports):
            break
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    if OUT:
        with open(OUT, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": item.nodeid, "deltas": deltas}) + "\n")
    return True
