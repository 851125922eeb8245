"""The kernel model: every simulated host's sockets, and the segments between them.

Layer: testing (the simulation; above ``endpoints``, ``fdtable`` and
``links``, below ``loop_side`` and ``network``). `Kernel` is what a real
kernel would be under the simulated sockets, for every host at once:

- the hosts (by name and by address, each created on first use with the
  next address of 10.0.0.0/8) and which one the running code is on
  (`HOST`, a context variable: a task inherits its creator's host);
- the system calls of `endpoints.Syscalls`: binding ports and paths,
  listening, connecting, accepting, reading, writing, shutting down and
  closing, with the errors Linux gives;
- segments and datagrams: what a call sends becomes a segment (``syn``,
  ``synack``, ``refused``, ``data``, ``fin``, ``rst``, ``dgram``,
  ``unreachable``) delivered through the `Links` after a latency drawn
  from the network's generator (a timer on the loop), or held while a
  partition cuts its way, or lost; its arrival changes the endpoints;
- the fd table (``fdtable.FdTable``): the live simulated sockets, and
  what the loop's poller sees of them; every change to an endpoint that
  can make it ready touches it there;
- the event log every part of the simulation records into (`record`).

Invariants:
- A socket's endpoint is in the fd table from `register` until `close`
  (or until the socket is collected unclosed).
- Segments of one direction of one stream connection arrive in the order
  sent: an arrival is never scheduled before the previous one
  (``last_arrival``), and each arrival timer delivers the oldest segment in
  flight (``in_flight``), so timers due at the same instant keep the order
  whichever runs first.
- The generator is drawn from only here, in the order the program's calls
  and the arrivals happen: the same seed and the same schedule give the
  same draws.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import ipaddress
import os
import random
import socket
import weakref
import zlib
from typing import Any, Final

from .endpoints import UDP_BUFFER, WINDOW, Address, Endpoint, Host, Kind, error
from .fdtable import FdTable
from .links import Links

#: The largest UDP payload over IPv4.
_UDP_MAX: Final = 65507

#: The host the running code is on (unset: the host ``"client"``).
HOST: contextvars.ContextVar[Host] = contextvars.ContextVar("tideloop_sim_host")

#: One entry of the event log: (virtual time, event, from host, to host, detail).
LogEntry = tuple[float, str, str, str, str]


class Kernel:
    """The kernel of every simulated host (see the module docstring).

    *rng* is the network's generator (latencies, loss, duplication, split);
    *links* what messages between hosts go through.
    """

    __slots__ = (
        "_by_address",
        "_held",
        "_hosts",
        "_links",
        "_rng",
        "fds",
        "log",
        "loop",
    )

    def __init__(self, rng: random.Random, links: Links) -> None:
        self._rng = rng
        self._links = links
        self._hosts: dict[str, Host] = {}
        self._by_address: dict[str, Host] = {}
        #: The live simulated sockets, and what the loop's poller sees of them.
        self.fds = FdTable()
        #: Segments a partition holds, in the order they were sent.
        self._held: list[tuple[Host, Host, Any]] = []
        #: The loop served now (set by the loop side when a loop attaches).
        self.loop: asyncio.AbstractEventLoop | None = None
        #: What happened, in order.
        self.log: list[LogEntry] = []

    # -- hosts and the loop --------------------------------------------------

    def host(self, name: str) -> Host:
        """The host named *name*, created (with the next free address) on first use."""
        host = self._hosts.get(name)
        if host is None:
            address = str(ipaddress.IPv4Address("10.0.0.0") + len(self._hosts) + 1)
            host = Host(name, address)
            self._hosts[name] = host
            self._by_address[address] = host
        return host

    def named(self, name: str) -> Host | None:
        """The host named *name*, if there is one (none is created)."""
        return self._hosts.get(name)

    def host_at(self, address: str) -> Host | None:
        return self._by_address.get(address)

    def current_host(self) -> Host:
        """The host the running code is on (``"client"`` outside every host)."""
        host = HOST.get(None)
        return host if host is not None else self.host("client")

    def running_loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None:
            raise RuntimeError("this SimNetwork is not attached to a loop yet")
        return self.loop

    def record(self, event: str, a: str, b: str, detail: str) -> None:
        now = self.loop.time() if self.loop is not None else 0.0
        self.log.append((now, event, a, b, detail))

    # -- the system calls (endpoints.Syscalls) ---------------------------------

    def endpoint(self, host: Host, kind: Kind) -> Endpoint:
        """A new socket's endpoint on *host*."""
        return Endpoint(self, host, kind)

    def register(self, sock: socket.socket, ep: Endpoint) -> None:
        # A socket collected unclosed closes its fd with no _real_close: the
        # endpoint must go then too, before the kernel hands the fd out again.
        ep.ref = weakref.ref(sock, lambda _: self._collected(ep))
        self.fds.add(socket.socket.fileno(sock), ep)

    def _collected(self, ep: Endpoint) -> None:
        if not ep.closed:
            self.close(ep)

    def _local_address(self, ep: Endpoint, address: str) -> str:
        if address in ("", "0.0.0.0"):
            return "0.0.0.0"
        if address in ("127.0.0.1", "localhost", ep.host.address):
            return ep.host.address
        raise error(errno.EADDRNOTAVAIL)

    def bind(self, ep: Endpoint, address: Any) -> None:
        if ep.local is not None:
            raise error(errno.EINVAL)
        host = ep.host
        if ep.kind == "unix":
            path = os.fspath(address)
            if not path:
                raise error(errno.EINVAL)  # autobind is not simulated
            if path in host.paths:
                raise error(errno.EADDRINUSE)
            host.paths[path] = ep
            ep.local = path
            return
        local = self._local_address(ep, str(address[0]))
        port = int(address[1])
        if port == 0:
            port = host.free_port(ep.kind)
        elif (ep.kind, port) in host.ports:
            raise error(errno.EADDRINUSE)
        host.ports[ep.kind, port] = ep
        ep.local = (local, port)

    def _unbind(self, ep: Endpoint) -> None:
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

    def listen(self, ep: Endpoint, backlog: int) -> None:
        if ep.kind == "udp":
            raise error(errno.EOPNOTSUPP)
        if ep.local is None:
            if ep.kind == "unix":
                raise error(errno.EINVAL)
            self.bind(ep, ("0.0.0.0", 0))
        ep.state = "listening"
        ep.backlog_max = max(1, backlog)
        if ep.alive and ep.kind == "tcp":
            ep.host.listeners[ep.local[1]] = ep

    def accept(self, ep: Endpoint) -> Endpoint:
        if ep.state != "listening":
            raise error(errno.EINVAL)
        if not ep.backlog:
            raise error(errno.EAGAIN, BlockingIOError)
        return ep.backlog.popleft()

    def _resolve_remote(self, ep: Endpoint, address: Any) -> tuple[Host, Address]:
        ip, port = str(address[0]), int(address[1])
        if ip in ("127.0.0.1", "localhost"):
            ip = ep.host.address
        elif ip in self._hosts:  # a name, as the kernel's calls resolve them
            ip = self._hosts[ip].address
        dst = self.host_at(ip)
        if dst is None:
            raise error(errno.ENETUNREACH)
        return dst, (ip, port)

    def connect(self, ep: Endpoint, address: Any) -> None:
        if ep.kind == "unix":
            self._connect_unix(ep, os.fspath(address))
            return
        if ep.kind == "udp":
            dst, remote = self._resolve_remote(ep, address)
            if ep.local is None:
                self.bind(ep, ("0.0.0.0", 0))
            if ep.local[0] == "0.0.0.0":  # connect picks the source address, as Linux's
                ep.local = (ep.host.address, ep.local[1])
            ep.remote = remote
            return
        if ep.state == "connected":
            raise error(errno.EISCONN)
        if ep.state == "connecting":
            raise error(errno.EALREADY, BlockingIOError)
        dst, remote = self._resolve_remote(ep, address)
        if ep.local is None:
            self.bind(ep, (ep.host.address, 0))
        elif ep.local[0] == "0.0.0.0":
            ep.local = (ep.host.address, ep.local[1])
        ep.remote = remote
        ep.state = "connecting"
        self.record("connect", ep.host.name, dst.name, f"{ep.local} -> {ep.remote}")
        self._deliver(ep.host, dst, ("syn", ep, remote[1]))
        raise error(errno.EINPROGRESS, BlockingIOError)

    def _connect_unix(self, ep: Endpoint, path: str | bytes) -> None:
        if ep.state == "connected":
            raise error(errno.EISCONN)
        host = ep.host
        listener = host.paths.get(path)
        if listener is None:
            raise error(errno.ENOENT, FileNotFoundError)
        if listener.state != "listening" or listener.closed:
            raise error(errno.ECONNREFUSED, ConnectionRefusedError)
        if len(listener.backlog) >= listener.backlog_max:
            raise error(errno.EAGAIN, BlockingIOError)
        server = Endpoint(self, host, "unix")
        server.state = ep.state = "connected"
        server.local = path
        server.remote = ep.local if ep.local is not None else ""
        ep.remote = path
        server.peer, ep.peer = ep, server
        listener.backlog.append(server)
        self.fds.touch(listener)
        self.fds.touch(ep)
        self.record("connect", host.name, host.name, f"unix {path!r}")

    def getsockopt(self, ep: Endpoint, level: int, optname: int) -> int:
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

    def setsockopt(self, ep: Endpoint, level: int, optname: int, value: int) -> None:
        ep.options[level, optname] = value

    def _check_readable(self, ep: Endpoint) -> None:
        if ep.state == "dead":
            raise error(errno.ECONNRESET, ConnectionResetError)
        if ep.error:
            self._raise_pending_error(ep)
        if ep.state not in ("connected", "closed-by-error"):
            raise error(errno.ENOTCONN)
        if not ep.inbox and not ep.eof:
            raise error(errno.EAGAIN, BlockingIOError)

    def _raise_pending_error(self, ep: Endpoint) -> None:
        """Report a reset once, from whichever of recv/send comes first, as Linux
        does; after it the socket reads EOF and writes EPIPE."""
        err, ep.error = ep.error, 0
        self.fds.touch(ep)
        if ep.kind == "udp":  # an ICMP error: reported once, the socket lives on
            raise error(err, ConnectionRefusedError if err == errno.ECONNREFUSED else OSError)
        ep.eof = True
        ep.state = "closed-by-error"
        raise error(err, ConnectionResetError if err == errno.ECONNRESET else OSError)

    def recv(self, ep: Endpoint, size: int) -> bytes:
        self._check_readable(ep)
        n = min(size, len(ep.inbox))
        data = bytes(ep.inbox[:n])
        self._consume(ep, n)
        return data

    def recv_into(self, ep: Endpoint, view: memoryview, size: int) -> int:
        self._check_readable(ep)
        n = min(size, len(ep.inbox))
        view[:n] = ep.inbox[:n]
        self._consume(ep, n)
        return n

    def _consume(self, ep: Endpoint, n: int) -> None:
        if n == 0:
            return
        del ep.inbox[:n]
        sender = ep.peer
        if sender is not None:
            sender.outstanding -= n
            self.fds.touch(sender)

    def send(self, ep: Endpoint, view: memoryview) -> int:
        if ep.state == "dead":
            return len(view)  # a crashed host's socket: its bytes go nowhere
        if ep.error:
            self._raise_pending_error(ep)
        if ep.state == "closed-by-error" or ep.shut_wr:
            raise error(errno.EPIPE, BrokenPipeError)
        if ep.state != "connected" or ep.peer is None:
            raise error(errno.ENOTCONN)
        room = WINDOW - ep.outstanding
        if room <= 0:
            raise error(errno.EAGAIN, BlockingIOError)
        data = bytes(view[:room])
        if not data:
            return 0
        ep.outstanding += len(data)
        self.fds.touch(ep)
        src, dst = ep.host, ep.peer.host
        link = self._links.link(src.name, dst.name)
        if link.split and len(data) > 1 and self._rng.random() < link.split:
            cuts = sorted(self._rng.sample(range(1, len(data)), min(3, len(data) - 1)))
            pieces = [data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            self.record("split", src.name, dst.name, f"{len(data)} bytes in {len(pieces)}")
        else:
            pieces = [data]
        for piece in pieces:
            self._deliver(src, dst, ("data", ep.peer, piece, ep))
        return len(data)

    def sendto(self, ep: Endpoint, view: memoryview, address: Any) -> int:
        if ep.state == "dead":
            return len(view)
        if ep.error:
            self._raise_pending_error(ep)
        if len(view) > _UDP_MAX:
            raise error(errno.EMSGSIZE)
        dst, remote = self._resolve_remote(ep, address)
        if ep.local is None:
            self.bind(ep, ("0.0.0.0", 0))
        source = (ep.host.address, ep.local[1])
        self._deliver(ep.host, dst, ("dgram", remote[1], bytes(view), source, ep))
        return len(view)

    def recvfrom(self, ep: Endpoint, size: int) -> tuple[bytes, Address]:
        if ep.error:
            self._raise_pending_error(ep)
        if not ep.datagrams:
            raise error(errno.EAGAIN, BlockingIOError)
        data, address = ep.datagrams.popleft()
        ep.queued -= len(data)
        return data[:size], address

    def shutdown(self, ep: Endpoint, how: int) -> None:
        if ep.kind == "udp" or ep.state not in ("connected", "closed-by-error"):
            raise error(errno.ENOTCONN)
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not ep.shut_wr:
            ep.shut_wr = True
            self.fds.touch(ep)
            if ep.peer is not None and ep.state == "connected":
                self._deliver(ep.host, ep.peer.host, ("fin", ep.peer))

    def close(self, ep: Endpoint) -> None:
        ep.closed = True
        self.fds.remove(ep)
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

    # -- faults (the test API asks) --------------------------------------------

    def crash(self, host: Host) -> None:
        """*host* stops: nothing of it is bound, its sockets go silent, its peers
        are reset."""
        host.up = False
        host.wipe()
        for ep in self.fds.endpoints():
            if ep.host is host and ep.generation == host.generation:
                peer = ep.peer
                if peer is not None and peer.state == "connected" and peer.alive:
                    self._deliver(host, peer.host, ("rst", peer), force=True)
                ep.state = "dead"
                ep.peer = None
                self.fds.touch(ep)

    def restart(self, host: Host) -> None:
        """A crashed *host* is up again, a new incarnation (its old sockets stay dead)."""
        host.generation += 1
        host.up = True

    def reset(self, a: str, b: str) -> None:
        """Reset every connection between the hosts named *a* and *b*."""
        for ep in self.fds.endpoints():
            peer = ep.peer
            if peer is None or ep.state != "connected":
                continue
            if {ep.host.name, peer.host.name} == {a, b} or (a == b == ep.host.name):
                self._abort_pair(ep)

    def _abort_pair(self, ep: Endpoint) -> None:
        peer = ep.peer
        for side in (ep, peer):
            if side is not None and side.state == "connected":
                side.error = errno.ECONNRESET
                side.inbox.clear()
                if side.peer is not None:
                    side.peer.outstanding = 0
                self.fds.touch(side)

    def release_held(self) -> None:
        """Deliver, in order, the held segments whose way is no longer cut."""
        held, self._held = self._held, []
        for src, dst, segment in held:
            if self._links.is_cut(src.name, dst.name):
                self._held.append((src, dst, segment))
            else:
                self._deliver(src, dst, segment)

    # -- delivery ----------------------------------------------------------

    def _deliver(self, src: Host, dst: Host, segment: Any, *, force: bool = False) -> None:
        loop = self.running_loop()
        if loop.is_closed():
            return  # a socket collected after its loop closed: nothing moves any more
        kind = segment[0]
        if not force and self._links.is_cut(src.name, dst.name):
            if kind == "dgram":
                self.record("dropped", src.name, dst.name, f"{len(segment[2])} bytes (partition)")
            else:
                self._held.append((src, dst, segment))
            return
        link = self._links.link(src.name, dst.name)
        copies = 1
        if kind == "dgram":
            if link.loss and self._rng.random() < link.loss:
                self.record("lost", src.name, dst.name, f"{len(segment[2])} bytes")
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
                # Two segments may be due at the same instant, and timers
                # with one deadline may run in either order (a schedule
                # varies it: a tie): each timer delivers the oldest segment
                # in flight, so the bytes keep their order whatever order
                # the timers run in, and none arrives before its time.
                target: Endpoint = segment[1]
                at = max(at, target.last_arrival)
                target.last_arrival = at
                target.in_flight.append((src, dst, segment))
                loop.call_at(at, self._arrive_in_order, target)
                continue
            loop.call_at(at, self._arrive, src, dst, segment)

    def _arrive_in_order(self, target: Endpoint) -> None:
        self._arrive(*target.in_flight.popleft())

    def _arrive(self, src: Host, dst: Host, segment: Any) -> None:
        kind = segment[0]
        if kind == "syn":
            self._arrive_syn(src, dst, segment[1], segment[2])
            return
        if kind == "dgram":
            self._arrive_dgram(src, dst, segment)
            return
        ep: Endpoint = segment[1]
        self.fds.touch(ep)
        if kind == "synack":
            if ep.state == "connecting" and not ep.closed:
                ep.state = "connected"
                ep.peer = segment[2]
                self.record("connected", src.name, dst.name, f"{ep.local} -> {ep.remote}")
            elif segment[2].state == "connected":
                # The connecting socket is gone: reset the accepted side.
                self._deliver(dst, src, ("rst", segment[2]))
            return
        if kind == "refused":
            if ep.state == "connecting":
                ep.connect_error = errno.ECONNREFUSED
                self.record("refused", src.name, dst.name, f"{ep.remote}")
            return
        if not ep.alive:
            return  # the host crashed: nothing answers
        if kind == "unreachable":
            if not ep.closed:
                ep.error = errno.ECONNREFUSED
                self.record("unreachable", src.name, dst.name, f"to {ep.local}")
            return
        if kind == "data":
            data: bytes = segment[2]
            if ep.closed or ep.state not in ("connected",) or ep.error:
                sender: Endpoint = segment[3]
                if ep.closed and sender.state == "connected":
                    self._deliver(dst, src, ("rst", sender))
                return
            ep.inbox += data
            self.record(
                "data",
                src.name,
                dst.name,
                f"{len(data)} bytes to {ep.local} crc {zlib.crc32(data):08x}",
            )
        elif kind == "fin":
            ep.eof = True
            self.record("fin", src.name, dst.name, f"to {ep.local}")
        elif kind == "rst" and ep.state == "connected" and not ep.closed:
            ep.error = errno.ECONNRESET
            ep.inbox.clear()
            self.record("rst", src.name, dst.name, f"to {ep.local}")

    def _arrive_syn(self, src: Host, dst: Host, client: Endpoint, port: int) -> None:
        listener = dst.listeners.get(port) if dst.up else None
        if listener is None or listener.closed:
            if dst.up:
                self._deliver(dst, src, ("refused", client))
            return  # a crashed host does not answer: the connect waits
        if len(listener.backlog) >= listener.backlog_max or client.state != "connecting":
            return  # dropped, as a full backlog drops a SYN
        server = Endpoint(self, dst, "tcp")
        server.state = "connected"
        assert listener.local is not None and client.local is not None
        server.local = (dst.address, port)
        server.remote = client.local
        server.peer = client
        listener.backlog.append(server)
        self.fds.touch(listener)
        self.record("accept", src.name, dst.name, f"{client.local} -> {server.local}")
        self._deliver(dst, src, ("synack", client, server))

    def _arrive_dgram(self, src: Host, dst: Host, segment: Any) -> None:
        _, port, data, source, sender = segment
        ep = dst.ports.get(("udp", port)) if dst.up else None
        if ep is None or ep.closed or not ep.alive:
            if dst.up and sender.remote == (dst.address, port) and not sender.closed:
                # ICMP port unreachable: a connected sender hears of it.
                self._deliver(dst, src, ("unreachable", sender))
            self.record("dropped", src.name, dst.name, f"{len(data)} bytes (no socket)")
            return
        if ep.remote is not None and ep.remote != source:
            return  # a connected socket takes datagrams from its peer only
        if ep.queued + len(data) > UDP_BUFFER:
            self.record("dropped", src.name, dst.name, f"{len(data)} bytes (buffer full)")
            return
        ep.datagrams.append((data, source))
        ep.queued += len(data)
        self.fds.touch(ep)
        crc = zlib.crc32(data)
        self.record("dgram", src.name, dst.name, f"{len(data)} bytes to {ep.local} crc {crc:08x}")
