"""SockMethods: asyncio's ``sock_*`` coroutines on non-blocking sockets.

Layer: fd I/O. The methods use two components: the fd registry (`FdRegistry`)
to wait for readiness, and the `Resolver` for ``sock_connect``'s host names.
Each method first tries the
system call at once (a ready socket costs no poll round-trip and no
registration); only if the kernel says "would block" does it register a
reader or writer that retries the call when the fd is ready, and await a
future.

Semantics are asyncio's (``selector_events.py``), for every supported Python:

- In debug mode a blocking socket is refused with
  ``ValueError("the socket must be non-blocking")``; outside debug mode
  asyncio does not check, and neither do we (a blocking socket then blocks
  the loop, as it does with asyncio).
- An ``ssl.SSLSocket`` is refused with TypeError.
- Registering on an fd owned by a transport raises RuntimeError.
- ``sock_connect`` resolves host names for AF_INET/AF_INET6 sockets (through
  the `Resolver`); a failed non-blocking connect reports
  ``OSError(errno, 'Connect call failed <address>')``.

Invariants:
- A pending operation owns exactly one registration, and its future's
  done-callback removes it. A cancelled call therefore leaves no reader or
  writer registered once the cancellation has been delivered (the callback
  runs before the awaiting task resumes: it was added first).
- The done-callback removes a registration only if it is still the
  operation's own handle, so it never removes a callback that someone else
  registered on the fd meanwhile.
- A retry callback checks ``fut.done()`` first: cancellation is delivered
  one iteration after the future is cancelled, and the fd may fire between.

Facts / what this means for us:
- ``connect()`` on a non-blocking socket fails with EINPROGRESS (Python
  raises BlockingIOError); the outcome is known when the fd turns writable,
  and is read with ``getsockopt(SO_ERROR)``. EINTR (InterruptedError) means
  the same: the connect continues in the background.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import stat
import sys
from typing import Any, Final, TypeVar

from tideloop._core.coreloop import CoreLoop
from tideloop._core.errors import logger
from tideloop._core.handles import Handle

from .registry import FdRegistry, fd_of
from .resolver import HAS_IPV6, Resolver
from .sockets import Network

_R = TypeVar("_R")

try:
    import ssl as _ssl

    _SSL_SOCKET: type | None = _ssl.SSLSocket
except ImportError:  # pragma: no cover
    _SSL_SOCKET = None

_Address = Any  # whatever the socket family takes: a tuple, str, bytes...

# Facts / what this means for us: PyPy's socket send()/sendmsg() and
# os.write()/writev() copy a memoryview that starts past the first byte of
# its object (the unsent tail of a buffer) into a new buffer, all of it, on
# every call (measured: 35 ms a call for a 50 MB tail, 0.04 ms for the view
# of the whole object). Writing a large buffer a socket's or a pipe's worth
# at a time is then quadratic: 50 MB through a pipe copied about 20 GB. So
# on PyPy each write of a buffer's tail hands the kernel at most
# WRITE_LIMIT bytes, more than a socket or a pipe takes in one call.
# CPython writes views without copying: there the limit is no limit, and
# the transports' write paths stay as they are (`BOUNDED_WRITES`).
BOUNDED_WRITES: Final = sys.implementation.name == "pypy"
WRITE_LIMIT: Final = 1 << 20 if BOUNDED_WRITES else sys.maxsize


def check_ssl_socket(sock: object) -> None:
    """asyncio refuses ssl.SSLSocket wherever it takes a socket."""
    if _SSL_SOCKET is not None and isinstance(sock, _SSL_SOCKET):
        raise TypeError("Socket cannot be of type SSLSocket")


class _SendallState:
    """The unsent part of one sock_sendall() call."""

    __slots__ = ("pos", "view")

    def __init__(self, view: memoryview, pos: int) -> None:
        self.view = view
        self.pos = pos


def set_reuseport(sock: socket.socket) -> None:
    """SO_REUSEPORT on *sock*, with asyncio's errors where it is missing."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(  # noqa: B904 (asyncio's message, chained implicitly)
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        )


def remove_stale_unix_socket(path: str | bytes) -> None:
    """Remove *path* if it is a socket file (left by an earlier run); a blocking call."""
    if path[0] in (0, "\x00"):
        return  # an abstract socket: no file
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        # The directory may only let us create the socket.
        logger.error("Unable to check or remove stale UNIX socket %r: %r", path, err)


