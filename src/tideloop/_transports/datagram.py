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

`DatagramMethods` opens the kind (``create_datagram_endpoint``): it resolves
the local and remote addresses with the `Resolver`, creates and binds
(and, for a remote address, connects) the socket, and builds the
transport. Semantics are asyncio's (``base_events.create_datagram_endpoint``) for the
running Python: the same argument checks and messages (3.13 and PyPy 3.11
accept any non-stream socket as *sock*; CPython 3.11 and 3.12 only
SOCK_DGRAM, with another message), the same search over address families
(the first family in which both addresses resolve and the socket binds and
connects wins; if none does, the first error is raised), and
``reuse_address`` is not a parameter at all, so passing it is a TypeError,
as asyncio's signature makes it.

Facts / what this means for us:
- Connecting a UDP socket only records the peer in the kernel: no packet is
  sent. Afterwards ``send`` needs no address, datagrams from other sources
  are filtered out, and an ICMP "port unreachable" for a datagram we sent
  is reported as ECONNREFUSED on the next send or receive (asyncio passes it
  to ``error_received``).
- With ``allow_broadcast`` asyncio does not connect the socket (a broadcast
  address cannot be connected to usefully), but still sends to
  *remote_addr* by default.
- An AF_UNIX datagram socket bound to a path leaves the file behind when it
  closes; asyncio removes a stale socket file at *local_addr* before binding
  (and leaves it after closing), and so do we.
