"""TransportMethods: the one place the loop turns a socket into a transport.

Layer: transports. The net layer's connect and accept paths, and
``connect_accepted_socket``, hand a connected socket here; what comes back
is a transport whose protocol's ``connection_made`` is scheduled. The
method names are asyncio's (``_make_socket_transport``,
``_make_ssl_transport``, ``_create_connection_transport``), which
asyncio-aware code and tests call. Every transport is handed the components
it uses (the core loop, the fd registry, its server as a
`ConnectionTracker`); none reaches into the loop.

TLS is a `TLSProtocol` (``tls.py``) installed as the protocol of a stream
transport, exactly as asyncio layers its ``SSLProtocol``; the application
gets the TLS protocol's app-facing transport. ``start_tls`` puts one between
an existing stream transport and its protocol.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl as _ssl
from asyncio import constants
from typing import Any

from tideloop._core.coreloop import CoreLoop
from tideloop._fdio.registry import FdRegistry

from .base import TRANSPORT_CONTEXT, ConnectionTracker
from .datagram import DatagramTransport
from .stream import SocketTransport
from .tls import SSLTransport, TLSProtocol
from .tls import start_tls as _start_tls


class TransportMethods(CoreLoop):
    """Sockets to transports: ``_make_socket_transport``, ``_make_datagram_transport``."""

    _fds: FdRegistry

    # ------------------------------------------------------------------
    # Building transports

    def _make_socket_transport(
        self,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        *,
        extra: dict[str, Any] | None = None,
        server: ConnectionTracker | None = None,
        context: contextvars.Context | None = None,
    ) -> SocketTransport:
        self._fds.check_no_transport(sock)
        return SocketTransport(
            self, sock, protocol, waiter, extra, server, fds=self._fds, context=context
        )

    def _make_ssl_transport(
        self,
        rawsock: socket.socket,
        protocol: asyncio.BaseProtocol,
        sslcontext: _ssl.SSLContext | None,
        waiter: asyncio.Future[Any] | None = None,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        extra: dict[str, Any] | None = None,
        server: ConnectionTracker | None = None,
        ssl_handshake_timeout: float | None = constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout: float | None = constants.SSL_SHUTDOWN_TIMEOUT,
        context: contextvars.Context | None = None,
    ) -> SSLTransport:
        tls = TLSProtocol(
            self,
            protocol,
            sslcontext,
            waiter,
            server_side,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        self._make_socket_transport(rawsock, tls, extra=extra, server=server, context=context)
        app_transport = tls._app_transport
        assert app_transport is not None
        return app_transport

    async def start_tls(
        self,
        transport: asyncio.BaseTransport,
        protocol: asyncio.BaseProtocol,
        sslcontext: _ssl.SSLContext,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> asyncio.Transport | None:
        return await _start_tls(
            self,
            transport,
            protocol,
            sslcontext,
            server_side=server_side,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )

    def _make_datagram_transport(
        self,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        address: Any = None,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> DatagramTransport:
        self._fds.check_no_transport(sock)
        return DatagramTransport(self, sock, protocol, address, waiter, extra, fds=self._fds)

    async def _create_connection_transport(  # noqa: PLR0917 (asyncio's signature)
        self,
        sock: socket.socket,
        protocol_factory: Any,
        ssl: Any,
        server_hostname: str | None,
        server_side: bool = False,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        context: contextvars.Context | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        # The socket is closed if no transport comes to own it, whatever
        # failed (gh-153133; asyncio before 3.14 closed it only when the TLS
        # transport failed): the caller's socket included.
        try:
            sock.setblocking(False)
            if TRANSPORT_CONTEXT and context is None:
                # 3.15: the transport keeps a copy of its creator's context.
                context = contextvars.copy_context()
            protocol = protocol_factory()
            waiter: asyncio.Future[None] = self.create_future()
            transport: asyncio.Transport
            if ssl:
                sslcontext = None if isinstance(ssl, bool) else ssl
                transport = self._make_ssl_transport(
                    sock,
                    protocol,
                    sslcontext,
                    waiter,
                    server_side=server_side,
                    server_hostname=server_hostname,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout,
                    context=context,
                )
            else:
                transport = self._make_socket_transport(sock, protocol, waiter, context=context)
        except BaseException:
            sock.close()
            raise
        try:
            await waiter
        except BaseException:
            transport.close()
            # Break the cycle frame -> waiter -> exception -> traceback ->
            # frame, which would keep the transport alive (gh-159049).
            del waiter, transport, protocol, sock
            raise
        return transport, protocol
