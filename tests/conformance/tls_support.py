"""Helpers shared by the test_tls_* modules (this module has no tests).

Every TLS test runs through two *routes* (the `tls` fixture, in this folder's
``conftest.py`` with `certs`):

- ``api``: asyncio's public TLS API of the loop under test
  (``create_connection(ssl=)``, ``create_server(ssl=)``, ``start_tls``,
  ``open_connection(ssl=)``, ...); on tideloop this is tideloop's TLS
  module, wired into the loop.
- ``module``: the same operations built from tideloop's TLS module
  (``tideloop._transports.tls``) over the loop's plain stream transports,
  through public loop APIs only. These run, and must pass, on every loop
  today; once the loop wires ``ssl=`` to the module, the ``api`` route runs
  the same code.

Certificates come from `certs` (the ``openssl`` tool) at test time. Raw peers (a blocking
``ssl.SSLSocket`` in a thread) stand in for peers that asyncio would never
be, e.g. one that closes TCP without sending close_notify.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tideloop._transports import tls as tlsmod

import certs
import net_support

#: Bound on any single wait in these tests: a hang fails fast instead of
#: running into pytest-timeout.
WAIT = 10.0

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


# ----------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class Certs:
    """Contexts made from throwaway CAs."""

    ca: certs.CA
    server: ssl.SSLContext  # localhost / 127.0.0.1 / ::1, signed by `ca`
    client: ssl.SSLContext  # trusts `ca`, checks host names
    untrusted_server: ssl.SSLContext  # localhost, signed by another CA
    other_name_server: ssl.SSLContext  # signed by `ca`, but for example.org only
    client_cert: certs.LeafCert  # a client certificate signed by `ca`


def make_certs() -> Certs:
    ca = certs.CA()
    other = certs.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1", "::1").configure_cert(server)
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client)
    untrusted = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    other.issue_cert("localhost", "127.0.0.1").configure_cert(untrusted)
    other_name = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("example.org").configure_cert(other_name)
    client_cert = ca.issue_cert("client@example.org")
    return Certs(ca, server, client, untrusted, other_name, client_cert)


# ----------------------------------------------------------------------
# Routes


class Route:
    """asyncio's TLS entry points, through the loop (``api``) or the module (``module``)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.loop = loop
        # Everything made through this route, closed by `run` even when the
        # test fails (an expected failure must not leak into the next test).
        self._transports: list[asyncio.BaseTransport] = []
        self._servers: list[asyncio.AbstractServer] = []

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a test's main coroutine (bounded in time), then clean up after it."""
        loop = self.loop
        try:
            return loop.run_until_complete(asyncio.wait_for(coro, 3 * WAIT))
        finally:
            if not loop.is_closed():
                loop.run_until_complete(self._cleanup())

    async def _cleanup(self) -> None:
        for transport in self._transports:
            if not transport.is_closing():
                with contextlib.suppress(Exception):
                    transport.abort()  # type: ignore[attr-defined]
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), WAIT)
        for _ in range(5):  # let connection_lost callbacks run
            await asyncio.sleep(0)
        self._transports.clear()
        self._servers.clear()

    def track(self, obj: Any) -> Any:
        """Record a transport or server for cleanup; return it."""
        if isinstance(obj, asyncio.BaseTransport):
            self._transports.append(obj)
        elif isinstance(obj, asyncio.AbstractServer):
            self._servers.append(obj)
        return obj

    # -- clients

    async def connect(
        self,
        factory: ProtocolFactory,
        host: str | None = None,
        port: int | None = None,
        *,
        ssl: Any,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        sock: socket.socket | None = None,
        unix_path: str | None = None,
    ) -> tuple[Any, Any]:
        loop = self.loop
        kwargs = _timeouts(ssl_handshake_timeout, ssl_shutdown_timeout)
        if self.name == "api":
            if unix_path is not None or (sock is not None and sock.family == socket.AF_UNIX):
                pair = await loop.create_unix_connection(
                    factory,
                    unix_path,
                    ssl=ssl,
                    sock=sock,
                    server_hostname=server_hostname,
                    **kwargs,
                )
            else:
                pair = await loop.create_connection(
                    factory,
                    host,
                    port,
                    ssl=ssl,
                    sock=sock,
                    server_hostname=server_hostname,
                    **kwargs,
                )
            self.track(pair[0])
            return pair
        if server_hostname is None:
            server_hostname = host
        context = None if isinstance(ssl, bool) else ssl
        waiter: asyncio.Future[None] = loop.create_future()
        made: list[tuple[tlsmod.TLSProtocol, Any]] = []

        def make() -> tlsmod.TLSProtocol:
            app = factory()
            proto = tlsmod.TLSProtocol(
                loop, app, context, waiter, server_hostname=server_hostname, **kwargs
            )
            made.append((proto, app))
            return proto

        if unix_path is not None or (sock is not None and sock.family == socket.AF_UNIX):
            await loop.create_unix_connection(make, unix_path, sock=sock)
        else:
            await loop.create_connection(make, host, port, sock=sock)
        proto, app = made[0]
        return await self._handshake(proto, app, waiter)

    async def start_tls(
        self,
        transport: asyncio.BaseTransport,
        protocol: asyncio.BaseProtocol,
        context: Any,
        **kwargs: Any,
    ) -> Any:
        if self.name == "api":
            new = await self.loop.start_tls(transport, protocol, context, **kwargs)  # type: ignore[arg-type]
        else:
            new = await tlsmod.start_tls(self.loop, transport, protocol, context, **kwargs)
        return self.track(new)

    async def open_connection(
        self, host: str, port: int, *, ssl: Any, server_hostname: str | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.name == "api":
            reader, writer = await asyncio.open_connection(
                host, port, ssl=ssl, server_hostname=server_hostname
            )
            self.track(writer.transport)
            return reader, writer
        loop = self.loop
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await self.connect(
            lambda: protocol, host, port, ssl=ssl, server_hostname=server_hostname
        )
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    # -- servers

    async def serve(
        self,
        factory: ProtocolFactory,
        host: str | None = "127.0.0.1",
        port: int | None = 0,
        *,
        ssl: ssl.SSLContext,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        unix_path: str | None = None,
    ) -> asyncio.Server:
        loop = self.loop
        kwargs = _timeouts(ssl_handshake_timeout, ssl_shutdown_timeout)
        if self.name == "api":
            if unix_path is not None:
                server = await loop.create_unix_server(factory, unix_path, ssl=ssl, **kwargs)
            else:
                server = await loop.create_server(factory, host, port, ssl=ssl, **kwargs)
            return self.track(server)  # type: ignore[no-any-return]
        context = ssl

        def make() -> tlsmod.TLSProtocol:
            return tlsmod.TLSProtocol(loop, factory(), context, None, server_side=True, **kwargs)

        if unix_path is not None:
            server = await loop.create_unix_server(make, unix_path)
        else:
            server = await loop.create_server(make, host, port)
        return self.track(server)  # type: ignore[no-any-return]

    async def serve_plain(self, factory: ProtocolFactory) -> asyncio.Server:
        """A plain TCP server (no TLS) on 127.0.0.1, tracked: a peer that is not TLS,
        or whose connections a test upgrades with start_tls."""
        return self.track(await self.loop.create_server(factory, "127.0.0.1", 0))  # type: ignore[no-any-return]

    async def start_server(
        self,
        handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
        *,
        ssl: ssl.SSLContext,
    ) -> asyncio.Server:
        if self.name == "api":
            return self.track(  # type: ignore[no-any-return]
                await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl)
            )
        loop = self.loop

        def factory() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), handler, loop=loop)

        return await self.serve(factory, ssl=ssl)

    async def connect_accepted_socket(
        self, factory: ProtocolFactory, sock: socket.socket, *, ssl: ssl.SSLContext
    ) -> tuple[Any, Any]:
        loop = self.loop
        if self.name == "api":
            pair = await loop.connect_accepted_socket(factory, sock, ssl=ssl)
            self.track(pair[0])
            return pair
        waiter: asyncio.Future[None] = loop.create_future()
        app = factory()
        proto = tlsmod.TLSProtocol(loop, app, ssl, waiter, server_side=True)
        await loop.connect_accepted_socket(lambda: proto, sock)
        return await self._handshake(proto, app, waiter)

    async def _handshake(
        self, proto: tlsmod.TLSProtocol, app: Any, waiter: asyncio.Future[None]
    ) -> tuple[Any, Any]:
        """The module route's end of a connect: (app transport, app) once *waiter* says
        the handshake completed; the transport is closed if it failed."""
        transport = self.track(proto._app_transport)
        assert transport is not None
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, app