"""

from __future__ import annotations

import asyncio
import socket
from asyncio import constants
from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]
from collections.abc import Callable
from typing import Any, Final

from tideloop._core.coreloop import CoreLoop
from tideloop._core.errors import logger
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry
from tideloop._fdio.resolver import Resolver
from tideloop._fdio.sock import remove_stale_unix_socket, set_reuseport
from tideloop._fdio.sockets import Network, new_socket
from tideloop._versions import ANY_NON_STREAM_SOCK, UDP_HEADER_SIZE

from . import native
from .base import WriteFlowControl, socket_extra

_ANY_NON_STREAM_SOCK: Final = ANY_NON_STREAM_SOCK

#: Bytes accounted per queued datagram beyond its payload (asyncio 3.13+).
HEADER_SIZE: Final = UDP_HEADER_SIZE

#: recvfrom() size for UDP: above the largest UDP payload (see the docstring).
UDP_READ_SIZE: Final = 64 * 1024

_INET_FAMILIES: Final = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))

_Address = Any


class DatagramTransport(WriteFlowControl, asyncio.Transport, asyncio.DatagramTransport):
    __slots__ = ("_address", "_connected", "_family", "_read_buf", "_sock")

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
        # An int (the native paths read it: they convert addresses themselves
        # for AF_INET and AF_INET6 only).
        self._family = int(sock.family)
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

        self._queue(data, addr)

    _sendto_pure = sendto

    def _queue(self, data: bytes | bytearray | memoryview, addr: _Address) -> None:
        """Queue a datagram until the socket takes it (the native sendto's tail too)."""
        # An immutable copy: the caller may reuse its buffer.
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


native.install_datagram(DatagramTransport, UDP_READ_SIZE)


class DatagramMethods(CoreLoop):
    """``create_datagram_endpoint``, and ``_make_datagram_transport`` (asyncio's name)."""

    _fds: FdRegistry
    _resolver: Resolver
    _network: Network | None

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

    async def create_datagram_endpoint(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        local_addr: Any = None,
        remote_addr: Any = None,
        *,
        family: int = 0,
        proto: int = 0,
        flags: int = 0,
        reuse_port: bool | None = None,
        allow_broadcast: bool | None = None,
        sock: socket.socket | None = None,
    ) -> tuple[asyncio.DatagramTransport, asyncio.BaseProtocol]:
        r_addr: Any = None
        if sock is not None:
            if _ANY_NON_STREAM_SOCK:
                if sock.type == socket.SOCK_STREAM:
                    raise ValueError(f"A datagram socket was expected, got {sock!r}")
            elif sock.type != socket.SOCK_DGRAM:
                raise ValueError(f"A UDP Socket was expected, got {sock!r}")
            if (
                local_addr
                or remote_addr
                or family
                or proto
                or flags
                or reuse_port
                or allow_broadcast
            ):
                # Show the offending arguments, as asyncio does.
                opts = {
                    "local_addr": local_addr,
                    "remote_addr": remote_addr,
                    "family": family,
                    "proto": proto,
                    "flags": flags,
                    "reuse_port": reuse_port,
                    "allow_broadcast": allow_broadcast,
                }
                problems = ", ".join(f"{k}={v}" for k, v in opts.items() if v)
                raise ValueError(
                    f"socket modifier keyword arguments can not be used "
                    f"when sock is specified. ({problems})"
                )
            if self._network is not None:
                self._network.adopt(sock)
            sock.setblocking(False)
        else:
            sock, r_addr = await self._open_datagram_socket(
                local_addr, remote_addr, family, proto, flags, reuse_port, allow_broadcast
            )

        protocol = protocol_factory()
        waiter: asyncio.Future[None] = self.create_future()
        transport = self._make_datagram_transport(sock, protocol, r_addr, waiter)
        if self._debug:
            if local_addr:
                logger.info(
                    "Datagram endpoint local_addr=%r remote_addr=%r created: (%r, %r)",
                    local_addr,
                    remote_addr,
                    transport,
                    protocol,
                )
            else:
                logger.debug(
                    "Datagram endpoint remote_addr=%r created: (%r, %r)",
                    remote_addr,
                    transport,
                    protocol,
                )
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    async def _open_datagram_socket(  # noqa: PLR0917
        self,
        local_addr: Any,
        remote_addr: Any,
        family: int,
        proto: int,
        flags: int,
        reuse_port: bool | None,
        allow_broadcast: bool | None,
    ) -> tuple[socket.socket, Any]:
        """Create, bind and connect the endpoint's socket; return it and the remote address."""
        pairs: list[tuple[tuple[int, int], tuple[Any, Any]]]
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            pairs = [((family, proto), (None, None))]
        elif hasattr(socket, "AF_UNIX") and family == socket.AF_UNIX:
            for addr in (local_addr, remote_addr):
                if addr is not None and not isinstance(addr, str):
                    raise TypeError("string is expected")
            if local_addr:
                # A filesystem call: on a thread, not the loop's.
                await self._in_thread(remove_stale_unix_socket, local_addr)
            pairs = [((family, proto), (local_addr, remote_addr))]
        else:
            # Addresses by (family, proto), in resolution order.
            by_key: dict[tuple[int, int], list[Any]] = {}
            for idx, addr in ((0, local_addr), (1, remote_addr)):
                if addr is None:
                    continue
                if not (isinstance(addr, tuple) and len(addr) == 2):
                    raise TypeError("2-tuple is expected")
                infos = await self._resolver.ensure_resolved(
                    addr, family=family, type=socket.SOCK_DGRAM, proto=proto, flags=flags
                )
                if not infos:
                    raise OSError("getaddrinfo() returned empty list")
                for fam, _, pro, _, address in infos:
                    by_key.setdefault((fam, pro), [None, None])[idx] = address
            # Each given address must have a candidate in the family.
            pairs = [
                (key, (pair[0], pair[1]))
                for key, pair in by_key.items()
                if not ((local_addr and pair[0] is None) or (remote_addr and pair[1] is None))
            ]
            if not pairs:
                raise ValueError("can not get address information")

        exceptions: list[OSError] = []
        for (fam, pro), (local_address, remote_address) in pairs:
            sock = None
            try:
                sock = new_socket(self._network, fam, socket.SOCK_DGRAM, pro, remote_address)
                if reuse_port:
                    set_reuseport(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(local_address)
                r_addr = None
                if remote_addr:
                    if not allow_broadcast:
                        await self.sock_connect(sock, remote_address)
                    r_addr = remote_address
            except OSError as exc:
                if sock is not None:
                    sock.close()
                exceptions.append(exc)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            else:
                return sock, r_addr
        try:
            raise exceptions[0]
        finally:
            exceptions.clear()  # the tracebacks reference this frame
