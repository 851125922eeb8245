"""Sendfile: ``sock_sendfile`` and ``sendfile``, the zero-copy driver, the fallback.

Layer: transports. `SendfileMethods` holds the two loop methods; they use the
fd registry (to wait for writability) and, for ``loop.sendfile``, the
transport's own socket. Semantics are asyncio's (``base_events.py``,
``selector_events.py``, ``unix_events.py``):

- ``sock_sendfile(sock, file, offset=0, count=None, *, fallback=True)``
  validates (binary file, SOCK_STREAM, non-negative offset, positive count),
  tries os.sendfile(), and on SendfileNotAvailableError falls back to
  reading the file in the executor and ``sock_sendall`` (unless
  ``fallback=False``). The file position ends at ``offset + sent``.
- ``sendfile(transport, file, ...)`` refuses closing transports and
  transports that do not declare sendfile support; for ours it pauses
  reading, waits for the write buffer to drain, and hands the socket to
  os.sendfile(); write() raises meanwhile. The fallback writes through the
  transport with its flow control, under a stand-in protocol (the path TLS
  transports take).

Facts / what this means for us:
- ``os.sendfile(out_fd, in_fd, offset, count)`` copies from a file to a
  socket inside the kernel (no user-space copy). It takes an explicit offset
  and does not move the file position, so asyncio sets the position to
  ``offset + bytes sent`` when done, and callers may read ``file.tell()`` to
  learn how much went out, also after an error.
- On a non-blocking socket it sends what fits in the socket buffer and
  returns that count, or raises EAGAIN (BlockingIOError) when nothing fits;
  we then wait for the fd to become writable. It returns 0 at end of file.
- It fails (EINVAL, ENOSYS, ...) for files it cannot map, e.g. pipes or some
  pseudo-files. If that happens before anything was sent, asyncio raises
  SendfileNotAvailableError so the caller can fall back to read()+send();
  after a partial transfer the error is real and propagates.
- ENOTCONN after the first call means the peer went away mid-transfer;
  asyncio reports it as ConnectionError on every platform.
- A 32-bit ``count`` must stay below 2 GiB, so one call sends at most
  ``sys.maxsize // 2 + 1`` bytes.

Invariants:
- The caller checks that no transport owns the socket (or, for
  ``loop.sendfile``, that the transport lent it: drained, write() refused).
- A `NativeSendfile` owns one writer registration (one Handle, created once)
  from its first EAGAIN/partial send until it finishes; finishing (result,
  error, cancellation, `abort`) removes it, synchronously when we finish it
  ourselves, through the future's done-callback when the caller cancels.
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import socket
import sys
from asyncio import constants
from typing import Any, Final

from tideloop._core.coreloop import CoreLoop
from tideloop._core.handles import Handle
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry
from tideloop._fdio.sock import check_ssl_socket
from tideloop._fdio.sockets import simulated

from .stream import SocketTransport

#: One os.sendfile() call sends at most this (see the module docstring).
MAX_SENDFILE_CHUNK: Final = sys.maxsize // 2 + 1


def check_sendfile_params(sock: socket.socket, file: Any, offset: Any, count: Any) -> None:
    """asyncio's argument checks for sock_sendfile(), with its messages."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.type == socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


