"""DatagramTransport: UDP and AF_UNIX datagram sockets.

Layer: transports. An ``asyncio.DatagramTransport`` (and, like asyncio's own,
an ``asyncio.Transport``) with the semantics of
asyncio's ``_SelectorDatagramTransport`` (``selector_events.py``) for the
running Python; registration and lifecycle (pause/resume, close, abort,
fatal errors, connection_lost) come from `FdTransport`.

- ``sendto(data, addr)`` sends at once when nothing is queued; what the
  kernel refuses with EAGAIN is queued (as an immutable copy) and sent when
  the socket turns writable, with flow control (pause_writing above the
  high-water mark). On a connected endpoint *addr* must be None or the
  remote address (ValueError otherwise), and ``send`` is used.
- Errors of one datagram are not errors of the transport: an OSError from
  send/recv (ICMP port unreachable surfaces as ECONNREFUSED on a connected
  socket, a too-large datagram as EMSGSIZE) goes to
  ``protocol.error_received(exc)`` and the endpoint stays open. Anything else
  is fatal, as in asyncio.
- ``get_write_buffer_size()`` counts queued payload bytes, plus, from Python
  3.13 on, 8 bytes of header per datagram (asyncio 3.13's accounting).

Facts / what this means for us:
- A datagram larger than the buffer given to recvfrom is truncated, and the
  rest is lost. asyncio asks for 256 KiB, but glibc serves an allocation that
  large with mmap, so every read would map and unmap memory (several times
  the cost of the read itself for a small datagram). A UDP payload is at
  most 65,527 bytes, so UDP sockets read with ``recvfrom(64 KiB)``: nothing
  can be truncated. AF_UNIX datagrams can be larger (up to the socket's
  send buffer), so those read into one reused 256 KiB buffer and copy out
  what arrived: asyncio's limit, without the mmap.
- Zero-length datagrams are real datagrams (a UDP header with no payload);
  asyncio before 3.13 silently dropped them on send. We send them on every
  Python (``tests/divergences.py``, "zero-length-datagrams").

Invariants (with those of `FdTransport`):
- The write Handle is registered exactly while datagrams are queued.
- ``_buffer`` holds ``(bytes, address)`` pairs; ``_buffer_size`` is the sum
  of their accounted sizes.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from asyncio import constants
from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]
from typing import Any, Final

from tideloop._core.errors import logger
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry

from .base import WriteFlowControl, socket_extra

#: Bytes accounted per queued datagram beyond its payload (asyncio 3.13+).
HEADER_SIZE: Final = 8 if sys.version_info >= (3, 13) else 0

#: recvfrom() size for UDP: above the largest UDP payload (see the docstring).
UDP_READ_SIZE: Final = 64 * 1024

_INET_FAMILIES: Final = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))

_Address = Any


class DatagramTransport(WriteFlowControl, asyncio.Transport, asyncio.DatagramTransport):
    __slots__ = ("_address", "_connected", "_read_buf", "_sock")

    #: asyncio's read size, kept for code that reads it; see the docstring.
    max_size: int = 256 * 1024

    _buffer: Any  # deque[tuple[bytes, address]]

    def __init__(  # noqa: PLR0917 (asyncio's transport constructor order, then ours)
        self,
        loop: LoopServices,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        address: _Address = None,
        waiter: asyncio.Future[Any] | None = None,
        extra: dict[str, Any] | None = None,
        *,
        fds: FdRegistry,
    ) -> None:
        self._fd_closed = True
        fd = sock.fileno()
        super().__init__(loop, fds, fd, extra, None, sock.close)
        socket_extra(self._extra, sock)
        self._sock = sock
        self._address = address
        self._connected = bool(self._extra["peername"])
        self._read_buf: memoryview | None = None
        if sock.family not in _INET_FAMILIES:
            self._read_buf = memoryview(bytearray(self.max_size))
        self.set_protocol(protocol)
        fds.transports[fd] = self

        loop.call_soon(protocol.connection_made, self)
        # Reading starts only once connection_made() has run.
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    # ------------------------------------------------------------------
    # Receiving

    def _read_ready(self) -> None:
        if not self._reader_on or self._conn_lost:
            return  # detached after this run was queued
        data: bytes
        try:
            buf = self._read_buf
            if buf is None:
                data, addr = self._sock.recvfrom(UDP_READ_SIZE)
            else:
                n, addr = self._sock.recvfrom_into(buf)
                data = bytes(buf[:n])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._protocol.error_received(exc)
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on datagram transport")
            return
        self._protocol.datagram_received(data, addr)

    # ------------------------------------------------------------------
    # Sending

    def sendto(self, data: bytes | bytearray | memoryview, addr: _Address = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        address = self._address
        if address:
            if addr not in (None, address):
                raise ValueError(f"Invalid address: must be None or {address}")
            addr = address
        if self._conn_lost and address:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return

        if not self._buffer:
            # Nothing queued: try to send it now.
            try:
                if self._connected:
                    self._sock.send(data)
                else:
                    self._sock.sendto(data, addr)
                return
            except (BlockingIOError, InterruptedError):
                self._start_writing()
            except OSError as exc:
                self._protocol.error_received(exc)
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return

        # Queue an immutable copy: the caller may reuse its buffer.
        self._write_buffer().append((bytes(data), addr))
        self._buffer_size += len(data) + HEADER_SIZE
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        buffer = self._buffer
        sock = self._sock
        connected = self._connected
        while buffer:
            data, addr = buffer[0]
            try:
                if connected:
                    sock.send(data)
                else:
                    sock.sendto(data, addr)
            except (BlockingIOError, InterruptedError):
                break  # still full: wait for the next writable event
            except OSError as exc:
                buffer.popleft()
                self._buffer_size -= len(data) + HEADER_SIZE
                self._protocol.error_received(exc)
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
            buffer.popleft()
            self._buffer_size -= len(data) + HEADER_SIZE

        self._maybe_resume_protocol()  # may queue more
        if not buffer:
            self._stop_writing()
            if self._closing:
                self._call_connection_lost(None)
