"""TLS: bad input, timeouts, and peers that end connections in unusual ways.

Through both routes of the `tls` fixture (see ``tls_support``). What
is checked each time: the caller gets the exception asyncio gives, the
server keeps serving, nothing is reported to the exception handler (an
OSError, and so any ssl.SSLError, only reaches the waiter or
``connection_lost``), and no fd, task, timer or thread is left behind.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from typing import Any

import pytest

from net_support import captured_asyncio_logs
from tls_support import (
    WAIT,
    Certs,
    Echo,
    Recorder,
    Route,
    ThreadPeer,
    bio_server_handshake,
    close_server,
    connect_tls,
    first,
    payload,
    port_of,
    recording_factory,
    ssl_error_for_bad_record,
    tls_server_socket,
)


async def still_serves(tls: Route, certs: Certs, srv: asyncio.AbstractServer) -> None:
    """A good client still gets through after the bad one."""
    transport, client = await connect_tls(tls, certs, port_of(srv))
    assert transport.get_extra_info("peercert") is not None
    transport.close()
    assert await client.wait_lost() is None


def raw_exchange(port: int, data: bytes, eof: bool = False) -> bytes:
    """Connect, send *data* (then EOF), read until the server closes; what came back."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(data)
        if eof:
            sock.shutdown(socket.SHUT_WR)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return received


# ----------------------------------------------------------------------
# Certificates and names


def test_untrusted_certificate(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=certs.untrusted_server)
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await connect_tls(tls, certs, port_of(srv))
        assert info.value.reason == "CERTIFICATE_VERIFY_FAILED"
        assert "unable to get local issuer certificate" in str(info.value)
        await asyncio.sleep(0.05)
        assert made == [] or made[0].events == []  # the server application saw nothing
        await close_server(srv)

    tls.run(main())


def test_wrong_hostname(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.other_name_server)
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await connect_tls(tls, certs, port_of(srv))
        assert "Hostname mismatch" in str(info.value)
        await close_server(srv)

    tls.run(main())


def _ssl_refusal_without_hostname(context: ssl.SSLContext) -> Exception | None:
    """What this Python's ssl raises for a client SSLObject without a server_hostname."""
    try:
        context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname=None)
    except Exception as exc:
        return exc
    return None


def test_no_hostname_check_with_empty_server_hostname(tls: Route, certs: Certs) -> None:
    """server_hostname='' turns hostname matching off (the context must allow it)."""
    loop = tls.loop
    context = ssl.create_default_context()
    certs.ca.configure_trust(context)
    context.check_hostname = False

    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.other_name_server)
        transport, client = await connect_tls(
            tls, certs, port_of(srv), ssl=context, server_hostname=""
        )
        assert transport.get_extra_info("ssl_object").server_hostname is None
        transport.write(b"ok")
        assert await client.wait_for_bytes(2) == b"ok"
        transport.close()
        await client.wait_lost()
        # With check_hostname on: older ssl modules make an SSLObject without a
        # server_hostname that checks the chain only (asyncio's behaviour,
        # surprising as it is); newer ones refuse to make it, and that error
        # reaches create_connection's caller. Whichever this Python's does.
        refusal = _ssl_refusal_without_hostname(certs.client)
        if refusal is None:
            transport, client = await connect_tls(tls, certs, port_of(srv), server_hostname="")
            transport.close()
            await client.wait_lost()
        else:
            # On a socket of the test's own: asyncio 3.13 leaves it open when
            # the transport cannot be made (divergence
            # socket-closed-without-transport), and the server would wait
            # for that connection.
            sock = socket.create_connection(("127.0.0.1", port_of(srv)))
            try:
                with pytest.raises(type(refusal)) as caught:
                    await tls.connect(
                        lambda: Recorder(loop), ssl=certs.client, server_hostname="", sock=sock
                    )
                assert str(caught.value) == str(refusal)
            finally:
                sock.close()
        await close_server(srv)

    tls.run(main())


