"""Unit tests of tideloop's TLS module with an in-memory lower transport.

Two `TLSProtocol`s (client and server) are joined by `MemoryTransport`s that
record every ``write()`` and hand bytes to the other side only when the test
says so (`Pair.pump`). A real loop provides call_soon/call_later; there is
no socket. This checks what the black-box tests cannot see: how many lower
writes a burst costs, the ciphertext buffer's growth, re-entrancy.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tideloop._transports import tls as tlsmod

import certs


class MemoryTransport(asyncio.Transport):
    """A lower transport that keeps what is written until the test pumps it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False
        self.reading = True
        self.protocol: Any = None

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol

    def take(self) -> bytes:
        data = b"".join(self.writes)
        self.writes.clear()
        return data


class App(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.received: list[bytes] = []
        self.events: list[str] = []
        self.reply: list[bytes] = []
        self.close_on_data = False
        self.abort_on_data = False
        self.depth = 0
        self.max_depth = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.depth += 1
        self.max_depth = max(self.max_depth, self.depth)
        self.received.append(data)
        for chunk in self.reply:
            self.transport.write(chunk)
        if self.close_on_data:
            self.transport.close()
        if self.abort_on_data:
            self.transport.abort()
        self.depth -= 1

    def eof_received(self) -> None:
        self.events.append("eof")

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("lost")
        self.lost_exc = exc


class Pair:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        ca = certs.CA()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(server_ctx)
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
        self.loop = loop
        self.client_app = App()
        self.server_app = App()
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.client = tlsmod.TLSProtocol(
            loop, self.client_app, client_ctx, self.waiter, server_hostname="localhost"
        )
        self.server = tlsmod.TLSProtocol(loop, self.server_app, server_ctx, None, server_side=True)
        self.client_lower = MemoryTransport()
        self.server_lower = MemoryTransport()

    @staticmethod
    def feed(proto: tlsmod.TLSProtocol, data: bytes) -> None:
        """Deliver *data* as a lower transport would (get_buffer/buffer_updated)."""
        view = memoryview(data)
        while view:
            buf = proto.get_buffer(-1)
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            proto.buffer_updated(n)
            view = view[n:]

    def pump(self) -> None:
        """Move bytes both ways until both sides are quiet."""
        for _ in range(50):
            to_server = self.client_lower.take()
            to_client = self.server_lower.take()
            if not to_server and not to_client:
                return
            if to_server:
                self.feed(self.server, to_server)
            if to_client:
                self.feed(self.client, to_client)

    def connect(self) -> None:
        self.client.connection_made(self.client_lower)
        self.server.connection_made(self.server_lower)
        self.pump()
        self.loop.run_until_complete(asyncio.sleep(0))
        assert self.waiter.done() and self.waiter.result() is None


@pytest.fixture
def pair() -> Iterator[Pair]:
    loop = asyncio.new_event_loop()
    p = Pair(loop)
    try:
        yield p
    finally:
        for proto in (p.client, p.server):
            if proto._app_transport is not None:
                proto._app_transport._closed = True  # no ResourceWarning at collection
            if proto._transport is not None:
                proto.connection_lost(None)
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_handshake_and_data(pair: Pair) -> None:
    pair.connect()
    assert pair.client_app.events == ["made"] and pair.server_app.events == ["made"]
    pair.client_app.transport.write(b"hello")
    pair.pump()
    assert pair.server_app.received == [b"hello"]


def test_replies_written_during_a_delivery_leave_in_one_lower_write(pair: Pair) -> None:
    pair.connect()
    pair.server_app.reply = [b"one", b"two", b"three"]
    pair.server_lower.take()
    pair.client_app.transport.write(b"ping")
    pair.feed(pair.server, pair.client_lower.take())
    assert len(pair.server_lower.writes) == 1  # three records, one write()
    pair.feed(pair.client, pair.server_lower.take())
    assert b"".join(pair.client_app.received) == b"onetwothree"


def test_writelines_is_one_record_one_write(pair: Pair) -> None:
    pair.connect()
    pair.client_app.transport.writelines([b"a", b"b", bytearray(b"c")])
    assert len(pair.client_lower.writes) == 1
    pair.pump()
    assert pair.server_app.received == [b"abc"]


def test_abort_inside_a_delivery_still_sends_what_was_written(pair: Pair) -> None:
    pair.connect()
    pair.server_app.reply = [b"bye"]
    pair.server_app.abort_on_data = True
    pair.client_app.transport.write(b"x")
    pair.feed(pair.server, pair.client_lower.take())
    assert pair.server_lower.aborted
    pair.feed(pair.client, pair.server_lower.take())
    assert pair.client_app.received == [b"bye"]


def test_close_inside_a_delivery_is_not_reentrant(pair: Pair) -> None:
    pair.connect()
    pair.server_app.close_on_data = True
    for i in range(5):  # several records arrive together
        pair.client_app.transport.write(b"record %d;" % i)
    pair.feed(pair.server, pair.client_lower.take())
    assert pair.server_app.max_depth == 1
    # Everything that had arrived was delivered before close_notify went out.
    assert b"".join(pair.server_app.received) == b"".join(b"record %d;" % i for i in range(5))
    pair.pump()
    assert pair.client_app.events == ["made", "eof"]
    pair.loop.run_until_complete(asyncio.sleep(0))
    assert pair.server_lower.closing and pair.client_lower.closing


def test_ciphertext_buffer_grows_while_reads_fill_it(pair: Pair) -> None:
    pair.connect()
    size = len(pair.client.get_buffer(-1))
    assert size == tlsmod.RECV_BUFFER_INITIAL
    pair.server_app.transport.write(b"z" * 1_000_000)
    data = pair.server_lower.take()
    sizes = []
    view = memoryview(data)
    while view:
        buf = pair.client.get_buffer(-1)
        sizes.append(len(buf))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        pair.client.buffer_updated(n)
        view = view[n:]
    assert sizes[0] == tlsmod.RECV_BUFFER_INITIAL
    assert max(sizes) == tlsmod.RECV_BUFFER_MAX
    assert sorted(sizes) == sizes[:1] + sorted(sizes[1:])  # only ever grows
    assert sum(len(d) for d in pair.client_app.received) == 1_000_000


def test_lower_pause_writing_holds_ciphertext_and_pauses_the_app(pair: Pair) -> None:
    pair.connect()
    paused: list[str] = []
    pair.client_app.pause_writing = lambda: paused.append("pause")  # type: ignore[method-assign]
    pair.client_app.resume_writing = lambda: paused.append("resume")  # type: ignore[method-assign]
    transport = pair.client_app.transport
    transport.set_write_buffer_limits(high=100_000)
    pair.client.pause_writing()  # the lower transport is full
    transport.write(b"q" * 60_000)
    assert pair.client_lower.writes == []
    assert transport.get_write_buffer_size() > 60_000  # ciphertext, held
    transport.write(b"q" * 60_000)
    assert paused == ["pause"] and transport._protocol_paused
    pair.client.resume_writing()
    assert len(pair.client_lower.writes) == 1  # all of it in one write
    assert paused == ["pause", "resume"] and not transport._protocol_paused
    assert transport.get_write_buffer_size() == 0


def test_connection_lost_reports_the_abort_reason(pair: Pair) -> None:
    pair.connect()
    pair.client._fatal_error(ConnectionAbortedError("why"))
    assert pair.client_lower.aborted
    pair.client.connection_lost(None)  # what abort() leads to
    pair.loop.run_until_complete(asyncio.sleep(0))
    assert pair.client_app.events == ["made", "lost"]
    assert isinstance(pair.client_app.lost_exc, ConnectionAbortedError)
