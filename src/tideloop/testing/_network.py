"""SimNetwork: hosts, TCP and faults, simulated inside one loop, from a seed.

Layer: testing. `SimNetwork` is a ``tideloop._fdio.network.Network``: the loop
(``tideloop.testing.new_event_loop(network=net)``) asks it for every socket
it creates to connect or to serve, for names, and for readiness. It answers
with `SimSocket`, a ``socket.socket`` subclass whose ``connect``, ``accept``,
``send``, ``recv_into``, ``shutdown``... move bytes through the simulation
instead of the kernel, so everything above the socket (transports, flow
control, streams, servers, TLS, ``sock_*``) is the production code.

The model (what a program can observe):

- **Hosts** are names; each gets an address from 10.0.0.0/8 in order of
  first use (``10.0.0.1``, ``10.0.0.2``...). ``getaddrinfo(name)`` resolves
  a host's name, ``localhost``, ``127.0.0.1`` and ``0.0.0.0`` mean the host
  the code runs on. Code runs on a host when it runs in a task `spawn`
  started (or a task such a task started: the host is a context variable);
  anything else runs on the host ``"client"``.
- **TCP.** ``connect`` sends a SYN; after one link latency a listening
  socket answers (the connection is in its backlog, the connecting socket
  becomes writable one latency later), or the host answers with a reset
  (``ConnectionRefusedError``). Bytes sent arrive after the link's latency,
  in order, in the pieces they were sent in. A connection carries at most
  `WINDOW` bytes sent and not yet read by the peer: beyond that ``send``
  raises ``BlockingIOError``, so a reader that stops reading pauses its
  writer, as over a real socket. ``shutdown(SHUT_WR)`` and ``close`` send a
  FIN (the peer reads EOF after the data); ``close`` with unread data sends
  a reset instead, as Linux does; data for a closed socket is answered with
  a reset.
- **Faults.** `partition` holds every segment between two hosts (one way or
  both) until `heal`: TCP retransmits, so nothing is lost, it comes late; a
  SYN held long enough times the ``connect`` out in the program's own
  ``wait_for``. `reset` resets every connection between two hosts (both
  ends read ``ConnectionResetError``). `crash` stops a host: its tasks are
  cancelled, its sockets go silent, its peers get resets, its listeners
  vanish; `restart` brings it back (same address) running a new task.
- **Latency** per message is drawn from the link's range (`set_latency`,
  default `DEFAULT_LATENCY`) with the network's seeded generator: the same
  seed gives the same delivery times, so (with virtual time, which
  `new_event_loop` turns on with a network) the same run.
- **Not simulated yet**: UDP, Unix sockets, IPv6 and sockets the program
  creates itself stay the kernel's. Addresses no host has are refused
  (``real="refuse"``: ``gaierror`` for names, ``ENETUNREACH`` for
  addresses) or left to the real network (``real="allow"``).

Invariants:
- Every `_Endpoint` is in ``_by_fd`` from creation until its socket closes;
  the poller wrapper reports readiness only for fds found there.
- Segments of one direction of one connection arrive in the order sent:
  an arrival is never scheduled before the previous one (``last_arrival``).
- ``outstanding`` (bytes sent, not yet read by the peer) never exceeds
  `WINDOW`.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import errno
import ipaddress
import os
import random
import socket
import weakref
from collections.abc import Coroutine
from typing import Any, Final, Literal

from tideloop._pollers import READ, WRITE, Poller

#: Bytes one connection carries sent but not yet read by the peer.
WINDOW: Final = 256 * 1024
#: Seconds a message takes, drawn uniformly from this range per message.
DEFAULT_LATENCY: Final = (0.0005, 0.002)
_FIRST_EPHEMERAL: Final = 49152

#: Task.get_context() is new in Python 3.12.
_TASKS_SHOW_CONTEXT: Final = hasattr(asyncio.Task, "get_context")

_HOST: contextvars.ContextVar[_Host] = contextvars.ContextVar("tideloop_sim_host")

Address = tuple[str, int]


def _error(code: int, exc_type: type[OSError] = OSError) -> OSError:
    return exc_type(code, os.strerror(code))


class _Host:
    __slots__ = ("address", "generation", "listeners", "name", "next_port", "up")

    def __init__(self, name: str, address: str) -> None:
        self.name = name
        self.address = address
        self.listeners: dict[int, _Endpoint] = {}
        self.next_port = _FIRST_EPHEMERAL
        self.generation = 0
        self.up = True

    def free_port(self, taken: set[int]) -> int:
        while self.next_port in taken or self.next_port in self.listeners:
            self.next_port += 1
        port = self.next_port
        self.next_port += 1
        return port

    def __repr__(self) -> str:
        return f"<host {self.name} {self.address}>"


class _Endpoint:
    """One simulated TCP socket's state."""

    __slots__ = (
        "backlog",
        "backlog_max",
        "closed",
        "connect_error",
        "eof",
        "error",
        "fd",
        "generation",
        "host",
        "inbox",
        "last_arrival",
        "local",
        "outstanding",
        "peer",
        "remote",
        "shut_wr",
        "state",
    )

    def __init__(self, host: _Host) -> None:
        self.host = host
        self.generation = host.generation
        self.fd = -1  # its SimSocket's, once it has one
        # new, listening, connecting, connected, closed-by-error (a reset was
        # reported), closed, dead (its host crashed)
        self.state = "new"
        self.local: Address | None = None
        self.remote: Address | None = None
        self.peer: _Endpoint | None = None
        self.inbox = bytearray()
        self.eof = False
        self.error = 0  # reported by the next recv/send (then EOF / EPIPE)
        self.connect_error = 0  # SO_ERROR after a non-blocking connect
        self.outstanding = 0
        self.shut_wr = False
        self.closed = False
        self.backlog: collections.deque[_Endpoint] = collections.deque()
        self.backlog_max = 0
        self.last_arrival = 0.0

    @property
    def alive(self) -> bool:
        return self.host.up and self.generation == self.host.generation

    def readable(self) -> bool:
        if self.state == "listening":
            return bool(self.backlog)
        if self.state == "connecting":
            return self.connect_error != 0
        return bool(self.inbox) or self.eof or self.error != 0

    def writable(self) -> bool:
        if self.state == "connecting":
            return self.connect_error != 0
        if self.state != "connected":
            return self.state in ("dead", "closed-by-error") or self.error != 0
        return self.error != 0 or self.shut_wr or self.outstanding < WINDOW


