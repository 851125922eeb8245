"""epoll(7) poller (Linux).

Layer: pollers. Facts that shape this module:

- epoll watches an *open file description*, keyed by the fd number it was
  registered under. Closing the last fd that refers to the description removes
  it from the set silently; EPOLL_CTL_DEL on it then fails with EBADF (fd
  closed) or ENOENT (fd number reused by a new description). Either way the
  registration is already gone, so ``unregister`` swallows the error.
- If the description is still open through a dup, the closed fd number keeps
  reporting events and cannot be removed. Nothing in user space can fix that;
  the registry ignores events for fds it does not know.
- Regular files cannot be registered (EPERM); that error reaches the caller,
  as it does with asyncio's EpollSelector.
- ``select.epoll.poll`` takes the timeout in seconds, ``None`` for "block",
  rounds it up to whole milliseconds (never wakes early) and retries on
  EINTR itself (PEP 475), running Python signal handlers first. That is
  exactly the interface's ``poll``, so ``poll`` *is* that builtin, bound:
  the loop calls it once per iteration with no Python frame in between.
- PyPy's ``select.epoll.poll`` rejects ``None`` (TypeError: "must be real
  number") and takes ``-1`` for "block"; it too rounds up to milliseconds.
  There ``poll`` is a small function that maps None to -1 (`_blocking_none`).
- Level-triggered mode: a ready fd keeps being reported until drained, which
  is what asyncio's reader/writer semantics assume.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from typing import Final

#: Whether ``epoll.poll`` needs -1 instead of None to block (PyPy).
_POLL_NEEDS_MINUS_ONE: Final = sys.implementation.name == "pypy"


def _blocking_none(
    poll: Callable[[float], list[tuple[int, int]]],
) -> Callable[[float | None], list[tuple[int, int]]]:
    def poll_none_blocks(timeout: float | None) -> list[tuple[int, int]]:
        return poll(-1.0 if timeout is None else timeout)

    return poll_none_blocks


# mypy checks the class on Linux only, where select.epoll exists.
if sys.platform == "linux":

    class EpollPoller:
        __slots__ = ("_ep", "name", "poll")

        def __init__(self) -> None:
            self.name = "epoll"
            self._ep = ep = select.epoll()
            # maxevents keeps its default (FD_SETSIZE - 1 events per call);
            # more ready fds are reported by the next call (level-triggered).
            self.poll: Callable[[float | None], list[tuple[int, int]]] = (
                _blocking_none(ep.poll) if _POLL_NEEDS_MINUS_ONE else ep.poll
            )

        def fileno(self) -> int:
            return self._ep.fileno()

        def register(self, fd: int, events: int) -> None:
            self._ep.register(fd, events)

        def modify(self, fd: int, events: int) -> None:
            self._ep.modify(fd, events)

        def unregister(self, fd: int) -> None:
            try:
                self._ep.unregister(fd)
            except OSError:
                pass  # already closed: the kernel dropped it (see module docstring)

        def close(self) -> None:
            self._ep.close()