def test_debug_log_for_failed_handshake(
    tls: Route, certs: Certs, loop_errors: list[dict[str, Any]]
) -> None:
    loop = tls.loop
    loop.set_debug(True)
    loop.slow_callback_duration = 10.0

    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.untrusted_server)
        with captured_asyncio_logs() as records, pytest.raises(ssl.SSLCertVerificationError):
            await connect_tls(tls, certs, port_of(srv))
        debug = [r for r in records if r.levelname == "DEBUG"]
        assert any(
            r.getMessage().endswith("SSL handshake failed on verifying the certificate")
            for r in debug
        )
        await close_server(srv)

    tls.run(main())
    # In debug mode a loop's accept path reports its failed connections.
    assert {ctx["message"] for ctx in loop_errors} <= {
        "Error on transport creation for incoming connection"
    }


# ----------------------------------------------------------------------
# Wrong protocols and garbage


def test_plaintext_client_to_tls_server(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.server)
        received = await tls.loop.run_in_executor(
            None, raw_exchange, port_of(srv), b"GET / HTTP/1.0\r\n\r\n"
        )
        assert b"HTTP" not in received
        await still_serves(tls, certs, srv)
        await close_server(srv)

    tls.run(main())


def test_garbage_to_tls_server(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.server)
        for junk in (b"\x16\x03\x01\x00\x05hello", bytes(range(256)) * 4, b"\x00"):
            # Some of it is a valid start that waits for more: EOF ends it.
            await tls.loop.run_in_executor(None, raw_exchange, port_of(srv), junk, True)
        await still_serves(tls, certs, srv)
        await close_server(srv)

    tls.run(main())


def test_tls_client_to_plaintext_echo_server(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        srv = await tls.serve_plain(Echo)
        with pytest.raises(ssl.SSLError):
            await connect_tls(tls, certs, port_of(srv))
        await close_server(srv)

    tls.run(main())


class SendThenClose(asyncio.Protocol):
    def __init__(self, data: bytes) -> None:
        self.data = data

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.data)  # type: ignore[attr-defined]
        transport.close()


@pytest.mark.parametrize(
    "reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"\x15\x03\x03\x00\x02\x02\x28", b""]
)
def test_tls_client_to_server_that_answers_and_closes(
    tls: Route, certs: Certs, reply: bytes
) -> None:
    """Garbage, a fatal alert, or nothing at all, then the server closes."""

    async def main() -> None:
        srv = await tls.serve_plain(lambda: SendThenClose(reply))
        with pytest.raises((ssl.SSLError, ConnectionError)) as info:
            await connect_tls(tls, certs, port_of(srv))
        if not reply:
            assert isinstance(info.value, ConnectionResetError)
        await close_server(srv)

    tls.run(main())


def test_peer_disconnects_mid_handshake(tls: Route, certs: Certs) -> None:
    """Server side: a client that sends half a ClientHello, then closes."""
    loop = tls.loop

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=certs.server)
        incoming = ssl.MemoryBIO()
        outgoing = ssl.MemoryBIO()
        sslobj = certs.client.wrap_bio(incoming, outgoing, server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            sslobj.do_handshake()
        hello = outgoing.read()
        for cut in (len(hello) // 2, len(hello)):
            with socket.create_connection(("127.0.0.1", port_of(srv))) as sock:
                sock.sendall(hello[:cut])
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        assert not made or all(not p.events for p in made)
        await still_serves(tls, certs, srv)
        await close_server(srv)

    tls.run(main())


# ----------------------------------------------------------------------
# Timeouts


def test_handshake_timeout_client(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        silent = await tls.serve_plain(asyncio.Protocol)
        started = time.monotonic()
        with pytest.raises(ConnectionAbortedError) as info:
            await connect_tls(tls, certs, port_of(silent), ssl_handshake_timeout=0.3)
        elapsed = time.monotonic() - started
        assert str(info.value) == (
            "SSL handshake is taking longer than 0.3 seconds: aborting the connection"
        )
        assert 0.25 <= elapsed < 3
        await close_server(silent)

    tls.run(main())


def test_handshake_timeout_server(tls: Route, certs: Certs) -> None:
    """A client that connects and says nothing is dropped after the timeout."""
    loop = tls.loop

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=certs.server, ssl_handshake_timeout=0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(srv))
        tls.track(writer.transport)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), WAIT) == b""
        assert 0.15 <= time.monotonic() - started < 3
        writer.close()
        await writer.wait_closed()
        assert not made or not made[0].events
        await still_serves(tls, certs, srv)
        await close_server(srv)

    tls.run(main())


