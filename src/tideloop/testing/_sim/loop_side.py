"""The loop's side of the simulation: what the loop asks of a ``Network``, answered.

Layer: testing (the simulation; above ``kernel`` and ``sockets``, below
``network``). `LoopSide` answers the calls of
``tideloop._fdio.network.Network`` (``SimNetwork`` forwards them here):

- `LoopSide.wrap_poller`: the loop's poller becomes a `SimPoller`, which
  answers for simulated fds from the kernel model's fd table
  (``fdtable.FdTable``) and for every other fd from the kernel's poller,
  in one poll;
- `LoopSide.attach`: the loop the simulation serves (its time is the
  network's, its timers deliver the segments);
- `LoopSide.socket`: a `SimSocket` on the running code's host for every
  socket the loop creates, unless the destination is the real network's
  (``real="allow"``);
- `LoopSide.adopt`: a program's own ``socket.socket`` handed to the loop
  becomes a `SimSocket` in place, keeping its fd number (and its port or
  path, now on the simulated host);
- `LoopSide.getaddrinfo`: names resolve to hosts' addresses, from a table
  of services (no file is read on the loop's thread).

It also knows which host each task runs on (`host_of`): the task's
context says so on Python 3.12+; on 3.11, whose tasks do not show their
context, a task factory notes each task's host as it is created.

Invariants:
- One loop at a time: a second poller is refused while the loop of the
  first is open; once it is closed, the next loop's poller starts with no
  simulated fd watched.
- A socket is simulated only if the simulation carries its kind (TCP and
  UDP over IPv4, Unix streams) and its destination is a simulated host, or
  unknown, or anything under ``real="refuse"``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import weakref
from typing import Any, Final, Literal

from tideloop._pollers import Poller

from .endpoints import Host, Kind, kind_of
from .fdtable import FdTable
from .kernel import HOST, Kernel
from .sockets import SimSocket

#: The service names the simulated resolver knows (a port given by name).
_SERVICES: Final = {
    "ftp": 21,
    "ssh": 22,
    "smtp": 25,
    "domain": 53,
    "http": 80,
    "pop3": 110,
    "imap": 143,
    "https": 443,
    "submission": 587,
    "imaps": 993,
    "mysql": 3306,
    "postgresql": 5432,
    "amqp": 5672,
    "redis": 6379,
    "http-alt": 8080,
}

#: Task.get_context() is new in Python 3.12.
_TASKS_SHOW_CONTEXT: Final = hasattr(asyncio.Task, "get_context")

#: LoopSide has a method named socket: annotations there say this.
_Socket = socket.socket


class SimPoller:
    """The loop's poller under a simulation: simulated fds from the kernel model's
    fd table, every other fd from the kernel's poller, in one poll."""

    def __init__(self, fds: FdTable, inner: Poller) -> None:
        self._fds = fds
        self._inner = inner
        self.name = f"sim+{inner.name}"

    def fileno(self) -> int:
        return self._inner.fileno()

    def register(self, fd: int, events: int) -> None:
        if self._fds.is_simulated(fd):
            self._fds.watch(fd, events)
        else:
            self._inner.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        if self._fds.watching(fd):
            self._fds.watch(fd, events)
        else:
            self._inner.modify(fd, events)

    def unregister(self, fd: int) -> None:
        if not self._fds.unwatch(fd):
            self._inner.unregister(fd)

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        ready = self._fds.ready()
        events = self._inner.poll(0.0 if ready else timeout)
        return events + ready if ready else events

    def close(self) -> None:
        self._inner.close()


