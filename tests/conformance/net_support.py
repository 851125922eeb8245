"""Helpers shared by the test_net_* modules and the other transport tests (no tests here).

Everything here works on any asyncio loop: the tests that use it run on the
stdlib loop and on tideloop alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import sys
import types
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest


def has_ipv6() -> bool:
    """Whether ::1 can be bound here (skip IPv6 tests only if not)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports nobody listens on.

    Separate free_port() calls may return the same port twice; two refusals
    with one message would then collapse into one exception (asyncio raises
    the first when all messages are equal), so the sockets are held together.
    """
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def listening(address: Any = ("127.0.0.1", 0), family: int = socket.AF_INET) -> socket.socket:
    """A stream socket of *family* bound to *address* and listening (a socket: close
    it, or use it in a with statement)."""
    sock = socket.socket(family)
    try:
        sock.bind(address)
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def connecting(address: tuple[str, int], n: int) -> list[socket.socket]:
    """*n* non-blocking sockets whose connect() to *address* has begun (all closed
    again if making one fails)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.setblocking(False)
            try:
                s.connect(address)
            except BlockingIOError:
                pass
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


@contextlib.contextmanager
def blackhole() -> Iterator[tuple[str, int]]:
    """An address whose connect() stays in progress: a listener with a full queue
    (the next SYN is not answered)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers: list[socket.socket] = []
    try:
        fillers = connecting(listener.getsockname(), 8)
        yield listener.getsockname()
    finally:
        for f in fillers:
            f.close()
        listener.close()


def nonblocking_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


class Recorder(asyncio.Protocol):
    """Records every callback; futures for connection_made/eof/lost."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, keep_open_on_eof: bool = False) -> None:
        self.loop = loop
        self.transport: Any = None
        self.events: list[str] = []
        self.data = bytearray()
        self.keep_open_on_eof = keep_open_on_eof
        self.made: asyncio.Future[None] = loop.create_future()
        self.eof: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[BaseException | None] = loop.create_future()
        self.lost_calls = 0
        self.paused = 0
        self.resumed = 0
        self._want = 0
        self._enough: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")
        self.transport = transport
        self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        assert isinstance(data, bytes)
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        self.data += data
        self._check()

    def eof_received(self) -> bool:
        self.events.append("eof")
        self.eof.set_result(None)
        return self.keep_open_on_eof

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("lost")
        self.lost_calls += 1
        if not self.lost.done():
            self.lost.set_result(exc)
        if self._enough is not None and not self._enough.done():
            self._enough.set_exception(ConnectionError("lost before enough data"))

    def pause_writing(self) -> None:
        self.paused += 1
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.resumed += 1
        self.events.append("resume")

    def _check(self) -> None:
        if self._enough is not None and len(self.data) >= self._want:
            if not self._enough.done():
                self._enough.set_result(None)
            self._enough = None

    async def wait_for_bytes(self, n: int) -> bytes:
        if len(self.data) < n:
            self._want = n
            self._enough = self.loop.create_future()
            await self._enough
        return bytes(self.data)


def recording_factory(
    loop: asyncio.AbstractEventLoop,
) -> tuple[Callable[[], Recorder], list[Recorder]]:
    """A protocol factory for servers, and the list of every Recorder it made."""
    made: list[Recorder] = []

    def factory() -> Recorder:
        made.append(Recorder(loop))
        return made[-1]

    return factory, made


