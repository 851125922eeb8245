"""Name resolution: the `Resolver` component and ``getaddrinfo``/``getnameinfo``.

Layer: fd I/O. Resolution sits this low because asyncio's ``sock_connect``
(this layer) resolves host names of AF_INET/AF_INET6 addresses; the net
layer's connect and bind paths use the same `Resolver`. `DnsMethods` is the
loop's public face of it.

`Resolver.ensure_resolved` (the connect/bind paths) skips resolution for
literal addresses and otherwise calls the *loop's public* ``getaddrinfo``,
not its own: asyncio does, and programs and tests replace
``loop.getaddrinfo`` to stub DNS. That public method, in turn, is
`Resolver.getaddrinfo`.

Facts / what this means for us:
- ``socket.getaddrinfo`` may block for seconds (DNS, /etc/hosts, NSS
  modules), so asyncio runs it in the default executor, and so do we.
- A host that is already a literal IP address needs no resolution. asyncio's
  connect/bind paths recognise it with ``inet_pton`` and build the addrinfo
  tuple themselves (``_ipaddr_info``): no thread hop, no executor. We do the
  same, with asyncio's rules: only for proto 0/TCP/UDP with a stream or
  datagram type, a numeric (or empty/None) port, and no IPv6 zone index
  ("%eth0" is refused by Linux's inet_pton).
- The public ``getaddrinfo()`` returns what ``socket.getaddrinfo`` returns
  (for a literal host and type 0 that is one entry per socket type, which
  the fast path above would not produce). For a literal host with a numeric
  port we therefore still call ``socket.getaddrinfo``, but inline, with
  AI_NUMERICHOST | AI_NUMERICSERV added: with those flags the C library
  never consults DNS or the services database, so the call cannot block,
  and the result is the same. Debug mode keeps asyncio's logged executor
  path.
"""

from __future__ import annotations

import socket
from typing import Any, Final

from tideloop._core.coreloop import CoreLoop
from tideloop._core.errors import logger
from tideloop._core.interfaces import LoopServices

from .sockets import Network

AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr)

HAS_IPV6: Final = hasattr(socket, "AF_INET6")

_FAST_PROTOS = frozenset({0, socket.IPPROTO_TCP, socket.IPPROTO_UDP})
_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


def ipaddr_info(  # noqa: PLR0917 (asyncio's _ipaddr_info signature)
    host: Any,
    port: Any,
    family: int,
    type: int,
    proto: int,
    flowinfo: int = 0,
    scopeid: int = 0,
) -> AddrInfo | None:
    """The addrinfo tuple for a literal IP *host*, or None if it must be resolved."""
    if not hasattr(socket, "inet_pton"):  # pragma: no cover
        return None
    if proto not in _FAST_PROTOS or host is None:
        return None
    if type == socket.SOCK_STREAM:
        proto = socket.IPPROTO_TCP
    elif type == socket.SOCK_DGRAM:
        proto = socket.IPPROTO_UDP
    else:
        return None

    if port is None or port in {b"", ""}:
        port = 0
    else:
        # A service name ("http") needs the services database.
        try:
            port = int(port)
        except (TypeError, ValueError):
            return None

    families: list[int]
    if family == socket.AF_UNSPEC:
        families = [socket.AF_INET, socket.AF_INET6] if HAS_IPV6 else [socket.AF_INET]
    else:
        families = [family]

    if isinstance(host, bytes):
        host = host.decode("idna")
    if "%" in host:
        return None  # a zone index: Linux's inet_pton refuses it

    for af in families:
        try:
            socket.inet_pton(af, host)
        except OSError:
            continue
        if HAS_IPV6 and af == socket.AF_INET6:
            return af, type, proto, "", (host, port, flowinfo, scopeid)
        return af, type, proto, "", (host, port)
    return None


def _is_literal_ip(host: object) -> bool:
    if not isinstance(host, str) or "%" in host:
        return False
    for af in (socket.AF_INET, socket.AF_INET6) if HAS_IPV6 else (socket.AF_INET,):
        try:
            socket.inet_pton(af, host)
        except OSError:
            continue
        return True
    return False


def _is_numeric_port(port: object) -> bool:
    if port is None or type(port) is int:
        return True
    return isinstance(port, str) and port.isascii() and port.isdigit()


class Resolver:
    """Resolves addresses for the loop: literal fast path, else getaddrinfo in a thread."""

    __slots__ = ("_loop", "_network")

    def __init__(self, loop: LoopServices, network: Network | None = None) -> None:
        self._loop = loop
        self._network = network

    def _getaddrinfo_debug(  # noqa: PLR0917 (socket.getaddrinfo's order, for the executor)
        self, host: Any, port: Any, family: int, type: int, proto: int, flags: int
    ) -> list[AddrInfo]:
        # asyncio's debug-mode wrapper, with its log lines.
        parts = [f"{host}:{port!r}"]
        if family:
            parts.append(f"family={family!r}")
        if type:
            parts.append(f"type={type!r}")
        if proto:
            parts.append(f"proto={proto!r}")
        if flags:
            parts.append(f"flags={flags!r}")
        msg = ", ".join(parts)
        logger.debug("Get address info %s", msg)
        loop = self._loop
        t0 = loop.time()
        addrinfo = socket.getaddrinfo(host, port, family, type, proto, flags)
        dt = loop.time() - t0
        msg = f"Getting address info {msg} took {dt * 1e3:.3f}ms: {addrinfo!r}"
        if dt >= loop.slow_callback_duration:
            logger.info(msg)
        else:
            logger.debug(msg)
        return addrinfo

    async def getaddrinfo(  # noqa: PLR0917 (socket.getaddrinfo's order)
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        family: int,
        type: int,
        proto: int,
        flags: int,
    ) -> list[AddrInfo]:
        loop = self._loop
        if self._network is not None:
            answer = self._network.getaddrinfo(host, port, family, type, proto, flags)
            if answer is not None:
                return answer
        if loop._debug:
            return await loop.run_in_executor(
                None, self._getaddrinfo_debug, host, port, family, type, proto, flags
            )
        if _is_literal_ip(host) and _is_numeric_port(port) and isinstance(flags, int):
            # Cannot block (see the module docstring): no thread hop. (Flags
            # that are not an int go the executor's way, to fail as there.)
            return socket.getaddrinfo(host, port, family, type, proto, flags | _NUMERIC_FLAGS)
        return await loop.run_in_executor(
            None, socket.getaddrinfo, host, port, family, type, proto, flags
        )

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int) -> tuple[str, str]:
        return await self._loop.run_in_executor(None, socket.getnameinfo, sockaddr, flags)

    async def ensure_resolved(
        self,
        address: tuple[Any, ...],
        *,
        family: int = 0,
        type: int = socket.SOCK_STREAM,
        proto: int = 0,
        flags: int = 0,
    ) -> list[AddrInfo]:
        host, port = address[:2]
        info = ipaddr_info(host, port, family, type, proto, *address[2:])
        if info is not None:
            return [info]  # already a literal IP address
        # Through the loop's public method, which programs and tests replace.
        return await self._loop.getaddrinfo(
            host, port, family=family, type=type, proto=proto, flags=flags
        )


class DnsMethods(CoreLoop):
    """``getaddrinfo``, ``getnameinfo``."""

    _resolver: Resolver

    async def getaddrinfo(
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[AddrInfo]:
        return await self._resolver.getaddrinfo(host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        return await self._resolver.getnameinfo(sockaddr, flags)
