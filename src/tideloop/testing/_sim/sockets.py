"""SimSocket: the ``socket.socket`` a program holds when its traffic is simulated.

Layer: testing (the simulation; above ``endpoints``, which it reads, and
beside the kernel model, which it reaches only through the
``endpoints.Syscalls`` its endpoint carries). A `SimSocket` is the user
side of a simulated socket: it turns each ``socket.socket`` method, with
its argument forms (``recv_into``'s *nbytes*, ``sendto``'s optional
flags, ``sendmsg``'s buffers, ``connect_ex``'s error code), into the one
kernel call that does the work, so everything above it (transports, flow
control, streams, servers, TLS, ``sock_*``, sendfile's fallback) is the
production code.

Invariants:
- A SimSocket adds no slots to ``socket.socket``: its state is its
  endpoint, found by fd in ``endpoints.ENDPOINTS`` (so that the loop side
  can turn a program's own ``socket.socket`` into one, in place).
- It changes nothing of its endpoint itself; it reads ``kind``, ``state``,
  ``local``, ``remote`` and ``host`` to choose a call and to answer
  ``getsockname``/``getpeername``.
- Its real socket underneath is never connected and always non-blocking:
  it only holds an fd number unique in the process, and the right
  ``family`` and ``type``.
"""

from __future__ import annotations

import errno
import socket
from typing import Any, Final

from .endpoints import ENDPOINTS, Endpoint, error


class SimSocket(socket.socket):
    """A ``socket.socket`` whose traffic is simulated (see the module docstring).

    It holds a real, never-connected socket of its family and type, so that
    its fd number is unique in the process and ``family``/``type`` are right;
    every method that would move data or change state is the simulation's.
    It adds no slots to ``socket.socket`` (its state is its endpoint, found
    by fd), so that ``SimNetwork.adopt`` can turn a program's own
    ``socket.socket`` into one.
    """

    __slots__ = ()
    #: Read by the loop (``tideloop._fdio.network.simulated``): no os.sendfile here.
    _tideloop_simulated: Final = True

    def __init__(self, endpoint: Endpoint, family: int, type: int, proto: int) -> None:
        """The socket of *endpoint*: a new one, or (``accept``) an accepted connection's."""
        super().__init__(family, type, proto)
        super().setblocking(False)
        endpoint.kernel.register(self, endpoint)

    @property
    def _ep(self) -> Endpoint:
        ep = ENDPOINTS.get(socket.socket.fileno(self))
        if ep is None:
            raise error(errno.EBADF)
        return ep

    # -- state ---------------------------------------------------------

    def getsockname(self) -> Any:
        ep = self._ep
        if ep.local is not None:
            return ep.local
        return "" if ep.kind == "unix" else ("0.0.0.0", 0)

    def getpeername(self) -> Any:
        ep = self._ep
        if ep.remote is None or (ep.kind != "udp" and ep.state != "connected"):
            raise error(errno.ENOTCONN)
        return ep.remote

    def setsockopt(self, level: int, optname: int, value: Any, *args: Any) -> None:
        number = int(value) if not isinstance(value, bytes) else 1
        ep = self._ep
        ep.kernel.setsockopt(ep, level, optname, number)

    def getsockopt(self, level: int, optname: int, *args: Any) -> Any:
        ep = self._ep
        return ep.kernel.getsockopt(ep, level, optname)

    def setblocking(self, flag: bool) -> None:
        # Always non-blocking underneath; the loop only uses non-blocking sockets.
        super().setblocking(False)

    # -- setting up ----------------------------------------------------

    def bind(self, address: Any) -> None:
        ep = self._ep
        ep.kernel.bind(ep, address)

    def listen(self, backlog: int = 128) -> None:
        ep = self._ep
        ep.kernel.listen(ep, backlog)

    def connect(self, address: Any) -> None:
        ep = self._ep
        ep.kernel.connect(ep, address)

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except OSError as exc:
            return exc.errno or 0
        return 0

    def accept(self) -> tuple[socket.socket, Any]:
        ep = self._ep
        child = ep.kernel.accept(ep)
        sock = SimSocket(child, self.family, self.type, self.proto)
        return sock, child.remote

    # -- data ------------------------------------------------------------

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        ep = self._ep
        if ep.kind == "udp":
            return ep.kernel.recvfrom(ep, bufsize)[0]
        return ep.kernel.recv(ep, bufsize)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        ep = self._ep
        if ep.kind == "udp":
            return ep.kernel.recvfrom(ep, bufsize)
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        ep = self._ep
        view = memoryview(buffer).cast("B")
        size = min(nbytes or len(view), len(view))
        if ep.kind == "udp":
            data, address = ep.kernel.recvfrom(ep, size)
            view[: len(data)] = data
            return len(data), address
        return ep.kernel.recv_into(ep, view, size), None

    def send(self, data: Any, flags: int = 0) -> int:
        ep = self._ep
        if ep.kind == "udp":
            if ep.remote is None:
                raise error(errno.EDESTADDRREQ)
            return ep.kernel.sendto(ep, memoryview(data).cast("B"), ep.remote)
        return ep.kernel.send(ep, memoryview(data).cast("B"))

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = self.send(view)
        if sent != len(view):
            raise error(errno.EAGAIN, BlockingIOError)

    def sendto(self, data: Any, *args: Any) -> int:
        ep = self._ep
        address = args[-1]
        if ep.kind != "udp":
            if ep.state == "connected":
                raise error(errno.EISCONN)
            return self.send(data)
        return ep.kernel.sendto(ep, memoryview(data).cast("B"), address)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        data = b"".join(buffers)
        if len(args) >= 3 and args[2] is not None:
            return self.sendto(data, args[2])
        return self.send(data)

    def shutdown(self, how: int) -> None:
        ep = self._ep
        ep.kernel.shutdown(ep, how)

    # -- closing ---------------------------------------------------------

    def _real_close(self, *args: Any) -> None:
        ep = ENDPOINTS.get(socket.socket.fileno(self))
        if ep is not None and not ep.closed:
            ep.kernel.close(ep)
        super()._real_close(*args)  # type: ignore[misc]

    def detach(self) -> int:
        raise OSError(errno.EOPNOTSUPP, "a simulated socket cannot be detached")

    def __repr__(self) -> str:
        ep = ENDPOINTS.get(socket.socket.fileno(self))
        if ep is None:
            return "<SimSocket [closed]>"
        return (
            f"<SimSocket {ep.kind} {ep.host.name} {ep.state} "
            f"local={ep.local!r} remote={ep.remote!r}>"
        )
