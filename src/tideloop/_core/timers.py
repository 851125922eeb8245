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
- A `Schedule` (``tideloop.testing``) hands the queue a *tie* function
  through the constructor (``interfaces.TimerTie``): every push asks it
  where the new timer goes among the timers already queued with its
  deadline (``tie(handle, tied)``: an index 0..len(tied), len(tied) being
  scheduling order; with none there the answer is not used, and the call
  only tells the schedule that a timer was armed, to name it later in the
  program's terms), so equal deadlines fire in an order the schedule
  chose. Without a schedule nothing is called. Deadline order is the
  heap's; no tie changes it.
- Timers are ordered by their float deadline (divergence
  "timer-deadline-as-float"): the loop passes ``float(when)``.
- Far timers. Most timers that are armed far ahead are timeouts, cancelled
  long before they are due. With many of them pending (a server's
  connections), each one cost a push into a heap far larger than the cache
  and an entry in the bucket dict, both traversed again by every full
  collection (docs/performance.md: with a million pending, arming one took
  1.07 µs without the GC, 0.67 now). So a timer due `FAR_DELAY` (2 s) or
  more from now (`push_far`; the loop decides by the delay) goes into a
  *slot*: the list of the far timers whose deadlines fall in the same
  `SLOT_WIDTH` (1 s) window, in push order. One heap entry per far slot,
  the *marker* (bucket ``marker``), comes due when the slot begins; when
  `pop_due` reaches it, the slot's live timers move into the heap
  (`_migrate`) and its cancelled ones are dropped, unseen by the heap. A
  loop about to block with a marker first in the heap does not wait for
  it: `pass_markers` migrates that slot at once, so the loop (and a
  virtual clock) only ever sleeps until a real timer. Arming a far timer
  is a list append, and the GC sees it once, in the order it was armed.
- Far timers keep asyncio's order. A marker is due no later than every
  deadline of its slot, and `pop_due` migrates a slot before it pops
  anything later than its marker, so timers still come out in deadline
  order, also after a stall. Equal deadlines keep scheduling order: for one
  deadline, every push that went to a slot came before every push that went
  to the heap (the delay only shrinks as the clock advances), so migrated
  timers go in front of the heap's; and no far push goes to a slot already
  migrated (``_near_until``).

Invariants:
- ``heap`` holds each key of ``buckets`` exactly once, and nothing else.
  Every bucket is a timer, a list of timers, or ``marker``.
- ``_far`` maps each slot index (``when // SLOT_WIDTH``, a float) to a
  non-empty list of timers; ``_slots`` is a heap of exactly its keys. Every
  slot index is at least ``_near_until / SLOT_WIDTH``.
- ``_far`` is non-empty iff ``_mark_at`` is finite; then ``_mark_at`` is a
  key of ``buckets`` whose bucket is ``marker``, no later than the start
  of the first slot. Other ``marker`` buckets are stale: popped, they do
  nothing.
- ``handle._scheduled`` is True iff the handle is in a bucket or a slot;
  ``size`` counts those handles, cancelled ones included (markers are not
  handles).
- ``cancelled`` counts the cancelled handles in buckets and slots: bumped by the
  loop's ``_timer_handle_cancelled`` (called by ``TimerHandle.cancel``) or
  `note_cancelled`, lowered whenever a cancelled handle leaves its bucket.
- The head bucket may keep cancelled handles next to live ones (its
  deadline is live); `pop_due` skips them, compaction drops them.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify, heappop, heappush
from math import inf, nextafter
from typing import Final

from .handles import ReadyQueue, TimerHandle
from .interfaces import TimerTie
from .metrics import LAG_BOUNDS, Counters, new_counters

#: asyncio's compaction thresholds (base_events._MIN_SCHEDULED_TIMER_HANDLES, ...).
MIN_SCHEDULED_FOR_COMPACTION: Final = 100
MIN_CANCELLED_FRACTION: Final = 0.5

#: Far timers: due this many seconds or more from now when armed...
FAR_DELAY: Final = 2.0
#: ...they wait in slots this wide, keyed by ``when // SLOT_WIDTH``.
SLOT_WIDTH: Final = 1.0

#: A bucket: the timer with that deadline, or the timers (two or more).
Bucket = TimerHandle | list[TimerHandle]


def _new_marker() -> TimerHandle:
    """The heap's "migrate a far slot" entry: never cancelled, never run."""
    marker: TimerHandle = object.__new__(TimerHandle)
    marker._cancelled = False
    marker._scheduled = False
    marker._when = inf
    return marker


class TimerQueue:
    __slots__ = (
        "_counters",
        "_far",
        "_mark_at",
        "_near_until",
        "_slots",
        "_tie",
        "buckets",
        "cancelled",
        "heap",
        "marker",
        "size",
    )

    def __init__(self, tie: TimerTie | None = None, counters: Counters | None = None) -> None:
        """*tie*: where a timer goes among those with its deadline (None: last).

        *counters*: where `pop_due` records how late timers were (the
        loop's metrics); None keeps a private set.
        """
        self.heap: list[float] = []
        self.buckets: dict[float, Bucket] = {}
        self.size = 0
        self.cancelled = 0
        self._tie = tie
        self._counters = new_counters() if counters is None else counters
        self._far: dict[float, list[TimerHandle]] = {}
        self._slots: list[float] = []
        self._mark_at = inf
        self.marker = _new_marker()
        self._near_until = -inf

    def __len__(self) -> int:
        return self.size

    def handles(self) -> list[TimerHandle]:
        """Every queued handle, cancelled ones included (for tests and metrics)."""
        out: list[TimerHandle] = []
        marker = self.marker
        for entry in self.buckets.values():
            if isinstance(entry, list):
                out.extend(entry)
            elif entry is not marker:
                out.append(entry)
        for slot in self._far.values():
            out.extend(slot)
        return out

    def push(self, handle: TimerHandle, when: float) -> None:
        """Schedule *handle*; *when* is its deadline as a float (the heap's key)."""
        handle._scheduled = True
        self.size += 1
        if self._tie is not None:
            self._push_tied(handle, when)
            return
        buckets = self.buckets
        entry = buckets.get(when)
        if entry is None:
            buckets[when] = handle
            heappush(self.heap, when)
        elif isinstance(entry, list):
            entry.append(handle)
        elif entry is self.marker:
            self._displace_marker(when, handle)
        else:
            buckets[when] = [entry, handle]

    def push_far(self, handle: TimerHandle, when: float) -> None:
        """Schedule *handle*, due `FAR_DELAY` or more from now: into its slot.

        The loop calls this instead of `push` when the delay is that long;
        the queue still takes the heap when slots would not keep its order
        (a Schedule's tie function, an already migrated slot, no finite
        deadline).
        """
        if self._tie is not None or not self._near_until <= when < inf:
            self.push(handle, when)
            return
        handle._scheduled = True
        self.size += 1
        slot = when // SLOT_WIDTH
        far = self._far
        timers = far.get(slot)
        if timers is not None:
            timers.append(handle)
            return
        far[slot] = [handle]
        heappush(self._slots, slot)
        mark = slot * SLOT_WIDTH
        if mark < self._mark_at:
            self._arm(mark)  # the earliest slot now; the old marker goes stale

    def _arm(self, mark: float) -> None:
        """Put the marker in the heap at *mark*, or just before it if a deadline is there."""
        buckets = self.buckets
        while mark in buckets:
            mark = nextafter(mark, -inf)
        buckets[mark] = self.marker
        heappush(self.heap, mark)
        self._mark_at = mark

    def _displace_marker(self, when: float, handle: TimerHandle) -> None:
        """A deadline equal to a marker's key: the timer takes the bucket."""
        self.buckets[when] = handle  # the heap already holds the key
        if when == self._mark_at:
            self._arm(when)  # re-armed just before it

    def _migrate(self, end_time: float) -> None:
        """Move every slot whose marker time is before *end_time* into the heap.

        Cancelled timers are dropped here. A migrated timer goes in front of
        the heap's timers with the same deadline (pushed after it, see the
        module docstring); reversed, so that a slot's own timers with equal
        deadlines keep their order too.
        """
        self._mark_at = inf
        slots = self._slots
        far = self._far
        buckets = self.buckets
        heap = self.heap
        marker = self.marker
        # The first slot always: its marker is the one that came due (and
        # may sit an ulp before the slot's nominal time, see _arm).
        while slots:
            slot = heappop(slots)
            self._near_until = slot * SLOT_WIDTH + SLOT_WIDTH
            for handle in reversed(far.pop(slot)):
                if handle._cancelled:
                    handle._scheduled = False
                    self.cancelled -= 1
                    self.size -= 1
                    continue
                w = handle._when
                when = w if type(w) is float else float(w)
                entry = buckets.get(when)
                if entry is None:
                    buckets[when] = handle
                    heappush(heap, when)
                elif isinstance(entry, list):
                    entry.insert(0, handle)
                elif entry is marker:
                    self._displace_marker(when, handle)  # stale: _mark_at is inf here
                else:
                    buckets[when] = [handle, entry]
            if slots and slots[0] * SLOT_WIDTH >= end_time:
                self._arm(slots[0] * SLOT_WIDTH)
                return

    def _push_tied(self, handle: TimerHandle, when: float) -> None:
        tie = self._tie
        assert tie is not None
        entry = self.buckets.get(when)
        if entry is None:
            tie(handle, ())  # armed, tied with none: nothing to decide
            self.buckets[when] = handle
            heappush(self.heap, when)
            return
        if isinstance(entry, list):
            i = tie(handle, entry)
            entry.insert(i, handle)
        else:
            self.buckets[when] = [entry, handle] if tie(handle, (entry,)) else [handle, entry]

    def pass_markers(self) -> float | None:
        """Before the loop blocks: migrate now instead of waking for a marker.

        Drops markers from the top of the heap, migrating the current one's
        slot (its timers are the earliest left). Returns the first deadline
        then, as `next_deadline` does.
        """
        while True:
            deadline = self.next_deadline()  # may compact: no locals across it
            if deadline is None or self.buckets[deadline] is not self.marker:
                return deadline
            heappop(self.heap)
            del self.buckets[deadline]
            if deadline == self._mark_at:
                self._migrate(-inf)  # the first slot only

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
        return self.heap[0] if self.heap else None

    def _compact(self) -> None:
        """Drop every cancelled timer and rebuild the heap (asyncio's compaction)."""
        marker = self.marker
        buckets: dict[float, Bucket] = {}
        size = 0
        for when, entry in self.buckets.items():
            if entry is marker:
                continue  # re-armed below if slots remain
            if isinstance(entry, list):
                live: list[TimerHandle] = []
                for handle in entry:
                    if handle._cancelled:
                        handle._scheduled = False
                    else:
                        live.append(handle)
                if not live:
                    continue
                buckets[when] = live[0] if len(live) == 1 else live
                size += len(live)
            elif entry._cancelled:
                entry._scheduled = False
            else:
                buckets[when] = entry
                size += 1
        far: dict[float, list[TimerHandle]] = {}
        for slot, timers in self._far.items():
            live = []
            for handle in timers:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    live.append(handle)
            if live:
                far[slot] = live
                size += len(live)
        heap = list(buckets)
        heapify(heap)
        self.heap = heap
        self.buckets = buckets
        self._far = far
        self._slots = sorted(far)  # a sorted list is a heap
        self._mark_at = inf
        if far:
            self._arm(self._slots[0] * SLOT_WIDTH)
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
        marker = self.marker
        while heap and heap[0] < end_time:
            when = heappop(heap)
            entry = buckets.pop(when)
            if entry is marker:
                if when == self._mark_at:
                    self._migrate(end_time)
                continue
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
        self._far.clear()
        self._slots.clear()
        self._mark_at = inf
        self.size = 0
        self.cancelled = 0
