"""The network the loop's sockets live on: the kernel's, or one a test gives.

Layer: fd I/O. A `Network` is a component (DESIGN.md point 7): ``Loop``
takes one as ``network=``; production passes none and every socket is the
kernel's, with no code of this module on any path. A test passes
``tideloop.testing.SimNetwork``, and the loop then asks it:

- for every socket the loop creates itself to connect or to serve
  (`Network.socket`): the simulation hands back a ``socket.socket``
  subclass whose methods move bytes through the simulation, so the
  transports, servers, TLS and ``sock_*`` code above run unchanged;
- for names (`Network.getaddrinfo`), before the real resolver;
- for readiness: it wraps the poller (`Network.wrap_poller`), so that
  simulated sockets are reported ready from the simulation's state and
  real fds from the kernel's, in one poll;
- about sockets the program made itself and hands to the loop
  (`Network.adopt`, from ``sock_*``, ``create_connection(sock=)``,
  ``create_server(sock=)``...): the network may make them its own.

A simulated socket says so (`simulated`): the loop then makes no call
that needs a kernel socket under it (``os.sendfile``, Unix path checks).

Invariant: the loop calls `Network.attach` once, after its own
construction, and before any other method here.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Protocol

from tideloop._pollers import Poller

AddrInfo = tuple[Any, ...]
#: Network has a method named socket: annotations there say this.
_Socket = socket.socket


class Network(Protocol):
    """What the loop asks of a network (see the module docstring)."""

    def wrap_poller(self, poller: Poller) -> Poller: ...

    def attach(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def socket(self, family: int, type: int, proto: int, remote: Any = None) -> socket.socket:
        """A socket for the loop to connect to *remote* (None: to bind and serve)."""
        ...

    def adopt(self, sock: _Socket, remote: Any = None) -> None:
        """A socket the program made, handed to the loop (to reach *remote*)."""
        ...

    def getaddrinfo(  # noqa: PLR0917 (socket.getaddrinfo's order)
        self, host: Any, port: Any, family: int, type: int, proto: int, flags: int
    ) -> list[AddrInfo] | None:
        """The network's answer for *host*, or None to ask the real resolver."""
        ...


def new_socket(
    network: Network | None, family: int, type: int, proto: int, remote: Any = None
) -> socket.socket:
    """A socket the loop creates to connect to *remote* (None: to bind), from *network*."""
    if network is None:
        return socket.socket(family, type, proto)
    return network.socket(family, type, proto, remote)


def simulated(sock: socket.socket) -> bool:
    """Whether *sock* is a network's simulation rather than a kernel socket."""
    return getattr(sock, "_tideloop_simulated", False) is True