class Echo(asyncio.Protocol):
    """Writes back what it receives; closes on EOF."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


@contextlib.contextmanager
def captured_asyncio_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record logged to the ``asyncio`` logger inside the block."""
    records: list[logging.LogRecord] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("asyncio")
    handler = Handler(logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def transport_socket(transport: asyncio.BaseTransport, family: int, kind: int) -> Any:
    """*transport*'s ``socket`` extra, checked: asyncio's TransportSocket of *family* and
    *kind*, whose address is the transport's ``sockname``; an unknown key's default
    comes back."""
    sock = transport.get_extra_info("socket")
    assert isinstance(sock, asyncio.trsock.TransportSocket)
    assert sock.family == family
    assert sock.type == kind
    assert transport.get_extra_info("sockname") == sock.getsockname()
    assert transport.get_extra_info("nonexistent", "dflt") == "dflt"
    return sock


def no_reader_or_writer(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    """True if fd has neither reader nor writer (remove_* reports what it removed)."""
    return not loop.remove_reader(fd) and not loop.remove_writer(fd)


async def close_server(server: asyncio.AbstractServer) -> None:
    server.close()
    await server.wait_closed()


async def cancelled_after(task: asyncio.Future[Any], delay: float) -> bool:
    """Wait *delay* s, then cancel *task* and check that it ends with CancelledError.

    False if *task* had finished first (a connect the kernel completed after
    all): nothing was cancelled, and its result is the caller's to clean up.
    """
    await asyncio.sleep(delay)
    if task.done():
        return False
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return True


async def close_client(
    transport: asyncio.BaseTransport, client: Any, server: asyncio.AbstractServer | None = None
) -> None:
    """Close *transport*, wait for its protocol *client*'s ``lost`` (a `Recorder`'s
    future), then close *server* if one is given."""
    transport.close()
    await client.lost
    if server is not None:
        await close_server(server)


async def tcp_pair(
    loop: asyncio.AbstractEventLoop,
    server_factory: Callable[[], asyncio.BaseProtocol],
    client_factory: Callable[[], asyncio.BaseProtocol],
    host: str = "127.0.0.1",
    **kwargs: Any,
) -> tuple[asyncio.AbstractServer, asyncio.Transport, Any]:
    """A fresh server on 127.0.0.1 and a client connected to it through *host*
    (*kwargs* go to create_connection): (server, client transport, client protocol)."""
    server = await loop.create_server(server_factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, protocol = await loop.create_connection(client_factory, host, port, **kwargs)
    return server, transport, protocol


@contextlib.asynccontextmanager
async def tcp_session(
    loop: asyncio.AbstractEventLoop,
    server_factory: Callable[[], asyncio.BaseProtocol],
    client_factory: Callable[[], asyncio.BaseProtocol],
    host: str = "127.0.0.1",
    **kwargs: Any,
) -> AsyncIterator[tuple[asyncio.Transport, Any]]:
    """`tcp_pair`'s client transport and protocol; afterwards the transport is
    closed, its connection_lost awaited and the server closed."""
    server, transport, client = await tcp_pair(loop, server_factory, client_factory, host, **kwargs)
    try:
        yield transport, client
    finally:
        await close_client(transport, client, server)


def refused_exception_holders(
    loop: asyncio.AbstractEventLoop, happy_eyeballs_delay: float | None
) -> list[object]:
    """What, besides frames, still references a refused connection's exception.

    Empty when the exception is freed by reference counting alone; a future
    or a list here is a cycle through a frame of its traceback, which only
    the garbage collector breaks (CPython PR 124859). PyPy frees nothing by
    reference counting, so a cycle costs nothing more there than any other
    garbage (and its pure-Python futures are held by their frames in the
    traceback anyway): on PyPy this drops the exception, collects, and lists
    the exceptions of this refused connection that survived (a real leak).
    """
    port = free_port()
    caught: list[OSError] = []

    async def main() -> None:
        try:
            await loop.create_connection(
                asyncio.Protocol, "127.0.0.1", port, happy_eyeballs_delay=happy_eyeballs_delay
            )
        except OSError as exc:
            caught.append(exc)  # not the task's result: the task is no holder

    loop.run_until_complete(main())
    exc = caught.pop()
    assert isinstance(exc, ConnectionRefusedError)
    if sys.implementation.name == "pypy":
        text = str(exc)
        del exc
        for _ in range(3):  # objects with finalizers take more than one collection
            gc.collect()
        return [
            obj
            for obj in gc.get_objects()
            if isinstance(obj, ConnectionRefusedError) and str(obj) == text
        ]
    return [ref for ref in gc.get_referrers(exc) if not isinstance(ref, types.FrameType)]


def stdlib_error(action: Callable[[asyncio.Transport], object]) -> BaseException:
    """The exception the stdlib loop's socket transport raises for *action* on this Python.

    Error texts change between releases, patch releases included: tests
    compare tideloop's with this, not with a string fixed in the test.
    """
    loop = asyncio.SelectorEventLoop()
    a, b = socket.socketpair()
    try:

        async def main() -> BaseException:
            transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
            try:
                action(transport)
            except BaseException as exc:
                return exc
            finally:
                transport.abort()
                await asyncio.sleep(0)
            raise AssertionError(f"the stdlib loop's transport accepted {action!r}")

        return loop.run_until_complete(main())
    finally:
        loop.close()
        a.close()
        b.close()
