"""The waker: lets any thread interrupt a loop blocked in its poller.

Layer: core. ``call_soon_threadsafe`` appends to the ready queue and then
calls `Waker.wake`; the fd layer registers ``fileno()`` as an internal reader
whose callback is `Waker.drain`.

Facts / what this means for us:

- Linux has eventfd: one fd, an 8-byte counter, one syscall per wake. Other
  platforms get a non-blocking socketpair (what asyncio uses everywhere).
- A wake that finds one already pending need not write again: the fd is
  still readable, so the poll will return. ``_pending`` coalesces wakes; this
  is what keeps ``call_soon_threadsafe`` from many threads from costing one
  syscall each.
- Ordering that makes coalescing safe: the writer appends its callback
  *before* testing ``_pending``; `drain` reads the fd *before* clearing
  ``_pending``. A writer that sees True therefore appended before the clear,
  so the loop (which checks the ready queue after the run phase that cleared
  it) sees its callback without another wake. A writer that sees False
  writes, and the fd stays readable until the next drain.
- After `close` the fd number may be reused by an unrelated file, so `wake`
  must not write to it: it checks for -1 (the race with a concurrent close is
  the same one asyncio accepts for its self-pipe).

Signals do not use this fd: ``signal.set_wakeup_fd`` writes single bytes,
which an eventfd rejects. The signal layer has its own pipe.
"""

from __future__ import annotations

import os
import socket
import sys


class Waker:
    __slots__ = ("_pending", "_rfd", "_rsock", "_wfd", "_wsock")

    def __init__(self) -> None:
        self._pending = False
        self._rsock: socket.socket | None = None
        self._wsock: socket.socket | None = None
        if sys.platform == "linux":
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._rfd = self._wfd = fd
        else:
            self._rsock, self._wsock = socket.socketpair()
            self._rsock.setblocking(False)
            self._wsock.setblocking(False)
            self._rfd = self._rsock.fileno()
            self._wfd = self._wsock.fileno()

    def fileno(self) -> int:
        return self._rfd

    def wake(self) -> None:
        """Make the loop's next (or current) poll return. Any thread."""
        if self._pending:
            return
        self._pending = True
        fd = self._wfd
        if fd < 0:
            return
        try:
            if sys.platform == "linux":
                os.eventfd_write(fd, 1)
            else:
                assert self._wsock is not None
                self._wsock.send(b"\0")
        except OSError:
            # Closed under us, or (socketpair) full: full means readable.
            pass

    def drain(self) -> None:
        """Consume pending wakes. Loop thread, as the fd's reader callback."""
        try:
            if sys.platform == "linux":
                os.eventfd_read(self._rfd)
            else:
                assert self._rsock is not None
                while self._rsock.recv(4096):
                    pass
        except (BlockingIOError, InterruptedError):
            pass
        self._pending = False

    def close(self) -> None:
        if self._rfd < 0:
            return
        self._wfd = -1
        if sys.platform == "linux":
            os.close(self._rfd)
        else:
            assert self._rsock is not None and self._wsock is not None
            self._rsock.close()
            self._wsock.close()
        self._rfd = -1
