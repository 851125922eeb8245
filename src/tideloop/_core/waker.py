"""The waker: lets any thread interrupt a loop blocked in its poller.

Layer: core. ``call_soon_threadsafe`` appends to the ready queue and then
calls ``wake()``; the fd layer registers ``fileno()`` as an internal reader
whose callback is ``drain()``.

Facts / what this means for us:

- Linux has eventfd: one fd, an 8-byte counter, one syscall per wake
  (`EventfdWaker`). Other platforms, and Pythons without ``os.eventfd``
  (PyPy), get a non-blocking socketpair (`SocketpairWaker`, what asyncio
  uses everywhere). `make_waker` picks.
- A wake that finds one already pending need not write again: the fd is
  still readable, so the poll will return. ``_pending`` coalesces wakes; this
  is what keeps ``call_soon_threadsafe`` from many threads from costing one
  syscall each.
- Ordering that makes coalescing safe: the writer appends its callback
  *before* testing ``_pending``; ``drain`` reads the fd *before* clearing
  ``_pending``. A writer that sees True therefore appended before the clear,
  so the loop (which checks the ready queue after the run phase that cleared
  it) sees its callback without another wake. A writer that sees False
  writes, and the fd stays readable until the next drain.
- After ``close`` the fd number may be reused by an unrelated file, so
  ``wake`` must not write to it: it checks for -1 (the race with a concurrent
  close is the same one asyncio accepts for its self-pipe).

Signals do not use this fd: ``signal.set_wakeup_fd`` writes single bytes,
which an eventfd rejects. The signal layer has its own pipe.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Final, Protocol


class Waker(Protocol):
    _pending: bool

    def fileno(self) -> int: ...

    def wake(self) -> None:
        """Make the loop's next (or current) poll return. Any thread."""

    def drain(self) -> None:
        """Consume pending wakes. Loop thread, as the fd's reader callback."""

    def close(self) -> None: ...


class SocketpairWaker:
    __slots__ = ("_pending", "_rfd", "_rsock", "_wsock")

    def __init__(self) -> None:
        self._pending = False
        self._rsock, self._wsock = socket.socketpair()
        self._rsock.setblocking(False)
        self._wsock.setblocking(False)
        self._rfd = self._rsock.fileno()

    def fileno(self) -> int:
        return self._rfd

    def wake(self) -> None:
        if self._pending:
            return
        self._pending = True
        if self._rfd < 0:
            return
        try:
            self._wsock.send(b"\0")
        except OSError:
            pass  # closed under us, or full (and so readable)

    def drain(self) -> None:
        try:
            while self._rsock.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._pending = False

    def close(self) -> None:
        if self._rfd < 0:
            return
        self._rfd = -1
        self._rsock.close()
        self._wsock.close()


# mypy checks this class on Linux only, where os.eventfd exists.
if sys.platform == "linux":

    class EventfdWaker:
        __slots__ = ("_fd", "_pending")

        def __init__(self) -> None:
            self._pending = False
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

        def fileno(self) -> int:
            return self._fd

        def wake(self) -> None:
            if self._pending:
                return
            self._pending = True
            fd = self._fd
            if fd < 0:
                return
            try:
                os.eventfd_write(fd, 1)
            except OSError:
                pass  # closed under us

        def drain(self) -> None:
            try:
                os.eventfd_read(self._fd)
            except (BlockingIOError, InterruptedError):
                pass
            self._pending = False

        def close(self) -> None:
            fd = self._fd
            if fd < 0:
                return
            self._fd = -1
            os.close(fd)


#: Whether this Python can make an eventfd (CPython 3.10+ on Linux; not PyPy).
HAS_EVENTFD: Final = hasattr(os, "eventfd")


def make_waker() -> Waker:
    if sys.platform == "linux" and HAS_EVENTFD:
        return EventfdWaker()
    else:  # mypy skips platform-guarded code only as an if/else branch
        return SocketpairWaker()
