"""``start_tls``: upgrading a plain connection (client and server side), TLS over TLS.

Through both routes of the `tls` fixture (``loop.start_tls``, and
``tideloop._transports.tls.start_tls`` on any loop; see ``tls_support``).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Callable
from typing import Any

import pytest

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
)


class StartTLSServer(asyncio.Protocol):
    """A line protocol: echoes lines upper-cased; STARTTLS switches to TLS."""

    def __init__(self, tls: Route, context: ssl.SSLContext, *, answer: bool = True) -> None:
        self.tls = tls
        self.context = context
        self.answer = answer
        self.transport: Any = None
        self.buf = b""
        self.lines: list[bytes] = []
        self.upgraded: asyncio.Future[Any] = tls.loop.create_future()
        self.lost: asyncio.Future[BaseException | None] = tls.loop.create_future()
        self.asked: asyncio.Future[None] = tls.loop.create_future()
        self.go: asyncio.Future[None] = tls.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = self.tls.track(transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            self.lines.append(line)
            if line == b"STARTTLS":
                assert self.buf == b"", "nothing may follow STARTTLS before the answer"
                if self.answer:
                    self.transport.write(b"OK\n")
                else:
                    self.transport.pause_reading()
                self.asked.set_result(None)
                task = asyncio.ensure_future(self._upgrade())
                task.add_done_callback(self._upgraded)
                return
            self.transport.write(line.upper() + b"\n")

    async def _upgrade(self) -> Any:
        if not self.answer:
            await self.go
        return await self.tls.start_tls(self.transport, self, self.context, server_side=True)

    def _upgraded(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.upgraded.cancel()
        elif task.exception() is not None:
            self.upgraded.set_exception(task.exception())  # type: ignore[arg-type]
        else:
            self.transport = task.result()
            self.upgraded.set_result(self.transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def start_tls_servers(
    tls: Route, context: ssl.SSLContext, **kwargs: Any
) -> tuple[Callable[[], StartTLSServer], list[StartTLSServer]]:
    """A factory of `StartTLSServer` protocols (*kwargs* go to each) and the list of
    those it made."""
    made: list[StartTLSServer] = []

    def factory() -> StartTLSServer:
        made.append(StartTLSServer(tls, context, **kwargs))
        return made[-1]

    return factory, made


async def plain_client(
    tls: Route, factory: Callable[[], asyncio.BaseProtocol]
) -> tuple[asyncio.Server, Any, Recorder]:
    """A plain server of *factory*'s protocols and a `Recorder` connected to it over
    plain TCP, ready for start_tls (both tracked by *tls*)."""
    loop = tls.loop
    srv = await tls.serve_plain(factory)
    transport, client = await loop.create_connection(
        lambda: Recorder(loop), "127.0.0.1", port_of(srv)
    )
    tls.track(transport)
    return srv, transport, client


async def starttls_answered(
    tls: Route, context: ssl.SSLContext, lines: bytes = b""
) -> tuple[asyncio.Server, Any, Recorder, list[StartTLSServer]]:
    """`plain_client` to a `StartTLSServer` of *context*, which the client has sent
    *lines* and STARTTLS and which has answered them (upper-cased, then OK):
    (server, client transport, client, the server's protocols)."""
    factory, made = start_tls_servers(tls, context)
    srv, transport, client = await plain_client(tls, factory)
    transport.write(lines + b"STARTTLS\n")
    expected = lines.upper() + b"OK\n"
    assert await client.wait_for_bytes(len(expected)) == expected
    return srv, transport, client, made


def test_start_tls_client_and_server_side(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv, transport, client, made = await starttls_answered(tls, certs.server, b"hello\n")
        new = await tls.start_tls(transport, client, certs.client, server_hostname="localhost")
        assert new is not transport
        assert new.get_protocol() is client
        assert new.get_extra_info("peercert") is not None
        assert new.get_extra_info("sslcontext") is certs.client
        server = await first(made)
        server_tls = await asyncio.wait_for(server.upgraded, WAIT)
        assert server_tls.get_extra_info("ssl_object").server_side
        big = payload(500_000).replace(b"\n", b" ") + b"\n"
        new.write(b"secret\n")
        new.write(big)
        expected = b"HELLO\nOK\nSECRET\n" + big.upper()
        assert await client.wait_for_bytes(len(expected)) == expected
        # Every plaintext line was read exactly once, before the switch.
        assert server.lines[:2] == [b"hello", b"STARTTLS"]
        assert server.lines[2:] == [b"secret", big[:-1]]
        # Nothing reached connection_made again; the old transport is the lower one.
        assert client.events == ["made", "data"]
        new.close()
        assert await client.wait_lost() is None
        assert await asyncio.wait_for(server.lost, WAIT) is None
        await close_server(srv)

    tls.run(main())


def test_start_tls_with_client_hello_already_buffered(tls: Route, certs: Certs) -> None:
    """The ClientHello waits in the kernel before the server's start_tls: none of it is lost."""

    async def main() -> None:
        factory, made = start_tls_servers(tls, certs.server, answer=False)
        srv, transport, client = await plain_client(tls, factory)
        transport.write(b"STARTTLS\n")
        server = await first(made)
        await asyncio.wait_for(server.asked, WAIT)  # its transport is paused now
        upgrade = asyncio.ensure_future(
            tls.start_tls(transport, client, certs.client, server_hostname="localhost")
        )
        try:
            await asyncio.sleep(0.1)  # the ClientHello is in the server's socket buffer
            assert not upgrade.done()
        except BaseException:
            upgrade.cancel()
            await asyncio.gather(upgrade, return_exceptions=True)
            raise
        server.go.set_result(None)
        new = await asyncio.wait_for(upgrade, WAIT)
        await asyncio.wait_for(server.upgraded, WAIT)
        new.write(b"ping\n")
        assert await client.wait_for_bytes(5) == b"PING\n"
        new.close()
        await client.wait_lost()
        await asyncio.wait_for(server.lost, WAIT)
        await close_server(srv)

    tls.run(main())


def test_start_tls_argument_errors(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv, transport, client = await plain_client(tls, Echo)
        with pytest.raises(TypeError, match="sslcontext is expected to be an instance of"):
            await tls.start_tls(transport, client, "not a context")
        with pytest.raises(TypeError, match="is not supported by start_tls"):
            await tls.start_tls(asyncio.Transport(), client, certs.client)
        # Still a working plain connection.
        transport.write(b"plain")
        assert await client.wait_for_bytes(5) == b"plain"
        transport.close()
        await client.wait_lost()
        await close_server(srv)

    tls.run(main())


def test_start_tls_handshake_failure(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv, transport, client, made = await starttls_answered(tls, certs.untrusted_server)
        with pytest.raises(ssl.SSLCertVerificationError):
            await tls.start_tls(transport, client, certs.client, server_hostname="localhost")
        assert transport.is_closing()
        # asyncio: the protocol that asked for TLS is told the connection is gone.
        exc = await client.wait_lost()
        assert isinstance(exc, ssl.SSLCertVerificationError)
        server = await first(made)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.wait_for(server.upgraded, WAIT)
        await asyncio.wait_for(server.lost, WAIT)
        await close_server(srv)

    tls.run(main())


def test_start_tls_handshake_timeout(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv, transport, client = await plain_client(tls, asyncio.Protocol)
        with pytest.raises(ConnectionAbortedError, match="SSL handshake is taking longer than"):
            await tls.start_tls(
                transport,
                client,
                certs.client,
                server_hostname="localhost",
                ssl_handshake_timeout=0.2,
            )
        assert transport.is_closing()
        # asyncio: the protocol that asked for TLS gets no connection_lost when
        # the handshake times out (it does when the handshake fails).
        await asyncio.sleep(0.05)
        assert client.lost_calls == 0
        await close_server(srv)

    tls.run(main())


def test_tls_over_tls(tls: Route, certs: Certs) -> None:
    """start_tls on a TLS transport: the inner layer is a BufferedProtocol of the outer."""
    inner_server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certs.ca.issue_cert("localhost").configure_cert(inner_server)

    async def main() -> None:
        factory, made = start_tls_servers(tls, inner_server)
        srv = await tls.serve(factory, ssl=certs.server)
        outer, client = await connect_tls(tls, certs, port_of(srv))
        outer.write(b"over tls\nSTARTTLS\n")
        assert await client.wait_for_bytes(12) == b"OVER TLS\nOK\n"
        inner = await tls.start_tls(outer, client, certs.client, server_hostname="localhost")
        assert inner.get_extra_info("ssl_object") is not outer.get_extra_info("ssl_object")
        data = payload(300_000).replace(b"\n", b"-") + b"\n"
        inner.write(data)
        expected = b"OVER TLS\nOK\n" + data.upper()
        assert await client.wait_for_bytes(len(expected)) == expected
        inner.close()
        assert await client.wait_lost() is None
        server = await first(made)
        await asyncio.wait_for(server.lost, WAIT)
        await close_server(srv)

    tls.run(main())


def test_stream_writer_start_tls(loop: asyncio.AbstractEventLoop, certs: Certs) -> None:
    """StreamWriter.start_tls (3.11+) on both ends: the server upgrades from its handler."""
    tls = Route("api", loop)
    handled: list[asyncio.Task[Any]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handled.append(task)
        try:
            assert await reader.readline() == b"STARTTLS\n"
            writer.write(b"OK\n")
            await writer.drain()
            await writer.start_tls(certs.server)
            assert writer.get_extra_info("ssl_object") is not None
            while line := await reader.readline():
                writer.write(line.upper())
                await writer.drain()
        finally:
            writer.close()

    async def main() -> None:
        srv = tls.track(await asyncio.start_server(handler, "127.0.0.1", 0))
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(srv))
        tls.track(writer.transport)
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"OK\n"
        await writer.start_tls(certs.client, server_hostname="localhost")
        tls.track(writer.transport)
        assert writer.get_extra_info("peercert") is not None
        writer.write(b"over tls\n")
        assert await reader.readline() == b"OVER TLS\n"
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), WAIT)
        await asyncio.wait_for(asyncio.gather(*handled), WAIT)
        await close_server(srv)

    tls.run(main())


def holders(obj: object) -> str:
    """What refers to obj, two levels up, by type: the failure's diagnosis when a
    transport that should be garbage is kept alive."""
    import gc

    out = []
    for near in gc.get_referrers(obj):
        up = sorted({type(r).__name__ for r in gc.get_referrers(near)})
        out.append(f"{type(near).__name__} (itself held by {', '.join(up) or 'nothing'})")
    return "; ".join(out) or "nothing the collector sees"


@pytest.mark.divergence("failed-tls-no-refcycles")
def test_failed_start_tls_leaves_no_cycle(loop: asyncio.AbstractEventLoop, certs: Certs) -> None:
    """After start_tls() fails verification, nothing but the caller keeps the transport:
    with the garbage collector off, it is freed as soon as the caller lets go (gh-159049)."""
    import gc
    import weakref

    factory, made = start_tls_servers(Route("api", loop), certs.untrusted_server)

    async def main() -> weakref.ref[asyncio.BaseTransport]:
        srv = await loop.create_server(factory, "127.0.0.1", 0)

        # A protocol that keeps no exception (a Recorder would: a cycle of
        # the test's own through connection_lost's argument).
        class Plain(asyncio.Protocol):
            def __init__(self) -> None:
                self.answer: asyncio.Future[bytes] = loop.create_future()

            def data_received(self, data: bytes) -> None:
                if not self.answer.done():
                    self.answer.set_result(data)

        transport, client = await loop.create_connection(Plain, "127.0.0.1", port_of(srv))
        ref = weakref.ref(transport)
        transport.write(b"STARTTLS\n")
        assert await asyncio.wait_for(client.answer, WAIT) == b"OK\n"
        try:
            await loop.start_tls(transport, client, certs.client, server_hostname="localhost")
        except ssl.SSLCertVerificationError:
            pass
        else:
            raise AssertionError("the handshake succeeded")
        del transport, client
        server = await first(made)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.wait_for(server.upgraded, WAIT)
        await asyncio.wait_for(server.lost, WAIT)
        await close_server(srv)
        return ref

    gc.collect()
    gc.disable()
    try:
        ref = loop.run_until_complete(main())
        if sys.implementation.name == "pypy":
            # No reference counting: the transport must go in collections
            # (explicit ones run with gc disabled). An object with a
            # finalizer (the transport's __del__) is freed at the collection
            # after the one that finalizes it, and a chain of finalizers takes
            # one collection a link. Under a full parallel run the stdlib
            # loop's took a fourth once (CI), and more than ten another time,
            # so the bound is generous: it tells "freed in collections" from
            # "kept alive", which no number of collections frees.
            for _ in range(100):
                if ref() is None:
                    break
                gc.collect()
        kept = ref()
        assert kept is None, f"kept alive by {holders(kept)}"
        del kept
    finally:
        gc.enable()


async def streams_start_tls_after_buffering(
    loop: asyncio.AbstractEventLoop, certs: Certs, timeout: float
) -> bytes:
    """A streams server reads STARTTLS, lets the client's first TLS record reach its
    StreamReader, then upgrades; the client sends STARTTLS and its ClientHello at once.
    What the server reads over TLS (TimeoutError if the handshake never completes)."""
    got: asyncio.Future[bytes] = loop.create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            assert await reader.readline() == b"STARTTLS\n"
            await asyncio.sleep(0.1)  # the ClientHello arrives in the reader's buffer
            await writer.start_tls(certs.server)
            got.set_result(await reader.readline())
        except Exception as exc:
            if not got.done():
                got.set_exception(exc)
        finally:
            writer.close()

    srv = await asyncio.start_server(handler, "127.0.0.1", 0)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port_of(srv))
    upgrade = None
    try:
        writer.write(b"STARTTLS\n")
        upgrade = asyncio.ensure_future(writer.start_tls(certs.client, server_hostname="localhost"))
        await asyncio.wait_for(asyncio.shield(upgrade), timeout)
        writer.write(b"over tls\n")
        return await asyncio.wait_for(got, timeout)
    finally:
        if upgrade is not None and not upgrade.done():
            upgrade.cancel()
        writer.close()
        await asyncio.gather(upgrade or asyncio.sleep(0), return_exceptions=True)
        await asyncio.gather(got, return_exceptions=True)
        if not got.done():
            got.cancel()
        srv.close()
        srv.close_clients() if hasattr(srv, "close_clients") else None
        await asyncio.wait_for(srv.wait_closed(), WAIT)


@pytest.mark.divergence("start-tls-buffered-data")
def test_stream_start_tls_takes_buffered_data(
    loop: asyncio.AbstractEventLoop, certs: Certs
) -> None:
    assert loop.run_until_complete(streams_start_tls_after_buffering(loop, certs, WAIT)) == (
        b"over tls\n"
    )
