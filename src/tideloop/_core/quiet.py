"""Quiet threads: threads that never need the GIL handed over at once.

Layer: core (no loop state; the console, above, is its one user).

Facts / what this means for us:

- A loop iteration with callbacks ready polls with a zero timeout. With
  only the waker registered that poll reports nothing the ready queue does
  not already show, so the scheduler skips the syscall (about 0.3 us, as
  much as the rest of an iteration) while no other thread exists.
- The syscall also releases the GIL. A thread that a callback just woke
  (a worker told to stop, a ``queue.put``) runs at once on the stdlib
  loop, which polls every iteration; with the poll skipped it waits for
  the switch interval (5 ms). That is why any other thread turns the skip
  off.
- Some threads are woken only by what arrives from outside the process,
  never by a callback: tideloop's console server, asleep in ``select`` on
  its socket while nobody is attached. For them 5 ms more before a human's
  first request is answered costs nothing, while turning the skip off cost
  every loop of the process a quarter of its ``sleep(0)`` rate. Such a
  thread declares itself here, from inside itself, for as long as it is
  quiet.

Invariant: `count` is never more than the quiet threads alive and counted
by ``_thread._count()``: a thread enters from inside itself (so it is
counted already) and leaves before it ends. The scheduler skips the poll
while ``_thread._count() <= count``; the native core keeps its own copy,
set under the same lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from . import native as _choice

__all__ = ["count", "quiet"]

#: Quiet threads alive now (read by the pure scheduler on every iteration
#: that could skip its poll; written only under `_lock`).
count = 0
_lock = threading.Lock()


def _add(delta: int) -> None:
    global count
    with _lock:
        count += delta
        if _choice.core is not None:
            _choice.core.set_quiet_threads(count)


class Quiet:
    """The calling thread's say: quiet or not, changed as often as it likes."""

    __slots__ = ("_on",)

    def __init__(self) -> None:
        self._on = False

    def set(self, on: bool) -> None:
        """Quiet now (*on*) or not; only the thread itself calls this."""
        if on != self._on:
            self._on = on
            _add(1 if on else -1)


@contextlib.contextmanager
def quiet() -> Iterator[Quiet]:
    """For the calling thread's life in the block: a `Quiet` it sets, and
    that is unset (not quiet) when the block ends, however it ends."""
    say = Quiet()
    try:
        yield say
    finally:
        say.set(False)
