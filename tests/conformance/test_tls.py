"""TLS transports: data, extra info, closing, flow control, streams, Unix sockets, sendfile.

Each test runs on every loop and through both routes of the `tls` fixture
(asyncio's public ``ssl=`` API, and tideloop's TLS module over the loop's
plain transports; see ``tls_support``). The bad-input and shutdown
cases are in ``test_tls_errors.py``, ``start_tls`` in ``test_tls_start_tls.py``.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

import pytest

from tideloop._transports import tls as tlsmod

from net_support import captured_asyncio_logs
from tls_support import (
    WAIT,
    Certs,
    Echo,
    Recorder,
    Route,
    close_server,
    connect_tls,
    first,
    payload,
    port_of,
    recording_factory,
)


async def connect_pair(
    tls: Route,
    certs: Certs,
    client: Any = None,
    server: Any = None,
    client_ssl: ssl.SSLContext | None = None,
    **kwargs: Any,
) -> tuple[asyncio.Server, Any, Any, list[Any]]:
    """A TLS server (recording its protocols) and a client connected to it."""
    loop = tls.loop
    made: list[Any] = []
    if server is None:
        factory, made = recording_factory(loop)
    else:

        def factory() -> Any:
            made.append(server())
            return made[-1]

    srv = await tls.serve(factory, ssl=certs.server)
    transport, proto = await connect_tls(
        tls, certs, port_of(srv), client, ssl=client_ssl or certs.client, **kwargs
    )
    return srv, transport, proto, made


# ----------------------------------------------------------------------
# Data


@pytest.mark.parametrize("size", [1, 1024, 65536, 1024 * 1024, 8 * 1024 * 1024])
def test_echo(tls: Route, certs: Certs, size: int) -> None:
    data = payload(size)

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(tls, certs, server=Echo)
        transport.write(data)
        assert await client.wait_for_bytes(size) == data
        transport.close()
        assert await client.wait_lost() is None
        # The peer's close_notify answering ours reaches eof_received (asyncio).
        assert client.events == ["made", "data", "eof", "lost"]
        await close_server(srv)

    tls.run(main())


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_echo_each_tls_version(tls: Route, certs: Certs, version: str) -> None:
    context = make_certs_client(certs)
    context.minimum_version = context.maximum_version = getattr(ssl.TLSVersion, version)

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(tls, certs, server=Echo, client_ssl=context)
        assert transport.get_extra_info("ssl_object").version() == version.replace("_", ".")
        expected = b""
        for i in range(20):  # many small round trips (TLS 1.3: tickets come in between)
            transport.write(b"ping %d\n" % i)
            expected += b"ping %d\n" % i
            assert await client.wait_for_bytes(len(expected)) == expected
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def make_certs_client(certs: Certs) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    certs.ca.configure_trust(context)
    return context


def test_many_concurrent_clients(tls: Route, certs: Certs) -> None:
    async def one(port: int, i: int) -> None:
        transport, client = await connect_tls(tls, certs, port)
        data = payload(1000 + i * 997)
        transport.write(data)
        assert await client.wait_for_bytes(len(data)) == data
        transport.close()
        assert await client.wait_lost() is None

    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.server)
        await asyncio.gather(*(one(port_of(srv), i) for i in range(40)))
        await close_server(srv)

    tls.run(main())


def test_both_directions_at_once(tls: Route, certs: Certs) -> None:
    up = payload(3 * 1024 * 1024)
    down = payload(2 * 1024 * 1024)[::-1]

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        transport.write(up)
        server.transport.write(down)
        assert await server.wait_for_bytes(len(up)) == up
        assert await client.wait_for_bytes(len(down)) == down
        transport.close()
        await client.wait_lost()
        assert await server.wait_lost() is None
        assert server.events == ["made", "data", "eof", "lost"]
        await close_server(srv)

    tls.run(main())


def test_writelines_and_write_types(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv, transport, client, _ = await connect_pair(tls, certs, server=Echo)
        parts: list[Any] = [b"a", bytearray(b"bc"), memoryview(b"def"), b"", b"g" * 100000]
        transport.writelines(parts)
        transport.writelines(iter([b"1", b"2"]))
        transport.writelines([])
        transport.write(b"")
        transport.write(bytearray(b"xy"))
        transport.write(memoryview(b"--z--")[2:3])
        with pytest.raises(TypeError, match="data: expecting a bytes-like instance, got str"):
            transport.write("text")
        expected = b"abcdef" + b"g" * 100000 + b"12xyz"
        assert await client.wait_for_bytes(len(expected)) == expected
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


@pytest.mark.divergence("tls-writelines-type-check")
def test_writelines_rejects_what_is_not_bytes_at_the_call(tls: Route, certs: Certs) -> None:
    """TypeError from writelines() itself; nothing of that call is sent, the connection lives."""

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(tls, certs, server=Echo)
        for bad in ([b"a", "text"], [b"a", 5], [None]):
            with pytest.raises(TypeError, match="data: expecting a bytes-like instance, got"):
                transport.writelines(bad)
        transport.writelines([b"still ", b"open"])
        assert await client.wait_for_bytes(10) == b"still open"
        transport.close()
        assert await client.wait_lost() is None
        await close_server(srv)

    tls.run(main())


class BufferedRecorder(asyncio.BufferedProtocol):
    """A BufferedProtocol with a small buffer, to make deliveries span many calls.

    get_buffer() returns a memoryview: asyncio's SSL transport (3.11-3.13)
    corrupts data when it is a bytearray (it reads the rest of a record into
    ``buf[offset:]``, a copy); `test_buffered_protocol_bytearray_buffer`
    checks that tideloop does not.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, size: int = 100, *, as_bytearray: bool = False
    ) -> None:
        self.buf: Any = bytearray(size) if as_bytearray else memoryview(bytearray(size))
        self.data = bytearray()
        self.hints: list[int] = []
        self.transport: Any = None
        self.lost: asyncio.Future[BaseException | None] = loop.create_future()
        self.eof_count = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> bytearray:
        self.hints.append(sizehint)
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        assert 0 < nbytes <= len(self.buf)
        self.data += self.buf[:nbytes]

    def eof_received(self) -> None:
        self.eof_count += 1

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.set_result(exc)


