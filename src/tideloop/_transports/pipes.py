"""Pipe transports (pipes, FIFOs, ptys, character devices, sockets) and their loop methods.

Layer: transports. `ReadPipeTransport` is an ``asyncio.ReadTransport``,
`WritePipeTransport` an ``asyncio.WriteTransport``; `PipeMethods` holds
``connect_read_pipe``/``connect_write_pipe``. Registration and lifecycle come
from `FdTransport`; semantics are asyncio's ``unix_events`` pipe transports
for the running Python, which differ from the socket transports in ways
programs see:

- Only pipes/FIFOs, sockets and character devices are accepted (ValueError
  otherwise: a regular file is always "ready", so polling it means nothing;
  epoll even refuses it).
- Read side: end of file calls ``eof_received()`` (its return value is
  ignored) and then ``connection_lost(None)``. A read error other than EIO
  is reported to the exception handler before ``connection_lost(exc)``.
- Write side: a write after ``write_eof()``/``close()`` or after the
  connection was lost is dropped silently (a warning is logged after many),
  where a socket transport raises. ``resume_writing()`` is called only once
  the buffer has drained completely. ``close()`` is ``write_eof()``: the
  buffer is flushed first.
- ``write()`` asserts its argument is bytes-like (AssertionError), as
  asyncio does.

Facts / what this means for us:
- On Linux, reading a pty master after the last slave fd closed fails with
  EIO instead of returning b"" (the pty has hung up). asyncio treats EIO as
  the ordinary end of a pty: no exception handler call, only
  ``connection_lost(OSError(EIO))``; so do we.
- The writer of a pipe learns that the reader went away only when it
  writes (EPIPE) — unless it polls: a pipe's or socket's write end reports
  an error/hang-up event when the other end closes, even while we are not
  waiting to write. So the write transport polls its fd for reading, as
  asyncio does, and treats that event as "closed by peer":
  ``connection_lost(None)``, or ``BrokenPipeError`` if data was still
  buffered (it can never be delivered). Character devices give no such
  event and are not polled for it.
- O_NONBLOCK is a property of the open file description: setting it on our
  fd also makes any dup of it (the other process's end is a different
  description) non-blocking, as asyncio does too.
- A pipe holds 64 KiB by default, so one ``read`` returns at most that much;
  we ask for 64 KiB, not asyncio's 256 KiB (glibc would map and unmap a
  256 KiB buffer on every read; divergence "recv-size-adaptive").

Invariants (with those of `FdTransport`):
- The write transport's write Handle is registered exactly while its
  buffer is not empty; connection_lost is scheduled at most once and runs
  at most once (``_fd_closed``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from asyncio import constants
from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]
from collections.abc import Callable
from itertools import islice
from typing import Any, Final, TypeVar

from tideloop._core.coreloop import CoreLoop
from tideloop._core.errors import logger
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry
from tideloop._fdio.sock import BOUNDED_WRITES

from .base import FdTransport, WriteFlowControl, bounded_head
from .stream import IOV_MAX

#: Bytes asked of one read() (see the module docstring).
READ_SIZE: Final = 64 * 1024

#: The pipe object asyncio takes: anything with fileno() and close().
Pipe = Any


def _closed_by_peer_message(transport: object) -> None:
    logger.info("%r was closed by peer", transport)


def _pipe_repr(transport: FdTransport, state: str) -> str:
    """asyncio's pipe transport repr: ``<Class [closing] fd=N state>``."""
    info = [type(transport).__name__]
    if transport._fd_closed:
        info.append("closed")
    elif transport._closing:
        info.append("closing")
    info.append(f"fd={transport._fd}")
    if transport._fd_closed:
        info.append("closed")
    elif transport._loop.is_closed():
        info.append("open")
    else:
        info.append(state)
    return "<{}>".format(" ".join(info))


