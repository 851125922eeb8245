"""``python -m tideloop --stats``: watch every loop a program creates, summarise at exit.

Layer: top. A `StatsCollector` registers itself in
``tideloop._loop.NEW_LOOP_OBSERVERS``, so it sees every loop made by
``tideloop.new_event_loop`` (``tideloop.run``, the installed policy, and
``loop_factory=tideloop.new_event_loop`` all go through it; a ``Loop()``
constructed directly is not seen). On each it installs a slow-callback hook
that keeps the *top* slowest callbacks (duration, task name, where the task
stopped); `report` merges the loops' `LoopMetrics` into one summary.

Invariants: the collector holds the loops it saw until `report`, so their
counters outlive ``loop.close()``; the hook runs in each loop's own thread
and only touches the collector under its lock (loops may run in several
threads).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
from typing import NamedTuple

from ._core.metrics import LAG_BOUNDS, LoopMetrics, SlowCallback
from ._loop import NEW_LOOP_OBSERVERS, Loop

_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep

#: How many slow callbacks the report lists.
TOP_SLOW = 10


class SlowEntry(NamedTuple):
    duration: float
    name: str
    #: ``file:line in function`` of the innermost frame where the task stopped
    #: (empty for a plain callback).
    where: str


class StatsCollector:
    """Collects metrics of the loops created while it is attached."""

    def __init__(self, threshold: float = 0.1, top: int = TOP_SLOW) -> None:
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold!r}")
        self.threshold = threshold
        self.top = top
        self.loops: list[Loop] = []
        # Min-heap on duration: the shortest of the kept entries is replaced.
        self._slowest: list[tuple[float, int, SlowEntry]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def __enter__(self) -> StatsCollector:
        NEW_LOOP_OBSERVERS.append(self.attach)
        return self

    def __exit__(self, *exc_info: object) -> None:
        NEW_LOOP_OBSERVERS.remove(self.attach)

    def attach(self, loop: Loop) -> None:
        with self._lock:
            self.loops.append(loop)
        loop.set_slow_callback_hook(self._on_slow, self.threshold)

    def _on_slow(self, slow: SlowCallback) -> None:
        where = ""
        # The innermost frame outside asyncio itself: where the program's
        # code stopped (asyncio.sleep's own frame says nothing).
        frames = [f for f in slow.stack if not f.filename.startswith(_ASYNCIO_DIR)]
        if frames or slow.stack:
            frame = (frames or list(slow.stack))[-1]
            where = f"{frame.filename}:{frame.lineno} in {frame.name}"
        entry = SlowEntry(slow.duration, slow.name, where)
        with self._lock:
            item = (slow.duration, next(self._order), entry)
            if len(self._slowest) < self.top:
                heapq.heappush(self._slowest, item)
            elif slow.duration > self._slowest[0][0]:
                heapq.heapreplace(self._slowest, item)

    def slowest(self) -> list[SlowEntry]:
        """The slowest callbacks seen, slowest first."""
        with self._lock:
            return [entry for _, _, entry in sorted(self._slowest, reverse=True)]

    def combined(self) -> LoopMetrics | None:
        """The loops' metrics added up (None if no loop was created)."""
        with self._lock:
            loops = list(self.loops)
        if not loops:
            return None
        return merge([loop.metrics() for loop in loops])

    def report(self) -> str:
        with self._lock:
            nloops = len(self.loops)
        m = self.combined()
        if m is None:
            return "tideloop --stats: the program created no tideloop loop\n"
        ms = 1000.0
        lines = [
            f"tideloop --stats: {nloops} loop{'s' if nloops != 1 else ''}, ran {m.run_time:.3f} s",
            f"  iterations      {m.iterations}",
            f"  callbacks       {m.callbacks}",
            f"  utilisation     {100 * m.utilisation:.1f} % "
            f"(busy {m.busy_time:.3f} s, idle {m.idle_time:.3f} s)",
        ]
        fired = sum(m.lag_counts)
        if fired:
            lines.append(
                f"  timer lag       p50 <= {ms * m.lag_quantile(0.5):.1f} ms, "
                f"p90 <= {ms * m.lag_quantile(0.9):.1f} ms, "
                f"p99 <= {ms * m.lag_quantile(0.99):.1f} ms, "
                f"max {ms * m.max_lag:.1f} ms ({fired} timers)"
            )
        else:
            lines.append("  timer lag       no timers fired")
        lines.append(f"  slow callbacks  {m.slow_callbacks} (>= {ms * self.threshold:.0f} ms)")
        for entry in self.slowest():
            where = f"  at {entry.where}" if entry.where else ""
            lines.append(f"    {ms * entry.duration:9.1f} ms  {entry.name}{where}")
        return "\n".join(lines) + "\n"


def merge(snapshots: list[LoopMetrics]) -> LoopMetrics:
    """Add several loops' snapshots up (maxima for ``max_lag`` and the threshold)."""
    width = len(LAG_BOUNDS) + 1
    lag_counts = [0] * width
    for snap in snapshots:
        for i, count in enumerate(snap.lag_counts):
            lag_counts[i] += count
    return LoopMetrics(
        iterations=sum(s.iterations for s in snapshots),
        callbacks=sum(s.callbacks for s in snapshots),
        busy_time=sum(s.busy_time for s in snapshots),
        idle_time=sum(s.idle_time for s in snapshots),
        ready=sum(s.ready for s in snapshots),
        timers=sum(s.timers for s in snapshots),
        fds=sum(s.fds for s in snapshots),
        executor_pending=sum(s.executor_pending for s in snapshots),
        max_lag=max(s.max_lag for s in snapshots),
        lag_sum=sum(s.lag_sum for s in snapshots),
        lag_counts=tuple(lag_counts),
        slow_callbacks=sum(s.slow_callbacks for s in snapshots),
        slow_callback_threshold=max(s.slow_callback_threshold for s in snapshots),
    )
