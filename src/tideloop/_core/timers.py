"""The timer queue: a binary heap of deadlines, with lazy cancellation.

Layer: core. Semantics are asyncio's (base_events._run_once):

- Cancelling a timer does not remove it; it is skipped when it reaches the
  top, or all cancelled timers are dropped at once ("compaction") when there
  are more than 100 timers and more than half of them are cancelled. Both
  thresholds are asyncio's, so memory and CPU under timeout churn match.
- A timer is due when its deadline is earlier than ``now + resolution``.

Facts / what this means for us:
- heapq compares entries with ``<``. TimerHandle's ``__lt__`` is Python (a
  call per comparison, log n per push and pop), and a ``(when, seq,
  handle)`` tuple per timer compares in C but is one more object per timer
  that the garbage collector tracks and, for timers that live long (a
  server's timeouts, 100,000 sleeping tasks), scans in every full
  collection: measured, a third more GC time per wakeup than asyncio's.
- So the heap holds only the distinct deadlines, as floats: compared in C,
  not tracked by the GC, no allocation per timer. ``buckets`` maps each
  deadline to its timer, or to a list of them in the rare case of equal
  deadlines (asyncio leaves their order open; here it is scheduling order).
- A `Schedule` (``tideloop.testing``) hands the queue tie-break keys through
  the constructor, seeded random numbers: then each bucket is kept in key
  order (``_tiekeys``), a key is drawn at every push, and equal deadlines
  fire in a seeded order. Deadline order is the heap's; no key changes it.
- Timers are ordered by their float deadline (divergence
  "timer-deadline-as-float"): the loop passes ``float(when)``.

Invariants:
- ``heap`` holds each key of ``buckets`` exactly once, and nothing else.
- ``handle._scheduled`` is True iff the handle is in a bucket; ``size``
  counts the handles in buckets, cancelled ones included.
- ``cancelled`` counts the cancelled handles in buckets: bumped by the
  loop's ``_timer_handle_cancelled`` (called by ``TimerHandle.cancel``) or
  `note_cancelled`, lowered whenever a cancelled handle leaves its bucket.
- The head bucket may keep cancelled handles next to live ones (its
  deadline is live); `pop_due` skips them, compaction drops them.
- With keys: ``_tiekeys[when]`` lists the keys of ``buckets[when]``'s
  handles, in the same (ascending) order.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from heapq import heapify, heappop, heappush
from typing import Final

from .handles import ReadyQueue, TimerHandle
from .metrics import LAG_BOUNDS, Counters

#: asyncio's compaction thresholds (base_events._MIN_SCHEDULED_TIMER_HANDLES, ...).
MIN_SCHEDULED_FOR_COMPACTION: Final = 100
MIN_CANCELLED_FRACTION: Final = 0.5

#: A bucket: the timer with that deadline, or the timers (two or more).
Bucket = TimerHandle | list[TimerHandle]


class TimerQueue:
    __slots__ = ("_counters", "_keys", "_tiekeys", "buckets", "cancelled", "heap", "size")

    def __init__(self, keys: Iterator[int] | None = None, counters: Counters | None = None) -> None:
        """*keys*: tie-break keys for equal deadlines (None: scheduling order).

        *counters*: where `pop_due` records how late timers were (the
        loop's metrics); None keeps a private set.
        """
        self.heap: list[float] = []
        self.buckets: dict[float, Bucket] = {}
        self.size = 0
        self.cancelled = 0
        self._keys = keys
        self._tiekeys: dict[float, list[int]] = {}
        self._counters = Counters() if counters is None else counters

    def __len__(self) -> int:
        return self.size

    def handles(self) -> list[TimerHandle]:
        """Every queued handle, cancelled ones included (for tests and metrics)."""
        out: list[TimerHandle] = []
        for entry in self.buckets.values():
            if isinstance(entry, list):
                out.extend(entry)
            else:
                out.append(entry)
        return out

    def push(self, handle: TimerHandle, when: float) -> None:
        """Schedule *handle*; *when* is its deadline as a float (the heap's key)."""
        handle._scheduled = True
        self.size += 1
        if self._keys is not None:
            self._push_keyed(handle, when)
            return
        buckets = self.buckets
        entry = buckets.get(when)
        if entry is None:
            buckets[when] = handle
            heappush(self.heap, when)
        elif isinstance(entry, list):
            entry.append(handle)
        else:
            buckets[when] = [entry, handle]

    def _push_keyed(self, handle: TimerHandle, when: float) -> None:
        keys = self._keys
        assert keys is not None
        key = next(keys)
        entry = self.buckets.get(when)
        if entry is None:
            self.buckets[when] = handle
            self._tiekeys[when] = [key]
            heappush(self.heap, when)
            return
        bucket_keys = self._tiekeys[when]
        i = bisect_right(bucket_keys, key)
        bucket_keys.insert(i, key)
        if isinstance(entry, list):
            entry.insert(i, handle)
        else:
            self.buckets[when] = [entry, handle] if i else [handle, entry]

    def note_cancelled(self, handle: TimerHandle) -> None:
        if handle._scheduled:
            self.cancelled += 1

    def next_deadline(self) -> float | None:
        """Drop cancelled timers (asyncio's rule) and return the earliest deadline."""
        n = self.size
        if n > MIN_SCHEDULED_FOR_COMPACTION and self.cancelled / n > MIN_CANCELLED_FRACTION:
            self._compact()
        else:
            heap = self.heap
            buckets = self.buckets
            while heap:
                entry = buckets[heap[0]]
                if isinstance(entry, list):
                    for handle in entry:
                        if not handle._cancelled:
                            return heap[0]
                    for handle in entry:
                        handle._scheduled = False
                    dropped = len(entry)
                elif entry._cancelled:
                    entry._scheduled = False
                    dropped = 1
                else:
                    break
                self.cancelled -= dropped
                self.size -= dropped
                when = heappop(heap)
                del buckets[when]
                if self._keys is not None:
                    del self._tiekeys[when]
        return self.heap[0] if self.heap else None

    def _compact(self) -> None:
        """Drop every cancelled timer and rebuild the heap (asyncio's compaction)."""
        keyed = self._keys is not None
        buckets: dict[float, Bucket] = {}
        tiekeys: dict[float, list[int]] = {}
        size = 0
        for when, entry in self.buckets.items():
            if isinstance(entry, list):
                live: list[TimerHandle] = []
                live_keys: list[int] = []
                old_keys = self._tiekeys[when] if keyed else None
                for i, handle in enumerate(entry):
                    if handle._cancelled:
                        handle._scheduled = False
                    else:
                        live.append(handle)
                        if old_keys is not None:
                            live_keys.append(old_keys[i])
                if not live:
                    continue
                buckets[when] = live[0] if len(live) == 1 else live
                size += len(live)
                if keyed:
                    tiekeys[when] = live_keys
            elif entry._cancelled:
                entry._scheduled = False
            else:
                buckets[when] = entry
                size += 1
                if keyed:
                    tiekeys[when] = self._tiekeys[when]
        heap = list(buckets)
        heapify(heap)
        self.heap = heap
        self.buckets = buckets
        self._tiekeys = tiekeys
        self.size = size
        self.cancelled = 0

    def pop_due(self, now: float, end_time: float, ready: ReadyQueue) -> None:
        """Move every timer with a deadline before *end_time* to *ready*.

        *now* is the loop's time: each timer's lag (*now* minus its deadline)
        goes to the metrics' histogram.
        """
        heap = self.heap
        buckets = self.buckets
        counters = self._counters
        lag_counts = counters.lag_counts
        append = ready.append
        lag_sum = 0.0
        max_lag = counters.max_lag
        while heap and heap[0] < end_time:
            when = heappop(heap)
            entry = buckets.pop(when)
            if self._keys is not None:
                del self._tiekeys[when]
            if isinstance(entry, list):
                fired = 0
                for handle in entry:
                    handle._scheduled = False
                    if handle._cancelled:
                        self.cancelled -= 1
                    else:
                        append(handle)
                        fired += 1
                self.size -= len(entry)
            else:
                entry._scheduled = False
                self.size -= 1
                if entry._cancelled:
                    self.cancelled -= 1
                    continue
                append(entry)
                fired = 1
            # One deadline, one lag for every timer of the bucket.
            lag = now - when
            if lag < 0.0:  # noqa: PLR1730 (due within the clock's resolution)
                lag = 0.0
            lag_sum += lag * fired
            if lag > max_lag:  # noqa: PLR1730 (no builtin call per timer)
                max_lag = lag
            lag_counts[bisect_left(LAG_BOUNDS, lag)] += fired
        # The loop's thread only: written once per call, not per timer.
        counters.lag_sum += lag_sum
        counters.max_lag = max_lag

    def clear(self) -> None:
        for handle in self.handles():
            handle._scheduled = False
        self.heap.clear()
        self.buckets.clear()
        self._tiekeys.clear()
        self.size = 0
        self.cancelled = 0