@pytest.mark.parametrize("bufsize", [1, 100, 65536])
def test_buffered_protocol_application(tls: Route, certs: Certs, bufsize: int) -> None:
    loop = tls.loop
    size = 200_000 if bufsize == 1 else 2_000_000
    data = payload(size)

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(
            tls, certs, client=lambda: BufferedRecorder(loop, bufsize), server=Echo
        )
        assert isinstance(client, BufferedRecorder)
        transport.write(data)
        for _ in range(int(WAIT / 0.01)):
            if len(client.data) >= size:
                break
            await asyncio.sleep(0.01)
        assert client.data == data
        assert all(hint >= 0 for hint in client.hints)
        transport.close()
        assert await asyncio.wait_for(client.lost, WAIT) is None
        await close_server(srv)

    tls.run(main())


@pytest.mark.divergence("tls-bytearray-get-buffer")
def test_buffered_protocol_bytearray_buffer(tls: Route, certs: Certs) -> None:
    """A bytearray from get_buffer() (asyncio's SSL transport loses data there)."""
    loop = tls.loop
    data = payload(1_000_000)

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(
            tls, certs, client=lambda: BufferedRecorder(loop, 5000, as_bytearray=True), server=Echo
        )
        transport.write(data)
        for _ in range(int(WAIT / 0.01)):
            if len(client.data) >= len(data):
                break
            await asyncio.sleep(0.01)
        assert client.data == data
        transport.close()
        assert await asyncio.wait_for(client.lost, WAIT) is None
        await close_server(srv)

    tls.run(main())


