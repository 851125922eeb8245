"""TransportMethods: the one place the loop turns a socket into a transport.

Layer: transports. The net layer's connect and accept paths, and
``connect_accepted_socket``, hand a connected socket here; what comes back
is a transport whose protocol's ``connection_made`` is scheduled. The
method names are asyncio's (``_make_socket_transport``,
``_create_connection_transport``), which asyncio-aware code and tests call.
Every transport is handed the components it uses (the core loop, the fd
registry, its server as a `ConnectionTracker`); none reaches into the loop.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from tideloop._core.run import CoreLoop
from tideloop._fdio.registry import FdRegistry

from .base import ConnectionTracker
from .datagram import DatagramTransport
from .stream import SocketTransport


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
    ) -> SocketTransport:
        self._fds.check_no_transport(sock)
        return SocketTransport(self, sock, protocol, waiter, extra, server, fds=self._fds)

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
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        sock.setblocking(False)
        protocol = protocol_factory()
        waiter: asyncio.Future[None] = self.create_future()
        transport: asyncio.Transport
        if ssl:
            sock.close()
            raise NotImplementedError("TLS transports are not implemented yet in tideloop")
        else:
            transport = self._make_socket_transport(sock, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol
