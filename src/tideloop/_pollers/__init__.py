"""Pollers: kernel readiness behind one small interface (see `base`).

Layer: pollers, the lowest; imports nothing else from tideloop.
`make_poller` picks the best mechanism for the platform (epoll, then kqueue,
then poll) or the one named by the caller.
"""

from __future__ import annotations

import select
import sys

from .base import READ, READER_BITS, WRITE, WRITER_BITS, Poller

__all__ = ["READ", "READER_BITS", "WRITE", "WRITER_BITS", "Poller", "available", "make_poller"]


def available() -> list[str]:
    """Names of the pollers this platform supports, best first."""
    names = []
    if hasattr(select, "epoll"):
        names.append("epoll")
    if hasattr(select, "kqueue"):
        names.append("kqueue")
    if hasattr(select, "poll"):
        names.append("poll")
    return names


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
    if name == "epoll" and sys.platform == "linux":
        from .epoll import EpollPoller

        return EpollPoller()
    if name == "kqueue" and sys.platform != "linux" and sys.platform != "win32":
        from .kqueue import KqueuePoller

        return KqueuePoller()
    from .poll import PollPoller

    return PollPoller()
