"""Shared fixtures: every loop under test, and leak checks after every test.

`loop_factory` is parametrised over the stdlib's selector loop and tideloop
with each poller this platform has, so a test written against it runs on all
of them and must pass on all of them: asyncio is the spec. A behaviour in
which tideloop deliberately differs is named in `divergences.py`, and a test
of it is marked ``@pytest.mark.divergence("key")``: it then runs on tideloop
only, and the registry's own test checks that the stdlib still differs.

After every test: no new fds, no new threads (executor threads get a moment
to exit), and the `loop` fixture fails a test that leaves tasks pending.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

import tideloop
from tideloop._pollers import available

from divergences import DIVERGENCES

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]

FACTORIES: dict[str, LoopFactory] = {"asyncio": asyncio.SelectorEventLoop}
for _name in available():
    FACTORIES[f"tideloop-{_name}"] = lambda _n=_name: tideloop.new_event_loop(poller=_n)
TIDELOOP_FACTORIES = [name for name in FACTORIES if name.startswith("tideloop")]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "divergence(key): tideloop differs from asyncio here on purpose (divergences.py)"
    )
    config.addinivalue_line("markers", "tideloop_only: exercises a tideloop-only API")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "loop_name" not in metafunc.fixturenames:
        return
    names = list(FACTORIES)
    marker = metafunc.definition.get_closest_marker("divergence")
    if marker is not None:
        key = marker.args[0]
        assert key in DIVERGENCES, f"unknown divergence {key!r}"
        names = TIDELOOP_FACTORIES
    if metafunc.definition.get_closest_marker("tideloop_only") is not None:
        names = TIDELOOP_FACTORIES
    metafunc.parametrize("loop_name", names)


@pytest.fixture
def loop_factory(loop_name: str) -> LoopFactory:
    return FACTORIES[loop_name]


@pytest.fixture
def loop(loop_factory: LoopFactory) -> Iterator[asyncio.AbstractEventLoop]:
    loop = loop_factory()
    try:
        yield loop
    finally:
        if not loop.is_closed():
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            assert not pending, f"test left tasks pending: {pending}"


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
