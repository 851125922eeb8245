"""Servers: the `Server` object, create_server(), create_unix_server(), accepting.

Layer: net. `ServerMethods` holds the loop methods; the state that outlives
one call (accept-retry timers, Unix socket files to unlink) lives in the
`Listeners` component. Accepted sockets become transports through the
transports layer's ``_make_socket_transport``. We own servers: `Server` is
our class (an `asyncio.AbstractServer`), with the
behaviour of ``asyncio.Server`` of the running Python:

- 3.11: ``wait_closed()`` returns at once if the server is already closed.
- 3.12+: ``wait_closed()`` waits until the server is closed *and* every
  connection it accepted is gone.
- 3.13+: ``close_clients()`` / ``abort_clients()``, ``create_server(...,
  keep_alive=)``, ``create_unix_server(..., cleanup_socket=True)``. On older
  Pythons these arguments raise TypeError, as asyncio's signatures do.

Facts / what this means for us:
- A listening socket is readable when its accept queue is not empty. asyncio
  accepts up to ``backlog`` connections per readiness event (bpo-27906) so a
  burst does not cost one poll per connection; so do we.
- accept() fails with EMFILE/ENFILE when the process/system is out of file
  descriptors, ENOBUFS/ENOMEM under memory pressure. The pending connection
  stays queued and the socket stays readable, so level-triggered polling
  would call us again at once, forever. asyncio reports the error to the
  exception handler ('socket.accept() out of system resource'), stops
  polling the socket, and retries after ``ACCEPT_RETRY_DELAY`` (1 s). We do
  the same, once per event (asyncio keeps looping up to ``backlog`` times,
  logging and scheduling a retry each time), and the retry timer is
  cancelled if the server closes meanwhile. ECONNABORTED (the client gave up
  while queued) skips that connection, as asyncio 3.13.x+ does.
- An accepted connection's transport is built right in the accept callback,
  in a fresh copy of the context (asyncio builds it in a new task, which also
  runs it in a copy of the context): no task per connection. On 3.15 that
  copy is of the context the server was created in, and the transport keeps
  it for all its protocol's callbacks (gh-140947).
- A listening AF_INET6 socket gets IPV6_V6ONLY, so binding "::" and
  "0.0.0.0" both works (Linux otherwise makes the IPv6 socket dual-stack).
  SO_REUSEADDR is on by default on POSIX (rebinding a port in TIME_WAIT).
  SO_REUSEPORT lets several sockets (processes) share a port; the kernel
  balances connections between them.
- A Unix server's socket file outlives the socket. Before binding, a stale
  socket file at the path is removed; on 3.13+ the file is unlinked when the
  server closes, but only if it is still the one we bound (same inode).

Invariants:
- ``Server._sockets`` is None exactly after close(); waiters of
  wait_closed() are released exactly once (``_waiters`` becomes None).
- A Server holds its transports weakly (an abandoned transport must still be
  collectable and warn).
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
import errno
import functools
import itertools
import os
import socket
import sys
import weakref
from asyncio import constants, trsock
from typing import Any, Final

from tideloop._core.errors import logger
from tideloop._core.handles import Handle
from tideloop._fdio.registry import FdRegistry
from tideloop._fdio.resolver import HAS_IPV6, AddrInfo, Resolver
from tideloop._fdio.sock import check_ssl_socket, remove_stale_unix_socket, set_reuseport
from tideloop._fdio.sockets import Network, new_socket, simulated
from tideloop._transports.base import TRANSPORT_CONTEXT
from tideloop._transports.stream import StreamMethods
from tideloop._versions import BIND_MESSAGE_STRERROR, BIND_SKIPS_EADDRNOTAVAIL, PY312, PY313

from .connect import ProtocolFactory

_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Server(asyncio.AbstractServer):
    def __init__(  # noqa: PLR0917 (asyncio.Server's signature)
        self,
        loop: ServerMethods,
        sockets: list[socket.socket],
        protocol_factory: ProtocolFactory,
        ssl_context: Any,
        backlog: int,
        ssl_handshake_timeout: float | None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        self._loop = loop
        self._sockets: list[socket.socket] | None = sockets
        self._clients: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()
        self._active_count = 0
        self._waiters: list[asyncio.Future[None]] | None = []
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._ssl_context = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._serving = False
        self._serving_forever_fut: asyncio.Future[None] | None = None
        # 3.15: connections get copies of the context the server was made in.
        self._context: contextvars.Context | None = (
            contextvars.copy_context() if TRANSPORT_CONTEXT else None
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} sockets={self.sockets!r}>"

    # Called by transports. 3.13 tracks the transports themselves (for
    # close_clients); earlier versions count, and their _attach()/_detach()
    # take no argument (CPython's own tests call them so).
    def _attach(self, transport: asyncio.BaseTransport | None = None) -> None:
        if transport is not None and PY313:
            self._clients.add(transport)
        else:
            self._active_count += 1

    def _detach(self, transport: asyncio.BaseTransport | None = None) -> None:
        if transport is not None and PY313:
            self._clients.discard(transport)
        else:
            self._active_count -= 1
        if self._active() == 0 and self._sockets is None:
            self._wakeup()

    def _active(self) -> int:
        return len(self._clients) + self._active_count

    def _wakeup(self) -> None:
        waiters = self._waiters
        self._waiters = None
        if waiters is None:
            return
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _start_serving(self) -> None:
        if self._serving or self._sockets is None:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            self._loop._start_serving(
                self._protocol_factory,
                sock,
                self._ssl_context,
                self,
                self._backlog,
                self._ssl_handshake_timeout,
                self._ssl_shutdown_timeout,
            )

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    @property
    def sockets(self) -> tuple[trsock.TransportSocket, ...]:
        if self._sockets is None:
            return ()
        return tuple(trsock.TransportSocket(s) for s in self._sockets)

    def close(self) -> None:
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        for sock in sockets:
            self._loop._stop_serving(sock)
        self._serving = False
        fut = self._serving_forever_fut
        if fut is not None and not fut.done():
            fut.cancel()
            self._serving_forever_fut = None
        if self._active() == 0:
            self._wakeup()

    if PY313:

        def close_clients(self) -> None:
            for transport in self._clients.copy():
                transport.close()

        def abort_clients(self) -> None:
            for transport in self._clients.copy():
                transport.abort()  # type: ignore[attr-defined]

    async def start_serving(self) -> None:
        self._start_serving()
        # One loop iteration, as asyncio: the accept readers are in place.
        await asyncio.sleep(0)

    async def serve_forever(self) -> None:
        if self._serving_forever_fut is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except asyncio.CancelledError:
            try:
                self.close()
                if PY313:
                    # wait_closed() waits for the connections too: close
                    # them, or a client that hangs on keeps this cancelled
                    # task waiting (gh-123720; asyncio before 3.13.x hangs:
                    # divergence serve-forever-closes-clients).
                    for transport in self._clients.copy():
                        transport.close()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self) -> None:
        # 3.12+: released once the server is closed and its connections are
        # gone, in either order. 3.11 returned at once if already closed.
        if self._waiters is None or (not PY312 and self._sockets is None):
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class Listeners:
    """What the loop remembers about its listening sockets between calls."""

    __slots__ = ("retries", "unix_inodes")

    def __init__(self) -> None:
        # Listening Unix sockets to unlink on close: socket -> inode bound.
        self.unix_inodes: dict[socket.socket, int] = {}
        # Pending accept retries after EMFILE & co: socket -> timer.
        self.retries: dict[socket.socket, asyncio.TimerHandle] = {}

    def close(self) -> None:
        """The loop is closing: its timers are gone; forget the sockets."""
        self.retries.clear()
        self.unix_inodes.clear()


def bind_unix_path(sock: socket.socket, path: str | bytes | None, inode: bool) -> int | None:
    """Bind *sock* to *path* (if given), removing a stale socket file first;
    with *inode*, the inode of the file *sock* is bound to (None if none).
    Blocking calls: one helper-thread trip does them all."""
    if path is not None:
        remove_stale_unix_socket(path)
        sock.bind(path)
    if not inode:
        return None
    bound = sock.getsockname()
    if not bound or bound[0] in (0, "\x00"):
        return None  # unbound, or an abstract socket: no file
    try:
        return os.stat(bound).st_ino
    except FileNotFoundError:
        return None


class ServerMethods(StreamMethods):
    """``create_server``, ``create_unix_server``; accepting connections."""

    _fds: FdRegistry
    _resolver: Resolver
    _listeners: Listeners
    _network: Network | None

    # ------------------------------------------------------------------
    # Accepting

    def _start_serving(  # noqa: PLR0917 (asyncio's signature; tests replace it)
        self,
        protocol_factory: ProtocolFactory,
        sock: socket.socket,
        sslcontext: Any = None,
        server: Server | None = None,
        backlog: int = 100,
        ssl_handshake_timeout: float | None = constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout: float | None = constants.SSL_SHUTDOWN_TIMEOUT,
    ) -> None:
        self._listeners.retries.pop(sock, None)
        self._check_closed()
        handle = Handle(
            self._accept_connection,
            (
                protocol_factory,
                sock,
                sslcontext,
                server,
                backlog,
                ssl_handshake_timeout,
                ssl_shutdown_timeout,
            ),
            self,
            None,
        )
        self._fds.set_reader(sock.fileno(), handle)

    def _accept_connection(  # noqa: PLR0917 (asyncio's signature)
        self,
        protocol_factory: ProtocolFactory,
        sock: socket.socket,
        sslcontext: Any = None,
        server: Server | None = None,
        backlog: int = 100,
        ssl_handshake_timeout: float | None = constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout: float | None = constants.SSL_SHUTDOWN_TIMEOUT,
    ) -> None:
        # Up to `backlog` connections per readiness event (see the docstring).
        for _ in range(backlog):
            try:
                conn, addr = sock.accept()
                if self._debug:
                    logger.debug("%r got a new connection from %r: %r", server, addr, conn)
                conn.setblocking(False)
            except ConnectionAbortedError:
                continue  # aborted before we accepted it: take the next
            except (BlockingIOError, InterruptedError):
                return  # the accept queue is empty
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise  # the loop reports it; the server goes on
                # Out of fds or memory: stop polling (the socket would stay
                # readable), retry later.
                self.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": exc,
                        "socket": trsock.TransportSocket(sock),
                    }
                )
                self._fds.remove_reader(sock.fileno())
                self._listeners.retries[sock] = self.call_later(
                    constants.ACCEPT_RETRY_DELAY,
                    self._start_serving,
                    protocol_factory,
                    sock,
                    sslcontext,
                    server,
                    backlog,
                    ssl_handshake_timeout,
                    ssl_shutdown_timeout,
                )
                return
            else:
                # A fresh context per connection, as a task would have; on
                # 3.15 a copy of the server's, which the transport keeps.
                server_context = None if server is None else server._context
                context = (
                    contextvars.copy_context() if server_context is None else server_context.copy()
                )
                context.run(
                    self._accept_one,
                    protocol_factory,
                    conn,
                    addr,
                    sslcontext,
                    server,
                    ssl_handshake_timeout,
                    ssl_shutdown_timeout,
                    context if server_context is not None else None,
                )

    def _accept_one(  # noqa: PLR0917 (called through Context.run, positionally)
        self,
        protocol_factory: ProtocolFactory,
        conn: socket.socket,
        addr: Any,
        sslcontext: Any,
        server: Server | None,
        ssl_handshake_timeout: float | None,
        ssl_shutdown_timeout: float | None,
        context: contextvars.Context | None,
    ) -> None:
        protocol = None
        transport: asyncio.BaseTransport | None = None
        try:
            protocol = protocol_factory()
            extra = {"peername": addr}
            if sslcontext:
                # The handshake's outcome arrives later, through the waiter.
                waiter: asyncio.Future[None] = self.create_future()
                transport = self._make_ssl_transport(
                    conn,
                    protocol,
                    sslcontext,
                    waiter,
                    server_side=True,
                    extra=extra,
                    server=server,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout,
                    context=context,
                )
                waiter.add_done_callback(functools.partial(self._tls_accepted, protocol, transport))
            else:
                transport = self._make_socket_transport(
                    conn, protocol, extra=extra, server=server, context=context
                )
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if transport is None:
                conn.close()
            else:
                transport.close()
            self._report_accept_error(exc, protocol, transport)

    def _tls_accepted(
        self,
        protocol: asyncio.BaseProtocol,
        transport: asyncio.BaseTransport,
        waiter: asyncio.Future[None],
    ) -> None:
        """An accepted TLS connection's handshake ended (asyncio awaits it in a task)."""
        if waiter.cancelled():
            transport.close()
            return
        exc = waiter.exception()
        if exc is not None:
            transport.close()
            self._report_accept_error(exc, protocol, transport)

    def _report_accept_error(
        self,
        exc: BaseException,
        protocol: asyncio.BaseProtocol | None,
        transport: asyncio.BaseTransport | None,
    ) -> None:
        # A failed connection is the client's problem: only debug mode reports it.
        if self._debug:
            context: dict[str, Any] = {
                "message": "Error on transport creation for incoming connection",
                "exception": exc,
            }
            if protocol is not None:
                context["protocol"] = protocol
            if transport is not None:
                context["transport"] = transport
            self.call_exception_handler(context)

    def _stop_serving(self, sock: socket.socket) -> None:
        listeners = self._listeners
        path = sock.getsockname() if sock in listeners.unix_inodes else None
        retry = listeners.retries.pop(sock, None)
        if retry is not None:
            retry.cancel()
        self._fds.remove_reader(sock.fileno())
        sock.close()
        if path is not None:
            inode = listeners.unix_inodes.pop(sock)
            try:
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                logger.error("Unable to clean up listening UNIX socket %r: %r", path, err)

    # ------------------------------------------------------------------
    # create_server

    async def _create_server_getaddrinfo(
        self, host: Any, port: Any, family: int, flags: int
    ) -> list[AddrInfo]:
        infos = await self._resolver.ensure_resolved(
            (host, port), family=family, type=socket.SOCK_STREAM, flags=flags
        )
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned empty list")
        return infos

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        host: Any = None,
        port: Any = None,
        *,
        family: int = socket.AF_UNSPEC,
        flags: int = socket.AI_PASSIVE,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
        keep_alive: bool | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
    ) -> Server:
        if keep_alive is not None and not PY313:
            raise TypeError("create_server() got an unexpected keyword argument 'keep_alive'")
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and ssl is None:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            check_ssl_socket(sock)

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            sockets = await self._bind_server_sockets(
                host=host,
                port=port,
                family=family,
                flags=flags,
                reuse_address=bool(reuse_address),
                reuse_port=reuse_port,
                keep_alive=keep_alive,
            )
        else:
            if sock is None:
                raise ValueError("Neither host/port nor sock were specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            if self._network is not None:
                self._network.adopt(sock)
            sockets = [sock]

        for s in sockets:
            s.setblocking(False)
        server = Server(
            self,
            sockets,
            protocol_factory,
            ssl,
            backlog,
            ssl_handshake_timeout,
            ssl_shutdown_timeout,
        )
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)  # one iteration, as asyncio
        if self._debug:
            logger.info("%r is serving", server)
        return server

    async def _bind_server_sockets(
        self,
        *,
        host: Any,
        port: Any,
        family: int,
        flags: int,
        reuse_address: bool,
        reuse_port: bool | None,
        keep_alive: bool | None,
    ) -> list[socket.socket]:
        if host == "":
            hosts: Any = [None]
        elif isinstance(host, str) or not isinstance(host, collections.abc.Iterable):
            hosts = [host]
        else:
            hosts = host
        per_host = await asyncio.gather(
            *[self._create_server_getaddrinfo(h, port, family, flags) for h in hosts]
        )
        # The same address reached through several names is bound once.
        infos = set(itertools.chain.from_iterable(per_host))

        sockets: list[socket.socket] = []
        completed = False
        try:
            for af, socktype, proto, _canonname, sa in infos:
                try:
                    sock = new_socket(self._network, af, socktype, proto)
                except OSError:
                    # Assume a family/type/protocol combination we lack.
                    if self._debug:
                        logger.warning(
                            "create_server() failed to create socket.socket(%r, %r, %r)",
                            af,
                            socktype,
                            proto,
                            exc_info=True,
                        )
                    continue
                sockets.append(sock)
                if reuse_address:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                if reuse_port:
                    set_reuseport(sock)
                if keep_alive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                if HAS_IPV6 and af == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    # No dual stack: "::" must not also take IPv4 (see docstring).
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                try:
                    sock.bind(sa)
                except OSError as err:
                    if BIND_MESSAGE_STRERROR:
                        text = (err.strerror or str(err)).lower()
                    else:
                        text = str(err).lower()
                    msg = f"error while attempting to bind on address {sa!r}: {text}"
                    if BIND_SKIPS_EADDRNOTAVAIL and err.errno == errno.EADDRNOTAVAIL:
                        # The family is probably not enabled (bpo-30945).
                        sockets.pop()
                        sock.close()
                        if self._debug:
                            logger.warning(msg)
                        continue
                    raise OSError(err.errno, msg) from None
            if not sockets:
                raise OSError(
                    f"could not bind on any address out of {[info[4] for info in infos]!r}"
                )
            completed = True
        finally:
            if not completed:
                for sock in sockets:
                    sock.close()
        return sockets

    # ------------------------------------------------------------------
    # create_unix_server

    async def create_unix_server(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
        cleanup_socket: bool | None = None,
    ) -> Server:
        if cleanup_socket is not None and not PY313:
            raise TypeError(
                "create_unix_server() got an unexpected keyword argument 'cleanup_socket'"
            )
        if cleanup_socket is None:
            cleanup_socket = PY313
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")

        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = new_socket(self._network, socket.AF_UNIX, socket.SOCK_STREAM, 0)
            try:
                if simulated(sock):
                    sock.bind(path)  # the simulated host's namespace, not the file system
                    inode = None
                else:
                    # Filesystem calls: on a thread, not the loop's.
                    inode = await self._in_thread(bind_unix_path, sock, path, cleanup_socket)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
                raise
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("path was not specified, and no sock specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            if self._network is not None:
                self._network.adopt(sock)
            inode = None
            if cleanup_socket and not simulated(sock):
                inode = await self._in_thread(bind_unix_path, sock, None, True)
        if inode is not None:
            self._listeners.unix_inodes[sock] = inode

        sock.setblocking(False)
        server = Server(
            self,
            [sock],
            protocol_factory,
            ssl,
            backlog,
            ssl_handshake_timeout,
            ssl_shutdown_timeout,
        )
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)
        return server
