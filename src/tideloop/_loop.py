"""Loop: the public event loop class, composed from the layers.

Layer: top. Each layer is a class that extends the one below it and imports
only from below:

    CoreLoop       (_core/run.py)          scheduling, run loop, lifecycle, errors,
                                           debug, threads, executor, async generators
    FdLoop         (_fdio/registry.py)     fd registry, add_reader/add_writer
    SockLoop       (_fdio/sock.py)         sock_recv, sock_sendall, sock_connect, ...
    TransportLoop  (_transports/loop.py)   stream transports, sock_sendfile, sendfile
    DnsLoop        (_net/dns.py)           getaddrinfo, getnameinfo
    ConnectLoop    (_net/connect.py)       create_connection (happy eyeballs), Unix
    NetLoop        (_net/server.py)        create_server, create_unix_server, Server
    SignalLoop     (_signals.py)           add_signal_handler/remove_signal_handler
    Loop           (here)                  what users construct

``class Loop(NetLoop, SignalLoop)``: both branches extend FdLoop, and the
method resolution order is the list above. Every layer's ``__init__(*,
poller, clock)`` and ``_close()`` call ``super()``, so each runs once.
Methods of `asyncio.AbstractEventLoop` not provided by any layer yet (TLS,
datagram endpoints, pipes, subprocesses) raise NotImplementedError
(asyncio's default).
"""

from __future__ import annotations

from ._core.clock import Clock
from ._net import NetLoop
from ._pollers import Poller
from ._signals import SignalLoop

__all__ = ["Loop", "new_event_loop"]


class Loop(NetLoop, SignalLoop):
    """A drop-in `asyncio.AbstractEventLoop`.

    *poller* picks the readiness mechanism: ``"epoll"``, ``"kqueue"``,
    ``"poll"``, a `Poller` instance, or None for the platform's best.
    *clock* supplies time (see ``tideloop._core.clock``); None means real
    monotonic time.
    """

    def __init__(self, *, poller: Poller | str | None = None, clock: Clock | None = None) -> None:
        super().__init__(poller=poller, clock=clock)


def new_event_loop(*, poller: Poller | str | None = None, clock: Clock | None = None) -> Loop:
    """Create a new tideloop event loop (usable as asyncio's ``loop_factory``)."""
    # mypy sees the AbstractEventLoop methods no layer provides yet (TLS,
    # datagram endpoints, pipes, subprocesses) as abstract.
    return Loop(poller=poller, clock=clock)  # type: ignore[abstract]
