"""The timer queue: a binary heap of TimerHandles with lazy cancellation.

Layer: core. Semantics are asyncio's (base_events._run_once):

- Cancelling a timer does not remove it; it is skipped when it reaches the
  top, or all cancelled timers are dropped at once ("compaction") when there
  are more than 100 timers and more than half of them are cancelled. Both
  thresholds are asyncio's, so memory and CPU under timeout churn match.
- A timer is due when its deadline is earlier than ``now + resolution``.

Heap entries are ``(when, key, handle)`` tuples: tuple comparison runs in C
(TimerHandle's ``__lt__`` is Python), and the key orders timers with equal
deadlines, which asyncio leaves undefined. By default the keys are a
sequence number, so equal deadlines fire in the order they were scheduled.
A `Schedule` (``tideloop.testing``) hands the queue its own keys through the
constructor, seeded random numbers that vary that order; deadline order is
the heap's and no key can change it.

Invariants:
- ``handle._scheduled`` is True iff the handle is in ``heap``.
- ``cancelled`` counts the cancelled handles that are in ``heap``: bumped by
  `note_cancelled` (called via ``TimerHandle.cancel``), lowered whenever a
  cancelled handle leaves the heap.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Iterator
from heapq import heapify, heappop, heappush
from typing import Final

from .handles import ReadyQueue, TimerHandle
from .metrics import LAG_BOUNDS, Counters

#: asyncio's compaction thresholds (base_events._MIN_SCHEDULED_TIMER_HANDLES, ...).
MIN_SCHEDULED_FOR_COMPACTION: Final = 100
MIN_CANCELLED_FRACTION: Final = 0.5


class TimerQueue:
    __slots__ = ("_counters", "_seq", "cancelled", "heap")

    def __init__(self, keys: Iterator[int] | None = None, counters: Counters | None = None) -> None:
        """*keys*: tie-break keys for equal deadlines (None: scheduling order).

        *counters*: where `pop_due` records how late timers were (the
        loop's metrics); None keeps a private set.
        """
        self.heap: list[tuple[float, int, TimerHandle]] = []
        self.cancelled = 0
        self._seq: Iterator[int] = itertools.count() if keys is None else keys
        self._counters = Counters() if counters is None else counters

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, handle: TimerHandle, when: float) -> None:
        """Schedule *handle*; *when* is its deadline as a float (the heap's key)."""
        heappush(self.heap, (when, next(self._seq), handle))
        handle._scheduled = True

    def note_cancelled(self, handle: TimerHandle) -> None:
        if handle._scheduled:
            self.cancelled += 1

    def next_deadline(self) -> float | None:
        """Drop cancelled timers (asyncio's rule) and return the earliest deadline."""
        heap = self.heap
        n = len(heap)
        if n > MIN_SCHEDULED_FOR_COMPACTION and self.cancelled / n > MIN_CANCELLED_FRACTION:
            live = []
            for entry in heap:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    live.append(entry)
            heapify(live)
            self.heap = heap = live
            self.cancelled = 0
        else:
            while heap and heap[0][2]._cancelled:
                heappop(heap)[2]._scheduled = False
                self.cancelled -= 1
        return heap[0][0] if heap else None

    def pop_due(self, now: float, end_time: float, ready: ReadyQueue) -> None:
        """Move every timer with a deadline before *end_time* to *ready*.

        *now* is the loop's time: each timer's lag (*now* minus its deadline)
        goes to the metrics' histogram.
        """
        heap = self.heap
        counters = self._counters
        lag_counts = counters.lag_counts
        append = ready.append
        lag_sum = 0.0
        max_lag = counters.max_lag
        while heap and heap[0][0] < end_time:
            when, _, handle = heappop(heap)
            handle._scheduled = False
            if handle._cancelled:
                self.cancelled -= 1
            else:
                append(handle)
                lag = now - when
                if lag < 0.0:  # noqa: PLR1730 (due within the clock's resolution)
                    lag = 0.0
                lag_sum += lag
                if lag > max_lag:  # noqa: PLR1730 (no builtin call per timer)
                    max_lag = lag
                lag_counts[bisect_left(LAG_BOUNDS, lag)] += 1
        # The loop's thread only: written once per call, not per timer.
        counters.lag_sum += lag_sum
        counters.max_lag = max_lag

    def clear(self) -> None:
        for entry in self.heap:
            entry[2]._scheduled = False
        self.heap.clear()
        self.cancelled = 0
