"""Loop metrics: always-on counters, the snapshot users read, the slow-callback report.

Layer: core. `Instruments` is a component of the core loop (``_instruments``):
it holds the `Counters` that ``_run_once`` and the timer queue update (a few
additions per iteration, no allocation, nothing timed per callback unless a
slow-callback hook is set), what decides whether callbacks are timed one by
one (a slow-callback hook, detailed metrics, callback observers), and
``loop.metrics()``'s copy of it all into an immutable `LoopMetrics`.

What is measured, and how:

- ``iterations``: calls of ``_run_once``. ``callbacks``: callbacks run
  (cancelled handles skipped are not counted).
- ``busy_time`` / ``idle_time``: real seconds. Idle is the time blocked in
  polls that may block (a poll with a timeout, or none); busy is the rest of
  the time ``run_forever`` ran (processing events, timers, callbacks, and
  the zero-timeout polls of iterations that had callbacks ready, which are
  not timed at all). Their sum is the time the loop ran. These use real
  monotonic time even when the loop runs on a virtual clock: they measure
  the machine, not the program.
- ``max_lag`` and the lag histogram: how late timers were. A timer's lag is
  the loop's time when it found the timer due minus its deadline; the
  timer's callback runs in the same iteration, after the callbacks queued
  before it (their run time is not in the lag). A timer found due up to the
  clock's resolution early counts as 0. A loop that blocks for 200 ms
  shows every timer that fell due meanwhile with up to 200 ms of lag.
- ``slow_callbacks``: callbacks that ran longer than the slow-callback
  threshold (``loop.slow_callback_duration``, or the hook's own). Counting
  them needs a clock read per callback, so it is exact only while a hook is
  installed or detailed metrics are on (``set_metrics(detailed=True)``);
  otherwise the loop times each *phase* (from the end of one poll to the
  start of the next: the events, timers and callbacks of one iteration)
  with the one clock read per iteration it makes anyway, and counts a phase
  over the threshold as one slow callback: a lower bound that costs nothing
  per callback.
- ``ready``, ``timers`` (pending, cancelled ones excluded), ``fds``
  (registered readers plus writers, the loop's own included) and
  ``executor_pending`` (jobs submitted to the default executor and not yet
  finished) are read at the moment of the snapshot.

Counters only grow. Utilisation over an interval is the difference of two
snapshots: ``(b.busy_time - a.busy_time) / ((b.busy_time + b.idle_time) -
(a.busy_time + a.idle_time))``.

Cost, per loop iteration: one clock read and a few attribute updates; an
iteration whose poll may block adds a second clock read and the seqlock
writes (see `Counters`). Per timer: a bucket search and three updates.

Invariant: every field of `Counters` is written by the loop's thread only.
A snapshot taken from another thread has consistent, never-decreasing busy
and idle times (the seqlock); each other counter is read whole, and
counters updated in the same iteration may be one timer or one run phase
apart.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from time import monotonic as _real_time
from time import sleep as _yield_gil
from typing import Any, Final, NamedTuple, Protocol

from tideloop._versions import FUTURE_AWAIT_CODE

#: Upper bounds (seconds) of the lag histogram's buckets; a last bucket
#: counts everything above the last bound.
LAG_BOUNDS: Final[tuple[float, ...]] = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
)


class LoopMetrics(NamedTuple):
    """One snapshot of a loop's metrics (see ``tideloop._core.metrics``)."""

    iterations: int
    callbacks: int
    busy_time: float
    idle_time: float
    ready: int
    timers: int
    fds: int
    executor_pending: int
    max_lag: float
    #: Sum of all timer lags (seconds): with ``sum(lag_counts)``, the mean lag.
    lag_sum: float
    #: Counts per lag bucket: ``lag_counts[i]`` counts lags <= ``LAG_BOUNDS[i]``
    #: (and above the bound before it); the last entry counts the rest.
    lag_counts: tuple[int, ...]
    slow_callbacks: int
    slow_callback_threshold: float

    @property
    def run_time(self) -> float:
        """Seconds the loop has run (busy plus idle)."""
        return self.busy_time + self.idle_time

    @property
    def utilisation(self) -> float:
        """Busy share of the run time since the loop was created (0 if it never ran)."""
        total = self.busy_time + self.idle_time
        return self.busy_time / total if total > 0 else 0.0

    def lag_quantile(self, q: float) -> float:
        """An upper bound of quantile *q* (0..1) of timer lags (0 if no timer fired).

        It is the bound of the histogram bucket holding the quantile, or
        ``max_lag`` if that is lower.
        """
        total = sum(self.lag_counts)
        if not total:
            return 0.0
        rank = q * total
        seen = 0
        for i, count in enumerate(self.lag_counts):
            seen += count
            if seen >= rank and count:
                # No lag exceeded max_lag, so it caps the bucket's bound.
                return min(LAG_BOUNDS[i], self.max_lag) if i < len(LAG_BOUNDS) else self.max_lag
        return self.max_lag