ROUTES = ["api", "module"]


def _timeouts(handshake: float | None, shutdown: float | None) -> dict[str, Any]:
    """The ``ssl_*_timeout`` keywords a test gave (those left out keep the loop's defaults)."""
    kwargs: dict[str, Any] = {}
    if handshake is not None:
        kwargs["ssl_handshake_timeout"] = handshake
    if shutdown is not None:
        kwargs["ssl_shutdown_timeout"] = shutdown
    return kwargs


# ----------------------------------------------------------------------
# Protocols


class Recorder(net_support.Recorder):
    """`net_support.Recorder`, stricter: bytes only, nothing after EOF or loss, waits bounded."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, eof_result: Any = None) -> None:
        super().__init__(loop)
        self.eof_result = eof_result

    def data_received(self, data: bytes) -> None:
        assert type(data) is bytes
        assert "eof" not in self.events and "lost" not in self.events
        super().data_received(data)

    def eof_received(self) -> Any:
        super().eof_received()
        return self.eof_result

    async def wait_for_bytes(self, n: int) -> bytes:
        return await asyncio.wait_for(super().wait_for_bytes(n), WAIT)

    async def wait_lost(self) -> BaseException | None:
        return await asyncio.wait_for(asyncio.shield(self.lost), WAIT)


class Echo(asyncio.Protocol):
    """Writes back what it receives."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def recording_factory(
    loop: asyncio.AbstractEventLoop, **kwargs: Any
) -> tuple[Callable[[], Recorder], list[Recorder]]:
    made: list[Recorder] = []

    def factory() -> Recorder:
        made.append(Recorder(loop, **kwargs))
        return made[-1]

    return factory, made


