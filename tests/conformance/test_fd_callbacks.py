"""add_reader / remove_reader / add_writer / remove_writer."""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import tempfile
from collections.abc import Callable, Iterator

import pytest

import tideloop
from tideloop._pollers import available


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def run_until(loop: asyncio.AbstractEventLoop, done: Callable[[], bool], limit: float = 5) -> None:
    async def waiter() -> None:
        deadline = loop.time() + limit
        while not done():
            assert loop.time() < deadline, "condition not reached"
            await asyncio.sleep(0.001)

    loop.run_until_complete(waiter())


def test_reader_called_when_readable(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    received: list[bytes] = []

    def on_readable(sock: socket.socket, tag: str) -> None:
        received.append(tag.encode() + sock.recv(100))

    loop.add_reader(a.fileno(), on_readable, a, "tag:")
    b.send(b"hello")
    run_until(loop, lambda: bool(received))
    assert received == [b"tag:hello"]
    assert loop.remove_reader(a.fileno()) is True
    assert loop.remove_reader(a.fileno()) is False


def test_reader_is_level_triggered(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    chunks: list[bytes] = []
    loop.add_reader(a, lambda: chunks.append(a.recv(1)))
    b.send(b"xyz")
    run_until(loop, lambda: len(chunks) == 3)
    assert chunks == [b"x", b"y", b"z"]
    loop.remove_reader(a)


def test_writer_called_when_writable(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, _ = pair
    calls: list[int] = []

    def on_writable() -> None:
        calls.append(1)
        loop.remove_writer(a.fileno())

    loop.add_writer(a.fileno(), on_writable)
    run_until(loop, lambda: bool(calls))
    assert calls == [1]
    assert loop.remove_writer(a.fileno()) is False


def test_file_objects_are_accepted(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    got: list[bytes] = []
    loop.add_reader(a, lambda: got.append(a.recv(10)))
    b.send(b"obj")
    run_until(loop, lambda: bool(got))
    assert loop.remove_reader(a) is True
    assert loop.remove_reader(a.fileno()) is False


def test_replacing_a_reader(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    calls: list[str] = []
    loop.add_reader(a, lambda: calls.append("old"))
    loop.add_reader(a, lambda: calls.append("new:" + a.recv(10).decode()))
    b.send(b"x")
    run_until(loop, lambda: bool(calls))
    assert calls == ["new:x"]
    assert loop.remove_reader(a) is True


def test_reader_and_writer_on_one_fd(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    reads: list[bytes] = []
    writes: list[int] = []
    loop.add_reader(a, lambda: reads.append(a.recv(100)))
    loop.add_writer(a, lambda: writes.append(1))
    run_until(loop, lambda: len(writes) >= 2)
    assert loop.remove_writer(a) is True
    b.send(b"still reading")
    run_until(loop, lambda: bool(reads))
    assert reads == [b"still reading"]
    assert loop.remove_reader(a) is True
    assert loop.remove_writer(a) is False


def test_remove_unknown_fd(loop: asyncio.AbstractEventLoop) -> None:
    r, w = os.pipe()
    try:
        assert loop.remove_reader(r) is False
        assert loop.remove_writer(w) is False
    finally:
        os.close(r)
        os.close(w)


def test_writer_only_then_reader_removed_returns_false(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, _ = pair
    loop.add_writer(a, lambda: None)
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is True


def test_peer_close_wakes_the_reader(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    got: list[bytes] = []

    def on_readable() -> None:
        got.append(a.recv(10))
        loop.remove_reader(a)

    loop.add_reader(a, on_readable)
    b.close()
    run_until(loop, lambda: bool(got))
    assert got == [b""]


@pytest.mark.parametrize(
    ("bad", "message"),
    [(-1, "Invalid file descriptor: -1"), ("nope", "Invalid file object: 'nope'")],
)
def test_invalid_fds(loop: asyncio.AbstractEventLoop, bad: object, message: str) -> None:
    for method in (loop.add_reader, loop.add_writer):
        with pytest.raises(ValueError, match=message):
            method(bad, lambda: None)  # type: ignore[arg-type]
    for method in (loop.remove_reader, loop.remove_writer):
        with pytest.raises(ValueError, match=message):
            method(bad)  # type: ignore[arg-type]


def test_closed_socket_object_is_invalid(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket()
    sock.close()
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.add_reader(sock, lambda: None)


def test_closed_socket_object_still_removes_its_registration(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """selectors finds a closed socket's registration by the object (anyio relies on it)."""
    a, b = socket.socketpair()
    try:
        loop.add_reader(a, lambda: None)
        loop.add_writer(b, lambda: None)
        a.close()  # a.fileno() is now -1
        b.close()
        assert loop.remove_reader(a) is True
        assert loop.remove_writer(b) is True
        # Gone entirely: now they are closed objects that are not registered.
        with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
            loop.remove_reader(a)
        with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
            loop.remove_writer(b)
    finally:
        a.close()
        b.close()


def test_closed_socket_object_never_registered(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket()
    sock.close()
    for method in (loop.remove_reader, loop.remove_writer):
        with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
            method(sock)


@pytest.mark.leaves_registrations  # closing with a reader registered is the point
def test_after_loop_close(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, _ = pair
    loop.add_reader(a, lambda: None)
    loop.close()
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is False
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_reader(a, lambda: None)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_writer(a, lambda: None)


def test_callback_exception_is_reported_and_reader_stays(
    loop: asyncio.AbstractEventLoop, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    errors: list[BaseException] = []
    loop.set_exception_handler(lambda lp, ctx: errors.append(ctx["exception"]))
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        data = a.recv(1)
        if data == b"1":
            raise ValueError("first fails")

    loop.add_reader(a, flaky)
    b.send(b"12")
    run_until(loop, lambda: len(calls) == 2)
    assert len(errors) == 1 and isinstance(errors[0], ValueError)
    loop.remove_reader(a)


# ----------------------------------------------------------------------
# Kernel-specific behaviour: compare each tideloop poller with the stdlib
# selector built on the same kernel mechanism.

KERNEL_PAIRS = [
    pytest.param(name, selector, id=name)
    for name, selector in (
        ("epoll", getattr(selectors, "EpollSelector", None)),
        ("poll", getattr(selectors, "PollSelector", None)),
        ("kqueue", getattr(selectors, "KqueueSelector", None)),
    )
    if name in available() and selector is not None
]


def _loops(name: str, selector: type[selectors.BaseSelector]) -> list[asyncio.AbstractEventLoop]:
    return [asyncio.SelectorEventLoop(selector()), tideloop.new_event_loop(poller=name)]


@pytest.mark.parametrize(("name", "selector"), KERNEL_PAIRS)
def test_closed_fd_registration(name: str, selector: type[selectors.BaseSelector]) -> None:
    outcomes = []
    for lp in _loops(name, selector):
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        try:
            lp.add_reader(r, lambda: None)
        except OSError as exc:
            outcomes.append(type(exc))
        else:
            outcomes.append(None)
            lp.remove_reader(r)
        finally:
            lp.close()
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(("name", "selector"), KERNEL_PAIRS)
def test_remove_after_fd_closed(name: str, selector: type[selectors.BaseSelector]) -> None:
    for lp in _loops(name, selector):
        try:
            r, w = os.pipe()
            lp.add_reader(r, lambda: None)
            lp.add_writer(w, lambda: None)
            os.close(r)
            os.close(w)
            assert lp.remove_reader(r) is True
            assert lp.remove_writer(w) is True
            # The loop still polls fine afterwards.
            lp.run_until_complete(asyncio.sleep(0.001))
        finally:
            lp.close()


@pytest.mark.parametrize(("name", "selector"), KERNEL_PAIRS)
def test_regular_file(name: str, selector: type[selectors.BaseSelector]) -> None:
    outcomes = []
    with tempfile.TemporaryFile() as f:
        for lp in _loops(name, selector):
            calls: list[int] = []
            try:
                lp.add_reader(f.fileno(), calls.append, 1)
            except OSError as exc:
                outcomes.append(type(exc))
            else:
                lp.run_until_complete(asyncio.sleep(0.01))
                outcomes.append(bool(calls))
                lp.remove_reader(f.fileno())
            finally:
                lp.close()
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(("name", "selector"), KERNEL_PAIRS)
def test_change_mask_of_closed_fd(name: str, selector: type[selectors.BaseSelector]) -> None:
    """Adding a writer to a registered fd that is now closed: same outcome as asyncio."""
    outcomes = []
    for lp in _loops(name, selector):
        r, w = os.pipe()
        try:
            lp.add_reader(r, lambda: None)
            os.close(r)
            try:
                lp.add_writer(r, lambda: None)
            except OSError as exc:
                outcomes.append((type(exc), lp.remove_reader(r), lp.remove_writer(r)))
            else:
                outcomes.append((None, lp.remove_reader(r), lp.remove_writer(r)))
        finally:
            os.close(w)
            lp.close()
    assert outcomes[0] == outcomes[1]
