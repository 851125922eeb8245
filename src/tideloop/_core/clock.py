"""Clocks: where the loop's notion of time comes from.

Layer: core. The loop reads time only through the clock it was built with
(``Loop(clock=...)``), so virtual time is a constructor argument, not a patch.

A clock provides:

- ``now()``: seconds on a monotonic scale (the value of ``loop.time()``);
- ``resolution``: the smallest step ``now()`` can show. A timer whose
  deadline is within one resolution of now is due (asyncio's rule: otherwise
  a deadline that the clock cannot represent exactly is never reached);
- ``wait``: None for a real clock, which means "block in the poller for the
  timeout the loop computed". A virtual clock supplies a function
  ``wait(poll, timeout)`` that decides how long to really block and advances
  its own time, e.g. jumping to the next deadline when the loop is idle
  (``tideloop.testing.VirtualClock``).

What the core promises a clock with a ``wait`` (a virtual clock):

- ``timeout`` is 0 when callbacks are ready (the clock must not block or
  move), the time until the earliest timer otherwise, or None when there is
  no timer.
- A clock with a ``wait`` may also have ``reach(deadline)``, which moves
  its time forward to *deadline*: the core calls it, after a wait, when the
  earliest timer is due within ``resolution`` but not yet reached (no timer
  runs before its deadline on a clock that does not move by itself), and
  when a timer has been due at one instant for ``SPIN_LIMIT`` iterations
  (a timer re-armed at the instant it runs moves time on by ``SPIN_STEP``,
  as a real clock's iterations would: ``Scheduler._keep_virtual_time_moving``
  says why).
- While executor jobs started by ``run_in_executor`` (or the default
  executor's shutdown) are in flight, a positive timeout is passed as None:
  their results are real work that will wake the loop, and time must not
  skip ahead of them. (The core counts those jobs under any clock: the metrics report them.)

Invariant: time never goes backwards; the loop does not check it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

#: The poller's poll: ``(timeout) -> [(fd, bits), ...]``.
PollFn = Callable[[float | None], list[tuple[int, int]]]
#: A virtual clock's wait: ``(poll, timeout) -> [(fd, bits), ...]``.
WaitFn = Callable[[PollFn, float | None], list[tuple[int, int]]]


class Clock(Protocol):
    @property
    def resolution(self) -> float: ...

    @property
    def wait(self) -> WaitFn | None: ...

    def now(self) -> float: ...


class MonotonicClock:
    """Real time: `time.monotonic` at full resolution (nanoseconds on Linux)."""

    __slots__ = ()
    resolution: Final[float] = time.get_clock_info("monotonic").resolution
    wait: Final[WaitFn | None] = None
    # The builtin itself, so ``loop.time()`` costs one C call.
    now: Final = staticmethod(time.monotonic)