async def first(made: list[Any]) -> Any:
    """The first protocol a server made (waiting until it exists and is connected)."""
    for _ in range(int(WAIT / 0.005)):
        if made:
            break
        await asyncio.sleep(0.005)
    assert made, "the server made no protocol"
    proto = made[0]
    if isinstance(proto, Recorder):
        await asyncio.wait_for(asyncio.shield(proto.made), WAIT)
    return proto


async def close_server(server: asyncio.AbstractServer) -> None:
    server.close()
    await asyncio.wait_for(server.wait_closed(), WAIT)


def port_of(server: asyncio.AbstractServer) -> int:
    return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]


def payload(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


async def connect_tls(
    tls: Route,
    certs: Certs,
    port: int,
    protocol: ProtocolFactory | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """A TLS client of 127.0.0.1:*port* through *tls*: (transport, protocol).

    The protocol is a `Recorder` unless *protocol* makes it; the context is
    ``certs.client`` (it trusts ``certs.ca``) and the name checked
    ``localhost``, unless ``ssl=`` or ``server_hostname=`` say otherwise;
    other keywords go to `Route.connect` as they are.
    """
    kwargs.setdefault("ssl", certs.client)
    kwargs.setdefault("server_hostname", "localhost")
    factory = protocol or (lambda: Recorder(tls.loop))
    return await tls.connect(factory, "127.0.0.1", port, **kwargs)


# ----------------------------------------------------------------------
# Raw peers in threads


class ThreadPeer:
    """A listening socket whose first connection is handed to *target* in a thread.

    The target gets the accepted socket (blocking, with a timeout) and this
    object; ``release`` is an event the test sets to let the peer finish.
    The thread is joined and the sockets closed by `close` (or the context
    manager). ``events`` are reported to the loop thread-safely.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: Callable[[socket.socket, ThreadPeer], None],
        *,
        accept: bool = True,
    ) -> None:
        self.loop = loop
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(WAIT)
        self.port = int(self.listener.getsockname()[1])
        self.release = threading.Event()
        self.error: BaseException | None = None
        self._target = target
        self._flags: dict[str, asyncio.Future[None]] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._accept = accept
        self._thread.start()

    def flag(self, name: str) -> asyncio.Future[None]:
        """A future (created in the loop thread) that `signal(name)` completes."""
        if name not in self._flags:
            self._flags[name] = self.loop.create_future()
        return self._flags[name]

    def signal(self, name: str) -> None:
        """From the peer thread: complete `flag(name)`."""
        fut = self._flags[name]
        self.loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

    async def wait(self, name: str) -> None:
        await asyncio.wait_for(asyncio.shield(self.flag(name)), WAIT)

    def _run(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError as exc:
            self.error = exc
            return
        conn.settimeout(WAIT)
        try:
            self._target(conn, self)
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()

    def close(self) -> None:
        self.release.set()
        self._thread.join(WAIT + 5)
        self.listener.close()
        assert not self._thread.is_alive()

    def __enter__(self) -> ThreadPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bio_server_handshake(
    conn: socket.socket, context: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """The server side of a handshake over memory BIOs, on a blocking socket.

    For peers that then put records (or raw bytes) on the wire by hand.
    Returns the SSL object and its incoming and outgoing BIOs; what OpenSSL
    wrote after its last flight (session tickets) is still in *outgoing*.
    """
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    sslobj = context.wrap_bio(incoming, outgoing, server_side=True)
    while True:
        try:
            sslobj.do_handshake()
            return sslobj, incoming, outgoing
        except ssl.SSLWantReadError:
            if outgoing.pending:
                conn.sendall(outgoing.read())
            incoming.write(conn.recv(65536))


def ssl_error_for_bad_record(certs: Certs, record: bytes) -> ssl.SSLError:
    """The SSLError this Python's ssl module raises when a client reads *record*.

    Both ends over memory BIOs, no loop: this is what asyncio's SSL protocol
    (and tideloop's) gets from OpenSSL. Reason names differ between OpenSSL
    releases (3.6 says RECORD_LAYER_FAILURE where 3.0 says
    DECRYPTION_FAILED_OR_BAD_RECORD_MAC), so tests compare with this.
    """
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = certs.client.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = certs.server.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    while not all(done):
        for i, obj in enumerate((client, server)):
            if not done[i]:
                try:
                    obj.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    server.write(b"ok")
    c_in.write(s_out.read() + record)
    try:
        while True:
            client.read(65536)
    except ssl.SSLError as exc:
        return exc


def tls_server_socket(conn: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
    """Wrap an accepted socket as a TLS server and complete the handshake."""
    return context.wrap_socket(conn, server_side=True)
