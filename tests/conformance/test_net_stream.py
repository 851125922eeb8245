"""Stream transports (TCP and AF_UNIX): reading, writing, flow control, closing."""

from __future__ import annotations

import array
import asyncio
import contextlib
import contextvars
import gc
import logging
import socket
import struct
import sys
from asyncio import selector_events
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from net_support import (
    Echo,
    Recorder,
    captured_asyncio_logs,
    close_client,
    close_server,
    recording_factory,
    stdlib_error,
    tcp_pair,
    tcp_session,
    transport_socket,
)

SIZES = [1, 1024, 65536, 1024 * 1024, 10 * 1024 * 1024]


@pytest.mark.parametrize("size", SIZES)
def test_echo(loop: asyncio.AbstractEventLoop, size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            transport.write(payload)
            assert await client.wait_for_bytes(size) == payload

    loop.run_until_complete(main())


def test_transport_is_an_asyncio_transport(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        try:
            assert isinstance(transport, asyncio.Transport)
            assert transport.get_protocol() is client
            assert client.transport is transport
            sock = transport_socket(transport, socket.AF_INET, socket.SOCK_STREAM)
            port = server.sockets[0].getsockname()[1]
            assert transport.get_extra_info("peername") == ("127.0.0.1", port)
            # TCP_NODELAY is on, as asyncio sets it.
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert transport.can_write_eof()
            assert transport.is_reading()
            assert not transport.is_closing()
            assert transport.get_write_buffer_size() == 0
            assert transport.get_write_buffer_limits() == (16384, 65536)
        finally:
            transport.close()
            assert transport.is_closing()
            await client.lost
            await close_server(server)

    loop.run_until_complete(main())


def test_server_side_transport_extra_info(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        factory, server_protos = recording_factory(loop)

        server, transport, client = await tcp_pair(loop, factory, lambda: Recorder(loop))
        try:
            await client.made
            while not server_protos:
                await asyncio.sleep(0)
            srv = server_protos[0]
            await srv.made
            st = srv.transport
            assert st.get_extra_info("peername") == transport.get_extra_info("sockname")
            assert st.get_extra_info("sockname") == server.sockets[0].getsockname()
        finally:
            await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_writelines(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            parts: list[Any] = [b"a", bytearray(b"bc"), memoryview(b"def"), b"", b"g" * 100000]
            transport.writelines(parts)
            transport.writelines(iter([b"1", b"2"]))  # any iterable
            transport.writelines([])
            expected = b"abcdef" + b"g" * 100000 + b"12"
            assert await client.wait_for_bytes(len(expected)) == expected

    loop.run_until_complete(main())


def test_writelines_many_buffers(loop: asyncio.AbstractEventLoop) -> None:
    """More buffers than one sendmsg() takes (IOV_MAX)."""

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            parts = [b"%05d" % i for i in range(5000)]
            transport.writelines(parts)
            expected = b"".join(parts)
            assert await client.wait_for_bytes(len(expected)) == expected

    loop.run_until_complete(main())


def test_write_copies_mutable_buffers(loop: asyncio.AbstractEventLoop) -> None:
    """What was written is what arrives, even if the caller reuses its buffer."""

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            transport.pause_reading()  # nobody drains our echo: the buffers fill
            buf = bytearray(b"A" * 1024 * 1024)
            expected = bytearray()
            for letter in b"ABCD":
                buf[:] = bytes([letter]) * len(buf)
                transport.write(buf)
                expected += buf
            transport.resume_reading()
            assert await client.wait_for_bytes(len(expected)) == expected

    loop.run_until_complete(main())


def test_write_memoryview_of_wider_items(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            arr = array.array("i", range(1000))
            transport.write(memoryview(arr))
            expected = arr.tobytes()
            assert await client.wait_for_bytes(len(expected)) == expected

    loop.run_until_complete(main())


def test_write_rejects_non_bytes(loop: asyncio.AbstractEventLoop) -> None:
    messages: list[str] = []

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, _client):
            with pytest.raises(TypeError) as caught:
                transport.write("text")  # type: ignore[arg-type]
            messages.append(str(caught.value))

    loop.run_until_complete(main())
    # The message changed in a 3.13 patch release: it is asyncio's of this Python.
    expected = stdlib_error(lambda transport: transport.write("text"))  # type: ignore[arg-type]
    assert type(expected) is TypeError
    assert messages == [str(expected)]


def test_buffered_protocol(loop: asyncio.AbstractEventLoop) -> None:
    class Buffered(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(1000)
            self.received = bytearray()
            self.sizes: list[int] = []
            self.done: asyncio.Future[None] = loop.create_future()

        def get_buffer(self, sizehint: int) -> bytearray:
            self.sizes.append(sizehint)
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            self.received += self.buf[:nbytes]

        def eof_received(self) -> None:
            self.done.set_result(None)

    payload = bytes(range(256)) * 400

    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, proto = await loop.create_connection(Buffered, "127.0.0.1", port)
        try:
            transport.write(payload)
            while len(proto.received) < len(payload):
                await asyncio.sleep(0.001)
            assert proto.received == payload
            assert proto.sizes and all(s == -1 for s in proto.sizes)
        finally:
            transport.close()
            await asyncio.sleep(0)
            await close_server(server)

    loop.run_until_complete(main())


def test_buffered_protocol_empty_buffer_is_an_error(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class Empty(asyncio.BufferedProtocol):
        lost: asyncio.Future[BaseException | None] = loop.create_future()

        def get_buffer(self, sizehint: int) -> bytearray:
            return bytearray()

        def buffer_updated(self, nbytes: int) -> None:
            raise AssertionError("unreachable")

        def connection_lost(self, exc: BaseException | None) -> None:
            self.lost.set_result(exc)

    async def main() -> None:
        server, transport, proto = await tcp_pair(loop, Echo, Empty)
        transport.write(b"x")
        exc = await proto.lost
        assert isinstance(exc, RuntimeError)
        assert "get_buffer() returned an empty buffer" in str(exc)
        await close_server(server)

    loop.run_until_complete(main())
    assert contexts and contexts[0]["message"] == "Fatal error: protocol.get_buffer() call failed."


def test_set_protocol_switches_read_path(loop: asyncio.AbstractEventLoop) -> None:
    class Buffered(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(100)
            self.received = bytearray()

        def get_buffer(self, sizehint: int) -> bytearray:
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            self.received += self.buf[:nbytes]

    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        try:
            transport.write(b"one")
            assert await client.wait_for_bytes(3) == b"one"
            buffered = Buffered()
            transport.set_protocol(buffered)
            assert transport.get_protocol() is buffered
            transport.write(b"two")
            while len(buffered.received) < 3:
                await asyncio.sleep(0.001)
            assert buffered.received == b"two"
        finally:
            transport.set_protocol(client)
            await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_bulk_reads_on_many_connections_keep_each_ones_bytes(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Connections read bulk data at once on one loop (tideloop reads it through a
    buffer the loop shares, see divergence "recv-size-adaptive"): every protocol gets
    exactly its own bytes, and the chunks it keeps are not overwritten later."""
    size = 1024 * 1024

    class Keep(asyncio.Protocol):
        def __init__(self) -> None:
            self.chunks: list[bytes] = []
            self.done = loop.create_future()

        def data_received(self, data: bytes) -> None:
            self.chunks.append(data)
            if sum(map(len, self.chunks)) >= size and not self.done.done():
                self.done.set_result(None)

    pairs = [socket.socketpair() for _ in range(4)]
    payloads = [bytes([i]) * 1000 + bytes(range(256)) * (size // 256) for i in range(len(pairs))]
    payloads = [p[:size] for p in payloads]

    async def main() -> None:
        transports = []
        protocols = []
        for ours, _ in pairs:
            transport, protocol = await loop.connect_accepted_socket(Keep, ours)
            transports.append(transport)
            protocols.append(protocol)
        for _, peer in pairs:
            peer.setblocking(False)
        await asyncio.gather(
            *(
                loop.sock_sendall(peer, payload)
                for (_, peer), payload in zip(pairs, payloads, strict=True)
            )
        )
        await asyncio.gather(*(p.done for p in protocols))
        for protocol, payload in zip(protocols, payloads, strict=True):
            assert all(type(c) is bytes for c in protocol.chunks)
            assert b"".join(protocol.chunks) == payload
        for transport in transports:
            transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        for _, peer in pairs:
            peer.close()


def test_pause_reading_in_a_bulk_read_holds_the_rest_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    size = 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    received = bytearray()

    class PauseOnce(asyncio.Protocol):
        def __init__(self) -> None:
            self.transport: Any = None
            self.paused_at = -1

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            received.extend(data)
            if self.paused_at < 0 and len(received) > 128 * 1024:
                self.paused_at = len(received)
                self.transport.pause_reading()

    ours, peer = socket.socketpair()

    async def main() -> None:
        transport, protocol = await loop.connect_accepted_socket(PauseOnce, ours)
        peer.setblocking(False)
        sender = asyncio.ensure_future(loop.sock_sendall(peer, payload))
        while protocol.paused_at < 0:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        assert len(received) == protocol.paused_at  # nothing delivered while paused
        transport.resume_reading()
        await sender
        while len(received) < size:
            await asyncio.sleep(0.001)
        assert received == payload
        transport.close()
        await asyncio.sleep(0)

    with peer:
        loop.run_until_complete(main())


def test_pause_and_resume_reading(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        try:
            await client.made
            transport.pause_reading()
            assert not transport.is_reading()
            transport.pause_reading()  # idempotent
            transport.write(b"while paused")
            await asyncio.sleep(0.05)
            assert client.data == b""
            transport.resume_reading()
            assert transport.is_reading()
            transport.resume_reading()  # idempotent
            assert await client.wait_for_bytes(12) == b"while paused"
        finally:
            transport.close()
            assert not transport.is_reading()
            await client.lost
            await close_server(server)

    loop.run_until_complete(main())


def test_pause_reading_before_connection_made_runs(loop: asyncio.AbstractEventLoop) -> None:
    """Reading starts after connection_made(); pausing inside it holds data back."""

    class PauseAtOnce(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.pause_reading()  # type: ignore[attr-defined]

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: PauseAtOnce(loop)) as (transport, client):
            transport.write(b"data")
            await asyncio.sleep(0.05)
            assert client.data == b""
            transport.resume_reading()
            assert await client.wait_for_bytes(4) == b"data"

    loop.run_until_complete(main())


WHO = contextvars.ContextVar("WHO", default="creator")


def run_as(who: str, action: Callable[[], object]) -> None:
    """Call *action* in a fresh context copy where WHO is *who*."""

    def call() -> None:
        WHO.set(who)
        action()

    contextvars.copy_context().run(call)


class ContextRecorder(Recorder):
    """Records WHO as data_received() and resume_writing() see it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.read_in: list[str] = []
        self.resumed_in: list[str] = []

    def data_received(self, data: bytes) -> None:
        self.read_in.append(WHO.get())
        super().data_received(data)

    def resume_writing(self) -> None:
        self.resumed_in.append(WHO.get())
        super().resume_writing()


#: 3.15 (gh-140947): a socket transport keeps the context it was made in and
#: runs every callback of its protocol there; before, each reader or writer
#: registration (and each call_soon) copied its caller's context. Read off the
#: stdlib's code.
TRANSPORT_CONTEXT = "context" in selector_events._SelectorTransport.__init__.__code__.co_varnames


def test_data_received_runs_in_the_context_that_resumed_reading(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Before 3.15, resume_reading() adds a reader Handle, which copies the caller's context;
    from 3.15 on, data_received() runs in the transport's own context."""

    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: ContextRecorder(loop)) as (transport, client):
            transport.write(b"1")
            await client.wait_for_bytes(1)
            transport.pause_reading()
            run_as("resumer", transport.resume_reading)
            transport.write(b"2")
            await client.wait_for_bytes(2)
            if TRANSPORT_CONTEXT:
                assert client.read_in == ["creator", "creator"]
            else:
                assert client.read_in == ["creator", "resumer"]

    loop.run_until_complete(main())


def test_resume_writing_runs_in_the_context_of_the_write_that_waited(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Before 3.15, each write() that has to wait adds a writer Handle in its own context;
    from 3.15 on, resume_writing() runs in the transport's own context."""
    big = b"w" * (8 * 1024 * 1024)  # more than the socket pair takes at once

    async def main() -> None:
        a, b = socket.socketpair()
        b.setblocking(False)
        transport, client = await loop.create_connection(lambda: ContextRecorder(loop), sock=a)
        try:
            for who in ("first writer", "second writer"):
                run_as(who, lambda: transport.write(big))
                assert client.paused == len(client.resumed_in) + 1
                while transport.get_write_buffer_size() or client.resumed < client.paused:
                    with contextlib.suppress(BlockingIOError):
                        while b.recv(1 << 20):
                            pass
                    await asyncio.sleep(0.001)
            if TRANSPORT_CONTEXT:
                assert client.resumed_in == ["creator", "creator"]
            else:
                assert client.resumed_in == ["first writer", "second writer"]
        finally:
            transport.close()
            await client.lost
            b.close()

    loop.run_until_complete(main())


def test_connection_lost_context_after_close(loop: asyncio.AbstractEventLoop) -> None:
    """connection_lost() after close(): before 3.15 in the context of the close() call (a
    call_soon copies it); from 3.15 on in the transport's own context (gh-140947)."""

    class LostRecorder(ContextRecorder):
        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            super().__init__(loop)
            self.made_in: list[str] = []
            self.lost_in: list[str] = []

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.made_in.append(WHO.get())
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            self.lost_in.append(WHO.get())
            super().connection_lost(exc)

    async def main() -> None:
        a, b = socket.socketpair()
        try:
            WHO.set("connector")
            transport, client = await loop.create_connection(lambda: LostRecorder(loop), sock=a)
            WHO.set("creator")
            run_as("closer", transport.close)
            await client.lost
            assert client.made_in == ["connector"]
            assert client.lost_in == (["connector"] if TRANSPORT_CONTEXT else ["closer"])
        finally:
            b.close()

    loop.run_until_complete(main())


def test_half_close_eof_received_true_keeps_transport_open(
    loop: asyncio.AbstractEventLoop,
) -> None:
    class Replier(Recorder):
        def eof_received(self) -> bool:
            super().eof_received()
            # The peer is done writing; we may still answer.
            self.transport.write(b"reply:" + bytes(self.data))
            self.transport.close()
            return True

    async def main() -> None:
        servers: list[Replier] = []

        def factory() -> Replier:
            servers.append(Replier(loop))
            return servers[-1]

        server, transport, client = await tcp_pair(loop, factory, lambda: Recorder(loop))
        try:
            transport.write(b"question")
            transport.write_eof()
            with pytest.raises(RuntimeError, match="after write_eof"):
                transport.write(b"more")
            transport.write_eof()  # a second call does nothing
            await client.eof
            assert bytes(client.data) == b"reply:question"
            assert await client.lost is None
            assert client.events == ["made", "data", "eof", "lost"]
            srv = servers[0]
            assert await srv.lost is None
            assert srv.events == ["made", "data", "eof", "lost"]
        finally:
            transport.close()
            await close_server(server)

    loop.run_until_complete(main())


def test_half_open_client_keeps_writing_after_eof(loop: asyncio.AbstractEventLoop) -> None:
    """eof_received() returning true: the transport stays open for writing."""

    class Server(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.write_eof()  # type: ignore[attr-defined]

    async def main() -> None:
        servers: list[Server] = []

        def factory() -> Server:
            servers.append(Server(loop))
            return servers[-1]

        server, transport, client = await tcp_pair(
            loop, factory, lambda: Recorder(loop, keep_open_on_eof=True)
        )
        try:
            await client.eof
            assert not transport.is_closing()
            transport.write(b"still writing")
            while not servers or len(servers[0].data) < 13:
                await asyncio.sleep(0.001)
            assert servers[0].data == b"still writing"
        finally:
            transport.close()
            assert await client.lost is None
            await close_server(server)

    loop.run_until_complete(main())


def test_eof_received_false_closes(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        factory, closer_protocols = recording_factory(loop)

        server, transport, client = await tcp_pair(loop, factory, lambda: Recorder(loop))
        transport.write_eof()
        srv = closer_protocols[0] if closer_protocols else None
        while srv is None:
            await asyncio.sleep(0)
            srv = closer_protocols[0] if closer_protocols else None
        assert await srv.lost is None  # closed on EOF
        await client.eof  # our side sees the server's close as EOF
        assert await client.lost is None
        assert transport.is_closing()
        await close_server(server)

    loop.run_until_complete(main())


def test_close_flushes_then_loses_connection_once(loop: asyncio.AbstractEventLoop) -> None:
    size = 8 * 1024 * 1024

    async def main() -> None:
        received = bytearray()
        done = loop.create_future()

        class Sink(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                received.extend(data)

            def eof_received(self) -> None:
                done.set_result(None)

        sink_server = await loop.create_server(Sink, "127.0.0.1", 0)
        port = sink_server.sockets[0].getsockname()[1]
        transport, client = await loop.create_connection(lambda: Recorder(loop), "127.0.0.1", port)
        transport.write(b"z" * size)
        assert transport.get_write_buffer_size() > 0  # the kernel could not take it all
        transport.close()
        transport.close()  # closing twice is harmless
        assert transport.is_closing()
        await done
        assert len(received) == size
        assert await client.lost is None
        await asyncio.sleep(0.01)
        assert client.lost_calls == 1
        await close_server(sink_server)

    loop.run_until_complete(main())


def test_abort_discards_buffer(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        transport.pause_reading()
        transport.write(b"x" * 16 * 1024 * 1024)
        assert transport.get_write_buffer_size() > 0
        transport.abort()
        assert transport.is_closing()
        assert transport.get_write_buffer_size() == 0
        transport.abort()
        transport.close()
        assert await client.lost is None
        await asyncio.sleep(0.01)
        assert client.lost_calls == 1
        await close_server(server)

    loop.run_until_complete(main())


def test_write_after_connection_lost_warns_after_threshold(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        transport.close()
        await client.lost
        with captured_asyncio_logs() as records:
            for _ in range(10):
                transport.write(b"x")
        warnings = [r for r in records if r.getMessage() == "socket.send() raised exception."]
        assert len(warnings) >= 5
        await close_server(server)

    loop.run_until_complete(main())


def test_slow_reader_pauses_writer_and_memory_stays_bounded(
    loop: asyncio.AbstractEventLoop,
) -> None:
    chunk = b"s" * 65536
    total_target = 32 * 1024 * 1024

    class Producer(Recorder):
        """Writes as long as the transport lets it."""

        def __init__(self) -> None:
            super().__init__(loop)
            self.written = 0
            self.max_buffer = 0
            self.can_write = True

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.set_write_buffer_limits(high=256 * 1024)  # type: ignore[attr-defined]
            loop.call_soon(self.produce)

        def produce(self) -> None:
            while self.can_write and self.written < total_target:
                self.transport.write(chunk)
                self.written += len(chunk)
                self.max_buffer = max(self.max_buffer, self.transport.get_write_buffer_size())
            if self.written >= total_target:
                self.transport.close()

        def pause_writing(self) -> None:
            super().pause_writing()
            self.can_write = False

        def resume_writing(self) -> None:
            super().resume_writing()
            self.can_write = True
            loop.call_soon(self.produce)

    async def main() -> None:
        producers: list[Producer] = []

        def factory() -> Producer:
            producers.append(Producer())
            return producers[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader = socket.create_connection(("127.0.0.1", port))
        reader.setblocking(False)
        try:
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            while not producers:
                await asyncio.sleep(0.001)
            producer = producers[0]
            # Nobody reads for a while: the producer must be paused, its
            # buffer bounded by the high-water mark plus one write.
            await asyncio.sleep(0.2)
            assert producer.paused == 1
            assert producer.transport.get_write_buffer_size() <= 256 * 1024 + len(chunk)
            assert producer.written < total_target
            # Read slowly until the end: pause/resume alternate.
            got = 0
            while True:
                try:
                    data = await loop.sock_recv(reader, 256 * 1024)
                except ConnectionResetError:  # pragma: no cover
                    break
                if not data:
                    break
                got += len(data)
            assert got == total_target
            assert producer.resumed >= 1
            assert producer.paused - producer.resumed in (0, 1)
            assert producer.max_buffer <= 256 * 1024 + len(chunk)
            await producer.lost
        finally:
            reader.close()
            await close_server(server)

    loop.run_until_complete(main())


def test_write_buffer_limits(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, _client):
            transport.set_write_buffer_limits(high=100)
            assert transport.get_write_buffer_limits() == (25, 100)
            transport.set_write_buffer_limits(low=10)
            assert transport.get_write_buffer_limits() == (10, 40)
            transport.set_write_buffer_limits(high=50, low=0)
            assert transport.get_write_buffer_limits() == (0, 50)
            with pytest.raises(ValueError, match=r"high \(1\) must be >= low \(2\) must be >= 0"):
                transport.set_write_buffer_limits(high=1, low=2)
            with pytest.raises(ValueError):
                transport.set_write_buffer_limits(high=-1)
            assert transport.get_write_buffer_limits() == (0, 50)

    loop.run_until_complete(main())


def test_set_write_buffer_limits_below_current_size_pauses(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        try:
            transport.pause_reading()
            transport.write(b"b" * 8 * 1024 * 1024)  # more than the kernel takes
            assert client.paused == 1  # above the default 64 KiB
            size = transport.get_write_buffer_size()
            assert size > 0
            transport.set_write_buffer_limits(high=size * 2)
            assert client.paused == 1  # no second pause while paused
        finally:
            transport.abort()
            await client.lost
            await close_server(server)

    loop.run_until_complete(main())


@pytest.mark.parametrize("how", ["rst-while-writing", "rst-before-read"])
def test_reset_by_peer_reaches_connection_lost_without_noise(
    loop: asyncio.AbstractEventLoop, how: str
) -> None:
    """SO_LINGER 0 makes close() send RST: the writer sees ECONNRESET/EPIPE."""
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class Writer(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if how == "rst-while-writing":
                loop.call_soon(self.flood)

        def flood(self) -> None:
            if self.transport.is_closing():
                return
            self.transport.write(b"f" * 65536)
            loop.call_later(0.001, self.flood)

    async def main() -> None:
        writers: list[Writer] = []

        def factory() -> Writer:
            writers.append(Writer(loop))
            return writers[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        peer = socket.create_connection(("127.0.0.1", port))
        try:
            while not writers:
                await asyncio.sleep(0.001)
            writer = writers[0]
            await writer.made
            if how == "rst-before-read":
                peer.send(b"unread")  # data the server never sees...
            await asyncio.sleep(0.05)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            peer.close()  # ...and an RST
        with captured_asyncio_logs() as records:
            if how == "rst-before-read":
                writers[0].transport.write(b"x")  # may hit EPIPE or ECONNRESET
            exc = await asyncio.wait_for(writers[0].lost, 5)
            await asyncio.sleep(0.01)
        assert isinstance(exc, (ConnectionResetError, BrokenPipeError)), exc
        assert writers[0].lost_calls == 1
        noisy = [r for r in records if r.levelno >= logging.WARNING]
        assert noisy == []
        assert contexts == []
        await close_server(server)

    loop.run_until_complete(main())


def test_protocol_error_goes_to_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class Failing(Recorder):
        def data_received(self, data: bytes) -> None:
            raise ZeroDivisionError("boom")

    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Failing(loop))
        transport.write(b"x")
        exc = await client.lost
        assert isinstance(exc, ZeroDivisionError)
        await close_server(server)

    loop.run_until_complete(main())
    assert len(contexts) == 1
    ctx = contexts[0]
    assert ctx["message"] == "Fatal error: protocol.data_received() call failed."
    assert isinstance(ctx["exception"], ZeroDivisionError)
    assert "transport" in ctx and "protocol" in ctx


def test_pause_writing_error_goes_to_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class BadPause(Recorder):
        def pause_writing(self) -> None:
            raise ValueError("pause")

    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: BadPause(loop))
        transport.pause_reading()
        transport.write(b"p" * 16 * 1024 * 1024)
        transport.abort()
        await client.lost
        await close_server(server)

    loop.run_until_complete(main())
    assert [c["message"] for c in contexts] == ["protocol.pause_writing() failed"]


def test_unix_stream_transport(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "echo.sock")
    payload = b"u" * 300000

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path)
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), path)
        try:
            sock = transport.get_extra_info("socket")
            assert sock.family == socket.AF_UNIX
            assert transport.get_extra_info("peername") == path
            transport.write(payload)
            assert await client.wait_for_bytes(len(payload)) == payload
            transport.write_eof()
            await client.eof
        finally:
            await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_unclosed_transport_warns(loop: asyncio.AbstractEventLoop) -> None:
    import warnings

    a, b = socket.socketpair()

    async def main() -> None:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        # While it polls, the loop holds it; paused, nothing does.
        transport.pause_reading()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del transport
            gc.collect()
        assert any("unclosed transport" in str(w.message) for w in caught)
        assert a.fileno() == -1  # the warning closed the socket

    with b:
        loop.run_until_complete(main())


def _measure_start() -> Callable[[], int]:
    """Start measuring what the process allocates; returns the stop-and-tell function.

    tracemalloc where there is one. PyPy has none: there, the memory in use
    by its GC after full collections (``gc._get_stats()`` is the raw form of
    its documented ``gc.get_stats()``, whose fields are formatted "5.1MB";
    two collections, as an object with a finalizer goes at the one after it
    ran), before and after.
    """
    if sys.implementation.name == "pypy":

        def live_bytes() -> int:
            gc.collect()
            gc.collect()
            return int(gc._get_stats().total_gc_memory)  # type: ignore[attr-defined]

        live_before = live_bytes()
        return lambda: live_bytes() - live_before

    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.take_snapshot()

    def stop() -> int:
        try:
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        return sum(d.size_diff for d in after.compare_to(before, "filename"))

    return stop


def connection_memory(loop: asyncio.AbstractEventLoop, conns: int) -> float:
    """Bytes the process allocates per echo connection (`_measure_start`), all of them busy.

    The clients (blocking sockets in a thread) allocate the same on any loop.
    """
    import threading

    lost: list[None] = []

    class CountingEcho(Echo):
        def connection_lost(self, exc: BaseException | None) -> None:
            lost.append(None)

    async def main() -> float:
        server = await loop.create_server(CountingEcho, "127.0.0.1", 0, backlog=conns)
        port = server.sockets[0].getsockname()[1]
        clients: list[socket.socket] = []

        def connect_and_echo() -> None:
            clients.extend(socket.create_connection(("127.0.0.1", port)) for _ in range(conns))
            for c in clients:
                c.sendall(b"m" * 1024)
            for c in clients:
                got = 0
                while got < 1024:
                    got += len(c.recv(4096))

        stop = _measure_start()
        try:
            thread = threading.Thread(target=connect_and_echo)
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.005)
        finally:
            allocated = stop()
            for c in clients:
                c.close()
            while len(lost) < len(clients):  # the server side sees each EOF and closes
                await asyncio.sleep(0.005)
            await close_server(server)
        return allocated / conns

    return loop.run_until_complete(main())


def test_a_connection_costs_no_more_memory_than_on_the_stdlib_loop() -> None:
    """The issue's scale target, in allocated bytes: per connection, at most the stdlib's.

    tideloop makes the write buffer and the write Handle only when a write
    has to wait, which most connections never do.
    """
    import tideloop

    # PyPy's measure (`_measure_start`) also counts what its JIT allocates
    # while it compiles the code the connections run, and that depends on
    # what the process ran before (a worker that ran other tests measured
    # 1634 against 1095 once, where a fresh one measures less than the
    # stdlib): there each loop runs in fresh interpreters, two rounds,
    # interleaved, and its least is its cost.
    pypy = sys.implementation.name == "pypy"
    costs: dict[str, float] = {}
    loops = {"stdlib": asyncio.new_event_loop, "tideloop": tideloop.new_event_loop}
    for _ in range(2 if pypy else 1):
        for name, factory in loops.items():
            if pypy:
                cost = _cost_in_a_fresh_interpreter(name)
            else:
                loop = factory()
                try:
                    cost = connection_memory(loop, 200)
                finally:
                    loop.close()
            costs[name] = min(cost, costs.get(name, cost))
    assert costs["tideloop"] <= costs["stdlib"], costs


def _cost_in_a_fresh_interpreter(name: str) -> float:
    import os
    import subprocess

    here = Path(__file__).resolve().parent
    code = (
        "import asyncio, sys, tideloop, test_net_stream as t\n"
        "loops = {'stdlib': asyncio.new_event_loop, 'tideloop': tideloop.new_event_loop}\n"
        f"loop = loops[{name!r}]()\n"
        "try:\n"
        "    print(t.connection_memory(loop, 200))\n"
        "finally:\n"
        "    loop.close()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(here.parent)]))
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])
