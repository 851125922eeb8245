"""The waker: cross-thread wakeups, coalescing, and safety after close."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tideloop._core.waker import HAS_EVENTFD, SocketpairWaker, Waker, make_waker
from tideloop._pollers import READ, Poller, make_poller

# Every waker this Python can make: an eventfd needs os.eventfd (CPython 3.10+
# on Linux; PyPy has none, and uses the socketpair there).
KINDS: list[Callable[[], Waker]] = [SocketpairWaker]
if sys.platform == "linux" and HAS_EVENTFD:
    from tideloop._core.waker import EventfdWaker

    KINDS.append(EventfdWaker)


@pytest.fixture(params=KINDS, ids=lambda k: k.__name__)
def kind(request: pytest.FixtureRequest) -> Callable[[], Waker]:
    return request.param  # type: ignore[no-any-return]


def test_platform_choice() -> None:
    waker = make_waker()
    try:
        linux_eventfd = sys.platform == "linux" and hasattr(os, "eventfd")
        expected = "EventfdWaker" if linux_eventfd else "SocketpairWaker"
        assert type(waker).__name__ == expected
    finally:
        waker.close()


@contextmanager
def polled(kind: Callable[[], Waker]) -> Iterator[tuple[Waker, Poller]]:
    """A waker of *kind* registered for reading with a poller of this platform's
    kind (unregistered at the end); both closed afterwards."""
    waker = kind()
    poller = make_poller()
    try:
        poller.register(waker.fileno(), READ)
        yield waker, poller
        poller.unregister(waker.fileno())
    finally:
        poller.close()
        waker.close()


def test_wake_makes_fd_readable_and_drain_clears_it(kind: Callable[[], Waker]) -> None:
    with polled(kind) as (waker, poller):
        assert poller.poll(0) == []
        waker.wake()
        assert [fd for fd, _ in poller.poll(0)] == [waker.fileno()]
        waker.drain()
        assert poller.poll(0) == []


def test_wakes_coalesce_until_drained(kind: Callable[[], Waker]) -> None:
    waker = kind()
    try:
        waker.wake()
        assert waker._pending
        waker.wake()
        waker.wake()
        waker.drain()
        assert not waker._pending
        waker.drain()  # draining an empty waker is fine
    finally:
        waker.close()


def test_wake_from_another_thread_interrupts_a_blocking_poll(
    kind: Callable[[], Waker],
) -> None:
    with polled(kind) as (waker, poller):
        timer = threading.Timer(0.05, waker.wake)
        timer.start()
        events = poller.poll(None)  # blocks until the other thread wakes it
        timer.join()
        assert [fd for fd, _ in events] == [waker.fileno()]
        waker.drain()


def test_wake_after_close_is_harmless(kind: Callable[[], Waker]) -> None:
    waker = kind()
    waker.close()
    waker.wake()
    waker.close()
    assert waker.fileno() == -1
