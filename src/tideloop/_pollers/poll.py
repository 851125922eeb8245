"""poll(2) poller: the portable fallback.

Layer: pollers. Facts that shape this module:

- The interest set lives in user space (the ``select.poll`` object), so
  nothing is "registered in the kernel": a closed fd stays in the set and
  poll reports POLLNVAL for it on every call until it is unregistered. That
  bit reaches both callbacks (see `base`), as with asyncio's PollSelector.
- poll's timeout is in whole milliseconds; we round up (never wake early).
- Cost is O(registered fds) per call; epoll and kqueue are preferred.
"""

from __future__ import annotations

import math
import select

from .base import READ, WRITE

assert select.POLLIN == READ and select.POLLOUT == WRITE  # the shared bit convention


class PollPoller:
    __slots__ = ("_p", "name")

    def __init__(self) -> None:
        self.name = "poll"
        self._p = select.poll()

    def fileno(self) -> int:
        return -1

    def register(self, fd: int, events: int) -> None:
        self._p.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._p.modify(fd, events)

    def unregister(self, fd: int) -> None:
        try:
            self._p.unregister(fd)
        except KeyError:
            pass

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        if timeout is None:
            return self._p.poll()
        if timeout <= 0:
            return self._p.poll(0)
        return self._p.poll(math.ceil(timeout * 1e3))

    def close(self) -> None:
        pass  # nothing held outside Python objects
