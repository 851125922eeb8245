"""SocketTransport: the stream transport for TCP and AF_UNIX sockets.

Layer: transports. Instances are `asyncio.Transport`s; semantics are
asyncio's ``_SelectorSocketTransport`` (``selector_events.py``): lifecycle,
error reporting, flow control, half-close, sendfile interplay. The code is
shaped for speed, because this is where a server spends its time.

Hot paths (one readiness event each):

- read: `_read_ready` is the callback of the read Handle, made when
  reading starts or resumes (`FdTransport`), not per event. For a
  `BufferedProtocol`, ``recv_into(protocol.get_buffer(-1))``: no allocation.
  For a `Protocol`, the read size adapts (``_read_mode``, divergence
  "recv-size-adaptive"):

  * small reads: one ``recv(max_size)`` with ``max_size`` 64 KiB. asyncio
    asks for 256 KiB, but glibc serves an allocation that large from mmap, so
    every read would map and unmap memory and then shrink the bytes object:
    several times the cost of the read itself for small messages;
  * large reads, from the read after one that returned at least
    ``LARGE_READ_MIN`` (32 KiB) until one that returns less: ``recv_into``
    the loop's 120 KiB scratch buffer (`FdRegistry.read_buffer`), then one
    copy of what arrived into a bytes object. A 100 KiB message then takes
    one read, one ``data_received`` and (for an echo) one send instead of two
    of each. For small reads the copy costs more than ``recv``'s fresh
    object, so small and medium traffic stays on the first path. Streams
    (a `StreamReaderProtocol`) always read small: their ``StreamReader``
    copies every chunk into its buffer anyway, and bigger chunks only grow
    that buffer past 128 KiB, where glibc maps and unmaps it with page
    faults on every message (``NO_LARGE_READS``, docs/performance.md).
- write: sends at once when nothing is buffered; only the unsent tail is
  buffered (bytes objects are kept as they are, mutable buffers are copied,
  a partly sent chunk is kept as a memoryview slice so a big write is never
  copied again per partial send). ``writelines`` sends its list with one
  vectored ``sendmsg`` (no joining). A write Handle and the buffer exist
  only once a write had to wait.

Facts / what this means for us:
- A peer that resets the connection makes recv/send raise
  ConnectionResetError (ECONNRESET), and writing after the peer closed raises
  BrokenPipeError (EPIPE; Python ignores SIGPIPE). Both are OSErrors: as in
  asyncio they close the transport and reach ``connection_lost(exc)`` without
  going through the exception handler (they are logged at debug level only).
  Errors that are not OSErrors (a protocol callback raising) are reported.
- recv() returning b"" is end of stream (the peer shut down its writing
  side). If ``eof_received()`` returns a true value the transport stays open
  for writing (half-close); otherwise it closes.
- ``write_eof`` is ``shutdown(SHUT_WR)``, after the buffer drains.
- TCP_NODELAY is set on TCP sockets: asyncio does, so that small writes are
  not held back by Nagle's algorithm waiting for the peer's ACK.
- sendmsg() takes at most IOV_MAX (usually 1024) buffers per call.

Invariants (with those of `FdTransport`, which owns registration and the
lifecycle):
- The write Handle is registered exactly while the buffer is not empty.
- The fd registry's ``transports[fd]`` names this transport while it lives.
- While a sendfile runs (``_empty_waiter`` set), write()/writelines() raise.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import os
import socket
import ssl as _ssl
from asyncio import constants
from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]
from collections.abc import Iterable
from itertools import islice
from typing import Any, Final, Protocol

from tideloop._core.coreloop import CoreLoop
from tideloop._core.errors import logger
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import READ_BUFFER_SIZE, FdRegistry
from tideloop._fdio.sock import BOUNDED_WRITES
from tideloop._versions import WRITE_TYPE_ERROR, WRITELINES_NAME

from . import native
from .base import TRANSPORT_CONTEXT, ConnectionTracker, WriteFlowControl, bounded_head, socket_extra
from .tls import SSLTransport, TLSProtocol


class Abortable(Protocol):
    """A transfer that owns the transport's fd writer (``sendfile``'s `NativeSendfile`)."""

    def abort(self, exc: BaseException) -> None: ...


#: ``_read_mode`` values: how `SocketTransport._read_ready` reads (see the
#: module docstring). Small reads are 0, so the hot path tests one truth value.
READ_SMALL: Final = 0
READ_LARGE: Final = 1
READ_BUFFERED: Final = 2
#: Reads of at least this many bytes switch a Protocol's transport to large
#: reads, smaller ones back. Small reads are cheaper through recv()'s fresh
#: bytes object than through a copy out of the shared buffer; at 10 KiB the
#: two measured level, so only bulk data (half a small read) switches.
LARGE_READ_MIN: Final = 32 * 1024
#: The switch point of a transport that never makes large reads: one whose
#: protocol is a `StreamReaderProtocol`. Its StreamReader copies every chunk
#: into one bytearray, so a bigger chunk saves no copy; it only makes that
#: buffer outgrow glibc's mmap threshold (128 KiB), and then every message
#: remaps it and page-faults (docs/performance.md).
NO_LARGE_READS: Final = 1 << 62


def _iov_max() -> int:
    try:
        return os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):  # pragma: no cover
        return 16  # the POSIX minimum


#: Most buffers one sendmsg() call takes.
IOV_MAX: Final = _iov_max()

#: After the connection is lost, warn about every write() past this many.
LOG_THRESHOLD_FOR_CONNLOST_WRITES: Final = constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES

_SHUT_WR: Final = socket.SHUT_WR
_TCP_FAMILIES: Final = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))


#: The stdlib's words for write(non-bytes), and writelines()' own name in
#: its errors (see `tideloop._versions`).
_WRITE_TYPE_ERROR: Final = WRITE_TYPE_ERROR
_WRITELINES: Final = WRITELINES_NAME


def set_nodelay(sock: socket.socket) -> None:
    if (
        hasattr(socket, "TCP_NODELAY")
        and sock.family in _TCP_FAMILIES
        and sock.type == socket.SOCK_STREAM
        and sock.proto == socket.IPPROTO_TCP
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _byte_view(data: memoryview) -> memoryview:
    """A flat byte view of *data*, so lengths and slices count bytes."""
    if data.itemsize != 1 or data.ndim != 1:
        return data.cast("B")
    return data


class SocketTransport(WriteFlowControl, asyncio.Transport):
    __slots__ = (
        "_empty_waiter",
        "_eof",
        "_large_min",
        "_read_mode",
        "_sendfile_op",
        "_sock",
    )

    #: Bytes asked of one recv() for a Protocol (see the module docstring).
    max_size: int = 64 * 1024

    # Read by asyncio-compatible code: start_tls() works on this transport,
    # and loop.sendfile() may try os.sendfile() on it.
    _start_tls_compatible: bool = True
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE

    _buffer: collections.deque[bytes | memoryview]

    def __init__(  # noqa: PLR0917 (asyncio's transport constructor order, then ours)
        self,
        loop: LoopServices,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
        server: ConnectionTracker | None = None,
        *,
        fds: FdRegistry,
        context: contextvars.Context | None = None,
    ) -> None:
        # Set first: __del__ reads it even if the constructor fails.
        self._fd_closed = True
        fd = sock.fileno()
        super().__init__(loop, fds, fd, extra, server, sock.close)
        self._context = context
        socket_extra(self._extra, sock)
        self._sock = sock
        self.set_protocol(protocol)  # also sets the read mode and its switch point
        self._eof = False
        self._empty_waiter: asyncio.Future[None] | None = None
        self._sendfile_op: Abortable | None = None
        if server is not None:
            server._attach(self)
        fds.transports[fd] = self
        set_nodelay(sock)

        loop.call_soon(protocol.connection_made, self, context=context)
        # Reading starts only once connection_made() has run.
        loop.call_soon(self._start_reading, context=context)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None, context=context)

    # ------------------------------------------------------------------
    # Protocol and reading

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # A new protocol starts with small reads (and a BufferedProtocol
        # always brings its own buffer).
        self._read_mode = (
            READ_BUFFERED if isinstance(protocol, asyncio.BufferedProtocol) else READ_SMALL
        )
        self._large_min = (
            NO_LARGE_READS if isinstance(protocol, asyncio.StreamReaderProtocol) else LARGE_READ_MIN
        )
        self._protocol = protocol
        self._protocol_connected = True

    def _read_ready(self) -> None:
        if not self._reader_on:
            return  # detached after this run was queued
        mode = self._read_mode
        if mode == READ_BUFFERED:
            self._read_ready_buffered()
            return
        try:
            if not mode:
                data = self._sock.recv(self.max_size)
            else:
                # Copied out before any protocol code runs: the buffer is the
                # loop's, and the next large read of any transport reuses it.
                view = self._fds.read_buffer()
                nbytes = self._sock.recv_into(view)
                data = bytes(view[:nbytes])
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_eof()
            return
        # This read's size picks the next one's mode (before the protocol
        # runs, so that a set_protocol() from data_received wins).
        if len(data) >= self._large_min:
            if not mode:
                self._read_mode = READ_LARGE
        elif mode:
            self._read_mode = READ_SMALL
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _read_ready_buffered(self) -> None:
        protocol = self._protocol
        try:
            buf = protocol.get_buffer(-1)
            if not len(buf):
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
            return
        try:
            nbytes = self._sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not nbytes:
            self._read_eof()
            return
        try:
            protocol.buffer_updated(nbytes)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")

    def _read_eof(self) -> None:
        if self._loop._debug:
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if keep_open:
            # Half-open: the protocol may still write, but nothing more can
            # be read, so stop polling for it.
            self._stop_reading()
        else:
            self.close()

    # ------------------------------------------------------------------
    # Writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        # On the native core (native.py) the class's write is a native
        # method that does the common case (nothing buffered: one send()
        # that takes everything) and calls this one, as _write_pure, for
        # everything else, or _write_tail after a send that took less.
        if type(data) is not bytes:
            if isinstance(data, memoryview):
                data = _byte_view(data)
            elif not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"{_WRITE_TYPE_ERROR}{type(data).__name__!r}")
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        size = len(data)
        if not size:
            return
        if self._conn_lost:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return

        if not self._buffer_size:
            # Nothing queued: try to send now, buffer only what is left.
            try:
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on socket transport")
                return
            if n == size:
                return
            self._start_writing()
        else:
            n = 0
        self._buffer_tail(data, n)

    _write_pure = write

    def _write_tail(self, data: bytes | bytearray | memoryview, n: int) -> None:
        """After a first send() that took *n* bytes, not all: wait for the fd, buffer the rest."""
        self._start_writing()
        self._buffer_tail(data, n)

    def _buffer_tail(self, data: bytes | bytearray | memoryview, n: int) -> None:
        # Keep bytes as they are (a partly sent one as a view of its tail);
        # copy what the caller could mutate after we return.
        buffer = self._write_buffer()
        size = len(data)
        if type(data) is bytes:
            buffer.append(memoryview(data)[n:] if n else data)
        else:
            buffer.append(bytes(memoryview(data)[n:]) if n else bytes(data))
        self._buffer_size += size - n
        if self._buffer_size > self._high_water:
            self._maybe_pause_protocol()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._eof:
            raise RuntimeError(f"Cannot call {_WRITELINES}() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError(f"unable to {_WRITELINES}; sendfile is in progress")
        chunks: list[bytes | bytearray | memoryview] = []
        size = 0
        for item in list_of_data:
            data = item
            if type(data) is not bytes:
                if isinstance(data, memoryview):
                    data = _byte_view(data)
                elif not isinstance(data, (bytes, bytearray)):
                    raise TypeError(
                        f"data argument must be a bytes-like object, not {type(data).__name__!r}"
                    )
            if len(data):
                chunks.append(data)
                size += len(data)
        if not size:
            return
        if self._conn_lost:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return

        n = 0
        if not self._buffer_size:
            # One vectored send of the whole list (up to IOV_MAX buffers).
            try:
                n = self._sock.sendmsg(chunks if len(chunks) <= IOV_MAX else chunks[:IOV_MAX])
            except (BlockingIOError, InterruptedError):
                pass
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on socket transport")
                return
            if n == size:
                return
            self._start_writing()
        # Buffer what was not sent, copying what the caller could mutate.
        buffer = self._write_buffer()
        skip = n
        for data in chunks:
            length = len(data)
            if skip >= length:
                skip -= length
                continue
            if type(data) is bytes:
                buffer.append(memoryview(data)[skip:] if skip else data)
            else:
                buffer.append(bytes(memoryview(data)[skip:]) if skip else bytes(data))
            skip = 0
        self._buffer_size += size - n
        if self._buffer_size > self._high_water:
            self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        buffer = self._buffer
        if not buffer or self._conn_lost:
            return  # detached after this run was queued, or lost meanwhile
        try:
            if BOUNDED_WRITES:  # PyPy: see _fdio/sock.py
                n = self._sock.sendmsg(bounded_head(buffer, IOV_MAX))
            elif len(buffer) == 1:
                n = self._sock.send(buffer[0])
            elif len(buffer) <= IOV_MAX:
                n = self._sock.sendmsg(buffer)
            else:
                n = self._sock.sendmsg(list(islice(buffer, IOV_MAX)))
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._stop_writing()
            buffer.clear()
            self._buffer_size = 0
            self._fatal_error(exc, "Fatal write error on socket transport")
            waiter = self._empty_waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            return
        if n:
            self._consume(buffer, n)
        if self._protocol_paused:
            self._maybe_resume_protocol()  # may write more
        if not buffer:
            self._stop_writing()
            waiter = self._empty_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if self._closing:
                self._conn_lost += 1
                self._call_connection_lost(None)
            elif self._eof:
                self._sock.shutdown(_SHUT_WR)

    def write_eof(self) -> None:
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._buffer:
            self._sock.shutdown(_SHUT_WR)

    def can_write_eof(self) -> bool:
        return True

    # ------------------------------------------------------------------
    # Closing

    def _release(self) -> None:
        op = self._sendfile_op
        if op is not None:
            # A native sendfile owns our fd's writer: end it before the fd
            # number can be reused.
            self._sendfile_op = None
            op.abort(ConnectionError("Connection is closed by peer"))
        super()._release()
        waiter = self._empty_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError("Connection is closed by peer"))

    # ------------------------------------------------------------------
    # sendfile support (used by the loop's sendfile())

    def _make_empty_waiter(self) -> asyncio.Future[None]:
        if self._empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._empty_waiter = waiter
        if not self._buffer:
            waiter.set_result(None)
        return waiter

    def _reset_empty_waiter(self) -> None:
        self._empty_waiter = None


native.install_stream(SocketTransport, READ_BUFFER_SIZE)


class StreamMethods(CoreLoop):
    """The one place the loop turns a connected socket into a stream transport.

    ``_make_socket_transport`` (TCP and Unix streams), ``_make_ssl_transport``
    (a `TLSProtocol` installed as the protocol of a stream transport, exactly
    as asyncio layers its ``SSLProtocol``; the application gets the TLS
    protocol's app-facing transport) and ``_create_connection_transport``.
    The names are asyncio's, which asyncio-aware code and tests call. The net
    layer's connect and accept paths and ``connect_accepted_socket`` hand
    their sockets here; every transport is handed the components it uses
    (the core loop, the fd registry, its server as a `ConnectionTracker`).
    """

    _fds: FdRegistry

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