@pytest.mark.parametrize("value", [0, -1.5])
def test_timeouts_must_be_positive(loop: asyncio.AbstractEventLoop, value: float) -> None:
    from tideloop._transports.tls import TLSProtocol

    context = ssl.create_default_context()
    with pytest.raises(
        ValueError, match=f"ssl_handshake_timeout should be a positive number, got {value}"
    ):
        TLSProtocol(loop, asyncio.Protocol(), context, None, ssl_handshake_timeout=value)
    with pytest.raises(
        ValueError, match=f"ssl_shutdown_timeout should be a positive number, got {value}"
    ):
        TLSProtocol(loop, asyncio.Protocol(), context, None, ssl_shutdown_timeout=value)


def test_cancelled_connect_during_handshake(tls: Route, certs: Certs) -> None:
    async def main() -> None:
        silent = await tls.serve_plain(asyncio.Protocol)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                connect_tls(tls, certs, port_of(silent)),
                0.2,
            )
        await close_server(silent)

    tls.run(main())


def handshake_then_wait(context: ssl.SSLContext) -> Any:
    """A raw TLS server that completes the handshake, then does nothing until released."""

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, context)
        try:
            peer.signal("handshake")
            peer.release.wait(WAIT)
        finally:
            tls_sock.close()

    return target


def test_shutdown_timeout(tls: Route, certs: Certs) -> None:
    """Our close_notify is never answered: the connection ends after ssl_shutdown_timeout."""
    loop = tls.loop

    async def main() -> None:
        with ThreadPeer(loop, handshake_then_wait(certs.server)) as peer:
            peer.flag("handshake")
            transport, client = await connect_tls(tls, certs, peer.port, ssl_shutdown_timeout=0.3)
            await peer.wait("handshake")
            started = time.monotonic()
            transport.close()
            exc = await client.wait_lost()
            assert 0.25 <= time.monotonic() - started < 3
            assert isinstance(exc, TimeoutError)
            assert str(exc) == "SSL shutdown timed out"
            assert client.events == ["made", "lost"]

    tls.run(main())


def eof_without_reading(context: ssl.SSLContext) -> Any:
    """A peer that completes the handshake, then (once told) sends EOF and never reads."""

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, context)
        try:
            peer.signal("handshake")
            peer.release.wait(WAIT)
            tls_sock.shutdown(socket.SHUT_WR)  # EOF (no close_notify), and no reading
            peer.signal("eof")
            peer.done.wait(WAIT)  # type: ignore[attr-defined]
        finally:
            tls_sock.close()

    return target


async def shutdown_against_a_peer_that_stops_reading(
    tls: Route, certs: Certs, close_first: bool
) -> BaseException | None:
    """Fill the connection, (close,) let the peer send EOF while it never reads: what
    connection_lost() gets, or TimeoutError from here if it never comes."""
    loop = tls.loop
    peer = ThreadPeer(loop, eof_without_reading(certs.server))
    peer.done = threading.Event()  # type: ignore[attr-defined]
    try:
        peer.flag("handshake")
        peer.flag("eof")
        transport, client = await connect_tls(tls, certs, peer.port, ssl_shutdown_timeout=0.1)
        await peer.wait("handshake")
        for _ in range(64):  # until the transport can pass nothing more on
            if client.paused:
                break
            transport.write(bytes(256 * 1024))
            await asyncio.sleep(0)
        assert client.paused, "the transport never paused writing"
        if close_first:
            transport.close()
        peer.release.set()
        await peer.wait("eof")
        try:
            return await asyncio.wait_for(client.wait_lost(), 3.0)
        finally:
            transport.abort()
            await asyncio.sleep(0)
    finally:
        peer.done.set()  # type: ignore[attr-defined]
        peer.close()