class NativeSendfile:
    """One os.sendfile() transfer from *fileno* to a non-blocking socket."""

    __slots__ = (
        "_blocksize",
        "_count",
        "_fds",
        "_fileno",
        "_first",
        "_handle",
        "_loop",
        "_offset",
        "_registered",
        "_sock_fd",
        "_total",
        "future",
    )

    def __init__(  # noqa: PLR0917
        self,
        loop: LoopServices,
        fds: FdRegistry,
        sock_fd: int,
        fileno: int,
        offset: int,
        count: int | None,
    ) -> None:
        self._loop = loop
        self._fds = fds
        self._sock_fd = sock_fd
        self._fileno = fileno
        self._offset = offset
        self._count = count
        self._total = 0
        self._blocksize = MAX_SENDFILE_CHUNK
        self._first = True
        self._registered = False
        self._handle = Handle(self._step, (), loop, None)
        self.future: asyncio.Future[int] = loop.create_future()
        self.future.add_done_callback(self._on_done)

    def start(self, blocksize: int) -> asyncio.Future[int]:
        self._blocksize = blocksize
        self._step()
        return self.future

    def _on_done(self, fut: asyncio.Future[int]) -> None:
        # Reached on cancellation by the caller; a no-op otherwise.
        self._unregister()

    def _unregister(self) -> None:
        if self._registered:
            self._registered = False
            self._fds.remove_writer_if(self._sock_fd, self._handle)

    def _finish(self, result: int | None, exc: BaseException | None) -> None:
        self._unregister()
        # The file position ends at offset + what was sent, even when nothing
        # was (asyncio since 3.13.x/3.14; earlier releases left it alone
        # then: divergence sendfile-sets-file-position).
        os.lseek(self._fileno, self._offset, os.SEEK_SET)
        fut = self.future
        if fut.done():
            return
        if exc is None:
            fut.set_result(self._total if result is None else result)
        else:
            fut.set_exception(exc)

    def abort(self, exc: BaseException) -> None:
        """The socket is going away: stop, and fail the transfer with *exc*."""
        if not self.future.done():
            self._finish(None, exc)

    def _step(self) -> None:
        if self.future.done():
            return
        blocksize = self._blocksize
        count = self._count
        if count:
            blocksize = count - self._total
            if blocksize <= 0:
                self._finish(None, None)
                return
        blocksize = min(blocksize, MAX_SENDFILE_CHUNK)
        self._blocksize = blocksize
        first = self._first
        self._first = False
        try:
            sent = os.sendfile(self._sock_fd, self._fileno, self._offset, blocksize)
        except (BlockingIOError, InterruptedError):
            self._register()
        except OSError as exc:
            if not first and exc.errno == errno.ENOTCONN and type(exc) is not ConnectionError:
                # The connection closed mid-transfer: report it as asyncio
                # does on every platform.
                new_exc = ConnectionError("socket is not connected", errno.ENOTCONN)
                new_exc.__cause__ = exc
                exc = new_exc
            if self._total == 0:
                # Typically a file the kernel cannot sendfile() from: let the
                # caller fall back to read()+send().
                self._finish(None, asyncio.SendfileNotAvailableError("os.sendfile call failed"))
            else:
                self._finish(None, exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._finish(None, exc)
        else:
            if sent == 0:
                self._finish(None, None)  # end of file
            else:
                self._offset += sent
                self._total += sent
                self._register()

    def _register(self) -> None:
        if not self._registered:
            self._fds.set_writer(self._sock_fd, self._handle)
            self._registered = True


def prepare_native(file: Any, count: int | None) -> tuple[int, int]:
    """The file's fd and the first block size, or SendfileNotAvailableError."""
    if not hasattr(os, "sendfile"):
        raise asyncio.SendfileNotAvailableError("os.sendfile() is not available")
    try:
        fileno = file.fileno()
    except (AttributeError, io.UnsupportedOperation) as err:
        raise asyncio.SendfileNotAvailableError("not a regular file") from err
    try:
        fsize = os.fstat(fileno).st_size
    except OSError as err:
        raise asyncio.SendfileNotAvailableError("not a regular file") from err
    blocksize = count if count else fsize
    return fileno, blocksize


class FallbackProtocol(asyncio.Protocol):
    """Stands in for a transport's protocol while sendfile() writes through it.

    The read()+write() fallback must respect the transport's flow control
    without the user's protocol seeing pause/resume calls it did not cause:
    reading is paused, and pause_writing/resume_writing drive our own future.
    `restore` puts the user's protocol back (and resumes what we paused).
    """

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._proto = transport.get_protocol()
        self._should_resume_reading = transport.is_reading()
        self._should_resume_writing = bool(getattr(transport, "_protocol_paused", False))
        transport.pause_reading()
        transport.set_protocol(self)
        self._write_ready_fut: asyncio.Future[None] | None = None
        if self._should_resume_writing:
            self._write_ready_fut = transport._loop.create_future()

    async def drain(self) -> None:
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        fut = self._write_ready_fut
        if fut is None:
            return
        await fut

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raise RuntimeError("Invalid state: connection should have been established already.")

    def connection_lost(self, exc: Exception | None) -> None:
        fut = self._write_ready_fut
        if fut is not None and not fut.done():
            # The whole file went out only if we were not waiting: losing the
            # connection here is always an error for the sender.
            if exc is None:
                fut.set_exception(ConnectionError("Connection is closed by peer"))
            else:
                fut.set_exception(exc)
        self._proto.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._write_ready_fut is not None:
            return
        self._write_ready_fut = self._transport._loop.create_future()

    def resume_writing(self) -> None:
        fut = self._write_ready_fut
        if fut is None:
            return
        fut.set_result(None)
        self._write_ready_fut = None

    def data_received(self, data: bytes) -> None:
        raise RuntimeError("Invalid state: reading should be paused")

    def eof_received(self) -> bool | None:
        raise RuntimeError("Invalid state: reading should be paused")

    async def restore(self) -> None:
        self._transport.set_protocol(self._proto)
        if self._should_resume_reading:
            self._transport.resume_reading()
        fut = self._write_ready_fut
        if fut is not None:
            # Nobody waits on it any more; cancelling avoids a "never
            # retrieved" exception warning.
            fut.cancel()
        if self._should_resume_writing:
            self._proto.resume_writing()


class SendfileMethods(CoreLoop):
    """``sock_sendfile``, ``sendfile``."""

    _fds: FdRegistry

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
        if simulated(sock):
            raise asyncio.SendfileNotAvailableError("the socket is simulated")
        fileno, blocksize = prepare_native(file, count)
        if not blocksize:
            return 0  # empty file
        self._fds.check_no_transport(sock)
        op = NativeSendfile(self, self._fds, sock.fileno(), fileno, offset, count)
        return await op.start(blocksize)

    async def _sock_sendfile_fallback(
        self, sock: socket.socket, file: Any, offset: int, count: int | None
    ) -> int:
        # Reading starts at *offset*, 0 included: the file's position does
        # not matter (divergence sendfile-sets-file-position).
        if hasattr(file, "seek"):
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
        if not isinstance(transp, SocketTransport) or simulated(transp._sock):
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
            op = NativeSendfile(self, self._fds, transp._fd, fileno, offset, count)
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
        if hasattr(file, "seek"):  # as in _sock_sendfile_fallback
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
                transp.write(view[:read])
                # Drained after each write (asyncio 3.13.x+), so the buffer
                # is under the high-water mark when sendfile() returns.
                await proto.drain()
                total_sent += read
        finally:
            if total_sent > 0 and hasattr(file, "seek"):
                file.seek(offset + total_sent)
            await proto.restore()
