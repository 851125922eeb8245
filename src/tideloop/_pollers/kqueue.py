"""kqueue(2) poller (macOS, the BSDs).

Layer: pollers. Facts that shape this module:

- kqueue has one filter per direction: EVFILT_READ and EVFILT_WRITE are
  separate registrations, so a mask change is a list of add/delete changes
  and a ready fd can come back as two events (one per filter). The registry
  handles repeated fds in one poll result, so we report each filter as its own
  ``(fd, READ)`` or ``(fd, WRITE)`` pair.
- Closing an fd removes its filters from every kqueue; deleting them later
  fails with ENOENT/EBADF, which ``unregister`` swallows.
- ``control()`` takes a timeout in seconds with nanosecond resolution and
  needs an explicit maximum event count: one per registered filter.
- Unlike epoll, EV_EOF arrives as a flag on a normal read/write event, and
  the callbacks then see EOF or the error from their own syscall.
"""

from __future__ import annotations

import select
import sys

from .base import READ, WRITE

# mypy checks the class on kqueue platforms only (CI runs it with --platform darwin).
if sys.platform != "linux" and sys.platform != "win32":
    _FILTERS = ((READ, select.KQ_FILTER_READ), (WRITE, select.KQ_FILTER_WRITE))

    def _count(mask: int) -> int:
        """Filters a mask stands for: one per direction."""
        return (1 if mask & READ else 0) + (1 if mask & WRITE else 0)

    class KqueuePoller:
        __slots__ = ("_filters", "_kq", "_masks", "name")

        def __init__(self) -> None:
            self.name = "kqueue"
            self._kq = select.kqueue()
            self._masks: dict[int, int] = {}
            self._filters = 0  # registered filters, the most events one poll can return

        def fileno(self) -> int:
            return self._kq.fileno()

        def _apply(self, fd: int, old: int, new: int) -> None:
            changes = []
            for bit, kfilter in _FILTERS:
                if new & bit and not old & bit:
                    changes.append(select.kevent(fd, kfilter, select.KQ_EV_ADD))
                elif old & bit and not new & bit:
                    changes.append(select.kevent(fd, kfilter, select.KQ_EV_DELETE))
            if changes:
                self._kq.control(changes, 0, 0)

        def _forget(self, fd: int) -> None:
            """After a failed change the kernel's view is unknown: delete both filters."""
            self._filters -= _count(self._masks.pop(fd, 0))
            for _, kfilter in _FILTERS:
                try:
                    self._kq.control([select.kevent(fd, kfilter, select.KQ_EV_DELETE)], 0, 0)
                except OSError:
                    pass

        def register(self, fd: int, events: int) -> None:
            try:
                self._apply(fd, 0, events)
            except OSError:
                self._forget(fd)
                raise
            self._masks[fd] = events
            self._filters += _count(events)

        def modify(self, fd: int, events: int) -> None:
            old = self._masks.get(fd)
            if old is None:
                raise FileNotFoundError(2, "fd is not registered", fd)
            try:
                self._apply(fd, old, events)
            except OSError:
                self._forget(fd)
                raise
            self._masks[fd] = events
            self._filters += _count(events) - _count(old)

        def unregister(self, fd: int) -> None:
            old = self._masks.pop(fd, 0)
            self._filters -= _count(old)
            for bit, kfilter in _FILTERS:
                if old & bit:
                    try:
                        self._kq.control([select.kevent(fd, kfilter, select.KQ_EV_DELETE)], 0, 0)
                    except OSError:
                        pass  # closed fds lose their filters on close

        def poll(self, timeout: float | None) -> list[tuple[int, int]]:
            if timeout is not None and timeout < 0:
                timeout = 0
            kevents = self._kq.control(None, max(self._filters, 1), timeout)
            read_filter = select.KQ_FILTER_READ
            return [(kev.ident, READ if kev.filter == read_filter else WRITE) for kev in kevents]

        def close(self) -> None:
            self._kq.close()
            self._masks.clear()
            self._filters = 0