class Counters:
    """The loop's running totals; `_run_once` and the timer queue update them.

    Written by the loop's thread only. Most fields are single numbers that
    a reader copies as they are. The time accounting is the exception: a
    reader adds the run and the poll in progress up to *its* clock reading,
    so it must never see a start time older than one the loop is about to
    record. ``seq`` guards those (a seqlock): it is odd while the loop
    thread updates ``poll_start``, ``idle_time``, ``run_start`` or
    ``run_time``, and the loop reads the clock only after making it odd. A
    reader reads ``seq``, then the clock, then the fields, and retries if
    ``seq`` was odd or changed: so its clock reading is never later than the
    next one the loop records, and busy and idle time never go backwards.
    The windows contain no user code, so they are short. A poll that cannot
    block (callbacks were ready) opens no window and counts as busy time.
    """

    __slots__ = (
        "callbacks",
        "idle_time",
        "iterations",
        "lag_counts",
        "lag_sum",
        "mark",
        "max_lag",
        "poll_start",
        "run_start",
        "run_time",
        "seq",
        "slow_callbacks",
    )

    def __init__(self) -> None:
        self.seq = 0
        self.iterations = 0
        self.callbacks = 0
        #: Seconds run in finished ``run_forever`` calls.
        self.run_time = 0.0
        #: When the running ``run_forever`` started (0.0: not running).
        self.run_start = 0.0
        #: Seconds blocked in finished polls.
        self.idle_time = 0.0
        #: When the poll in progress started (0.0: not polling).
        self.poll_start = 0.0
        #: When the current busy stretch (the run phase) started: the end of
        #: the last poll, for the slow-phase check.
        self.mark = 0.0
        self.max_lag = 0.0
        self.lag_sum = 0.0
        self.lag_counts = [0] * (len(LAG_BOUNDS) + 1)
        self.slow_callbacks = 0


#: What makes a loop's `Counters`: the class above, or where the native core
#: runs its twin with the same fields as C numbers (``native.py`` sets it).
counters_factory: Callable[[], Counters] = Counters


def new_counters() -> Counters:
    """A fresh set of counters, of the kind the running core writes."""
    return counters_factory()


class SlowCallback(NamedTuple):
    """What a slow-callback hook receives (``loop.set_slow_callback_hook``)."""

    #: Real seconds the callback ran.
    duration: float
    handle: asyncio.Handle
    #: The task whose step this was, else None.
    task: asyncio.Task[Any] | None
    #: The task's name, else a description of the callback.
    name: str
    #: Where the task stopped, outermost coroutine first (empty for a callback
    #: that is not a task step, or a task that finished).
    stack: tuple[traceback.FrameSummary, ...]


SlowCallbackHook = Callable[[SlowCallback], object]


def _task_of(handle: asyncio.Handle) -> asyncio.Task[Any] | None:
    owner: Any = getattr(getattr(handle, "_callback", None), "__self__", None)
    return owner if isinstance(owner, asyncio.Task) else None


def coroutine_stack(task: asyncio.Task[Any]) -> tuple[traceback.FrameSummary, ...]:
    """The frames of a suspended task's coroutine chain, outermost first."""
    capture = getattr(asyncio, "capture_call_graph", None)
    if capture is not None:  # Python 3.14+
        graph = capture(task)
        if graph is not None:
            # call_stack lists the innermost frame first.
            return tuple(
                traceback.FrameSummary(
                    entry.frame.f_code.co_filename, entry.frame.f_lineno, entry.frame.f_code.co_name
                )
                for entry in reversed(graph.call_stack)
            )
    frames = []
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None or frame.f_code is FUTURE_AWAIT_CODE:
            break
        frames.append(
            traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        )
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return tuple(frames)


def describe_slow(handle: asyncio.Handle, duration: float) -> SlowCallback:
    task = _task_of(handle)
    if task is None:
        return SlowCallback(duration, handle, None, repr(handle), ())
    return SlowCallback(duration, handle, task, task.get_name(), coroutine_stack(task))


#: A callback observer: called with each handle after its callback ran
#: (``loop.add_callback_observer``). It may raise to stop the loop.
CallbackObserver = Callable[[asyncio.Handle], object]