class SockMethods(CoreLoop):
    """``sock_recv``, ``sock_sendall``, ``sock_connect``, ``sock_accept``, ..."""

    _fds: FdRegistry
    _resolver: Resolver
    _network: Network | None

    # ------------------------------------------------------------------
    # Shared helpers

    def _check_sock(self, sock: socket.socket) -> None:
        check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        if self._network is not None:
            self._network.adopt(sock)

    def _sock_read_done(self, fd: int, handle: asyncio.Handle, fut: asyncio.Future[Any]) -> None:
        self._fds.remove_reader_if(fd, handle)

    def _sock_write_done(self, fd: int, handle: asyncio.Handle, fut: asyncio.Future[Any]) -> None:
        self._fds.remove_writer_if(fd, handle)

    def _wait_readable(
        self, fut: asyncio.Future[Any], sock: socket.socket, callback: Any, *args: Any
    ) -> None:
        fd = sock.fileno()
        fds = self._fds
        fds.check_no_transport(fd)
        self._check_closed()
        fd = fd_of(fd)
        handle = Handle(callback, (fut, sock, *args), self, None)
        fds.set_reader(fd, handle)
        fut.add_done_callback(functools.partial(self._sock_read_done, fd, handle))

    def _wait_writable(
        self, fut: asyncio.Future[Any], sock: socket.socket, callback: Any, *args: Any
    ) -> None:
        fd = sock.fileno()
        fds = self._fds
        fds.check_no_transport(fd)
        self._check_closed()
        fd = fd_of(fd)
        handle = Handle(callback, (fut, sock, *args), self, None)
        fds.set_writer(fd, handle)
        fut.add_done_callback(functools.partial(self._sock_write_done, fd, handle))

    # ------------------------------------------------------------------
    # Single-syscall operations: try the syscall at once; if it would block,
    # retry it from one reader (writer) callback until it completes or the
    # future is cancelled.

    async def _sock_read_later(self, sock: socket.socket, op: str, *args: Any) -> _R:
        fut: asyncio.Future[_R] = self.create_future()
        self._wait_readable(fut, sock, self._sock_retry, op, *args)
        return await fut

    async def _sock_write_later(self, sock: socket.socket, op: str, *args: Any) -> _R:
        fut: asyncio.Future[_R] = self.create_future()
        self._wait_writable(fut, sock, self._sock_retry, op, *args)
        return await fut

    def _sock_retry(
        self, fut: asyncio.Future[_R], sock: socket.socket, op: str, *args: Any
    ) -> None:
        if fut.done():
            return
        try:
            # Call the method by name on the object rather than the unbound
            # socket.socket method: asyncio accepts socket-like objects
            # (subclasses, test doubles) and calls their own methods. The
            # name is a string, not a method's __name__: a patched
            # socket.socket method (blockbuster's, a mock) has another name.
            result: _R = getattr(sock, op)(*args)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    async def sock_recv(self, sock: socket.socket, n: int) -> bytes:
        self._check_sock(sock)
        try:
            return sock.recv(n)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_read_later(sock, "recv", n)

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        self._check_sock(sock)
        try:
            return sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_read_later(sock, "recv_into", buf)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, _Address]:
        self._check_sock(sock)
        try:
            return sock.recvfrom(bufsize)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_read_later(sock, "recvfrom", bufsize)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: Any, nbytes: int = 0
    ) -> tuple[int, _Address]:
        self._check_sock(sock)
        if not nbytes:
            nbytes = len(buf)
        try:
            return sock.recvfrom_into(buf, nbytes)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_read_later(sock, "recvfrom_into", buf, nbytes)

    # ------------------------------------------------------------------
    # Sending

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        self._check_sock(sock)
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        if n == len(data):
            return
        fut: asyncio.Future[None] = self.create_future()
        self._wait_writable(fut, sock, self._sock_sendall, _SendallState(memoryview(data), n))
        return await fut

    def _sock_sendall(
        self, fut: asyncio.Future[None], sock: socket.socket, state: _SendallState
    ) -> None:
        if fut.done():
            return
        view = state.view
        try:
            n = sock.send(view[state.pos : state.pos + WRITE_LIMIT])
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            return
        state.pos += n
        if state.pos == len(view):
            fut.set_result(None)

    async def sock_sendto(self, sock: socket.socket, data: Any, address: _Address) -> int:
        self._check_sock(sock)
        if self._network is not None:
            self._network.adopt(sock, address)
        try:
            return sock.sendto(data, address)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_write_later(sock, "sendto", data, address)

    # ------------------------------------------------------------------
    # Connecting and accepting

    async def sock_connect(self, sock: socket.socket, address: _Address) -> None:
        self._check_sock(sock)
        if sock.family == socket.AF_INET or (HAS_IPV6 and sock.family == socket.AF_INET6):
            resolved = await self._resolver.ensure_resolved(
                address, family=sock.family, type=sock.type, proto=sock.proto
            )
            address = resolved[0][4]
        if self._network is not None:
            self._network.adopt(sock, address)
        fut: asyncio.Future[None] | None = self.create_future()
        assert fut is not None
        self._sock_connect(fut, sock, address)
        try:
            return await fut
        finally:
            # Break the cycle exception -> traceback -> frame -> fut.
            fut = None

    def _sock_connect(
        self, fut: asyncio.Future[None], sock: socket.socket, address: _Address
    ) -> None:
        try:
            sock.connect(address)
        except (BlockingIOError, InterruptedError):
            # In progress (EINPROGRESS, or EINTR: it goes on in the
            # background); the fd turns writable when it is decided.
            self._wait_writable(fut, sock, self._sock_connect_cb, address)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        finally:
            del fut  # as in _sock_connect_cb

    def _sock_connect_cb(
        self, fut: asyncio.Future[None], sock: socket.socket, address: _Address
    ) -> None:
        if fut.done():
            return
        try:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err != 0:
                raise OSError(err, f"Connect call failed {address}")
        except (BlockingIOError, InterruptedError):
            pass  # still registered: retried when the fd fires again
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        finally:
            # Break the cycle exception -> traceback -> this frame -> fut.
            del fut

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, _Address]:
        self._check_sock(sock)
        sock.fileno()  # asyncio asks first: what is not a socket fails the same way
        try:
            conn, address = sock.accept()
            conn.setblocking(False)
            return conn, address
        except (BlockingIOError, InterruptedError):
            pass
        fut: asyncio.Future[tuple[socket.socket, _Address]] = self.create_future()
        self._wait_readable(fut, sock, self._sock_accept)
        return await fut

    def _sock_accept(
        self, fut: asyncio.Future[tuple[socket.socket, _Address]], sock: socket.socket
    ) -> None:
        if fut.done():
            return
        try:
            conn, address = sock.accept()
            conn.setblocking(False)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result((conn, address))
