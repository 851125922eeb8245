"""DatagramMethods: ``create_datagram_endpoint``.

Layer: net. Resolves the local and remote addresses with the `Resolver`,
creates and binds (and, for a remote address, connects) the socket, and
hands it to the transports layer's ``_make_datagram_transport``.

Semantics are asyncio's (``base_events.create_datagram_endpoint``) for the
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
from collections.abc import Callable
from typing import Any, Final

from tideloop._core.errors import logger
from tideloop._fdio.dns import Resolver
from tideloop._fdio.network import Network, new_socket
from tideloop._transports.factory import TransportMethods

from .server import _set_reuseport, remove_stale_unix_socket


def _stdlib_refuses_only_stream_socks() -> bool:
    """Does the stdlib refuse only a SOCK_STREAM *sock* ("A datagram socket was expected")?

    Not a version number: 3.13 made the change and PyPy's 3.11 stdlib has it
    too (3.11 and 3.12 refuse every type but SOCK_DGRAM, "A UDP Socket was
    expected"), so it is read off the running stdlib's own code.
    """
    consts = asyncio.BaseEventLoop.create_datagram_endpoint.__code__.co_consts
    return any(isinstance(c, str) and c.startswith("A datagram socket was") for c in consts)


_ANY_NON_STREAM_SOCK: Final = _stdlib_refuses_only_stream_socks()


class DatagramMethods(TransportMethods):
    """``create_datagram_endpoint``."""

    _resolver: Resolver
    _network: Network | None

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
                    _set_reuseport(sock)
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
