"""Each poller against real fds: registration, readiness bits, closed fds, timeouts."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Iterator

import pytest

from tideloop._pollers import READ, READER_BITS, WRITE, WRITER_BITS, Poller, available, make_poller


@pytest.fixture(params=available())
def poller(request: pytest.FixtureRequest) -> Iterator[Poller]:
    p = make_poller(request.param)
    yield p
    p.close()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def ready(poller: Poller, timeout: float = 0) -> dict[int, int]:
    merged: dict[int, int] = {}
    for fd, bits in poller.poll(timeout):
        merged[fd] = merged.get(fd, 0) | bits
    return merged


def test_available_lists_the_platform_best_first() -> None:
    names = available()
    assert names
    if hasattr(select, "epoll"):
        assert names[0] == "epoll"
    assert make_poller().name == names[0]


def test_bit_convention() -> None:
    assert READ == select.POLLIN and WRITE == select.POLLOUT
    assert READER_BITS & READ and not READER_BITS & WRITE
    assert WRITER_BITS & WRITE and not WRITER_BITS & READ


def test_read_readiness(poller: Poller, pipe: tuple[int, int]) -> None:
    r, w = pipe
    poller.register(r, READ)
    assert ready(poller) == {}
    os.write(w, b"x")
    assert ready(poller)[r] & READER_BITS
    os.read(r, 1)
    assert ready(poller) == {}
    poller.unregister(r)


def test_write_readiness_and_modify(poller: Poller, pipe: tuple[int, int]) -> None:
    _, w = pipe
    poller.register(w, WRITE)
    assert ready(poller)[w] & WRITER_BITS
    a, b = socket.socketpair()
    try:
        poller.register(a.fileno(), READ)
        assert a.fileno() not in ready(poller)
        poller.modify(a.fileno(), READ | WRITE)
        bits = ready(poller)[a.fileno()]
        assert bits & WRITER_BITS and not bits & READ
        b.send(b"y")
        bits = ready(poller)[a.fileno()]
        assert bits & READ and bits & WRITE
        poller.unregister(a.fileno())
    finally:
        a.close()
        b.close()
    poller.unregister(w)


def test_hangup_reaches_reader(poller: Poller, pipe: tuple[int, int]) -> None:
    r, w = pipe
    poller.register(r, READ)
    os.close(w)
    assert ready(poller)[r] & READER_BITS
    poller.unregister(r)


def test_unregister_of_closed_fd_does_not_raise(poller: Poller, pipe: tuple[int, int]) -> None:
    r, _ = pipe
    poller.register(r, READ)
    os.close(r)
    poller.unregister(r)
    poller.unregister(r)  # twice is fine too


def test_modify_of_unregistered_fd_raises(poller: Poller, pipe: tuple[int, int]) -> None:
    r, _ = pipe
    with pytest.raises(OSError):
        poller.modify(r, READ)


def test_timeout_is_never_short(poller: Poller, pipe: tuple[int, int]) -> None:
    r, _ = pipe
    poller.register(r, READ)
    for timeout in (0.0015, 0.0101):
        start = time.monotonic()
        assert poller.poll(timeout) == []
        # Rounded up to the kernel's resolution, never down: waking early
        # would make the loop spin until the deadline.
        assert time.monotonic() - start >= timeout
    poller.unregister(r)


def test_zero_timeout_returns_at_once(poller: Poller, pipe: tuple[int, int]) -> None:
    r, _ = pipe
    poller.register(r, READ)
    assert poller.poll(0) == []
    poller.unregister(r)


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll is Linux-only")
def test_epoll_fd_and_regular_files(pipe: tuple[int, int], tmp_path: object) -> None:
    p = make_poller("epoll")
    try:
        assert p.fileno() >= 0
        with open(__file__, "rb") as f, pytest.raises(PermissionError):
            p.register(f.fileno(), READ)
    finally:
        p.close()


@pytest.mark.skipif(not hasattr(select, "poll"), reason="poll")
def test_poll_reports_nval_for_closed_fd(pipe: tuple[int, int]) -> None:
    p = make_poller("poll")
    r, _ = pipe
    p.register(r, READ)
    os.close(r)
    bits = ready(p)[r]
    assert bits & select.POLLNVAL
    # NVAL reaches both callbacks, as asyncio's PollSelector does.
    assert bits & READER_BITS and bits & WRITER_BITS
    p.unregister(r)
    assert p.fileno() == -1


@pytest.mark.skipif(not hasattr(select, "kqueue"), reason="kqueue is BSD/macOS-only")
def test_kqueue_reports_one_event_per_filter(pipe: tuple[int, int]) -> None:
    p = make_poller("kqueue")
    a, b = socket.socketpair()
    try:
        p.register(a.fileno(), READ | WRITE)
        b.send(b"z")
        events = p.poll(0)
        assert sorted(bits for fd, bits in events if fd == a.fileno()) == [READ, WRITE]
        p.modify(a.fileno(), READ)
        assert [bits for fd, bits in p.poll(0) if fd == a.fileno()] == [READ]
        p.unregister(a.fileno())
        assert p.poll(0) == []
    finally:
        a.close()
        b.close()
        p.close()


def test_make_poller_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown or unavailable poller"):
        make_poller("select")
    with pytest.raises(TypeError):
        make_poller(3.5)  # type: ignore[arg-type]
