"""Transport bases: write flow control, and the lifecycle of fd transports.

Layer: transports.

`WriteFlowControl`: a writing transport buffers what the kernel would
not take at once and tells its protocol to stop producing when the buffer grows past
the *high-water mark* (``protocol.pause_writing()``), and to go on when it
drains to the *low-water mark* (``protocol.resume_writing()``). This is what
asyncio's ``_FlowControlMixin`` does, with the same defaults (64 KiB high,
high // 4 low), the same validation message, and the same error reporting (a
failing pause_writing/resume_writing goes to the exception handler).

Invariants:
- ``_protocol_paused`` is True exactly between a pause_writing() call and the
  matching resume_writing() call: the two always alternate.
- Subclasses keep the buffer size in an int (no summing on each call) and
  call `_maybe_pause_protocol` after the buffer grows and
  `_maybe_resume_protocol` after it shrinks.

`FdTransport` sets ``__slots__`` (asyncio's transport bases do too) and
adds ``__weakref__``: the fd registry and servers hold transports weakly.
It also keeps ``__dict__``: asyncio's concrete transports have one, and
programs and tests set attributes on transports (replacing a method with a
mock, say). The dict is only created when something is stored in it.
A concrete transport combines `FdTransport`, `WriteFlowControl` if it
writes, and the matching asyncio class (``asyncio.Transport``,
``DatagramTransport``, ``ReadTransport``, ``WriteTransport``), so that it is
an instance of exactly the asyncio classes asyncio's own would be.

`ConnectionTracker` is what a transport needs from the server that accepted
it (a net-layer object): to be counted while it lives. The method names are
asyncio's ``Server._attach``/``_detach``.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import socket
import warnings
from asyncio import trsock
from collections.abc import Callable
from typing import Any, Final, Protocol

from tideloop._core.errors import logger
from tideloop._core.handles import Handle
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry
from tideloop._fdio.sock import WRITE_LIMIT
from tideloop._versions import TRANSPORT_CONTEXT as _TRANSPORT_CONTEXT

from . import native


def socket_extra(extra: dict[str, Any], sock: socket.socket) -> None:
    """asyncio's extra info for a socket transport: socket, sockname, peername."""
    extra["socket"] = trsock.TransportSocket(sock)
    try:
        extra["sockname"] = sock.getsockname()
    except OSError:
        extra["sockname"] = None
    if "peername" not in extra:
        try:
            extra["peername"] = sock.getpeername()
        except OSError:
            extra["peername"] = None


#: Python 3.15 (gh-140947): transports run their protocol's callbacks in a
#: context of their own (see `tideloop._versions`).
TRANSPORT_CONTEXT: Final = _TRANSPORT_CONTEXT


def bounded_head(
    buffer: collections.deque[Any], iov_max: int, limit: int = WRITE_LIMIT
) -> list[Any]:
    """The first buffers of *buffer* for one vectored write, at most *limit* bytes.

    Used where writes are bounded (`BOUNDED_WRITES`, PyPy: see
    ``_fdio/sock.py``), so that a call copies a bounded amount; the last
    buffer taken is cut to the limit.
    """
    chunks: list[Any] = []
    room = limit
    for chunk in buffer:
        size = len(chunk)
        if size >= room:
            chunks.append(memoryview(chunk)[:room])
            break
        chunks.append(chunk)
        room -= size
        if len(chunks) == iov_max:
            break
    return chunks


class ConnectionTracker(Protocol):
    """The server side of a transport's lifetime (``asyncio.Server``'s hooks)."""

    def _attach(self, transport: asyncio.BaseTransport | None = None) -> None: ...

    def _detach(self, transport: asyncio.BaseTransport | None = None) -> None: ...