class SimSocket(socket.socket):
    """A ``socket.socket`` whose traffic is simulated (see the module docstring).

    It holds a real, never-connected socket of its family and type, so that
    its fd number is unique in the process and ``family``/``type`` are right;
    every method that would move data or change state is the simulation's.
    """

    def __init__(  # noqa: PLR0917 (socket.socket's three, plus the simulation's)
        self,
        net: SimNetwork,
        host: _Host,
        family: int,
        type: int,
        proto: int,
        endpoint: _Endpoint | None = None,
    ) -> None:
        """A new socket on *host*, or (``accept``) the socket of an accepted *endpoint*."""
        super().__init__(family, type, proto)
        super().setblocking(False)
        self._net = net
        if endpoint is None:
            endpoint = _Endpoint(host)
        endpoint.fd = super().fileno()
        self._ep = endpoint
        self._options: dict[tuple[int, int], int] = {}
        net._by_fd[endpoint.fd] = endpoint

    # -- state ---------------------------------------------------------

    def getsockname(self) -> Address:
        ep = self._ep
        return ep.local if ep.local is not None else ("0.0.0.0", 0)

    def getpeername(self) -> Address:
        if self._ep.remote is None or self._ep.state != "connected":
            raise _error(errno.ENOTCONN)
        return self._ep.remote

    def setsockopt(self, level: int, optname: int, value: Any, *args: Any) -> None:
        self._options[level, optname] = int(value) if not isinstance(value, bytes) else 1

    def getsockopt(self, level: int, optname: int, *args: Any) -> Any:
        if (level, optname) == (socket.SOL_SOCKET, socket.SO_ERROR):
            ep = self._ep
            err, ep.connect_error = ep.connect_error, 0
            if err:
                ep.state = "new"  # the attempt is over; another connect() may follow
            return err
        return self._options.get((level, optname), 0)

    def setblocking(self, flag: bool) -> None:
        # Always non-blocking underneath; the loop only uses non-blocking sockets.
        super().setblocking(False)

    # -- setting up ----------------------------------------------------

    def bind(self, address: Any) -> None:
        self._net._bind(self._ep, address)

    def listen(self, backlog: int = 128) -> None:
        self._net._listen(self._ep, backlog)

    def connect(self, address: Any) -> None:
        self._net._connect(self._ep, address)

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except OSError as exc:
            return exc.errno or 0
        return 0

    def accept(self) -> tuple[socket.socket, Address]:
        ep = self._ep
        if ep.state != "listening":
            raise _error(errno.EINVAL)
        if not ep.backlog:
            raise _error(errno.EAGAIN, BlockingIOError)
        child = ep.backlog.popleft()
        assert child.remote is not None
        sock = SimSocket(self._net, child.host, self.family, self.type, self.proto, child)
        return sock, child.remote

    # -- data ------------------------------------------------------------

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        ep = self._ep
        self._net._check_readable(ep)
        n = min(bufsize, len(ep.inbox))
        data = bytes(ep.inbox[:n])
        self._net._consume(ep, n)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        ep = self._ep
        self._net._check_readable(ep)
        view = memoryview(buffer).cast("B")
        n = min(nbytes or len(view), len(view), len(ep.inbox))
        view[:n] = ep.inbox[:n]
        self._net._consume(ep, n)
        return n

    def send(self, data: Any, flags: int = 0) -> int:
        return self._net._send(self._ep, memoryview(data).cast("B"))

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = self._net._send(self._ep, view)
        if sent != len(view):
            raise _error(errno.EAGAIN, BlockingIOError)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        return self.send(b"".join(buffers))

    def shutdown(self, how: int) -> None:
        self._net._shutdown(self._ep, how)

    # -- closing ---------------------------------------------------------

    def _real_close(self, *args: Any) -> None:
        ep = self._ep
        if not ep.closed:
            self._net._close(ep)
        super()._real_close(*args)  # type: ignore[misc]

    def detach(self) -> int:
        raise OSError(errno.EOPNOTSUPP, "a simulated socket cannot be detached")

    def __repr__(self) -> str:
        ep = self._ep
        return f"<SimSocket {ep.host.name} {ep.state} local={ep.local} remote={ep.remote}>"


