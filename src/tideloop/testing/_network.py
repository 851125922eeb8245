"""SimNetwork: hosts, TCP, UDP, Unix sockets and faults, simulated inside one loop, from a seed.

Layer: testing. `SimNetwork` is a ``tideloop._fdio.network.Network``: the loop
(``tideloop.testing.new_event_loop(network=net)``) asks it for every socket
it creates to connect or to serve, for names, and for readiness, and hands
it the sockets a program made itself (`SimNetwork.adopt`). It answers with
`SimSocket`, a ``socket.socket`` subclass whose ``connect``, ``accept``,
``send``, ``recv_into``, ``sendto``, ``shutdown``... move bytes through the
simulation instead of the kernel, so everything above the socket
(transports, flow control, streams, servers, TLS, ``sock_*``, sendfile's
fallback) is the production code.

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
  in order, in the pieces they were sent in (or in smaller ones: the link's
  *split*). A connection carries at most `WINDOW` bytes sent and not yet
  read by the peer: beyond that ``send`` raises ``BlockingIOError``, so a
  reader that stops reading pauses its writer, as over a real socket.
  ``shutdown(SHUT_WR)`` and ``close`` send a FIN (the peer reads EOF after
  the data); ``close`` with unread data sends a reset instead, as Linux
  does; data for a closed socket is answered with a reset.
- **UDP.** A datagram arrives whole (truncated to the reader's buffer, as
  ``recvfrom`` does), after its own latency, so datagrams reorder whenever
  latencies overlap; a link may lose or duplicate them (*loss*,
  *duplicate*); a partition drops them. A datagram to a port nobody bound
  is answered by "port unreachable": a connected socket then reads
  ``ConnectionRefusedError`` once, as on Linux. At most `UDP_BUFFER` bytes
  wait in a socket; more are dropped.
- **Unix sockets** (``AF_UNIX``, ``SOCK_STREAM``) live in their host's own
  namespace of paths (nothing touches the real file system): ``bind``
  takes a path until the socket closes, ``connect`` completes at once
  (``FileNotFoundError`` for no such path, ``ConnectionRefusedError`` for a
  path nobody listens on), and bytes move as over TCP.
- **Faults.** `partition` holds every TCP segment between two hosts (one
  way or both) until `heal`: TCP retransmits, so nothing is lost, it comes
  late; a SYN held long enough times the ``connect`` out in the program's
  own ``wait_for``; UDP datagrams are dropped. `reset` resets every
  connection between two hosts (both ends read ``ConnectionResetError``).
  `crash` stops a host: its tasks are cancelled, its sockets go silent,
  its peers get resets, its listeners vanish; `restart` brings it back
  (same address) running a new task. `set_link` gives a pair of hosts a
  latency range, a bandwidth (bytes a second: messages queue behind each
  other), UDP loss and duplication, and *split* (the probability that a
  TCP send arrives in several pieces).
- **The seed decides.** Every latency, loss, duplication and split is drawn
  from the network's generator, seeded with *seed*: with virtual time
  (which `new_event_loop` turns on with a network) the same seed gives the
  same run, event for event (`log`).
- **Sockets a program made** with ``socket.socket()`` and handed to the
  loop (``sock_connect``, ``sock_accept``, ``create_connection(sock=)``,
  ``create_server(sock=)``...) become simulated there: the loop calls
  `adopt`, which turns the object into a `SimSocket` in place (its class
  changes; it keeps its fd as the placeholder). Sockets already connected
  for real (a ``socketpair``), of a ``socket.socket`` subclass, or of
  another family (IPv6, Unix datagram) stay the kernel's.
- **Not simulated**: IPv6; names and addresses no host has are refused
  (``real="refuse"``: ``gaierror`` for names, ``ENETUNREACH`` for
  addresses) or left to the real network (``real="allow"``).

Invariants:
- Every live simulated socket's `_Endpoint` is in ``_ENDPOINTS`` (by fd)
  and its network's ``_by_fd`` from creation until the socket closes; the
  poller wrapper reports readiness only for fds found there.
- Readiness is recomputed only for fds in ``_candidates``: every change to
  an endpoint's state that can make it ready calls `_touch`, and an fd
  that is ready stays a candidate (level-triggered), so a poll costs the
  sockets that changed, not every socket.
- Segments of one direction of one stream connection arrive in the order
  sent: an arrival is never scheduled before the previous one
  (``last_arrival``).
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
import zlib
from collections.abc import Coroutine
from typing import Any, Final, Literal

from tideloop._pollers import READ, WRITE, Poller

#: Bytes one connection carries sent but not yet read by the peer.
WINDOW: Final = 256 * 1024
#: Bytes of datagrams that wait in one UDP socket; more are dropped.
UDP_BUFFER: Final = 208 * 1024
#: The largest UDP payload over IPv4.
_UDP_MAX: Final = 65507
#: Seconds a message takes, drawn uniformly from this range per message.
DEFAULT_LATENCY: Final = (0.0005, 0.002)
_FIRST_EPHEMERAL: Final = 49152
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
_LAST_PORT: Final = 65535

#: Task.get_context() is new in Python 3.12.
_TASKS_SHOW_CONTEXT: Final = hasattr(asyncio.Task, "get_context")

_HOST: contextvars.ContextVar[_Host] = contextvars.ContextVar("tideloop_sim_host")

Address = tuple[str, int]
#: SimNetwork has a method named socket: annotations there say this.
_Socket = socket.socket
Kind = Literal["tcp", "udp", "unix"]


def _error(code: int, exc_type: type[OSError] = OSError) -> OSError:
    return exc_type(code, os.strerror(code))


def _kind(family: int, type: int) -> Kind | None:
    """What the simulation makes of a socket of *family* and *type* (None: stays real)."""
    type &= ~(getattr(socket, "SOCK_NONBLOCK", 0) | getattr(socket, "SOCK_CLOEXEC", 0))
    if family == socket.AF_INET:
        if type == socket.SOCK_STREAM:
            return "tcp"
        if type == socket.SOCK_DGRAM:
            return "udp"
    elif family == getattr(socket, "AF_UNIX", None) and type == socket.SOCK_STREAM:
        return "unix"
    return None


class _Host:
    __slots__ = ("address", "generation", "listeners", "name", "next_port", "paths", "ports", "up")

    def __init__(self, name: str, address: str) -> None:
        self.name = name
        self.address = address
        #: TCP port -> the listening endpoint.
        self.listeners: dict[int, _Endpoint] = {}
        #: (tcp|udp, port) -> the endpoint bound to it.
        self.ports: dict[tuple[str, int], _Endpoint] = {}
        #: Unix path -> the endpoint bound to it.
        self.paths: dict[str | bytes, _Endpoint] = {}
        self.next_port = {"tcp": _FIRST_EPHEMERAL, "udp": _FIRST_EPHEMERAL}
        self.generation = 0
        self.up = True

    def free_port(self, kind: str) -> int:
        start = port = self.next_port[kind]
        while (kind, port) in self.ports:
            port = port + 1 if port < _LAST_PORT else _FIRST_EPHEMERAL
            if port == start:
                raise _error(errno.EADDRNOTAVAIL)
        self.next_port[kind] = port + 1 if port < _LAST_PORT else _FIRST_EPHEMERAL
        return port

    def wipe(self) -> None:
        """The host crashed: nothing of it is bound any more."""
        self.listeners.clear()
        self.ports.clear()
        self.paths.clear()

    def __repr__(self) -> str:
        return f"<host {self.name} {self.address}>"


class _Link:
    """What messages from one host to another go through (one direction)."""

    __slots__ = ("bandwidth", "busy_until", "duplicate", "latency", "loss", "split")

    def __init__(self, template: _Link | None = None) -> None:
        self.latency: tuple[float, float] = DEFAULT_LATENCY
        self.loss = 0.0
        self.duplicate = 0.0
        self.split = 0.0
        self.bandwidth: float | None = None
        if template is not None:
            self.latency = template.latency
            self.loss = template.loss
            self.duplicate = template.duplicate
            self.split = template.split
            self.bandwidth = template.bandwidth
        self.busy_until = 0.0


class _Endpoint:
    """One simulated socket's state (its `SimSocket` holds no state of its own)."""

    __slots__ = (
        "backlog",
        "backlog_max",
        "closed",
        "connect_error",
        "datagrams",
        "eof",
        "error",
        "fd",
        "generation",
        "host",
        "inbox",
        "kind",
        "last_arrival",
        "local",
        "net",
        "options",
        "outstanding",
        "peer",
        "queued",
        "ref",
        "remote",
        "shut_wr",
        "state",
    )

    def __init__(self, net: SimNetwork, host: _Host, kind: Kind) -> None:
        self.net = net
        self.host = host
        self.kind = kind
        self.generation = host.generation
        self.fd = -1  # its SimSocket's, once it has one
        # new, listening, connecting, connected, closed-by-error (a reset was
        # reported), closed, dead (its host crashed)
        self.state = "new"
        self.local: Any = None  # (address, port), or a Unix path
        self.remote: Any = None
        self.peer: _Endpoint | None = None
        self.inbox = bytearray()
        self.datagrams: collections.deque[tuple[bytes, Address]] = collections.deque()
        self.queued = 0  # bytes in datagrams
        self.eof = False
        self.error = 0  # reported by the next recv/send (then EOF / EPIPE)
        self.connect_error = 0  # SO_ERROR after a non-blocking connect
        self.outstanding = 0
        self.shut_wr = False
        self.closed = False
        self.backlog: collections.deque[_Endpoint] = collections.deque()
        self.backlog_max = 0
        self.last_arrival = 0.0
        self.options: dict[tuple[int, int], int] = {}
        self.ref: weakref.ref[socket.socket] | None = None

    @property
    def alive(self) -> bool:
        return self.host.up and self.generation == self.host.generation

    def readable(self) -> bool:
        if self.kind == "udp":
            return bool(self.datagrams) or self.error != 0
        if self.state == "listening":
            return bool(self.backlog)
        if self.state == "connecting":
            return self.connect_error != 0
        return bool(self.inbox) or self.eof or self.error != 0

    def writable(self) -> bool:
        if self.kind == "udp":
            return True
        if self.state == "connecting":
            return self.connect_error != 0
        if self.state != "connected":
            return self.state in ("dead", "closed-by-error") or self.error != 0
        return self.error != 0 or self.shut_wr or self.outstanding < WINDOW


