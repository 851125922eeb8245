"""TransportLoop: builds stream transports; sock_sendfile() and sendfile().

Layer: transports, above the fd I/O layer (`SockLoop`). It turns a connected
socket into a `SocketTransport` (``_make_socket_transport``, used by the net
layer's connect and accept paths), and implements the two sendfile methods.

Semantics are asyncio's (``base_events.py``, ``selector_events.py``,
``unix_events.py``):

- ``sock_sendfile(sock, file, offset=0, count=None, *, fallback=True)``
  validates (binary file, SOCK_STREAM, non-negative offset, positive count),
  tries os.sendfile(), and on SendfileNotAvailableError falls back to
  reading the file in the executor and ``sock_sendall`` (unless
  ``fallback=False``). The file position ends at ``offset + sent``.
- ``sendfile(transport, file, ...)`` refuses closing transports and
  transports that do not declare sendfile support; for ours it pauses
  reading, waits for the write buffer to drain, and hands the socket to
  os.sendfile(); write() raises meanwhile. The fallback writes through the
  transport with its flow control, under a stand-in protocol.
- TLS transports are a later layer: ``_make_ssl_transport`` raises
  NotImplementedError here.
"""

from __future__ import annotations

import asyncio
import socket
from asyncio import constants
from typing import Any

from tideloop._core.clock import Clock
from tideloop._fdio.sock import SockLoop, check_ssl_socket
from tideloop._pollers import Poller

from .sendfile import FallbackProtocol, NativeSendfile, check_sendfile_params, prepare_native
from .stream import SocketTransport


class TransportLoop(SockLoop):
    def __init__(self, *, poller: Poller | str | None = None, clock: Clock | None = None) -> None:
        super().__init__(poller=poller, clock=clock)

    # ------------------------------------------------------------------
    # Building transports

    def _make_socket_transport(
        self,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        *,
        extra: dict[str, Any] | None = None,
        server: Any = None,
    ) -> SocketTransport:
        self._ensure_fd_no_transport(sock)
        return SocketTransport(self, sock, protocol, waiter, extra, server)

    def _make_ssl_transport(
        self,
        rawsock: socket.socket,
        protocol: asyncio.BaseProtocol,
        sslcontext: Any,
        waiter: asyncio.Future[Any] | None = None,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        extra: dict[str, Any] | None = None,
        server: Any = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> asyncio.Transport:
        raise NotImplementedError("TLS transports are not implemented yet in tideloop")

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
            sslcontext = None if isinstance(ssl, bool) else ssl
            try:
                transport = self._make_ssl_transport(
                    sock,
                    protocol,
                    sslcontext,
                    waiter,
                    server_side=server_side,
                    server_hostname=server_hostname,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout,
                )
            except BaseException:
                sock.close()
                raise
        else:
            transport = self._make_socket_transport(sock, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    # ------------------------------------------------------------------
    # sock_sendfile

    async def sock_sendfile(
        self,
        sock: socket.socket,
        file: Any,
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool | None = True,
    ) -> int:
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        check_ssl_socket(sock)
        check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except asyncio.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    async def _sock_sendfile_native(
        self, sock: socket.socket, file: Any, offset: int, count: int | None
    ) -> int:
        fileno, blocksize = prepare_native(file, count)
        if not blocksize:
            return 0  # empty file
        self._ensure_fd_no_transport(sock)
        op = NativeSendfile(self, sock.fileno(), fileno, offset, count)
        return await op.start(blocksize)

    async def _sock_sendfile_fallback(
        self, sock: socket.socket, file: Any, offset: int, count: int | None
    ) -> int:
        if offset:
            file.seek(offset)
        # Read at call time: asyncio's tests lower it.
        blocksize = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        if count:
            blocksize = min(count, blocksize)
        buf = bytearray(blocksize)
        total_sent = 0
        try:
            while True:
                if count:
                    blocksize = min(count - total_sent, blocksize)
                    if blocksize <= 0:
                        break
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    break  # EOF
                await self.sock_sendall(sock, view[:read])
                total_sent += read
            return total_sent
        finally:
            if total_sent > 0 and hasattr(file, "seek"):
                file.seek(offset + total_sent)

    # ------------------------------------------------------------------
    # sendfile on a transport

    async def sendfile(
        self,
        transport: asyncio.WriteTransport,
        file: Any,
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool = True,
    ) -> int:
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        mode = getattr(transport, "_sendfile_compatible", constants._SendfileMode.UNSUPPORTED)
        if mode is constants._SendfileMode.UNSUPPORTED:
            raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
        if mode is constants._SendfileMode.TRY_NATIVE:
            try:
                return await self._sendfile_native(transport, file, offset, count)
            except asyncio.SendfileNotAvailableError:
                if not fallback:
                    raise
        if not fallback:
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not supported "
                f"for transport {transport!r}"
            )
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_native(self, transp: Any, file: Any, offset: int, count: int | None) -> int:
        if not isinstance(transp, SocketTransport):
            raise asyncio.SendfileNotAvailableError("sendfile syscall is not supported")
        resume_reading = transp.is_reading()
        transp.pause_reading()
        # Everything written before must go out first; write() raises from
        # now until we are done.
        await transp._make_empty_waiter()
        try:
            sock = transp._sock
            if self._debug and sock.gettimeout() != 0:
                raise ValueError("the socket must be non-blocking")
            check_sendfile_params(sock, file, offset, count)
            fileno, blocksize = prepare_native(file, count)
            if not blocksize:
                return 0
            op = NativeSendfile(self, transp._sock_fd, fileno, offset, count)
            # The transport ends the transfer if it loses its socket.
            transp._sendfile_op = op
            try:
                return await op.start(blocksize)
            finally:
                if transp._sendfile_op is op:
                    transp._sendfile_op = None
        finally:
            transp._reset_empty_waiter()
            if resume_reading:
                transp.resume_reading()

    async def _sendfile_fallback(
        self, transp: Any, file: Any, offset: int, count: int | None
    ) -> int:
        if offset:
            file.seek(offset)
        blocksize = min(count, 16384) if count else 16384
        buf = bytearray(blocksize)
        total_sent = 0
        proto = FallbackProtocol(transp)
        try:
            while True:
                if count:
                    blocksize = min(count - total_sent, blocksize)
                    if blocksize <= 0:
                        return total_sent
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    return total_sent  # EOF
                await proto.drain()
                transp.write(view[:read])
                total_sent += read
        finally:
            if total_sent > 0 and hasattr(file, "seek"):
                file.seek(offset + total_sent)
            await proto.restore()