class _SimPoller:
    """The loop's poller under a simulation: simulated fds from the network's
    state, every other fd from the kernel's poller, in one poll."""

    def __init__(self, net: SimNetwork, inner: Poller) -> None:
        self._net = net
        self._inner = inner
        self._sim: dict[int, int] = {}
        self.name = f"sim+{inner.name}"

    def fileno(self) -> int:
        return self._inner.fileno()

    def register(self, fd: int, events: int) -> None:
        if fd in self._net._by_fd:
            self._sim[fd] = events
        else:
            self._inner.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        if fd in self._sim:
            self._sim[fd] = events
        else:
            self._inner.modify(fd, events)

    def unregister(self, fd: int) -> None:
        if self._sim.pop(fd, None) is None:
            self._inner.unregister(fd)

    def forget(self, fd: int) -> None:
        """A simulated socket closed: its fd number may now be reused by the kernel."""
        self._sim.pop(fd, None)

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        ready: list[tuple[int, int]] = []
        by_fd = self._net._by_fd
        for fd, mask in self._sim.items():
            ep = by_fd.get(fd)
            if ep is None:
                continue
            bits = 0
            if mask & READ and ep.readable():
                bits |= READ
            if mask & WRITE and ep.writable():
                bits |= WRITE
            if bits:
                ready.append((fd, bits))
        events = self._inner.poll(0.0 if ready else timeout)
        return events + ready if ready else events

    def close(self) -> None:
        self._inner.close()


