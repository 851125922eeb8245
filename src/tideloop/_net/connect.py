"""ConnectMethods: create_connection (happy eyeballs), Unix connections, accepted sockets.

Layer: net. Uses the `Resolver` (fd layer) to resolve, the loop's public
``sock_connect`` to connect (asyncio calls it through the loop too), and
the transports layer's ``_create_connection_transport`` to build the
transport. Semantics are asyncio's (``base_events.py``,
``unix_events.py``) for the running Python: the same argument checks and
messages, the same resolution (literal addresses skip getaddrinfo), the same
error aggregation ("Multiple exceptions: ..."), ``all_errors`` from 3.12 on.

Facts / what this means for us (RFC 8305, "Happy Eyeballs v2"):
- A host name often resolves to several addresses, typically IPv6 and IPv4.
  Trying them one after the other makes a dead first address cost a whole
  connect timeout. RFC 8305 starts the next attempt after a short "connection
  attempt delay" (250 ms recommended; asyncio's ``happy_eyeballs_delay``)
  while earlier attempts continue, uses the first that connects, and cancels
  the rest (section 5). Addresses are interleaved by family first (section
  4; ``interleave``, default 1 when a delay is given).
- The next attempt starts when the delay since the previous start has passed,
  or as soon as the most recent attempt fails: the same rule as asyncio's
  staggered race, which we do not import (`_race` below is our own).
- Two attempts can both connect before the loser is cancelled; the loser's
  socket is closed, never leaked. Every failed attempt's exception is kept
  (for the aggregated error) and marked retrieved.
- Cancelling create_connection cancels every attempt; each closes its socket
  and its sock_connect removes its writer registration.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

from tideloop._core.errors import logger
from tideloop._fdio.resolver import AddrInfo, Resolver
from tideloop._fdio.sock import check_ssl_socket
from tideloop._fdio.sockets import Network, new_socket
from tideloop._transports.stream import StreamMethods
from tideloop._versions import PY312

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


def _bind_error_text(exc: OSError) -> str:
    # 3.12 switched from strerror to str(exc) in this message.
    if PY312:
        return str(exc).lower()
    return (exc.strerror or str(exc)).lower()


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


class ConnectMethods(StreamMethods):
    """``create_connection``, ``create_unix_connection``, ``connect_accepted_socket``."""

    _resolver: Resolver
    _network: Network | None

    # ------------------------------------------------------------------
    # create_connection

    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        host: str | None = None,
        port: int | str | None = None,
        *,
        ssl: Any = None,
        family: int = 0,
        proto: int = 0,
        flags: int = 0,
        sock: socket.socket | None = None,
        local_addr: tuple[Any, ...] | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        happy_eyeballs_delay: float | None = None,
        interleave: int | None = None,
        all_errors: bool | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        if all_errors is not None and not PY312:
            raise TypeError("create_connection() got an unexpected keyword argument 'all_errors'")
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            # The host is the default name to check the certificate against;
            # without one, the caller must say (server_hostname='' skips it).
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            check_ssl_socket(sock)
        if happy_eyeballs_delay is not None and interleave is None:
            interleave = 1  # RFC 8305: alternate families when racing

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            sock = await self._connect_to(
                host=host,
                port=port,
                family=family,
                proto=proto,
                flags=flags,
                local_addr=local_addr,
                happy_eyeballs_delay=happy_eyeballs_delay,
                interleave=interleave,
                all_errors=bool(all_errors),
            )
        else:
            if sock is None:
                raise ValueError("host and port was not specified and no sock specified")
            if sock.type != socket.SOCK_STREAM:
                # AF_UNIX stream sockets are accepted too, as asyncio does.
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            if self._network is not None:
                self._network.adopt(sock)

        transport, protocol = await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        if self._debug:
            # Ask the transport: a TLS transport wraps the socket.
            sock = transport.get_extra_info("socket")
            logger.debug("%r connected to %s:%r: (%r, %r)", sock, host, port, transport, protocol)
        return transport, protocol

    async def _connect_to(
        self,
        *,
        host: str | None,
        port: int | str | None,
        family: int,
        proto: int,
        flags: int,
        local_addr: tuple[Any, ...] | None,
        happy_eyeballs_delay: float | None,
        interleave: int | None,
        all_errors: bool,
    ) -> socket.socket:
        infos = await self._resolver.ensure_resolved(
            (host, port), family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
        )
        if not infos:
            raise OSError("getaddrinfo() returned empty list")
        laddr_infos: list[AddrInfo] | None = None
        if local_addr is not None:
            laddr_infos = await self._resolver.ensure_resolved(
                local_addr, family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
            )
            if not laddr_infos:
                raise OSError("getaddrinfo() returned empty list")
        if interleave:
            infos = interleave_addrinfos(infos, interleave)

        # One list of exceptions per attempt, in attempt order.
        exceptions: list[list[OSError]] = []
        sock: socket.socket | None = None
        if happy_eyeballs_delay is None:
            for info in infos:
                try:
                    sock = await self._connect_sock(exceptions, info, laddr_infos)
                    break
                except OSError:
                    continue
        else:
            sock = await self._race(infos, laddr_infos, happy_eyeballs_delay, exceptions)
        if sock is not None:
            return sock

        flat = [exc for sub in exceptions for exc in sub]
        try:
            if all_errors:
                raise ExceptionGroup("create_connection failed", flat)
            if len(flat) == 1:
                raise flat[0]
            # If they all say the same, one will do; otherwise show them all.
            model = str(flat[0])
            if all(str(exc) == model for exc in flat):
                raise flat[0]
            raise OSError("Multiple exceptions: {}".format(", ".join(str(exc) for exc in flat)))
        finally:
            # The exceptions' tracebacks reference this frame.
            exceptions.clear()
            flat = []

    async def _connect_sock(
        self,
        exceptions: list[list[OSError]],
        addr_info: AddrInfo,
        local_addr_infos: list[AddrInfo] | None = None,
    ) -> socket.socket:
        """Create, bind and connect one socket."""
        my_exceptions: list[OSError] = []
        exceptions.append(my_exceptions)
        family, type_, proto, _, address = addr_info
        sock = None
        try:
            sock = new_socket(self._network, family, type_, proto, address)
            sock.setblocking(False)
            if local_addr_infos is not None:
                for lfamily, _, _, _, laddr in local_addr_infos:
                    if lfamily != family:
                        continue  # a local address of another family
                    try:
                        sock.bind(laddr)
                        break
                    except OSError as exc:
                        msg = (
                            f"error while attempting to bind on address {laddr!r}: "
                            f"{_bind_error_text(exc)}"
                        )
                        my_exceptions.append(OSError(exc.errno, msg))
                else:  # no local address could be bound
                    if my_exceptions:
                        raise my_exceptions.pop()
                    raise OSError(f"no matching local address with {family=} found")
            await self.sock_connect(sock, address)
            return sock
        except OSError as exc:
            my_exceptions.append(exc)
            if sock is not None:
                sock.close()
            raise
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        finally:
            # The list stays in *exceptions*; the name in this frame would make
            # a cycle exception -> traceback -> this frame -> list -> exception.
            del my_exceptions

    async def _race(
        self,
        infos: list[AddrInfo],
        laddr_infos: list[AddrInfo] | None,
        delay: float,
        exceptions: list[list[OSError]],
    ) -> socket.socket | None:
        """RFC 8305 connection attempts; the first socket to connect, or None."""
        try:
            delay <= 0  # noqa: B015 (asyncio's race compares it: a type that cannot, fails)
        except TypeError:
            await _fail_as_staggered_race(self, delay)
            raise
        attempts: list[asyncio.Task[socket.socket]] = []
        winner: socket.socket | None = None
        try:
            for info in infos:
                latest = self.create_task(self._connect_sock(exceptions, info, laddr_infos))
                attempts.append(latest)
                deadline = self.time() + delay
                # Wait for a winner, for this attempt to fail, or for the delay.
                while not latest.done():
                    timeout = deadline - self.time()
                    if timeout <= 0:
                        break
                    running = [t for t in attempts if not t.done()]
                    done, _ = await asyncio.wait(
                        running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                    winner = _first_success(attempts)
                    if winner is not None:
                        return winner
                    if not done:
                        break  # the delay passed
                winner = _first_success(attempts)
                if winner is not None:
                    return winner
            # Every address has an attempt: wait for a success or for all to fail.
            while True:
                running = [t for t in attempts if not t.done()]
                if not running:
                    return None
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                winner = _first_success(attempts)
                if winner is not None:
                    return winner
        finally:
            await _settle(attempts, winner)

    # ------------------------------------------------------------------
    # Unix sockets and accepted sockets

    async def create_unix_connection(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
        *,
        ssl: Any = None,
        sock: socket.socket | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        assert server_hostname is None or isinstance(server_hostname, str)
        if ssl:
            if server_hostname is None:
                raise ValueError("you have to pass server_hostname when using ssl")
        else:
            if server_hostname is not None:
                raise ValueError("server_hostname is only meaningful with ssl")
            if ssl_handshake_timeout is not None:
                raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
            if ssl_shutdown_timeout is not None:
                raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")

        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = new_socket(self._network, socket.AF_UNIX, socket.SOCK_STREAM, 0, path)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, path)
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("no path and sock were specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            if self._network is not None:
                self._network.adopt(sock)
            sock.setblocking(False)

        return await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )

    async def connect_accepted_socket(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        sock: socket.socket,
        *,
        ssl: Any = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        check_ssl_socket(sock)
        if self._network is not None:
            self._network.adopt(sock)
        transport, protocol = await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            "",
            server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        if self._debug:
            sock_info = transport.get_extra_info("socket")
            logger.debug("%r handled: (%r, %r)", sock_info, transport, protocol)
        return transport, protocol


async def _fail_as_staggered_race(loop: asyncio.AbstractEventLoop, delay: Any) -> None:
    """Raise what asyncio's happy-eyeballs race raises for a *delay* it cannot compare.

    That differs between patch releases (a TypeError from ``wait_for``, or,
    since a 3.13 patch release, an ExceptionGroup "staggered race failed"
    holding it), so asyncio's own race is run, over two attempts that fail
    at once, to raise exactly what this Python's does. Returns if it raises
    nothing (the caller then raises the TypeError).
    """
    from asyncio import staggered

    async def attempt() -> None:
        raise OSError("no connection attempted")

    await staggered.staggered_race([attempt, attempt], delay, loop=loop)


def _first_success(attempts: Iterable[asyncio.Task[socket.socket]]) -> socket.socket | None:
    for task in attempts:
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()
    return None


async def _settle(
    attempts: list[asyncio.Task[socket.socket]], winner: socket.socket | None
) -> None:
    """Cancel the losers, wait for them to clean up, close extra winners."""
    pending = [t for t in attempts if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in attempts:
        if task.cancelled():
            continue
        exc = task.exception()  # also marks it retrieved
        if exc is None:
            sock = task.result()
            if sock is not winner:
                sock.close()