class ReadPipeTransport(FdTransport, asyncio.ReadTransport):
    __slots__ = ("_pipe",)

    #: asyncio's read size, kept for code that reads it; see the docstring.
    max_size: int = 256 * 1024

    def __init__(
        self,
        loop: LoopServices,
        pipe: Pipe,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
        *,
        fds: FdRegistry,
    ) -> None:
        self._fd_closed = True
        fd = pipe.fileno()
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise ValueError("Pipe transport is for pipes/sockets only.")
        super().__init__(loop, fds, fd, extra, None, pipe.close)
        self._extra["pipe"] = pipe
        self._pipe = pipe
        os.set_blocking(fd, False)
        self.set_protocol(protocol)
        loop.call_soon(protocol.connection_made, self)
        # Reading starts only once connection_made() has run.
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        return _pipe_repr(self, "polling" if self._reader_on else "idle")

    def _read_ready(self) -> None:
        if not self._reader_on:
            return  # detached after this run was queued
        try:
            data = os.read(self._fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if data:
            self._protocol.data_received(data)
            return
        if self._loop._debug:
            _closed_by_peer_message(self)
        self._closing = True
        self._stop_reading()
        self._loop.call_soon(self._protocol.eof_received)
        self._schedule_connection_lost(None)

    def close(self) -> None:
        if not self._closing:
            self._close(None)

    def _fatal_error(
        self, exc: BaseException, message: str = "Fatal error on pipe transport"
    ) -> None:
        if isinstance(exc, OSError) and exc.errno == errno.EIO:
            # The end of a pty (see the module docstring).
            if self._loop._debug:
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )
        self._close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        self._closing = True
        self._stop_reading()
        self._schedule_connection_lost(exc)

    def _schedule_connection_lost(self, exc: BaseException | None) -> None:
        if not self._conn_lost:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, exc)