class FdTransport(asyncio.BaseTransport):
    """A transport over one fd (a socket or a pipe): registration and lifecycle.

    What asyncio's ``_SelectorTransport`` and its pipe transports share:

    - a read Handle made each time reading starts or resumes, and a write
      Handle each time a write has to wait for the fd, as asyncio's
      ``add_reader()``/``add_writer()`` make them: ``data_received()`` runs in
      a copy of the context that started or resumed reading,
      ``resume_writing()`` (and ``connection_lost()`` after a ``close()``
      that waited for the buffer) in a copy of the context of the
      ``write()`` that had to wait. On 3.15 a socket transport has a context
      of its own (``_context``; see `TRANSPORT_CONTEXT`) and every Handle and
      call_soon of it runs there instead. The write buffer, too, is made at the
      first write that waits: most connections never do, and the buffer and
      the write Handle made up for 980 of the 2,640 bytes a connection cost;
    - ``pause_reading``/``resume_reading``/``is_reading``;
    - ``close()`` (connection_lost once the write buffer has drained),
      ``abort()`` and ``_fatal_error()`` (OSErrors are how connections end:
      logged at debug level only; anything else goes to the exception
      handler), then ``connection_lost`` exactly once, after which the fd is
      closed (through *closer*) and the server, if any, is told.

    Subclasses keep what they have not sent in ``_buffer`` (None until
    `_write_buffer` makes it) and its size in ``_buffer_size`` (in whatever
    unit asyncio reports for that transport), and send it in
    ``_write_ready``.

    Invariants:
    - ``_reader_on`` is True exactly while a read Handle is registered,
      ``_writer_on`` likewise for a write Handle. A Handle detached while
      already queued for this iteration may still run once, so the
      subclasses' callbacks check their state first.
    - ``_conn_lost`` counts the scheduling of connection_lost (only the first
      schedules); ``_fd_closed`` is True once the fd was given back.
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_buffer",
        "_buffer_size",
        "_closer",
        "_closing",
        "_conn_lost",
        "_context",
        "_fd",
        "_fd_closed",
        "_fds",
        "_high_water",
        "_loop",
        "_low_water",
        "_paused",
        "_protocol",
        "_protocol_connected",
        "_protocol_paused",
        "_reader_on",
        "_server",
        "_writer_on",
    )

    _buffer: collections.deque[Any] | None
    _extra: dict[str, Any]  # asyncio.BaseTransport's slot
    # Duck-typed, as in asyncio: any object with the protocol's methods.
    _protocol: Any

    def __init__(  # noqa: PLR0917
        self,
        loop: LoopServices,
        fds: FdRegistry,
        fd: int,
        extra: dict[str, Any] | None,
        server: ConnectionTracker | None,
        closer: Callable[[], None],
    ) -> None:
        # Set first: __del__ reads it even if a constructor fails.
        self._fd_closed = True
        super().__init__(extra)
        self._loop = loop
        self._protocol_paused = False
        self._high_water = 64 * 1024
        self._low_water = 16 * 1024
        self._fds = fds
        self._fd = fd
        self._closer = closer
        self._server = server
        # None: each registration copies its caller's context (before 3.15,
        # and every pipe); else the context of all of this transport's
        # callbacks.
        self._context: contextvars.Context | None = None
        self._buffer = None
        self._buffer_size = 0
        self._conn_lost = 0
        self._closing = False
        self._paused = False
        self._protocol_connected = False
        self._reader_on = False
        self._writer_on = False
        self._fd_closed = False

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._fd_closed:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._fd}")
        if not self._fd_closed and not self._loop.is_closed():
            info.append("read=polling" if self._reader_on else "read=idle")
            state = "polling" if self._writer_on else "idle"
            info.append(f"write=<{state}, bufsize={self._buffer_size}>")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not self._fd_closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._fd_closed = True
            self._closer()
            server = self._server
            if server is not None:
                self._server = None
                server._detach(self)

    # ------------------------------------------------------------------
    # Registration: a Handle per registration, in the caller's context

    def _start_reading(self) -> None:
        if self._reader_on or self._closing or self._paused or self._fd_closed:
            return
        self._fds.set_reader(self._fd, Handle(self._read_ready, (), self._loop, self._context))
        self._reader_on = True

    def _stop_reading(self) -> None:
        if self._reader_on:
            self._reader_on = False
            self._fds.detach_reader(self._fd)

    def _start_writing(self) -> None:
        if self._writer_on or self._fd_closed:
            return
        # Waits are rare (the send that found the socket full): a Handle per
        # wait costs little and copies the writer's context, as asyncio does.
        self._fds.set_writer(self._fd, Handle(self._write_ready, (), self._loop, self._context))
        self._writer_on = True

    def _read_ready(self) -> None:
        """The fd is readable: read, or notice that the peer went (subclasses)."""

    def _write_ready(self) -> None:
        """The fd is writable: send from the buffer (transports that write)."""

    def _write_buffer(self) -> collections.deque[Any]:
        """The write buffer, made on first use (see the class docstring)."""
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = collections.deque()
        return buffer

    def _stop_writing(self) -> None:
        if self._writer_on:
            self._writer_on = False
            self._fds.detach_writer(self._fd)

    # ------------------------------------------------------------------
    # Protocol and reading

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._protocol_connected = True

    def get_protocol(self) -> Any:
        return self._protocol

    def is_reading(self) -> bool:
        return not self._closing and not self._paused

    def pause_reading(self) -> None:
        if self._closing or self._paused:
            return
        self._paused = True
        self._stop_reading()
        if self._loop._debug:
            logger.debug("%r pauses reading", self)

    def resume_reading(self) -> None:
        if self._closing or not self._paused:
            return
        self._paused = False
        self._start_reading()
        if self._loop._debug:
            logger.debug("%r resumes reading", self)

    # ------------------------------------------------------------------
    # Closing

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._buffer:
            self._conn_lost += 1
            self._stop_writing()
            self._loop.call_soon(self._call_connection_lost, None, context=self._context)

    def abort(self) -> None:
        self._force_close(None)

    def _fatal_error(self, exc: BaseException, message: str = "Fatal error on transport") -> None:
        if isinstance(exc, OSError):
            # Resets and broken pipes are how connections end; asyncio
            # reports them to the protocol only.
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
        self._force_close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        if self._buffer:
            self._buffer.clear()
            self._buffer_size = 0
            self._stop_writing()
        if not self._closing:
            self._closing = True
            self._stop_reading()
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc, context=self._context)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        if self._fd_closed:
            return
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            self._release()

    def _release(self) -> None:
        """After connection_lost: unregister, close the fd, tell the server."""
        self._stop_reading()
        self._stop_writing()
        self._fd_closed = True
        self._closer()
        self._protocol = None
        server = self._server
        if server is not None:
            self._server = None
            server._detach(self)


class WriteFlowControl(FdTransport):
    """An `FdTransport` that writes: the water marks and pause/resume_writing.

    No state of its own: the attributes it uses are `FdTransport`'s slots.
    """

    __slots__ = ()

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    def _maybe_pause_protocol(self) -> None:
        if self.get_write_buffer_size() <= self._high_water or self._protocol_paused:
            return
        self._protocol_paused = True
        try:
            self._protocol.pause_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler(
                {
                    "message": "protocol.pause_writing() failed",
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and self.get_write_buffer_size() <= self._low_water:
            self._protocol_paused = False
            try:
                self._protocol.resume_writing()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._loop.call_exception_handler(
                    {
                        "message": "protocol.resume_writing() failed",
                        "exception": exc,
                        "transport": self,
                        "protocol": self._protocol,
                    }
                )

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water = high
        self._low_water = low

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()

    def _consume(self, buffer: collections.deque[Any], n: int) -> None:
        """Drop *n* sent bytes from the front of *buffer* (``self._buffer``)."""
        self._buffer_size -= n
        while n:
            chunk = buffer[0]
            size = len(chunk)
            if size <= n:
                buffer.popleft()
                n -= size
            else:
                # A memoryview slice: the rest is never copied.
                buffer[0] = memoryview(chunk)[n:]
                break


native.install_base(FdTransport, WriteFlowControl)
