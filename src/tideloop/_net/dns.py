"""DnsLoop: getaddrinfo() / getnameinfo(), and resolving connect/bind addresses.

Layer: net, the lowest class of it (above the transports layer). It also
provides `_ensure_resolved`, which the fd layer's ``sock_connect`` calls.

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

import itertools
import socket
from typing import Any

from tideloop._core.clock import Clock
from tideloop._core.errors import logger
from tideloop._fdio.sock import HAS_IPV6
from tideloop._pollers import Poller
from tideloop._transports import TransportLoop

AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr)

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


def interleave_addrinfos(
    addrinfos: list[AddrInfo], first_address_family_count: int = 1
) -> list[AddrInfo]:
    """Reorder by family, alternating (RFC 8305 section 4).

    The first *first_address_family_count* entries of the first family come
    first, then one of each family in turn.
    """
    by_family: dict[int, list[AddrInfo]] = {}
    for info in addrinfos:
        by_family.setdefault(info[0], []).append(info)
    lists = list(by_family.values())
    reordered: list[AddrInfo] = []
    if first_address_family_count > 1:
        reordered.extend(lists[0][: first_address_family_count - 1])
        del lists[0][: first_address_family_count - 1]
    reordered.extend(
        info for info in itertools.chain.from_iterable(itertools.zip_longest(*lists)) if info
    )
    return reordered


class DnsLoop(TransportLoop):
    def __init__(self, *, poller: Poller | str | None = None, clock: Clock | None = None) -> None:
        super().__init__(poller=poller, clock=clock)

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
        t0 = self.time()
        addrinfo = socket.getaddrinfo(host, port, family, type, proto, flags)
        dt = self.time() - t0
        msg = f"Getting address info {msg} took {dt * 1e3:.3f}ms: {addrinfo!r}"
        if dt >= self.slow_callback_duration:
            logger.info(msg)
        else:
            logger.debug(msg)
        return addrinfo

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
        if self._debug:
            return await self.run_in_executor(
                None, self._getaddrinfo_debug, host, port, family, type, proto, flags
            )
        if _is_literal_ip(host) and _is_numeric_port(port):
            # Cannot block (see the module docstring): no thread hop.
            return socket.getaddrinfo(host, port, family, type, proto, flags | _NUMERIC_FLAGS)
        return await self.run_in_executor(
            None, socket.getaddrinfo, host, port, family, type, proto, flags
        )

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)

    async def _ensure_resolved(
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
        # Through the public method, which users and tests may replace.
        return await self.getaddrinfo(
            host, port, family=family, type=type, proto=proto, flags=flags
        )