def test_buffered_protocol_server_receives_eof(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    data = payload(300_000)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(
            tls, certs, server=lambda: BufferedRecorder(loop, 4096)
        )
        transport.write(data)
        transport.close()
        await client.wait_lost()
        server = await first(made)
        assert await asyncio.wait_for(server.lost, WAIT) is None
        assert server.data == data
        assert server.eof_count == 1
        await close_server(srv)

    tls.run(main())


def test_set_protocol_switches_delivery(tls: Route, certs: Certs) -> None:
    """asyncpg's pattern: the TLS transport is handed to another protocol."""
    loop = tls.loop

    async def main() -> None:
        srv, transport, first_proto, made = await connect_pair(tls, certs)
        server = await first(made)
        second = Recorder(loop)
        transport.set_protocol(second)
        assert transport.get_protocol() is second
        server.transport.write(b"to the second")
        assert await second.wait_for_bytes(13) == b"to the second"
        third = BufferedRecorder(loop, 7)
        transport.set_protocol(third)
        server.transport.write(b"and then to a buffered one")
        for _ in range(int(WAIT / 0.01)):
            if len(third.data) >= 26:
                break
            await asyncio.sleep(0.01)
        assert third.data == b"and then to a buffered one"
        assert first_proto.data == b""
        transport.close()
        assert await asyncio.wait_for(third.lost, WAIT) is None
        assert first_proto.lost_calls == 0
        await close_server(srv)

    tls.run(main())


# ----------------------------------------------------------------------
# The transport object and its extra info


def test_transport_api_and_extra_info(tls: Route, certs: Certs) -> None:

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        assert isinstance(transport, asyncio.Transport)
        assert transport.get_protocol() is client
        assert client.transport is transport
        assert transport.get_extra_info("sslcontext") is certs.client
        # asyncio's private name for it, which libraries read (aiohttp's tests).
        assert transport._ssl_protocol._sslcontext is certs.client
        sslobj = transport.get_extra_info("ssl_object")
        assert isinstance(sslobj, ssl.SSLObject)
        assert sslobj.server_hostname == "localhost"
        peercert = transport.get_extra_info("peercert")
        assert peercert == sslobj.getpeercert()
        assert ("DNS", "localhost") in peercert["subjectAltName"]
        cipher = transport.get_extra_info("cipher")
        assert cipher == sslobj.cipher() and isinstance(cipher, tuple)
        assert transport.get_extra_info("compression") == sslobj.compression()
        sock = transport.get_extra_info("socket")
        assert sock is not None and sock.family == socket.AF_INET
        assert transport.get_extra_info("peername") == ("127.0.0.1", port_of(srv))
        assert transport.get_extra_info("sockname") == sock.getsockname()
        assert transport.get_extra_info("nonexistent", "dflt") == "dflt"
        assert transport.get_extra_info("nonexistent") is None

        assert not transport.can_write_eof()
        with pytest.raises(NotImplementedError):
            transport.write_eof()
        assert transport.is_reading()
        assert not transport.is_closing()
        assert transport.get_write_buffer_size() == 0
        assert transport.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        assert transport.get_read_buffer_limits() == (64 * 1024, 256 * 1024)
        assert transport.get_read_buffer_size() == 0
        assert getattr(transport, "_start_tls_compatible", False)

        st = server.transport
        assert st.get_extra_info("sslcontext") is certs.server
        assert st.get_extra_info("peercert") is None  # no client certificate
        assert st.get_extra_info("ssl_object").server_side
        assert st.get_extra_info("peername") == transport.get_extra_info("sockname")

        transport.close()
        assert transport.is_closing()
        assert await client.wait_lost() is None
        # After the connection: the TLS info stays, the socket's is gone.
        assert transport.get_extra_info("sslcontext") is certs.client
        assert transport.get_extra_info("peername") is None
        await close_server(srv)

    tls.run(main())


def test_client_certificate(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certs.ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED
    certs.ca.configure_trust(server_context)
    client_context = make_certs_client(certs)
    certs.client_cert.configure_cert(client_context)

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=server_context)
        transport, client = await connect_tls(tls, certs, port_of(srv), ssl=client_context)
        server = await first(made)
        peercert = server.transport.get_extra_info("peercert")
        assert ("email", "client@example.org") in peercert["subjectAltName"]
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_ssl_true_is_a_verifying_default_context(tls: Route, certs: Certs) -> None:
    """ssl=True: the system's trust store, which does not know our test CA."""
    loop = tls.loop

    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.server)
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await tls.connect(lambda: Recorder(loop), "localhost", port_of(srv), ssl=True)
        assert info.value.reason == "CERTIFICATE_VERIFY_FAILED"
        await close_server(srv)

    tls.run(main())


def test_default_context_rules() -> None:
    context = tlsmod.create_transport_context(False, "example.org")
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert not tlsmod.create_transport_context(False, None).check_hostname
    assert not tlsmod.create_transport_context(False, "").check_hostname
    with pytest.raises(ValueError, match="Server side SSL needs a valid SSLContext"):
        tlsmod.create_transport_context(True, None)


def test_unclosed_transport_warns(loop: asyncio.AbstractEventLoop, certs: Certs) -> None:
    proto = tlsmod.TLSProtocol(
        loop, asyncio.Protocol(), certs.client, None, server_hostname="localhost"
    )
    transport = proto._app_transport
    del proto
    with pytest.warns(ResourceWarning, match="unclosed transport"):
        del transport
        gc.collect()