#: Every live simulated socket of the process, by fd (its placeholder's).
_ENDPOINTS: dict[int, _Endpoint] = {}


class SimSocket(socket.socket):
    """A ``socket.socket`` whose traffic is simulated (see the module docstring).

    It holds a real, never-connected socket of its family and type, so that
    its fd number is unique in the process and ``family``/``type`` are right;
    every method that would move data or change state is the simulation's.
    It adds no slots to ``socket.socket`` (its state is its `_Endpoint`,
    found by fd), so that `SimNetwork.adopt` can turn a program's own
    ``socket.socket`` into one.
    """

    __slots__ = ()
    #: Read by the loop (``tideloop._fdio.network.simulated``): no os.sendfile here.
    _tideloop_simulated: Final = True

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
        kind = _kind(family, type)
        assert kind is not None
        net._register(self, endpoint if endpoint is not None else _Endpoint(net, host, kind))

    @property
    def _ep(self) -> _Endpoint:
        ep = _ENDPOINTS.get(socket.socket.fileno(self))
        if ep is None:
            raise _error(errno.EBADF)
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
            raise _error(errno.ENOTCONN)
        return ep.remote

    def setsockopt(self, level: int, optname: int, value: Any, *args: Any) -> None:
        self._ep.options[level, optname] = int(value) if not isinstance(value, bytes) else 1

    def getsockopt(self, level: int, optname: int, *args: Any) -> Any:
        ep = self._ep
        if (level, optname) == (socket.SOL_SOCKET, socket.SO_ERROR):
            err, ep.connect_error = ep.connect_error, 0
            if err:
                ep.state = "new"  # the attempt is over; another connect() may follow
            elif ep.kind == "udp" and ep.error:
                err, ep.error = ep.error, 0
            return err
        if (level, optname) == (socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return int(ep.state == "listening")
        return ep.options.get((level, optname), 0)

    def setblocking(self, flag: bool) -> None:
        # Always non-blocking underneath; the loop only uses non-blocking sockets.
        super().setblocking(False)

    # -- setting up ----------------------------------------------------

    def bind(self, address: Any) -> None:
        ep = self._ep
        ep.net._bind(ep, address)

    def listen(self, backlog: int = 128) -> None:
        ep = self._ep
        ep.net._listen(ep, backlog)

    def connect(self, address: Any) -> None:
        ep = self._ep
        ep.net._connect(ep, address)

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except OSError as exc:
            return exc.errno or 0
        return 0

    def accept(self) -> tuple[socket.socket, Any]:
        ep = self._ep
        if ep.state != "listening":
            raise _error(errno.EINVAL)
        if not ep.backlog:
            raise _error(errno.EAGAIN, BlockingIOError)
        child = ep.backlog.popleft()
        sock = SimSocket(ep.net, child.host, self.family, self.type, self.proto, child)
        return sock, child.remote

    # -- data ------------------------------------------------------------

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        ep = self._ep
        if ep.kind == "udp":
            return ep.net._recvfrom(ep, bufsize)[0]
        ep.net._check_readable(ep)
        n = min(bufsize, len(ep.inbox))
        data = bytes(ep.inbox[:n])
        ep.net._consume(ep, n)
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        ep = self._ep
        if ep.kind == "udp":
            return ep.net._recvfrom(ep, bufsize)
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        ep = self._ep
        view = memoryview(buffer).cast("B")
        size = min(nbytes or len(view), len(view))
        if ep.kind == "udp":
            data, address = ep.net._recvfrom(ep, size)
            view[: len(data)] = data
            return len(data), address
        ep.net._check_readable(ep)
        n = min(size, len(ep.inbox))
        view[:n] = ep.inbox[:n]
        ep.net._consume(ep, n)
        return n, None

    def send(self, data: Any, flags: int = 0) -> int:
        ep = self._ep
        if ep.kind == "udp":
            if ep.remote is None:
                raise _error(errno.EDESTADDRREQ)
            return ep.net._sendto(ep, memoryview(data).cast("B"), ep.remote)
        return ep.net._send(ep, memoryview(data).cast("B"))

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = self.send(view)
        if sent != len(view):
            raise _error(errno.EAGAIN, BlockingIOError)

    def sendto(self, data: Any, *args: Any) -> int:
        ep = self._ep
        address = args[-1]
        if ep.kind != "udp":
            if ep.state == "connected":
                raise _error(errno.EISCONN)
            return self.send(data)
        return ep.net._sendto(ep, memoryview(data).cast("B"), address)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        data = b"".join(buffers)
        if len(args) >= 3 and args[2] is not None:
            return self.sendto(data, args[2])
        return self.send(data)

    def shutdown(self, how: int) -> None:
        ep = self._ep
        ep.net._shutdown(ep, how)

    # -- closing ---------------------------------------------------------

    def _real_close(self, *args: Any) -> None:
        ep = _ENDPOINTS.get(socket.socket.fileno(self))
        if ep is not None and not ep.closed:
            ep.net._close(ep)
        super()._real_close(*args)  # type: ignore[misc]

    def detach(self) -> int:
        raise OSError(errno.EOPNOTSUPP, "a simulated socket cannot be detached")

    def __repr__(self) -> str:
        ep = _ENDPOINTS.get(socket.socket.fileno(self))
        if ep is None:
            return "<SimSocket [closed]>"
        return (
            f"<SimSocket {ep.kind} {ep.host.name} {ep.state} "
            f"local={ep.local!r} remote={ep.remote!r}>"
        )


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
            self._net._candidates[fd] = None
        else:
            self._inner.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        if fd in self._sim:
            self._sim[fd] = events
            self._net._candidates[fd] = None
        else:
            self._inner.modify(fd, events)

    def unregister(self, fd: int) -> None:
        if self._sim.pop(fd, None) is None:
            self._inner.unregister(fd)

    def forget(self, fd: int) -> None:
        """A simulated socket closed: its fd number may now be reused by the kernel."""
        self._sim.pop(fd, None)

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        net = self._net
        ready: list[tuple[int, int]] = []
        candidates = net._candidates
        if candidates:
            by_fd = net._by_fd
            still: dict[int, None] = {}
            for fd in candidates:
                mask = self._sim.get(fd)
                ep = by_fd.get(fd)
                if not mask or ep is None:
                    continue
                bits = 0
                if mask & READ and ep.readable():
                    bits |= READ
                if mask & WRITE and ep.writable():
                    bits |= WRITE
                if bits:
                    ready.append((fd, bits))
                    still[fd] = None  # level-triggered: asked again next poll
            net._candidates = still
        events = self._inner.poll(0.0 if ready else timeout)
        return events + ready if ready else events

    def close(self) -> None:
        self._inner.close()


class SimNetwork:
    """A simulated network of hosts for one loop (see the module docstring).

    *seed* seeds the generator that draws latencies and faults. *real*: what
    a name or address no host has means: ``"refuse"`` (it does not exist)
    or ``"allow"`` (the real network's, through real sockets). *latency*,
    *loss*, *duplicate*, *split* and *bandwidth*: every link's, until
    `set_link` says otherwise for a pair of hosts. *buggify*: whether
    ``tideloop.testing.sometimes()`` fires (on some seeds) in its runs.
    *seed_globals*: whether ``tideloop.testing.run`` and the ``tideloop_net``
    fixture seed ``random`` and ``os.urandom`` (unless not *urandom*) and
    make ``time.time``/``time.monotonic`` virtual for the run.

    A network serves one loop at a time; once that loop is closed it may
    serve another (a test's next run), keeping its hosts.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: tuple[float, float] = DEFAULT_LATENCY,
        loss: float = 0.0,
        duplicate: float = 0.0,
        split: float = 0.0,
        bandwidth: float | None = None,
        real: Literal["refuse", "allow"] = "refuse",
        buggify: bool = True,
        seed_globals: bool = True,
        urandom: bool = True,
    ) -> None:
        if real not in ("refuse", "allow"):
            raise ValueError(f"real must be 'refuse' or 'allow', not {real!r}")
        self.seed = seed
        self.real = real
        #: Whether ``tideloop.testing.sometimes()`` may fire in this network's runs.
        self.buggify = buggify
        #: Whether runs seed ``random``, ``os.urandom`` (*urandom*) and make
        #: ``time.time``/``time.monotonic`` virtual (``tideloop.testing._world``).
        self.seed_globals = seed_globals
        self.urandom = urandom
        self._rng = random.Random(seed)
        self._sites: dict[str, bool] = {}
        self._sometimes_rng = random.Random(f"tideloop:{seed}:sometimes")
        self._default = _Link()
        _configure(self._default, latency, loss, duplicate, split, bandwidth)
        self._config: dict[tuple[str, str], _Link] = {}
        self._links: dict[tuple[str, str], _Link] = {}
        self._hosts: dict[str, _Host] = {}
        self._by_address: dict[str, _Host] = {}
        self._by_fd: dict[int, _Endpoint] = {}
        self._candidates: dict[int, None] = {}
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
        if self._poller is not None and not (self._loop is not None and self._loop.is_closed()):
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
        kind = _kind(family, type)
        if kind is None or not self._simulates(kind, remote):
            return socket.socket(family, type, proto)
        return SimSocket(self, self.current_host(), family, type, proto)

    def _simulates(self, kind: Kind, remote: Any) -> bool:
        """Whether a *kind* socket to *remote* (None: not known yet) is the simulation's."""
        if kind == "unix" or remote is None or self.real == "refuse":
            return True
        return self._host_at(str(remote[0])) is not None or remote[0] in ("127.0.0.1", "localhost")

    def adopt(self, sock: _Socket, remote: Any = None) -> None:
        """Make a socket the program created itself simulated, in place, if it is
        the simulation's to carry (see the module docstring).

        *remote*: where it is about to connect or send (None: it is handed
        to the loop to serve, read or write; an unbound, unconnected socket
        is then left alone until it is given a destination).
        """
        if type(sock) is not socket.socket or sock.fileno() < 0:
            return  # a SimSocket already, a subclass (its layout differs) or closed
        kind = _kind(sock.family, sock.type)
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
        ep = _Endpoint(self, self.current_host(), kind)
        if bound:
            self._bind(ep, local)  # the same port (or path), on the host
            # Let go of the kernel's port: a fresh unbound socket takes over
            # the fd number (a real peer must not reach a simulated server).
            fresh = socket.socket(sock.family, sock.type, sock.proto)
            try:
                os.dup2(fresh.fileno(), sock.fileno(), inheritable=False)
            finally:
                fresh.close()
        sock.__class__ = SimSocket
        self._register(sock, ep)
        if listening:
            self._listen(ep, 128)
        self._record("adopt", ep.host.name, ep.host.name, f"{kind} {ep.local!r}")

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

    def is_simulated(self, fd: int) -> bool:
        """Whether *fd* is one of this network's live simulated sockets (a read only)."""
        return fd in self._by_fd

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

    def _sometimes(self, site: str, probability: float) -> bool:
        enabled = self._sites.get(site)
        if enabled is None:
            # Per site and seed, not drawn from a shared stream: adding a
            # site elsewhere does not change which sites this seed enables.
            enabled = random.Random(f"tideloop:{self.seed}:{site}").random() < 0.5
            self._sites[site] = enabled
        fired = enabled and self._sometimes_rng.random() < probability
        if fired:
            self._record("sometimes", self.current_host().name, "", site)
        return fired

    def set_link(
        self,
        a: str,
        b: str,
        *,
        latency: tuple[float, float] | float | None = None,
        loss: float | None = None,
        duplicate: float | None = None,
        split: float | None = None,
        bandwidth: float | None = None,
        oneway: bool = False,
    ) -> None:
        """Set what messages between hosts *a* and *b* go through (both ways unless
        *oneway*): a *latency* range in seconds (or one value), UDP *loss* and
        *duplicate* probabilities, the probability that a TCP send arrives in
        several pieces (*split*), and a *bandwidth* in bytes a second (0: none).
        What is not given keeps its value."""
        if isinstance(latency, (int, float)):
            latency = (latency, latency)
        for pair in [(a, b)] if oneway else [(a, b), (b, a)]:
            config = self._config.get(pair)
            if config is None:
                config = self._config[pair] = _Link(self._default)
            _configure(config, latency, loss, duplicate, split, bandwidth)
            self._links.pop(pair, None)  # rebuilt from the configuration on next use
        self._record("link", a, b, "oneway" if oneway else "")

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None:
        """Messages between hosts *a* and *b* (both ways) take *low* to *high* seconds."""
        self.set_link(a, b, latency=(low, low if high is None else high))

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None:
        """Hold every message from *a* to *b* (and *b* to *a* unless *oneway*) until `heal`."""
        self.host(a)
        self.host(b)
        self._cut.add((a, b))
        if not oneway:
            self._cut.add((b, a))
        self._record("partition", a, b, "oneway" if oneway else "")

    def heal(self, a: str | None = None, b: str | None = None, *, oneway: bool = False) -> None:
        """End partitions: between *a* and *b* (only *a* to *b* if *oneway*), every
        one of *a*'s if *b* is not given, every one if neither is; held
        messages are then delivered, in order, after a latency."""
        if a is None:
            self._cut.clear()
        elif b is None:
            self._cut = {pair for pair in self._cut if a not in pair}
        else:
            self._cut.discard((a, b))
            if not oneway:
                self._cut.discard((b, a))
        self._record("heal", a or "*", b or "*", "oneway" if oneway else "")
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
        h.wipe()
        for ep in list(self._by_fd.values()):
            if ep.host is h and ep.generation == h.generation:
                peer = ep.peer
                if peer is not None and peer.state == "connected" and peer.alive:
                    self._deliver(h, peer.host, ("rst", peer), force=True)
                ep.state = "dead"
                ep.peer = None
                self._touch(ep)
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

    def _register(self, sock: _Socket, ep: _Endpoint) -> None:
        fd = socket.socket.fileno(sock)
        ep.fd = fd
        # A socket collected unclosed closes its fd with no _real_close: the
        # endpoint must go then too, before the kernel hands the fd out again.
        ep.ref = weakref.ref(sock, lambda _: self._collected(ep))
        _ENDPOINTS[fd] = ep
        self._by_fd[fd] = ep

    def _collected(self, ep: _Endpoint) -> None:
        if not ep.closed:
            self._close(ep)

    def _touch(self, ep: _Endpoint) -> None:
        """*ep*'s readiness may have changed: the next poll looks at it."""
        if ep.fd >= 0 and not ep.closed:
            self._candidates[ep.fd] = None

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
        host = ep.host
        if ep.kind == "unix":
            path = os.fspath(address)
            if not path:
                raise _error(errno.EINVAL)  # autobind is not simulated
            if path in host.paths:
                raise _error(errno.EADDRINUSE)
            host.paths[path] = ep
            ep.local = path
            return
        local = self._local_address(ep, str(address[0]))
        port = int(address[1])
        if port == 0:
            port = host.free_port(ep.kind)
        elif (ep.kind, port) in host.ports:
            raise _error(errno.EADDRINUSE)
        host.ports[ep.kind, port] = ep
        ep.local = (local, port)

    def _unbind(self, ep: _Endpoint) -> None:
        host = ep.host
        if ep.local is None or ep.generation != host.generation:
            return
        if ep.kind == "unix":
            if host.paths.get(ep.local) is ep:
                del host.paths[ep.local]
        elif host.ports.get((ep.kind, ep.local[1])) is ep:
            del host.ports[ep.kind, ep.local[1]]
        if ep.kind == "tcp" and host.listeners.get(ep.local[1]) is ep:
            del host.listeners[ep.local[1]]

    def _listen(self, ep: _Endpoint, backlog: int) -> None:
        if ep.kind == "udp":
            raise _error(errno.EOPNOTSUPP)
        if ep.local is None:
            if ep.kind == "unix":
                raise _error(errno.EINVAL)
            self._bind(ep, ("0.0.0.0", 0))
        ep.state = "listening"
        ep.backlog_max = max(1, backlog)
        if ep.alive and ep.kind == "tcp":
            ep.host.listeners[ep.local[1]] = ep

    def _resolve_remote(self, ep: _Endpoint, address: Any) -> tuple[_Host, Address]:
        ip, port = str(address[0]), int(address[1])
        if ip in ("127.0.0.1", "localhost"):
            ip = ep.host.address
        elif ip in self._hosts:  # a name, as the kernel's calls resolve them
            ip = self._hosts[ip].address
        dst = self._host_at(ip)
        if dst is None:
            raise _error(errno.ENETUNREACH)
        return dst, (ip, port)

    def _connect(self, ep: _Endpoint, address: Any) -> None:
        if ep.kind == "unix":
            self._connect_unix(ep, os.fspath(address))
            return
        if ep.kind == "udp":
            dst, remote = self._resolve_remote(ep, address)
            if ep.local is None:
                self._bind(ep, ("0.0.0.0", 0))
            if ep.local[0] == "0.0.0.0":  # connect picks the source address, as Linux's
                ep.local = (ep.host.address, ep.local[1])
            ep.remote = remote
            return
        if ep.state == "connected":
            raise _error(errno.EISCONN)
        if ep.state == "connecting":
            raise _error(errno.EALREADY, BlockingIOError)
        dst, remote = self._resolve_remote(ep, address)
        if ep.local is None:
            self._bind(ep, (ep.host.address, 0))
        elif ep.local[0] == "0.0.0.0":
            ep.local = (ep.host.address, ep.local[1])
        ep.remote = remote
        ep.state = "connecting"
        self._record("connect", ep.host.name, dst.name, f"{ep.local} -> {ep.remote}")
        self._deliver(ep.host, dst, ("syn", ep, remote[1]))
        raise _error(errno.EINPROGRESS, BlockingIOError)

    def _connect_unix(self, ep: _Endpoint, path: str | bytes) -> None:
        if ep.state == "connected":
            raise _error(errno.EISCONN)
        host = ep.host
        listener = host.paths.get(path)
        if listener is None:
            raise _error(errno.ENOENT, FileNotFoundError)
        if listener.state != "listening" or listener.closed:
            raise _error(errno.ECONNREFUSED, ConnectionRefusedError)
        if len(listener.backlog) >= listener.backlog_max:
            raise _error(errno.EAGAIN, BlockingIOError)
        server = _Endpoint(self, host, "unix")
        server.state = ep.state = "connected"
        server.local = path
        server.remote = ep.local if ep.local is not None else ""
        ep.remote = path
        server.peer, ep.peer = ep, server
        listener.backlog.append(server)
        self._touch(listener)
        self._touch(ep)
        self._record("connect", host.name, host.name, f"unix {path!r}")

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
        self._touch(ep)
        if ep.kind == "udp":  # an ICMP error: reported once, the socket lives on
            raise _error(err, ConnectionRefusedError if err == errno.ECONNREFUSED else OSError)
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
            self._touch(sender)

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
        self._touch(ep)
        src, dst = ep.host, ep.peer.host
        link = self._link(src, dst)
        if link.split and len(data) > 1 and self._rng.random() < link.split:
            cuts = sorted(self._rng.sample(range(1, len(data)), min(3, len(data) - 1)))
            pieces = [data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            self._record("split", src.name, dst.name, f"{len(data)} bytes in {len(pieces)}")
        else:
            pieces = [data]
        for piece in pieces:
            self._deliver(src, dst, ("data", ep.peer, piece, ep))
        return len(data)

    def _sendto(self, ep: _Endpoint, view: memoryview, address: Any) -> int:
        if ep.state == "dead":
            return len(view)
        if ep.error:
            self._raise_pending_error(ep)
        if len(view) > _UDP_MAX:
            raise _error(errno.EMSGSIZE)
        dst, remote = self._resolve_remote(ep, address)
        if ep.local is None:
            self._bind(ep, ("0.0.0.0", 0))
        source = (ep.host.address, ep.local[1])
        self._deliver(ep.host, dst, ("dgram", remote[1], bytes(view), source, ep))
        return len(view)

    def _recvfrom(self, ep: _Endpoint, bufsize: int) -> tuple[bytes, Address]:
        if ep.error:
            self._raise_pending_error(ep)
        if not ep.datagrams:
            raise _error(errno.EAGAIN, BlockingIOError)
        data, address = ep.datagrams.popleft()
        ep.queued -= len(data)
        return data[:bufsize], address

    def _shutdown(self, ep: _Endpoint, how: int) -> None:
        if ep.kind == "udp" or ep.state not in ("connected", "closed-by-error"):
            raise _error(errno.ENOTCONN)
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not ep.shut_wr:
            ep.shut_wr = True
            self._touch(ep)
            if ep.peer is not None and ep.state == "connected":
                self._deliver(ep.host, ep.peer.host, ("fin", ep.peer))

    def _close(self, ep: _Endpoint) -> None:
        ep.closed = True
        if _ENDPOINTS.get(ep.fd) is ep:
            del _ENDPOINTS[ep.fd]
        if self._by_fd.get(ep.fd) is ep:
            del self._by_fd[ep.fd]
            self._candidates.pop(ep.fd, None)
            if self._poller is not None:
                self._poller.forget(ep.fd)
        self._unbind(ep)
        if ep.state == "listening":
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
                self._touch(side)

    # -- delivery ----------------------------------------------------------

    def _link(self, src: _Host, dst: _Host) -> _Link:
        pair = (src.name, dst.name)
        link = self._links.get(pair)
        if link is None:
            link = self._links[pair] = _Link(self._config.get(pair, self._default))
        return link

    def _deliver(self, src: _Host, dst: _Host, segment: Any, *, force: bool = False) -> None:
        loop = self._running_loop()
        if loop.is_closed():
            return  # a socket collected after its loop closed: nothing moves any more
        kind = segment[0]
        if not force and (src.name, dst.name) in self._cut:
            if kind == "dgram":
                self._record("dropped", src.name, dst.name, f"{len(segment[2])} bytes (partition)")
            else:
                self._held.append((src, dst, segment))
            return
        link = self._link(src, dst)
        copies = 1
        if kind == "dgram":
            if link.loss and self._rng.random() < link.loss:
                self._record("lost", src.name, dst.name, f"{len(segment[2])} bytes")
                return
            if link.duplicate and self._rng.random() < link.duplicate:
                copies = 2
        now = loop.time()
        for _ in range(copies):
            at = now
            if link.bandwidth and kind in ("data", "dgram"):
                start = max(now, link.busy_until)
                link.busy_until = at = start + len(segment[2]) / link.bandwidth
            low, high = link.latency
            at += low if low == high else self._rng.uniform(low, high)
            if kind not in ("syn", "dgram"):
                # One direction of one connection is a queue: never overtake.
                target: _Endpoint = segment[1]
                at = max(at, target.last_arrival)
                target.last_arrival = at
            loop.call_at(at, self._arrive, src, dst, segment)

    def _arrive(self, src: _Host, dst: _Host, segment: Any) -> None:
        kind = segment[0]
        if kind == "syn":
            self._arrive_syn(src, dst, segment[1], segment[2])
            return
        if kind == "dgram":
            self._arrive_dgram(src, dst, segment)
            return
        ep: _Endpoint = segment[1]
        self._touch(ep)
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
        if kind == "unreachable":
            if not ep.closed:
                ep.error = errno.ECONNREFUSED
                self._record("unreachable", src.name, dst.name, f"to {ep.local}")
            return
        if kind == "data":
            data: bytes = segment[2]
            if ep.closed or ep.state not in ("connected",) or ep.error:
                sender: _Endpoint = segment[3]
                if ep.closed and sender.state == "connected":
                    self._deliver(dst, src, ("rst", sender))
                return
            ep.inbox += data
            self._record(
                "data",
                src.name,
                dst.name,
                f"{len(data)} bytes to {ep.local} crc {zlib.crc32(data):08x}",
            )
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
        server = _Endpoint(self, dst, "tcp")
        server.state = "connected"
        assert listener.local is not None and client.local is not None
        server.local = (dst.address, port)
        server.remote = client.local
        server.peer = client
        listener.backlog.append(server)
        self._touch(listener)
        self._record("accept", src.name, dst.name, f"{client.local} -> {server.local}")
        self._deliver(dst, src, ("synack", client, server))

    def _arrive_dgram(self, src: _Host, dst: _Host, segment: Any) -> None:
        _, port, data, source, sender = segment
        ep = dst.ports.get(("udp", port)) if dst.up else None
        if ep is None or ep.closed or not ep.alive:
            if dst.up and sender.remote == (dst.address, port) and not sender.closed:
                # ICMP port unreachable: a connected sender hears of it.
                self._deliver(dst, src, ("unreachable", sender))
            self._record("dropped", src.name, dst.name, f"{len(data)} bytes (no socket)")
            return
        if ep.remote is not None and ep.remote != source:
            return  # a connected socket takes datagrams from its peer only
        if ep.queued + len(data) > UDP_BUFFER:
            self._record("dropped", src.name, dst.name, f"{len(data)} bytes (buffer full)")
            return
        ep.datagrams.append((data, source))
        ep.queued += len(data)
        self._touch(ep)
        crc = zlib.crc32(data)
        self._record("dgram", src.name, dst.name, f"{len(data)} bytes to {ep.local} crc {crc:08x}")


def _check_latency(value: tuple[float, float]) -> tuple[float, float]:
    low, high = float(value[0]), float(value[1])
    if not 0 <= low <= high:
        raise ValueError(f"latency must be 0 <= low <= high, not {value!r}")
    return low, high


def _check_probability(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability (0 to 1), not {value!r}")
    return value


def _configure(  # noqa: PLR0917 (one of each property)
    link: _Link,
    latency: tuple[float, float] | None,
    loss: float | None,
    duplicate: float | None,
    split: float | None,
    bandwidth: float | None,
) -> None:
    if latency is not None:
        link.latency = _check_latency(latency)
    if loss is not None:
        link.loss = _check_probability("loss", loss)
    if duplicate is not None:
        link.duplicate = _check_probability("duplicate", duplicate)
    if split is not None:
        link.split = _check_probability("split", split)
    if bandwidth is not None:
        if bandwidth < 0:
            raise ValueError(f"bandwidth must be >= 0 bytes a second, not {bandwidth!r}")
        link.bandwidth = float(bandwidth) or None