class SimNetwork:
    """A simulated network of hosts for one loop (see the module docstring).

    *seed* seeds the generator that draws latencies. *real*: what a name or
    address no host has means: ``"refuse"`` (it does not exist) or
    ``"allow"`` (the real network's, through real sockets).
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: tuple[float, float] = DEFAULT_LATENCY,
        real: Literal["refuse", "allow"] = "refuse",
    ) -> None:
        if real not in ("refuse", "allow"):
            raise ValueError(f"real must be 'refuse' or 'allow', not {real!r}")
        self.seed = seed
        self.real = real
        self._rng = random.Random(seed)
        self._default_latency = _check_latency(latency)
        self._latency: dict[tuple[str, str], tuple[float, float]] = {}
        self._hosts: dict[str, _Host] = {}
        self._by_address: dict[str, _Host] = {}
        self._by_fd: dict[int, _Endpoint] = {}
        self._cut: set[tuple[str, str]] = set()
        self._held: list[tuple[_Host, _Host, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: _SimPoller | None = None
        self._task_hosts: weakref.WeakKeyDictionary[asyncio.Task[Any], _Host] = (
            weakref.WeakKeyDictionary()
        )
        #: What happened, in order: (virtual time, event, from host, to host, detail).
        self.log: list[tuple[float, str, str, str, str]] = []

    # -- the loop's side (tideloop._fdio.network.Network) -----------------

    def wrap_poller(self, poller: Poller) -> Poller:
        if self._poller is not None:
            raise RuntimeError("a SimNetwork serves one loop")
        self._poller = _SimPoller(self, poller)
        return self._poller

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if not _TASKS_SHOW_CONTEXT:
            # Python 3.11's Task does not show its context: learn each task's
            # host as it is created, through the loop's task factory.
            loop.set_task_factory(self._task_factory)

    def _task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        host = context.get(_HOST) if context is not None else _HOST.get(None)
        if host is not None:
            self._task_hosts[task] = host
        return task

    def socket(self, family: int, type: int, proto: int, remote: Any = None) -> socket.socket:
        simulated = family == socket.AF_INET and type == socket.SOCK_STREAM
        if simulated and remote is not None and self.real == "allow":
            simulated = self._host_at(str(remote[0])) is not None
        if not simulated:
            return socket.socket(family, type, proto)
        return SimSocket(self, self.current_host(), family, type, proto)

    def getaddrinfo(  # noqa: PLR0917 (socket.getaddrinfo's order)
        self, host: Any, port: Any, family: int, type: int, proto: int, flags: int
    ) -> list[tuple[Any, ...]] | None:
        if isinstance(host, bytes):
            host = host.decode("idna")
        if host is None or host == "":
            address = "0.0.0.0" if flags & socket.AI_PASSIVE else self.current_host().address
        elif host in ("localhost", "127.0.0.1", "0.0.0.0"):
            address = self.current_host().address if host != "0.0.0.0" else host
        elif host in self._hosts:
            address = self._hosts[host].address
        elif self._host_at(host) is not None:
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
        elif isinstance(port, str):
            port = int(port) if port.isdigit() else socket.getservbyname(port)
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

    # -- hosts -------------------------------------------------------------

    def host(self, name: str) -> _Host:
        """The host named *name*, created (with the next free address) on first use."""
        host = self._hosts.get(name)
        if host is None:
            address = str(ipaddress.IPv4Address("10.0.0.0") + len(self._hosts) + 1)
            host = _Host(name, address)
            self._hosts[name] = host
            self._by_address[address] = host
        return host

    def address(self, name: str) -> str:
        """The address of host *name*."""
        return self.host(name).address

    def current_host(self) -> _Host:
        """The host the running code is on (``"client"`` outside every host)."""
        host = _HOST.get(None)
        return host if host is not None else self.host("client")

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start *coro* as a task on *host*: its sockets, and its tasks', are that host's."""
        loop = self._running_loop()
        h = self.host(host)
        if not h.up:
            coro.close()
            raise RuntimeError(f"host {host!r} is down (crash() it was; restart() it)")
        context = contextvars.copy_context()
        context.run(_HOST.set, h)
        return loop.create_task(coro, context=context)

    # -- faults ------------------------------------------------------------

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None:
        """Messages between hosts *a* and *b* (both ways) take *low* to *high* seconds."""
        value = _check_latency((low, low if high is None else high))
        self._latency[a, b] = self._latency[b, a] = value

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None:
        """Hold every message from *a* to *b* (and *b* to *a* unless *oneway*) until `heal`."""
        self.host(a)
        self.host(b)
        self._cut.add((a, b))
        if not oneway:
            self._cut.add((b, a))
        self._record("partition", a, b, "oneway" if oneway else "")

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """End the partitions between *a* and *b* (all of them if no hosts are given);
        held messages are then delivered, in order, after a latency."""
        if a is None:
            self._cut.clear()
        else:
            self._cut.discard((a, b or ""))
            if b is not None:
                self._cut.discard((b, a))
        self._record("heal", a or "*", b or "*", "")
        held, self._held = self._held, []
        for src, dst, segment in held:
            if (src.name, dst.name) in self._cut:
                self._held.append((src, dst, segment))
            else:
                self._deliver(src, dst, segment)

    def reset(self, a: str, b: str) -> None:
        """Reset every connection between hosts *a* and *b*: both ends read ECONNRESET."""
        self._record("reset", a, b, "")
        for ep in list(self._by_fd.values()):
            peer = ep.peer
            if peer is None or ep.state != "connected":
                continue
            if {ep.host.name, peer.host.name} == {a, b} or (a == b == ep.host.name):
                self._abort_pair(ep)

    def crash(self, host: str) -> None:
        """Stop *host*: cancel its tasks, silence its sockets, reset its peers, drop
        its listeners. `restart` brings it back."""
        h = self.host(host)
        if not h.up:
            return
        self._record("crash", host, host, "")
        h.up = False
        h.listeners.clear()
        for ep in list(self._by_fd.values()):
            if ep.host is h and ep.generation == h.generation:
                peer = ep.peer
                if peer is not None and peer.state == "connected" and peer.alive:
                    self._deliver(h, peer.host, ("rst", peer), force=True)
                ep.state = "dead"
                ep.peer = None
        loop = self._running_loop()
        for task in asyncio.all_tasks(loop):
            if self._task_host(task) is h:
                task.cancel(f"host {host} crashed")

    def _task_host(self, task: asyncio.Task[Any]) -> _Host | None:
        if _TASKS_SHOW_CONTEXT:
            return task.get_context().get(_HOST)  # type: ignore[attr-defined,no-any-return]
        return self._task_hosts.get(task)

    def restart(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Bring a crashed *host* back (same name and address) running *coro*."""
        h = self.host(host)
        if not h.up:
            h.generation += 1
            h.up = True
            self._record("restart", host, host, "")
        return self.spawn(host, coro)

    # -- the sockets' side ---------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("this SimNetwork is not attached to a loop yet")
        return self._loop

    def _host_at(self, address: str) -> _Host | None:
        return self._by_address.get(address)

    def _record(self, event: str, a: str, b: str, detail: str) -> None:
        now = self._loop.time() if self._loop is not None else 0.0
        self.log.append((now, event, a, b, detail))

    def _local_address(self, ep: _Endpoint, address: str) -> str:
        if address in ("", "0.0.0.0"):
            return "0.0.0.0"
        if address in ("127.0.0.1", "localhost", ep.host.address):
            return ep.host.address
        raise _error(errno.EADDRNOTAVAIL)

    def _bind(self, ep: _Endpoint, address: Any) -> None:
        if ep.local is not None:
            raise _error(errno.EINVAL)
        host, port = str(address[0]), int(address[1])
        local = self._local_address(ep, host)
        taken = {
            e.local[1]
            for e in self._by_fd.values()
            if e.host is ep.host and e.local and e.generation == ep.host.generation
        }
        if port == 0:
            port = ep.host.free_port(taken)
        elif port in taken:
            raise _error(errno.EADDRINUSE)
        ep.local = (local, port)

    def _listen(self, ep: _Endpoint, backlog: int) -> None:
        if ep.local is None:
            self._bind(ep, ("0.0.0.0", 0))
        assert ep.local is not None
        ep.state = "listening"
        ep.backlog_max = max(1, backlog)
        if ep.alive:
            ep.host.listeners[ep.local[1]] = ep

    def _connect(self, ep: _Endpoint, address: Any) -> None:
        if ep.state == "connected":
            raise _error(errno.EISCONN)
        if ep.state == "connecting":
            raise _error(errno.EALREADY, BlockingIOError)
        ip, port = str(address[0]), int(address[1])
        if ip in ("127.0.0.1", "localhost"):
            ip = ep.host.address
        dst = self._host_at(ip)
        if dst is None:
            raise _error(errno.ENETUNREACH)
        if ep.local is None:
            self._bind(ep, (ep.host.address, 0))
        elif ep.local[0] == "0.0.0.0":
            ep.local = (ep.host.address, ep.local[1])
        ep.remote = (ip, port)
        ep.state = "connecting"
        self._record("connect", ep.host.name, dst.name, f"{ep.local} -> {ep.remote}")
        self._deliver(ep.host, dst, ("syn", ep, port))
        raise _error(errno.EINPROGRESS, BlockingIOError)

    def _check_readable(self, ep: _Endpoint) -> None:
        if ep.state == "dead":
            raise _error(errno.ECONNRESET, ConnectionResetError)
        if ep.error:
            self._raise_pending_error(ep)
        if ep.state not in ("connected", "closed-by-error"):
            raise _error(errno.ENOTCONN)
        if not ep.inbox and not ep.eof:
            raise _error(errno.EAGAIN, BlockingIOError)

    def _raise_pending_error(self, ep: _Endpoint) -> None:
        """Report a reset once, from whichever of recv/send comes first, as Linux
        does; after it the socket reads EOF and writes EPIPE."""
        err, ep.error = ep.error, 0
        ep.eof = True
        ep.state = "closed-by-error"
        raise _error(err, ConnectionResetError if err == errno.ECONNRESET else OSError)

    def _consume(self, ep: _Endpoint, n: int) -> None:
        if n == 0:
            return
        del ep.inbox[:n]
        sender = ep.peer
        if sender is not None:
            sender.outstanding -= n

    def _send(self, ep: _Endpoint, view: memoryview) -> int:
        if ep.state == "dead":
            return len(view)  # a crashed host's socket: its bytes go nowhere
        if ep.error:
            self._raise_pending_error(ep)
        if ep.state == "closed-by-error" or ep.shut_wr:
            raise _error(errno.EPIPE, BrokenPipeError)
        if ep.state != "connected" or ep.peer is None:
            raise _error(errno.ENOTCONN)
        room = WINDOW - ep.outstanding
        if room <= 0:
            raise _error(errno.EAGAIN, BlockingIOError)
        data = bytes(view[:room])
        if not data:
            return 0
        ep.outstanding += len(data)
        self._deliver(ep.host, ep.peer.host, ("data", ep.peer, data, ep))
        return len(data)

    def _shutdown(self, ep: _Endpoint, how: int) -> None:
        if ep.state not in ("connected", "closed-by-error"):
            raise _error(errno.ENOTCONN)
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not ep.shut_wr:
            ep.shut_wr = True
            if ep.peer is not None and ep.state == "connected":
                self._deliver(ep.host, ep.peer.host, ("fin", ep.peer))

    def _close(self, ep: _Endpoint) -> None:
        ep.closed = True
        self._by_fd.pop(ep.fd, None)
        if self._poller is not None:
            self._poller.forget(ep.fd)
        if ep.state == "listening":
            if ep.local is not None and ep.host.listeners.get(ep.local[1]) is ep:
                del ep.host.listeners[ep.local[1]]
            for pending in ep.backlog:  # accepted by the kernel, never by the program
                if pending.peer is not None:
                    self._deliver(ep.host, pending.peer.host, ("rst", pending.peer))
            ep.backlog.clear()
        elif ep.state == "connected" and ep.peer is not None:
            peer = ep.peer
            if ep.inbox:
                # Linux: closing with unread data resets the connection.
                self._deliver(ep.host, peer.host, ("rst", peer))
            elif not ep.shut_wr:
                self._deliver(ep.host, peer.host, ("fin", peer))
        ep.state = "closed"

    def _abort_pair(self, ep: _Endpoint) -> None:
        peer = ep.peer
        for side in (ep, peer):
            if side is not None and side.state == "connected":
                side.error = errno.ECONNRESET
                side.inbox.clear()
                if side.peer is not None:
                    side.peer.outstanding = 0

    # -- delivery ----------------------------------------------------------

    def _delay(self, src: _Host, dst: _Host) -> float:
        low, high = self._latency.get((src.name, dst.name), self._default_latency)
        return low if low == high else self._rng.uniform(low, high)

    def _deliver(self, src: _Host, dst: _Host, segment: Any, *, force: bool = False) -> None:
        loop = self._running_loop()
        if not force and (src.name, dst.name) in self._cut:
            self._held.append((src, dst, segment))
            return
        at = loop.time() + self._delay(src, dst)
        # One direction of one connection is a queue: never overtake.
        target: _Endpoint | None = segment[1] if segment[0] != "syn" else None
        if target is not None:
            at = max(at, target.last_arrival)
            target.last_arrival = at
        loop.call_at(at, self._arrive, src, dst, segment)

    def _arrive(self, src: _Host, dst: _Host, segment: Any) -> None:
        kind = segment[0]
        if kind == "syn":
            self._arrive_syn(src, dst, segment[1], segment[2])
            return
        ep: _Endpoint = segment[1]
        if kind == "synack":
            if ep.state == "connecting" and not ep.closed:
                ep.state = "connected"
                ep.peer = segment[2]
                self._record("connected", src.name, dst.name, f"{ep.local} -> {ep.remote}")
            elif segment[2].state == "connected":
                # The connecting socket is gone: reset the accepted side.
                self._deliver(dst, src, ("rst", segment[2]))
            return
        if kind == "refused":
            if ep.state == "connecting":
                ep.connect_error = errno.ECONNREFUSED
                self._record("refused", src.name, dst.name, f"{ep.remote}")
            return
        if not ep.alive:
            return  # the host crashed: nothing answers
        if kind == "data":
            data: bytes = segment[2]
            if ep.closed or ep.state not in ("connected",) or ep.error:
                sender: _Endpoint = segment[3]
                if ep.closed and sender.state == "connected":
                    self._deliver(dst, src, ("rst", sender))
                return
            ep.inbox += data
            self._record("data", src.name, dst.name, f"{len(data)} bytes to {ep.local}")
        elif kind == "fin":
            ep.eof = True
            self._record("fin", src.name, dst.name, f"to {ep.local}")
        elif kind == "rst" and ep.state == "connected" and not ep.closed:
            ep.error = errno.ECONNRESET
            ep.inbox.clear()
            self._record("rst", src.name, dst.name, f"to {ep.local}")

    def _arrive_syn(self, src: _Host, dst: _Host, client: _Endpoint, port: int) -> None:
        listener = dst.listeners.get(port) if dst.up else None
        if listener is None or listener.closed:
            if dst.up:
                self._deliver(dst, src, ("refused", client))
            return  # a crashed host does not answer: the connect waits
        if len(listener.backlog) >= listener.backlog_max or client.state != "connecting":
            return  # dropped, as a full backlog drops a SYN
        server = _Endpoint(dst)
        server.state = "connected"
        assert listener.local is not None and client.local is not None
        server.local = (dst.address, port)
        server.remote = client.local
        server.peer = client
        listener.backlog.append(server)
        self._record("accept", src.name, dst.name, f"{client.local} -> {server.local}")
        self._deliver(dst, src, ("synack", client, server))


def _check_latency(value: tuple[float, float]) -> tuple[float, float]:
    low, high = float(value[0]), float(value[1])
    if not 0 <= low <= high:
        raise ValueError(f"latency must be 0 <= low <= high, not {value!r}")
    return low, high