# ----------------------------------------------------------------------
# Closing


@pytest.mark.divergence("tls-closed-twice")
def test_closing_twice_releases_the_tls_state(tls: Route, certs: Certs) -> None:
    """The second close() frees the SSL object; the transport still answers as closed."""

    async def main() -> None:
        srv, transport, client, _ = await connect_pair(tls, certs)
        sslobj = weakref.ref(transport.get_extra_info("ssl_object"))
        transport.close()
        assert await client.wait_lost() is None
        assert transport.get_extra_info("cipher") is not None  # closed once: all there
        transport.close()
        if sys.implementation.name == "pypy":
            gc.collect()  # no reference counting: freed objects go at a collection
        assert sslobj() is None
        assert transport.get_extra_info("cipher") is None
        assert transport.get_extra_info("sslcontext", "gone") == "gone"
        assert transport.is_closing()
        with captured_asyncio_logs() as records:
            for _ in range(6):
                transport.write(b"x")
        assert {r.getMessage() for r in records} == {"SSL connection is closed"}
        assert transport.get_write_buffer_size() == 0
        transport.abort()
        transport.close()
        await close_server(srv)

    tls.run(main())


def test_close_flushes_then_sends_close_notify(tls: Route, certs: Certs) -> None:
    data = payload(5 * 1024 * 1024)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        transport.write(data)
        transport.close()
        transport.close()  # a second close is harmless
        assert transport.is_closing()
        server = await first(made)
        assert await server.wait_lost() is None
        assert server.data == data
        # close_notify reached the server's application as EOF.
        assert server.events == ["made", "data", "eof", "lost"]
        assert await client.wait_lost() is None
        assert client.events == ["made", "eof", "lost"]
        assert client.lost_calls == 1
        await close_server(srv)

    tls.run(main())


