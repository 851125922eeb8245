"""VirtualClock: time that moves only when told to, or when the loop is idle.

Layer: top (``tideloop.testing``). A `VirtualClock` implements the core's
`Clock` protocol (``tideloop._core.clock``): the loop reads ``now()`` for
``loop.time()`` and every timer, and calls ``wait(poll, timeout)`` where it
would block in the poller. Nothing is patched: ``asyncio.sleep``,
``wait_for``, ``asyncio.timeout``, ``call_later``, TaskGroup and library
timeouts (aiohttp, anyio) all read ``loop.time()`` and schedule with
``call_at``, so they all follow this clock.

Semantics (trio's ``MockClock``, tokio's paused time):

- Time starts at *start* and never goes backwards. `advance` moves it
  forward; timers that fall due run in the loop's next iteration, in
  deadline order. Call it on the loop's thread (from a task or callback);
  from another thread, use ``loop.call_soon_threadsafe(clock.advance, s)``.
- Autojump: when the loop would block with a timer pending and nothing
  happens for *autojump_threshold* real seconds, the clock jumps to that
  timer's deadline. ``0.0`` jumps as soon as a poll finds nothing ready;
  ``math.inf`` never jumps (only `advance` moves time).
- The clock never jumps while the loop has callbacks ready. Whether it
  may jump while other threads work (executor jobs from
  ``run_in_executor`` and ``asyncio.to_thread``, the default executor's
  shutdown, threads of the program's own) is the loop's `Supervisor`'s
  call (``tideloop.testing``'s loops: ``_supervisor.py``, ``_threads.py``):
  a thread at work holds it, one blocked waiting for the program does not
  (or a job waiting for a later virtual time would wait forever). Built
  without a supervisor, the core holds it while any executor job is in
  flight. Other threads' ``call_soon_threadsafe`` work is ready work as
  soon as it is called, so it too holds time still.
- Real fds keep working: every wait really polls. What the clock cannot
  know about is real work in flight *outside* the loop: a peer in another
  process or a thread the loop did not start (a subprocess, a database
  server, a thread of your own, anyio's worker threads). A zero threshold
  jumps before such a peer answers. See "Choosing a threshold" below.

Choosing a threshold (facts / what this means for us):

- Loopback between two ends that both live on this loop is synchronous
  enough: on Linux, a ``send`` on a loopback TCP or Unix socket has queued
  the data at the peer before it returns (the loopback device hands the
  packet over in the sender's own system call), so the next poll already
  reports the peer readable and the clock does not jump. ``0.0`` is right
  for such tests, and is the default.
- A peer outside the loop (another process, a thread that calls
  ``call_soon_threadsafe`` on its own schedule, a real server) answers
  after real scheduling delays, typically well under 10 ms on an idle
  machine and tens of ms on a loaded CI box. Give such tests a threshold
  that covers that: ``0.05`` to ``0.2``. Each jump then costs that much
  real time, so a test with a few dozen idle waits still finishes in
  seconds, not minutes.

The time of day that goes with the clock (`wall`) is the real one when
the clock was made, moved as far as the clock has moved since: what
``time.time()`` reads on the loop's thread under the pytest plugin's
virtual time and ``tideloop.testing.run`` (``_loopclocks``).

Invariant: ``now()`` is monotonic; `advance` rejects negative steps, and a
jump moves to ``max(now, deadline)``.
"""

from __future__ import annotations

import math
import time
from typing import Final

from tideloop._core.clock import PollFn

#: Under ``autojump_threshold=inf`` the loop still wakes this often (real
#: seconds) while a timer is pending, so that an `advance` made from another
#: thread takes effect.
_MANUAL_POLL_SLICE: Final = 0.05

#: Bound now: a run may patch ``time.time`` (``_loopclocks``, ``_world``).
_real_wall: Final = time.time


class VirtualClock:
    """A clock for ``tideloop.new_event_loop(clock=...)`` whose time is virtual."""

    __slots__ = ("_jumps", "_origin", "_threshold", "_time", "_wall_origin")

    #: The finest step between two deadlines the loop tells apart (as
    #: ``time.monotonic`` on Linux). Deadlines reached by a jump are exact,
    #: and a timer due within it runs once time is brought to its deadline
    #: (`reach`).
    resolution: Final[float] = 1e-9

    def __init__(self, *, start: float = 0.0, autojump_threshold: float = 0.0) -> None:
        start = float(start)
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite number, not {start!r}")
        self._time = self._origin = start
        self._wall_origin = _real_wall()
        self._threshold = 0.0
        self._jumps = 0
        self.autojump_threshold = autojump_threshold

    def __repr__(self) -> str:
        return (
            f"<VirtualClock time={self._time!r} "
            f"autojump_threshold={self._threshold!r} jumps={self._jumps}>"
        )

    @property
    def autojump_threshold(self) -> float:
        """Real seconds the loop must be idle before time jumps (inf: never)."""
        return self._threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float) -> None:
        value = float(value)
        if not value >= 0.0:  # also rejects NaN
            raise ValueError(f"autojump_threshold must be >= 0, not {value!r}")
        self._threshold = value

    @property
    def jumps(self) -> int:
        """How many times autojump moved time (for tests and diagnostics)."""
        return self._jumps

    def now(self) -> float:
        return self._time

    def wall(self) -> float:
        """The time of day that goes with this clock: the real one when the
        clock was made, moved as far as the clock has moved since."""
        return self._wall_origin + (self._time - self._origin)

    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds*; what falls due runs next iteration."""
        seconds = float(seconds)
        if not seconds >= 0.0:
            raise ValueError(f"time can only move forward, not by {seconds!r}")
        self._time += seconds

    def reach(self, deadline: float) -> None:
        """Move time forward to *deadline* (no further than it, never back).

        The core calls it for a timer due within `resolution` of now, so the
        timer's callback sees ``loop.time()`` at its deadline, never a hair
        before it (``tideloop._core.clock``)."""
        self._time = max(self._time, deadline)

    def wait(self, poll: PollFn, timeout: float | None) -> list[tuple[int, int]]:
        """The loop's blocking point (the core's ``Clock.wait`` hook).

        *timeout* is virtual seconds until the next timer: 0 when callbacks
        are ready, None when there is no timer or executor jobs are in
        flight. Real fds are always polled.
        """
        if not timeout:
            # 0: just look. None: nothing to jump to, so block for real
            # until an fd, a signal or another thread wakes the loop.
            return poll(timeout)
        threshold = self._threshold
        if threshold == math.inf:
            return poll(_MANUAL_POLL_SLICE)
        start = self._time
        events = poll(threshold)
        if events:
            return events
        # Idle for the whole threshold: jump to the deadline (or as far as
        # the loop's one-day poll cap), unless advance() already went past.
        target = start + timeout
        self._time = max(self._time, target)
        self._jumps += 1
        return events