class LoopSide:
    """What the loop asks of a simulated network (see the module docstring).

    *real*: what a name or address no host has means: ``"refuse"`` (it does
    not exist) or ``"allow"`` (the real network's, through real sockets).
    """

    __slots__ = ("_kernel", "_poller", "_task_hosts", "real")

    def __init__(self, kernel: Kernel, real: Literal["refuse", "allow"]) -> None:
        self._kernel = kernel
        self.real = real
        self._poller: SimPoller | None = None
        self._task_hosts: weakref.WeakKeyDictionary[asyncio.Task[Any], Host] = (
            weakref.WeakKeyDictionary()
        )

    def wrap_poller(self, poller: Poller) -> Poller:
        loop = self._kernel.loop
        if self._poller is not None and not (loop is not None and loop.is_closed()):
            raise RuntimeError("a SimNetwork serves one loop")
        self._kernel.fds.new_poller()
        self._poller = SimPoller(self._kernel.fds, poller)
        return self._poller

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._kernel.attach(loop)
        if not _TASKS_SHOW_CONTEXT:
            # Python 3.11's Task does not show its context: learn each task's
            # host as it is created, through the loop's task factory.
            loop.set_task_factory(self._task_factory)

    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        host = context.get(HOST) if context is not None else HOST.get(None)
        if host is not None:
            self._task_hosts[task] = host
        return task

    def host_of(self, task: asyncio.Task[Any]) -> Host | None:
        """The host *task* runs on (None: it runs on no host's, outside every spawn)."""
        if _TASKS_SHOW_CONTEXT:
            return task.get_context().get(HOST)  # type: ignore[attr-defined,no-any-return]
        return self._task_hosts.get(task)

    def socket(self, family: int, type: int, proto: int, remote: Any = None) -> socket.socket:
        kind = kind_of(family, type)
        if kind is None or not self._simulates(kind, remote):
            return socket.socket(family, type, proto)
        kernel = self._kernel
        return SimSocket(kernel.endpoint(kernel.current_host(), kind), family, type, proto)

    def _simulates(self, kind: Kind, remote: Any) -> bool:
        """Whether a *kind* socket to *remote* (None: not known yet) is the simulation's."""
        if kind == "unix" or remote is None or self.real == "refuse":
            return True
        known = self._kernel.host_at(str(remote[0])) is not None
        return known or remote[0] in ("127.0.0.1", "localhost")

    def adopt(self, sock: _Socket, remote: Any = None) -> None:
        """Make a socket the program created itself simulated, in place, if it is
        the simulation's to carry (see the module docstring).

        *remote*: where it is about to connect or send (None: it is handed
        to the loop to serve, read or write; an unbound, unconnected socket
        is then left alone until it is given a destination).
        """
        if type(sock) is not socket.socket or sock.fileno() < 0:
            return  # a SimSocket already, a subclass (its layout differs) or closed
        kind = kind_of(sock.family, sock.type)
        if kind is None or not self._simulates(kind, remote):
            return
        try:
            sock.getpeername()
        except OSError:
            pass
        else:
            return  # connected for real (a socketpair): it stays the kernel's
        local = sock.getsockname()
        bound = bool(local) if kind == "unix" else local[1] != 0
        if remote is None and not bound:
            return
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        kernel = self._kernel
        ep = kernel.endpoint(kernel.current_host(), kind)
        if bound:
            kernel.bind(ep, local)  # the same port (or path), on the host
            # Let go of the kernel's port: a fresh unbound socket takes over
            # the fd number (a real peer must not reach a simulated server).
            fresh = socket.socket(sock.family, sock.type, sock.proto)
            try:
                os.dup2(fresh.fileno(), sock.fileno(), inheritable=False)
            finally:
                fresh.close()
        sock.__class__ = SimSocket
        kernel.register(sock, ep)
        if listening:
            kernel.listen(ep, 128)
        kernel.record("adopt", ep.host.name, ep.host.name, f"{kind} {ep.local!r}")

    def getaddrinfo(  # noqa: PLR0917 (socket.getaddrinfo's order)
        self, host: Any, port: Any, family: int, type: int, proto: int, flags: int
    ) -> list[tuple[Any, ...]] | None:
        kernel = self._kernel
        if isinstance(host, bytes):
            host = host.decode("idna")
        if host is None or host == "":
            address = "0.0.0.0" if flags & socket.AI_PASSIVE else kernel.current_host().address
        elif host in ("localhost", "127.0.0.1", "0.0.0.0"):
            address = kernel.current_host().address if host != "0.0.0.0" else host
        elif (named := kernel.named(host)) is not None:
            address = named.address
        elif kernel.host_at(host) is not None:
            address = host
        elif self.real == "allow":
            return None
        else:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if family not in (0, socket.AF_INET):
            raise socket.gaierror(
                socket.EAI_ADDRFAMILY, "Address family for hostname not supported"
            )
        if isinstance(port, bytes):
            port = port.decode()
        if port is None:
            port = 0
        elif isinstance(port, str) and not port.isdigit():
            # From a table, not /etc/services: no file read on the loop's thread.
            if port not in _SERVICES:
                raise socket.gaierror(socket.EAI_SERVICE, "Servname not supported for ai_socktype")
            port = _SERVICES[port]
        kinds = [
            (socket.SOCK_STREAM, socket.IPPROTO_TCP),
            (socket.SOCK_DGRAM, socket.IPPROTO_UDP),
            (socket.SOCK_RAW, 0),
        ]
        return [
            (socket.AF_INET, kind, kproto, "", (address, int(port)))
            for kind, kproto in kinds
            if (type in (0, kind)) and (proto in (0, kproto))
        ]
