"""Shared fixtures: every loop under test, and leak checks after every test.

`loop_factory` is parametrised over the stdlib's selector loop and tideloop
with each poller this platform has, so a test written against it runs on all
of them and must pass on all of them: asyncio is the spec. A behaviour in
which tideloop deliberately differs is named in `divergences.py`, and a test
of it is marked ``@pytest.mark.divergence("key")``: on the Pythons where the
entry holds it then runs on tideloop only, and the registry's own test checks
that the stdlib still differs there; on the others (a patch release fixed the
stdlib, or a release before the change) it runs on every loop.

After every test: no new fds, no new threads (executor threads get a moment
to exit), and the `loop` fixture fails a test that leaves tasks pending.

Every loop built through `loop_factory` (the `loop` fixture included) is
watched, as uvloop's test base watches its loops:

- a call of the loop's exception handler that the test did not expect fails
  the test. A test expects them by installing its own handler, or by taking
  the `loop_errors` fixture (the list of contexts reported while no handler
  of the test's own was installed), or with ``@pytest.mark.loop_errors``;
- when the loop is closed, no reader or writer may still be registered
  except the loop's own internal fds (its waker, its signal pipe): a
  transport, server or pending operation that outlives its test fails it.
  ``@pytest.mark.leaves_registrations`` exempts a test that leaves one on
  purpose.

``pytest --blockbuster`` runs every test under blockbuster, failing a
blocking call tideloop makes on a loop's thread (`blockwatch.py`).

``@pytest.mark.missing_on_tideloop("TLS")`` marks a test of a feature
tideloop has not built yet: on the stdlib loop it must pass (the evidence
that the test is right), on tideloop it is a strict expected failure, which
turns into a failure ("remove the mark") when the feature lands.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from divergences import DIVERGENCES
from loopwatch import FACTORIES, TIDELOOP_FACTORIES, LoopFactory, LoopWatch, finish

T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--blockbuster",
        action="store_true",
        help="fail a blocking call tideloop makes on a loop's thread (tests/blockwatch.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "divergence(key): tideloop differs from asyncio here on purpose (divergences.py)"
    )
    config.addinivalue_line("markers", "tideloop_only: exercises a tideloop-only API")
    config.addinivalue_line(
        "markers", "loop_errors: the test expects calls of the loop's exception handler"
    )
    config.addinivalue_line(
        "markers", "leaves_registrations: the test closes a loop with fds still registered"
    )
    config.addinivalue_line(
        "markers", "missing_on_tideloop(what): a strict xfail on tideloop until *what* is built"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("missing_on_tideloop")
        if marker is None:
            continue
        callspec = getattr(item, "callspec", None)
        loop_name = callspec.params.get("loop_name", "") if callspec is not None else ""
        if str(loop_name).startswith("tideloop"):
            what = marker.args[0] if marker.args else "this feature"
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"{what}: not built yet"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "loop_name" not in metafunc.fixturenames:
        return
    names = list(FACTORIES)
    marker = metafunc.definition.get_closest_marker("divergence")
    if marker is not None:
        key = marker.args[0]
        assert key in DIVERGENCES, f"unknown divergence {key!r}"
        if DIVERGENCES[key].holds:
            names = TIDELOOP_FACTORIES
    if metafunc.definition.get_closest_marker("tideloop_only") is not None:
        names = TIDELOOP_FACTORIES
    metafunc.parametrize("loop_name", names)


@pytest.fixture
def _loop_watch(request: pytest.FixtureRequest) -> Iterator[LoopWatch]:
    watch = LoopWatch()
    watch.errors_expected = request.node.get_closest_marker("loop_errors") is not None
    yield watch
    if not watch.errors_expected and watch.errors:
        lines = [str(ctx.get("message")) + f" ({ctx.get('exception')!r})" for ctx in watch.errors]
        pytest.fail(
            "the loop's exception handler was called unexpectedly:\n  " + "\n  ".join(lines),
            pytrace=False,
        )
    if watch.leftovers and request.node.get_closest_marker("leaves_registrations") is None:
        pytest.fail("\n".join(watch.leftovers), pytrace=False)


@pytest.fixture
def loop_errors(_loop_watch: LoopWatch) -> list[dict[str, Any]]:
    """The exception-handler contexts of this test's loops; taking it makes them expected."""
    _loop_watch.errors_expected = True
    return _loop_watch.errors


@pytest.fixture
def loop_factory(loop_name: str, _loop_watch: LoopWatch) -> LoopFactory:
    base = FACTORIES[loop_name]

    def factory() -> asyncio.AbstractEventLoop:
        return _loop_watch.watch(base())

    return factory


@pytest.fixture
def loop(loop_factory: LoopFactory) -> Iterator[asyncio.AbstractEventLoop]:
    loop = loop_factory()
    try:
        yield loop
    finally:
        finish(loop)


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    return loop.run_until_complete(coro)


def _open_fds() -> set[int]:
    return {
        int(fd)
        for fd in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")
    }


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


@pytest.fixture(autouse=True)
def _blockbuster(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.getoption("--blockbuster"):
        yield
        return
    from blockwatch import blockbuster_on_tideloop

    with blockbuster_on_tideloop():
        yield


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    fds_before = _open_fds()
    threads_before = _threads()
    yield
    deadline = time.monotonic() + 5.0
    while True:
        gc.collect()
        new_threads = _threads() - threads_before
        new_fds = _open_fds() - fds_before
        if (not new_threads and not new_fds) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not new_threads, f"test left threads running: {new_threads}"
    assert not new_fds, f"test left fds open: {sorted(new_fds)}"