@pytest.mark.divergence("tls-shutdown-timeout-until-closed")
@pytest.mark.parametrize("close_first", [True, False], ids=["close-then-eof", "eof"])
def test_shutdown_timeout_covers_a_peer_that_stops_reading(
    tls: Route, certs: Certs, close_first: bool
) -> None:
    """ssl_shutdown_timeout also ends a shutdown whose last flush a peer never reads,
    whether we closed first or the peer's EOF began it."""
    exc = tls.run(shutdown_against_a_peer_that_stops_reading(tls, certs, close_first))
    assert isinstance(exc, TimeoutError)


# ----------------------------------------------------------------------
# Peers that end the connection their own way


def send_then_close_without_close_notify(context: ssl.SSLContext, data: bytes) -> Any:
    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, context)
        tls_sock.sendall(data)
        tls_sock.close()  # close() sends no close_notify: only unwrap() does
        peer.signal("closed")

    return target


def test_peer_closes_without_close_notify(tls: Route, certs: Certs) -> None:
    """Common on the web: the connection ends promptly, with EOF and connection_lost."""
    loop = tls.loop
    data = payload(100_000)

    async def main() -> None:
        with ThreadPeer(loop, send_then_close_without_close_notify(certs.server, data)) as peer:
            peer.flag("closed")
            started = time.monotonic()
            transport, client = await connect_tls(tls, certs, peer.port)
            assert await client.wait_lost() is None
            assert time.monotonic() - started < 3  # not the 30 s shutdown timeout
            assert client.data == data
            assert client.events == ["made", "data", "eof", "lost"]
            assert transport.is_closing()

    tls.run(main())


