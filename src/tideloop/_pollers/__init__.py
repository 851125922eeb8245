"""Pollers: kernel readiness behind one small interface (see `base`).

Layer: pollers, the lowest; imports nothing else from tideloop.
`make_poller` picks the best mechanism for the platform (epoll, then kqueue,
then poll) or the one named by the caller.
"""

from __future__ import annotations

import importlib
import select
from typing import Final

from .base import READ, READER_BITS, WRITE, WRITER_BITS, Poller

__all__ = [
    "POLLERS",
    "READ",
    "READER_BITS",
    "WRITE",
    "WRITER_BITS",
    "Poller",
    "available",
    "make_poller",
]


#: The pollers, best first: (name, what the ``select`` module must have for
#: it, the module of this package that holds it, its class). The one place
#: that says which mechanism exists where: `available` and `make_poller`
#: both read it.
POLLERS: Final = (
    ("epoll", "epoll", "epoll", "EpollPoller"),  # Linux
    ("kqueue", "kqueue", "kqueue", "KqueuePoller"),  # the BSDs and macOS
    ("poll", "poll", "poll", "PollPoller"),  # every POSIX system
)


def available() -> list[str]:
    """Names of the pollers this platform supports, best first."""
    return [name for name, needs, _, _ in POLLERS if hasattr(select, needs)]


_POLLER_METHODS = ("fileno", "register", "modify", "unregister", "poll", "close")


def make_poller(name: Poller | str | None = None) -> Poller:
    """Create the poller called *name*, or the platform's best if None.

    A `Poller` instance (e.g. a fake in unit tests) is returned as is.
    """
    if name is not None and not isinstance(name, str):
        if all(callable(getattr(name, m, None)) for m in _POLLER_METHODS):
            return name
        raise TypeError(f"poller must be a name or a Poller, not {type(name).__name__}")
    names = available()
    if name is None:
        if not names:
            raise RuntimeError("no supported poller (epoll, kqueue or poll) on this platform")
        name = names[0]
    if name not in names:
        raise ValueError(f"unknown or unavailable poller {name!r}; this platform has {names}")
    module, cls = next((m, c) for n, _, m, c in POLLERS if n == name)
    poller: Poller = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
    return poller