def test_peer_close_reaches_eof_received_then_lost(tls: Route, certs: Certs) -> None:

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        server.transport.write(b"last words")
        server.transport.close()
        assert await client.wait_lost() is None
        assert client.events == ["made", "data", "eof", "lost"]
        assert client.data == b"last words"
        assert transport.is_closing()
        await server.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_eof_received_returning_true_has_no_effect(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    async def main() -> None:
        with captured_asyncio_logs() as records:
            srv, _transport, client, made = await connect_pair(
                tls, certs, client=lambda: Recorder(loop, eof_result=True)
            )
            server = await first(made)
            server.transport.close()
            assert await client.wait_lost() is None
        assert client.events == ["made", "eof", "lost"]
        messages = [r.getMessage() for r in records if r.levelname == "WARNING"]
        assert "returning true from eof_received() has no effect when using ssl" in messages
        await close_server(srv)

    tls.run(main())


def test_write_after_close_is_dropped_with_warnings(tls: Route, certs: Certs) -> None:

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        transport.write(b"before")
        transport.close()
        with captured_asyncio_logs() as records:
            for _ in range(10):
                transport.write(b"after")
        warnings = [r for r in records if r.getMessage() == "SSL connection is closed"]
        assert len(warnings) == 5  # from the 6th dropped write on
        await client.wait_lost()
        await server.wait_lost()
        assert server.data == b"before"
        await close_server(srv)

    tls.run(main())


def test_abort(tls: Route, certs: Certs) -> None:

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        transport.write(b"x" * 1000)
        transport.abort()
        assert transport.is_closing()
        transport.abort()  # again: harmless
        transport.close()  # and close after abort too
        assert await client.wait_lost() is None
        assert client.events == ["made", "lost"]
        exc = await server.wait_lost()
        assert exc is None or isinstance(exc, ConnectionError)
        await close_server(srv)

    tls.run(main())


def test_abort_from_data_received_still_sends_earlier_writes(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    class ReplyThenAbort(Recorder):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.transport.write(b"bye")
            self.transport.abort()

    async def main() -> None:
        srv, transport, client, made = await connect_pair(
            tls, certs, server=lambda: ReplyThenAbort(loop)
        )
        transport.write(b"hello")
        assert await client.wait_for_bytes(3) == b"bye"
        await client.wait_lost()
        server = await first(made)
        assert await server.wait_lost() is None
        await close_server(srv)

    tls.run(main())


def test_close_from_data_received(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    class ReplyThenClose(Recorder):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self.transport.write(data.upper())
            self.transport.close()

    async def main() -> None:
        srv, transport, client, made = await connect_pair(
            tls, certs, server=lambda: ReplyThenClose(loop)
        )
        transport.write(b"hello")
        assert await client.wait_lost() is None
        assert client.data == b"HELLO"
        assert client.events == ["made", "data", "eof", "lost"]
        server = await first(made)
        assert await server.wait_lost() is None
        assert server.lost_calls == 1
        await close_server(srv)

    tls.run(main())


def test_application_error_is_reported(
    tls: Route, certs: Certs, loop_errors: list[dict[str, Any]]
) -> None:
    loop = tls.loop

    class Boom(Recorder):
        def data_received(self, data: bytes) -> None:
            raise RuntimeError("boom")

    async def main() -> None:
        srv, _transport, client, made = await connect_pair(tls, certs, client=lambda: Boom(loop))
        server = await first(made)
        server.transport.write(b"data")
        exc = await client.wait_lost()
        assert isinstance(exc, RuntimeError) and str(exc) == "boom"
        await server.wait_lost()
        await close_server(srv)

    tls.run(main())
    assert [ctx["message"] for ctx in loop_errors] == ["Fatal error on SSL protocol"]
    assert isinstance(loop_errors[0]["exception"], RuntimeError)


# ----------------------------------------------------------------------
# Flow control


def test_write_flow_control(tls: Route, certs: Certs) -> None:
    chunk = payload(256 * 1024)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        server.transport.pause_reading()
        with pytest.raises(ValueError, match="must be >= low"):
            transport.set_write_buffer_limits(high=1, low=2)
        transport.set_write_buffer_limits(high=200_000)
        assert transport.get_write_buffer_limits() == (50_000, 200_000)
        sent = 0
        while not client.paused and sent < 256 * 1024 * 1024:
            transport.write(chunk)
            sent += len(chunk)
            if not client.paused:
                await asyncio.sleep(0)
        assert client.paused == 1
        assert transport.get_write_buffer_size() >= 200_000
        assert transport._protocol_paused  # what asyncio's sendfile fallback reads
        server.transport.resume_reading()
        await server.wait_for_bytes(sent)
        for _ in range(int(WAIT / 0.01)):
            if client.resumed:
                break
            await asyncio.sleep(0.01)
        assert client.resumed == 1
        assert transport.get_write_buffer_size() <= 50_000
        assert server.data == chunk * (sent // len(chunk))
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_read_flow_control(tls: Route, certs: Certs) -> None:
    """Paused: nothing is delivered, and ciphertext stops being read past the limit."""
    data = payload(4 * 1024 * 1024)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        transport.set_read_buffer_limits(high=64 * 1024)
        assert transport.get_read_buffer_limits() == (16 * 1024, 64 * 1024)
        transport.pause_reading()
        assert not transport.is_reading()
        server.transport.write(data)
        await asyncio.sleep(0.2)
        assert client.data == b""
        buffered = transport.get_read_buffer_size()
        # The lower transport stopped reading past the limit.
        assert 64 * 1024 <= buffered < len(data)
        await asyncio.sleep(0.1)
        assert transport.get_read_buffer_size() == buffered
        transport.resume_reading()
        transport.resume_reading()  # twice: harmless
        assert transport.is_reading()
        assert await client.wait_for_bytes(len(data)) == data
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_pause_reading_inside_data_received(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    data = payload(2 * 1024 * 1024)

    class Pauser(Recorder):
        calls = 0

        def data_received(self, chunk: bytes) -> None:
            super().data_received(chunk)
            self.calls += 1
            self.transport.pause_reading()
            loop.call_later(0.005, self.transport.resume_reading)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs, client=lambda: Pauser(loop))
        server = await first(made)
        server.transport.write(data)
        assert await client.wait_for_bytes(len(data)) == data
        assert client.calls > 1
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


@pytest.mark.divergence("tls-delivery-at-most-256k")
def test_what_piled_up_while_paused_comes_in_chunks_of_at_most_256k(
    tls: Route, certs: Certs
) -> None:
    loop = tls.loop
    data = payload(2 * 1024 * 1024)

    class Sizes(Recorder):
        def __init__(self) -> None:
            super().__init__(loop)
            self.sizes: list[int] = []

        def data_received(self, data: bytes) -> None:
            self.sizes.append(len(data))
            super().data_received(data)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs, client=Sizes)
        server = await first(made)
        transport.set_read_buffer_limits(high=16 * 1024 * 1024)
        transport.pause_reading()
        server.transport.write(data)
        for _ in range(int(WAIT / 0.01)):
            if transport.get_read_buffer_size() >= len(data):
                break
            await asyncio.sleep(0.01)
        assert client.sizes == []
        transport.resume_reading()
        assert await client.wait_for_bytes(len(data)) == data
        assert max(client.sizes) == 256 * 1024  # asyncio: one call of 2 MiB
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


# ----------------------------------------------------------------------
# Streams, Unix sockets, accepted sockets, sendfile


async def echo_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(line.upper())
            await writer.drain()
    finally:
        writer.close()


def test_streams(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv = await tls.start_server(echo_lines, ssl=certs.server)
        reader, writer = await tls.open_connection(
            "127.0.0.1", port_of(srv), ssl=certs.client, server_hostname="localhost"
        )
        assert writer.get_extra_info("peercert") is not None
        for i in range(50):
            writer.write(b"line %d\n" % i)
            await writer.drain()
            assert await reader.readline() == b"LINE %d\n" % i
        big = b"y" * 50_000 + b"\n"
        writer.write(big)
        await writer.drain()
        assert await reader.readline() == big.upper()
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), WAIT)
        await close_server(srv)

    tls.run(main())


def test_unix_sockets(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "tls.sock")
            srv = await tls.serve(Echo, ssl=certs.server, unix_path=path)
            transport, client = await tls.connect(
                lambda: Recorder(loop),
                ssl=certs.client,
                server_hostname="localhost",
                unix_path=path,
            )
            assert transport.get_extra_info("socket").family == socket.AF_UNIX
            assert transport.get_extra_info("peercert") is not None
            data = payload(1024 * 1024)
            transport.write(data)
            assert await client.wait_for_bytes(len(data)) == data
            transport.close()
            assert await client.wait_lost() is None
            await close_server(srv)

    tls.run(main())


def test_connect_accepted_socket(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    async def main() -> None:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            connecting = asyncio.ensure_future(connect_tls(tls, certs, listener.getsockname()[1]))
            accepted, _ = await loop.sock_accept(listener)
            try:
                server_transport, server = await tls.connect_accepted_socket(
                    lambda: Recorder(loop), accepted, ssl=certs.server
                )
            except BaseException:
                accepted.close()
                connecting.cancel()
                await asyncio.gather(connecting, return_exceptions=True)
                raise
            transport, client = await connecting
            assert server_transport.get_extra_info("ssl_object").server_side
            transport.write(b"ping")
            assert await server.wait_for_bytes(4) == b"ping"
            server_transport.write(b"pong")
            assert await client.wait_for_bytes(4) == b"pong"
            transport.close()
            assert await server.wait_lost() is None
            await client.wait_lost()

    tls.run(main())


def test_sendfile_uses_the_fallback(tls: Route, certs: Certs, tmp_path: Path) -> None:
    loop = tls.loop
    data = payload(3 * 1024 * 1024 + 17)
    path = tmp_path / "data.bin"
    path.write_bytes(data)

    async def main() -> None:
        srv, transport, client, made = await connect_pair(tls, certs)
        server = await first(made)
        transport.write(b"head:")
        with path.open("rb") as f:
            sent = await loop.sendfile(transport, f)
            assert sent == len(data)
            assert f.tell() == len(data)
            f.seek(0)
            with pytest.raises(RuntimeError, match="fallback is disabled"):
                await loop.sendfile(transport, f, fallback=False)
            assert await loop.sendfile(transport, f, offset=10, count=5) == 5
        transport.write(b":tail")
        expected = b"head:" + data + data[10:15] + b":tail"
        assert await server.wait_for_bytes(len(expected)) == expected
        assert transport.get_protocol() is client and transport.is_reading()
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_debug_mode_logs_the_handshake(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    loop.set_debug(True)
    loop.slow_callback_duration = 10.0

    async def main() -> None:
        with captured_asyncio_logs() as records:
            srv, transport, client, _ = await connect_pair(tls, certs, server=Echo)
            transport.close()
            await client.wait_lost()
            await close_server(srv)
        messages = [r.getMessage() for r in records if r.levelname == "DEBUG"]
        assert any(m.endswith("starts SSL handshake") for m in messages)
        assert any("SSL handshake took" in m for m in messages)

    tls.run(main())
