"""The kernel model's records: hosts, endpoints, and the calls a socket makes on them.

Layer: testing (the simulation; below ``kernel``, ``sockets`` and every
other part of it). What a simulated host's kernel holds, as plain records:

- a `Host`: its name and address, its namespaces (TCP and UDP ports, Unix
  paths, TCP listeners), whether it is up, and its *generation* (bumped by
  a restart, so that sockets of the crashed incarnation stay dead);
- an `Endpoint`: one simulated socket's whole state (its `SimSocket`
  holds none of its own, so a program's ``socket.socket`` can become one
  in place), found by fd in `ENDPOINTS`;
- `Syscalls`: what a socket may ask of the kernel model, one call per
  socket operation, each on the socket's endpoint. The kernel model
  (``kernel.Kernel``) is its one implementation; an endpoint carries it as
  ``kernel``, so a socket reaches the model through this interface only.

Invariants:
- Only the kernel model changes an endpoint; a socket reads its own
  (``kind``, ``state``, ``local``, ``remote``, ``host``) and asks
  `Syscalls` for everything else.
- An endpoint is in `ENDPOINTS` under its fd from `Syscalls.register` until
  `Syscalls.close` (or until its socket is collected unclosed); only the
  fd table (``fdtable``) writes it.
- ``outstanding`` (bytes sent, not yet read by the peer) never exceeds
  `WINDOW`; ``queued`` (bytes of waiting datagrams) never exceeds
  `UDP_BUFFER`.
"""

from __future__ import annotations

import collections
import errno
import os
import socket
import weakref
from typing import Any, Final, Literal, Protocol

#: Bytes one connection carries sent but not yet read by the peer.
WINDOW: Final = 256 * 1024
#: Bytes of datagrams that wait in one UDP socket; more are dropped.
UDP_BUFFER: Final = 208 * 1024
_FIRST_EPHEMERAL: Final = 49152
_LAST_PORT: Final = 65535

Address = tuple[str, int]
Kind = Literal["tcp", "udp", "unix"]


def error(code: int, exc_type: type[OSError] = OSError) -> OSError:
    """The exception a kernel call failing with *code* raises (its text is the C library's)."""
    return exc_type(code, os.strerror(code))


def kind_of(family: int, type: int) -> Kind | None:
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


class Host:
    """One simulated host: its address and what is bound on it."""

    __slots__ = ("address", "generation", "listeners", "name", "next_port", "paths", "ports", "up")

    def __init__(self, name: str, address: str) -> None:
        self.name = name
        self.address = address
        #: TCP port -> the listening endpoint.
        self.listeners: dict[int, Endpoint] = {}
        #: (tcp|udp, port) -> the endpoint bound to it.
        self.ports: dict[tuple[str, int], Endpoint] = {}
        #: Unix path -> the endpoint bound to it.
        self.paths: dict[str | bytes, Endpoint] = {}
        self.next_port = {"tcp": _FIRST_EPHEMERAL, "udp": _FIRST_EPHEMERAL}
        self.generation = 0
        self.up = True

    def free_port(self, kind: str) -> int:
        start = port = self.next_port[kind]
        while (kind, port) in self.ports:
            port = port + 1 if port < _LAST_PORT else _FIRST_EPHEMERAL
            if port == start:
                raise error(errno.EADDRNOTAVAIL)
        self.next_port[kind] = port + 1 if port < _LAST_PORT else _FIRST_EPHEMERAL
        return port

    def wipe(self) -> None:
        """The host crashed: nothing of it is bound any more."""
        self.listeners.clear()
        self.ports.clear()
        self.paths.clear()

    def __repr__(self) -> str:
        return f"<host {self.name} {self.address}>"


class Endpoint:
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
        "in_flight",
        "inbox",
        "kernel",
        "kind",
        "last_arrival",
        "local",
        "options",
        "outstanding",
        "peer",
        "queued",
        "ref",
        "remote",
        "shut_wr",
        "state",
    )

    def __init__(self, kernel: Syscalls, host: Host, kind: Kind) -> None:
        #: What its socket may ask of the kernel model.
        self.kernel = kernel
        self.host = host
        self.kind = kind
        self.generation = host.generation
        self.fd = -1  # its SimSocket's, once it has one
        # new, listening, connecting, connected, closed-by-error (a reset was
        # reported), closed, dead (its host crashed)
        self.state = "new"
        self.local: Any = None  # (address, port), or a Unix path
        self.remote: Any = None
        self.peer: Endpoint | None = None
        self.inbox = bytearray()
        self.datagrams: collections.deque[tuple[bytes, Address]] = collections.deque()
        self.queued = 0  # bytes in datagrams
        self.eof = False
        self.error = 0  # reported by the next recv/send (then EOF / EPIPE)
        self.connect_error = 0  # SO_ERROR after a non-blocking connect
        self.outstanding = 0
        self.shut_wr = False
        self.closed = False
        self.backlog: collections.deque[Endpoint] = collections.deque()
        self.backlog_max = 0
        self.last_arrival = 0.0
        #: Stream segments on their way here, in the order sent (kernel._deliver).
        self.in_flight: collections.deque[tuple[Any, Any, Any]] = collections.deque()
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
#: Read by the sockets; only the fd table (``fdtable``) adds and removes entries.
ENDPOINTS: dict[int, Endpoint] = {}


class Syscalls(Protocol):
    """What a simulated socket may ask of the kernel model (see the module docstring).

    Each call is the kernel's side of the socket method of the same name,
    on the socket's endpoint *ep*; it raises the ``OSError`` the kernel's
    would. Stream calls (``recv``, ``recv_into``, ``send``) are for TCP and
    Unix endpoints, datagram calls (``recvfrom``, ``sendto``) for UDP ones.
    """

    def register(self, sock: socket.socket, ep: Endpoint) -> None:
        """*ep* is *sock*'s (by its fd) until the socket closes or is collected."""
        ...

    def bind(self, ep: Endpoint, address: Any) -> None: ...

    def listen(self, ep: Endpoint, backlog: int) -> None: ...

    def connect(self, ep: Endpoint, address: Any) -> None: ...

    def accept(self, ep: Endpoint) -> Endpoint:
        """The next connection in a listener's backlog: its server-side endpoint."""
        ...

    def recv(self, ep: Endpoint, size: int) -> bytes: ...

    def recv_into(self, ep: Endpoint, view: memoryview, size: int) -> int: ...

    def recvfrom(self, ep: Endpoint, size: int) -> tuple[bytes, Address]: ...

    def send(self, ep: Endpoint, view: memoryview) -> int: ...

    def sendto(self, ep: Endpoint, view: memoryview, address: Any) -> int: ...

    def shutdown(self, ep: Endpoint, how: int) -> None: ...

    def close(self, ep: Endpoint) -> None: ...

    def getsockopt(self, ep: Endpoint, level: int, optname: int) -> int: ...

    def setsockopt(self, ep: Endpoint, level: int, optname: int, value: int) -> None: ...