def test_data_while_paused_then_peer_closes(tls: Route, certs: Certs) -> None:
    """What arrived while reading was paused is delivered when it resumes, then EOF."""
    loop = tls.loop
    data = payload(200_000)

    class PausedAtStart(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            # Not at once: asyncio's SSL transport would then hold back the
            # client's Finished (see test_pause_in_connection_made_...).
            loop.call_soon(transport.pause_reading)  # type: ignore[attr-defined]

    async def main() -> None:
        with ThreadPeer(loop, send_then_close_without_close_notify(certs.server, data)) as peer:
            peer.flag("closed")
            transport, client = await connect_tls(
                tls, certs, peer.port, lambda: PausedAtStart(loop)
            )
            await peer.wait("closed")
            await asyncio.sleep(0.2)  # the EOF has arrived meanwhile
            assert client.data == b""
            assert client.events == ["made"]
            assert not client.lost.done()
            transport.resume_reading()
            assert await client.wait_lost() is None
            assert client.data == data
            assert client.events == ["made", "data", "eof", "lost"]

    tls.run(main())


def test_data_while_paused_then_close_notify(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    data = payload(50_000)

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, certs.server)
        tls_sock.sendall(data)
        plain = tls_sock.unwrap()  # sends close_notify, waits for ours
        peer.signal("unwrapped")
        plain.close()

    class PausedAtStart(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            loop.call_soon(transport.pause_reading)  # type: ignore[attr-defined]

    async def main() -> None:
        with ThreadPeer(loop, target) as peer:
            peer.flag("unwrapped")
            transport, client = await connect_tls(
                tls, certs, peer.port, lambda: PausedAtStart(loop)
            )
            await asyncio.sleep(0.2)
            assert client.events == ["made"]
            transport.resume_reading()
            assert await client.wait_lost() is None
            assert client.data == data
            assert client.events == ["made", "data", "eof", "lost"]
            await peer.wait("unwrapped")

    tls.run(main())


def test_peer_sends_close_notify_but_keeps_tcp_open(tls: Route, certs: Certs) -> None:
    """We answer close_notify and close at once; no waiting for the peer's FIN."""
    loop = tls.loop

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, certs.server)
        tls_sock.sendall(b"goodbye")
        plain = tls_sock.unwrap()
        peer.signal("unwrapped")
        peer.release.wait(WAIT)  # keep TCP open until the test ends
        plain.close()

    async def main() -> None:
        with ThreadPeer(loop, target) as peer:
            peer.flag("unwrapped")
            started = time.monotonic()
            _transport, client = await connect_tls(tls, certs, peer.port)
            assert await client.wait_lost() is None
            assert time.monotonic() - started < 3
            assert client.data == b"goodbye"
            assert client.events == ["made", "data", "eof", "lost"]
            await peer.wait("unwrapped")  # it got our close_notify

    tls.run(main())


def memory_bio_server_that_ends_first(context: ssl.SSLContext, how: str) -> Any:
    """A TLS server (over memory BIOs) that ends its side while we still send.

    After ping/pong it waits for ``release``, then sends close_notify
    without waiting for ours (``how="close_notify"``) or shuts down TCP
    writing (``how="fin"``), and reads until our close_notify or TCP
    EOF. It records what it got in ``peer.got``:
    the request, how many bytes followed, whether close_notify ended them.
    """

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        sslobj, incoming, outgoing = bio_server_handshake(conn, context)

        def pump() -> bool:
            if outgoing.pending:
                conn.sendall(outgoing.read())
            chunk = conn.recv(65536)
            incoming.write(chunk)
            return bool(chunk)

        if outgoing.pending:
            conn.sendall(outgoing.read())
        request = b""
        while len(request) < 4:
            try:
                request += sslobj.read(4 - len(request))
            except ssl.SSLWantReadError:
                pump()
        sslobj.write(b"pong")
        conn.sendall(outgoing.read())
        peer.release.wait(WAIT)
        if how == "close_notify":
            with pytest.raises(ssl.SSLWantReadError):
                sslobj.unwrap()  # sent; ours is still to come
            conn.sendall(outgoing.read())
        else:
            conn.shutdown(socket.SHUT_WR)
        total = 0
        closed = False
        while True:
            try:
                data = sslobj.read(65536)
            except ssl.SSLWantReadError:
                if not pump():
                    break  # TCP EOF
                continue
            except ssl.SSLZeroReturnError:
                data = b""
            if not data:
                closed = True  # our close_notify
                break
            total += len(data)
        peer.got = (request, total, closed)  # type: ignore[attr-defined]
        peer.signal("done")

    return target


@pytest.mark.parametrize("how", ["close_notify", "fin"])
def test_peer_ends_first_while_we_still_send(tls: Route, certs: Certs, how: str) -> None:
    """Everything written before the peer's close_notify (or TCP FIN) still reaches it.

    The client has megabytes queued (the lower transport paused the TLS
    layer, so most of it waits as ciphertext) when the peer ends its side;
    the shutdown that follows sends all of it first.
    """
    loop = tls.loop
    chunk, count = 128 * 1024, 32

    async def main() -> None:
        target = memory_bio_server_that_ends_first(certs.server, how)
        with ThreadPeer(loop, target) as peer:
            peer.flag("done")
            transport, client = await connect_tls(tls, certs, peer.port)
            transport.write(b"ping")
            assert await client.wait_for_bytes(4) == b"pong"
            for _ in range(count):
                transport.write(b"x" * chunk)
            assert transport.get_write_buffer_size() > 0
            peer.release.set()
            assert await client.wait_lost() is None
            await peer.wait("done")
            assert peer.got == (b"ping", chunk * count, how == "close_notify")  # type: ignore[attr-defined]
            assert client.events[-2:] == ["eof", "lost"]

    tls.run(main())


def test_peer_resets_connection(tls: Route, certs: Certs) -> None:
    loop = tls.loop

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        tls_sock = tls_server_socket(conn, certs.server)
        tls_sock.sendall(b"x")
        # SO_LINGER with a zero timeout: close() sends RST.
        tls_sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        tls_sock.close()

    async def main() -> None:
        with ThreadPeer(loop, target) as peer:
            _transport, client = await connect_tls(tls, certs, peer.port)
            exc = await client.wait_lost()
            assert exc is None or isinstance(exc, ConnectionResetError)
            assert client.lost_calls == 1

    tls.run(main())


def test_server_survives_clients_that_vanish(tls: Route, certs: Certs) -> None:
    """Clients that close right after (or during) the handshake, many times over."""

    async def main() -> None:
        srv = await tls.serve(Echo, ssl=certs.server)
        for i in range(10):
            transport, client = await connect_tls(tls, certs, port_of(srv))
            if i % 2:
                transport.abort()
            else:
                transport.write(b"x" * 1000)
                transport.close()
            await client.wait_lost()
        await still_serves(tls, certs, srv)
        await close_server(srv)

    tls.run(main())


def test_client_certificate_required_but_missing(tls: Route, certs: Certs) -> None:
    loop = tls.loop
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certs.ca.issue_cert("localhost").configure_cert(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED
    certs.ca.configure_trust(server_context)

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=server_context)
        # TLS 1.3: the client's handshake completes before the server checks it.
        try:
            transport, client = await connect_tls(tls, certs, port_of(srv))
        except (ssl.SSLError, ConnectionError):
            pass
        else:
            transport.write(b"anyone?")
            exc = await client.wait_lost()
            assert exc is None or isinstance(exc, (ssl.SSLError, ConnectionError))
            assert client.data == b""
        await asyncio.sleep(0.05)
        assert not made or not made[0].events
        await close_server(srv)

    tls.run(main())


def test_write_during_peer_close(tls: Route, certs: Certs) -> None:
    """Writing while the peer goes away: no exception escapes, one connection_lost."""
    loop = tls.loop

    async def main() -> None:
        factory, made = recording_factory(loop)
        srv = await tls.serve(factory, ssl=certs.server)
        transport, client = await connect_tls(tls, certs, port_of(srv))
        server = await first(made)
        server.transport.abort()
        for _ in range(200):
            transport.write(b"z" * 10000)
            await asyncio.sleep(0)
            if client.lost.done():
                break
        await client.wait_lost()
        assert client.lost_calls == 1
        await close_server(srv)

    tls.run(main())


@pytest.mark.divergence("tls-paused-client-sends-finished")
def test_pause_in_connection_made_does_not_stall_the_handshake(tls: Route, certs: Certs) -> None:
    """A client paused in connection_made still sends its Finished.

    asyncio's SSL transport (3.11-3.13) flushes its last handshake flight
    only when it reads, so a client that pauses reading in connection_made
    leaves a TLS 1.3 server waiting for the handshake until the client
    writes or resumes. tideloop always flushes.
    """
    loop = tls.loop

    class PausedAtStart(Recorder):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.pause_reading()  # type: ignore[attr-defined]

    async def main() -> None:
        with ThreadPeer(loop, send_then_close_without_close_notify(certs.server, b"hi")) as peer:
            peer.flag("closed")
            transport, client = await connect_tls(
                tls, certs, peer.port, lambda: PausedAtStart(loop)
            )
            await peer.wait("closed")  # its handshake completed
            transport.resume_reading()
            assert await client.wait_lost() is None
            assert client.data == b"hi"

    tls.run(main())


#: An application-data record whose integrity check fails.
BAD_RECORD = b"\x17\x03\x03\x00\x20" + bytes(32)


@pytest.mark.divergence("tls-data-before-error")
def test_data_before_a_bad_record_is_delivered(tls: Route, certs: Certs) -> None:
    """Records that arrived before a corrupt one reach data_received, then the SSLError."""
    loop = tls.loop

    def target(conn: socket.socket, peer: ThreadPeer) -> None:
        sslobj, _, outgoing = bio_server_handshake(conn, certs.server)
        sslobj.write(b"hello")
        sslobj.write(b" world")
        # In one segment: two good records, then one that fails its integrity check.
        conn.sendall(outgoing.read() + BAD_RECORD)
        peer.release.wait(WAIT)

    async def main() -> None:
        with ThreadPeer(loop, target) as peer:
            _transport, client = await connect_tls(tls, certs, peer.port)
            exc = await client.wait_lost()
            assert isinstance(exc, ssl.SSLError)
            # OpenSSL's reason for it on this Python (it changed in 3.6).
            assert exc.reason == ssl_error_for_bad_record(certs, BAD_RECORD).reason
            assert client.data == b"hello world"  # asyncio: b""
            assert client.events == ["made", "data", "lost"]

    tls.run(main())