class RunRecorder(Protocol):
    """What the run phase tells a recorder (``tideloop._recorder``) while one is set.

    Called in the loop's thread, by the timed run phase only
    (``Scheduler._run_ready_timed``): a loop without a recorder never looks
    for one. ``phase_start`` and ``phase_end`` bracket each run phase (also
    an empty one: every iteration has one), ``before`` and ``after`` each
    callback that is not cancelled; *start* and *took* are the real time
    the callback started and the seconds it ran, as the metrics measured
    them. A callback that raises SystemExit or KeyboardInterrupt gets no
    ``after``, but its phase still ends.
    """

    def phase_start(self) -> None: ...

    def before(self, handle: asyncio.Handle, /) -> None: ...

    def after(self, handle: asyncio.Handle, start: float, took: float, /) -> None: ...

    def phase_end(self, ran: int, /) -> None: ...


class Instruments:
    """What a loop measures and who watches its callbacks.

    ``timed`` is what the run phase reads (once per iteration) to choose
    between the inlined fast path and the one that times every callback:
    True while a slow-callback hook, detailed metrics, a callback observer
    or a recorder is set (debug mode also times callbacks; the core checks
    that itself).
    """

    __slots__ = (
        "counters",
        "detailed",
        "observers",
        "recorder",
        "slow_hook",
        "slow_hook_threshold",
        "timed",
    )

    def __init__(self) -> None:
        self.counters = new_counters()
        self.detailed = False
        self.slow_hook: SlowCallbackHook | None = None
        self.slow_hook_threshold = 0.1
        #: Called after each callback, in the order added.
        self.observers: tuple[CallbackObserver, ...] = ()
        #: Told of every run phase and callback (see `RunRecorder`); at most one.
        self.recorder: RunRecorder | None = None
        self.timed = False

    def _retime(self) -> None:
        self.timed = (
            self.detailed
            or self.slow_hook is not None
            or bool(self.observers)
            or self.recorder is not None
        )

    def set_recorder(self, recorder: RunRecorder | None) -> None:
        """Set (or with None, remove) the loop's run-phase recorder."""
        self.recorder = recorder
        self._retime()

    def set_detailed(self, detailed: bool) -> None:
        self.detailed = bool(detailed)
        self._retime()

    def set_slow_hook(self, hook: SlowCallbackHook | None, threshold: float) -> None:
        if hook is not None and not callable(hook):
            raise TypeError(f"a callable or None is expected, got {hook!r}")
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold!r}")
        self.slow_hook = hook
        self.slow_hook_threshold = float(threshold)
        self._retime()

    def add_observer(self, observer: CallbackObserver) -> None:
        if not callable(observer):
            raise TypeError(f"a callable is expected, got {observer!r}")
        self.observers = (*self.observers, observer)
        self._retime()

    def remove_observer(self, observer: CallbackObserver) -> None:
        observers = list(self.observers)
        try:
            observers.remove(observer)
        except ValueError:
            raise ValueError(f"{observer!r} is not a callback observer of this loop") from None
        self.observers = tuple(observers)
        self._retime()

    def threshold(self, slow_callback_duration: float) -> float:
        """The slow-callback threshold in force: the hook's, else the loop's."""
        return slow_callback_duration if self.slow_hook is None else self.slow_hook_threshold

    def snapshot(
        self,
        *,
        ready: int,
        timers: int,
        fds: int,
        executor_pending: int,
        slow_callback_duration: float,
    ) -> LoopMetrics:
        """A consistent snapshot of the counters, with the gauges given. Any thread."""
        c = self.counters
        while True:
            seq = c.seq
            if seq & 1:  # the loop thread is inside a window: let it finish
                _yield_gil(0)
                continue
            now = _real_time()  # after the first seq read: see Counters
            iterations = c.iterations
            callbacks = c.callbacks
            run_time = c.run_time
            run_start = c.run_start
            idle = c.idle_time
            poll_start = c.poll_start
            max_lag = c.max_lag
            lag_sum = c.lag_sum
            lag_counts = tuple(c.lag_counts)
            slow = c.slow_callbacks
            # The iteration and callback counts move outside seq windows
            # (no window on a non-blocking iteration's path): a read between
            # which the loop ran on (PyPy switched threads between the two
            # reads, CI) is retried, so the pair is from one iteration.
            if c.seq == seq and c.iterations == iterations:
                break
        # The run and the poll in progress, up to now.
        if run_start:
            run_time += now - run_start
        if poll_start:
            idle += now - poll_start
        return LoopMetrics(
            iterations=iterations,
            callbacks=callbacks,
            busy_time=run_time - idle,
            idle_time=idle,
            ready=ready,
            timers=timers,
            fds=fds,
            executor_pending=executor_pending,
            max_lag=max_lag,
            lag_sum=lag_sum,
            lag_counts=lag_counts,
            slow_callbacks=slow,
            slow_callback_threshold=self.threshold(slow_callback_duration),
        )