class WritePipeTransport(WriteFlowControl, asyncio.Transport):
    # asyncio's write pipe transport is an asyncio.Transport (its flow-control
    # mixin's base), so it is a ReadTransport too, whose reading methods raise
    # NotImplementedError: isinstance() checks and those errors are the same
    # here. The reading it does (to see the reader go away) is internal.
    __slots__ = ("_pipe",)

    def __init__(
        self,
        loop: LoopServices,
        pipe: Pipe,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
        *,
        fds: FdRegistry,
    ) -> None:
        self._fd_closed = True
        fd = pipe.fileno()
        mode = os.fstat(fd).st_mode
        is_char = stat.S_ISCHR(mode)
        is_fifo = stat.S_ISFIFO(mode)
        is_socket = stat.S_ISSOCK(mode)
        if not (is_char or is_fifo or is_socket):
            raise ValueError("Pipe transport is only for pipes, sockets and character devices")
        super().__init__(loop, fds, fd, extra, None, pipe.close)
        self._extra["pipe"] = pipe
        self._pipe = pipe
        os.set_blocking(fd, False)
        self.set_protocol(protocol)
        loop.call_soon(protocol.connection_made, self)
        if is_socket or is_fifo:
            # Watch for the reader going away (see the module docstring),
            # once connection_made() has run.
            loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        polling = "polling" if self._writer_on else "idle"
        return _pipe_repr(self, f"{polling} bufsize={self._buffer_size}")

    def _read_ready(self) -> None:
        # A write pipe reads only to learn that the reader closed its end.
        if not self._reader_on:
            return
        if self._loop._debug:
            _closed_by_peer_message(self)
        self._close(BrokenPipeError() if self._buffer else None)

    def is_reading(self) -> bool:
        raise NotImplementedError

    def pause_reading(self) -> None:
        raise NotImplementedError

    def resume_reading(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------
    # Writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise AssertionError(repr(data))
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if not size:
            return
        if self._conn_lost or self._closing:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("pipe closed by peer or os.write(pipe, data) raised exception.")
            self._conn_lost += 1
            return

        n = 0
        if not self._buffer:
            # Nothing queued: try to write now, buffer only what is left.
            try:
                n = os.write(self._fd, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._conn_lost += 1
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            if n == size:
                return
            self._start_writing()
        # Keep bytes as they are; copy what the caller could mutate.
        buffer = self._write_buffer()
        if type(data) is bytes:
            buffer.append(memoryview(data)[n:] if n else data)
        else:
            buffer.append(memoryview(data).cast("B")[n:].tobytes())
        self._buffer_size += size - n
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        buffer = self._buffer
        if not buffer:
            return  # detached after this run was queued
        try:
            if BOUNDED_WRITES:  # PyPy: see _fdio/sock.py
                n = os.writev(self._fd, bounded_head(buffer, IOV_MAX))
            elif len(buffer) == 1:
                n = os.write(self._fd, buffer[0])
            else:
                n = os.writev(self._fd, list(islice(buffer, IOV_MAX)))
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            buffer.clear()
            self._buffer_size = 0
            self._conn_lost += 1
            self._stop_writing()
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        self._consume(buffer, n)
        if buffer:
            return
        self._stop_writing()
        self._maybe_resume_protocol()  # may write more
        if self._closing and not buffer:
            self._stop_reading()
            self._call_connection_lost(None)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._buffer:
            self._stop_reading()
            self._loop.call_soon(self._call_connection_lost, None)

    # ------------------------------------------------------------------
    # Closing

    def close(self) -> None:
        if not self._fd_closed and not self._closing:
            self.write_eof()

    def _force_close(self, exc: BaseException | None) -> None:
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        self._closing = True
        if self._buffer:
            self._stop_writing()
            self._buffer.clear()
            self._buffer_size = 0
        self._stop_reading()
        self._loop.call_soon(self._call_connection_lost, exc)


_PipeT = TypeVar("_PipeT", ReadPipeTransport, WritePipeTransport)
_ProtocolT = TypeVar("_ProtocolT", bound=asyncio.BaseProtocol)


class PipeMethods(CoreLoop):
    """``connect_read_pipe``, ``connect_write_pipe``."""

    _fds: FdRegistry

    def _make_read_pipe_transport(
        self,
        pipe: Pipe,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ReadPipeTransport:
        return ReadPipeTransport(self, pipe, protocol, waiter, extra, fds=self._fds)

    def _make_write_pipe_transport(
        self,
        pipe: Pipe,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> WritePipeTransport:
        return WritePipeTransport(self, pipe, protocol, waiter, extra, fds=self._fds)

    async def connect_read_pipe(
        self, protocol_factory: Callable[[], _ProtocolT], pipe: Any
    ) -> tuple[asyncio.ReadTransport, _ProtocolT]:
        """Wrap the read end *pipe* in a transport feeding a protocol from *protocol_factory*."""
        return await self._connect_pipe(self._make_read_pipe_transport, protocol_factory, pipe)

    async def connect_write_pipe(
        self, protocol_factory: Callable[[], _ProtocolT], pipe: Any
    ) -> tuple[asyncio.WriteTransport, _ProtocolT]:
        """Wrap the write end *pipe* in a transport driven by a protocol from *protocol_factory*."""
        return await self._connect_pipe(self._make_write_pipe_transport, protocol_factory, pipe)

    async def _connect_pipe(
        self,
        make: Callable[..., _PipeT],
        protocol_factory: Callable[[], _ProtocolT],
        pipe: Any,
    ) -> tuple[_PipeT, _ProtocolT]:
        protocol = protocol_factory()
        waiter: asyncio.Future[None] = self.create_future()
        transport = make(pipe, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        if self._debug:
            kind = "Write" if isinstance(transport, asyncio.WriteTransport) else "Read"
            logger.debug("%s pipe %r connected: (%r, %r)", kind, pipe.fileno(), transport, protocol)
        return transport, protocol
