"""Perturber: a schedule that varies the orderings asyncio leaves open.

Layer: top (``tideloop.testing``). A `Perturber` is the core's `Schedule`
(``tideloop._core.coreloop``), handed to ``Loop(schedule=...)``. The core asks it
for three things at construction and never consults it otherwise: the timer
queue's tie function, where other threads' ``call_soon_threadsafe`` handles
go, and a wait function around the clock's. A loop built without a schedule
runs none of this code. Every choice it makes is a *decision point* answered
by a `Strategy` through the run's `DecisionLog` (``_strategy``: random from
a seed, PCT, or the replay of a tape), with value 0 the unperturbed choice.

The model (exactly what varies, and what never does)
----------------------------------------------------

asyncio fixes some orders and leaves others to the kernel, to thread
scheduling or to chance. A program that is correct on asyncio must be
correct under *every* choice of the open ones. A Perturber varies exactly
these, and nothing else:

1. **An fd's readiness** (point ``("fd", loop, i, k)``: the k-th time the
   i-th fd became ready). Either dispatched now (0), or *deferred* 1 ..
   *max_defer* iterations (the kernel may report readiness a poll later
   than it could; polls are level triggered, so a deferred fd is reported
   again, and while any fd is deferred the loop does not block), or, when
   several fds are ready in one poll, dispatched now with a priority 1..3
   (higher first). Fds of one poll are otherwise dispatched in the order
   they first became ready; an fd's reader still goes before its writer.
   An fd is an open file (checked with ``fstat`` at each readiness): a
   number closed and reused by a new socket is a new fd. The loop's own
   waker keeps an identity but is never deferred: what it reports (other
   threads' handles, executor results) is held by points of its own (3.).
2. **Timers with equal deadlines** (``("tie", loop, i)``): a timer pushed
   onto a deadline that already has n timers goes ahead of v of them (0:
   last, scheduling order). Timers with different deadlines still run in
   deadline order, each in the first iteration at or after its deadline.
3. **Other threads' handles** (``("thread", loop, i)``: the i-th handle
   queued by ``call_soon_threadsafe`` from another thread; and
   ``("job", loop, i)``: the result of the i-th executor or ``to_thread``
   job, by submission order): admitted at once (0) or held
   until v more iterations that run timers have passed, 1 .. *max_hold*
   (a thread may be descheduled, or slow, at any moment): it is then
   queued after those timers' callbacks, as a slow thread's result would
   be. Counting timer firings, not iterations, makes this an order, not a
   race with the loop's pace: the same value puts the result after the
   same timers however fast the thread really was. A held handle lets time
   pass (the loop blocks, or a virtual clock jumps, to the next timer),
   within *thread_horizon* seconds of loop time from its arrival: a handle
   is admitted before the loop waits for a timer beyond that (a 5 ms job is
   not modelled as taking ten seconds), and at once when no timer is
   pending at all. Handles from one thread keep their order. A thread's
   ``call_soon_threadsafe`` returns only once its handle is admitted (the
   thread waits, as a slow thread would have before the call: nothing it
   does after the call can be seen before the handle is queued), unless
   the loop's thread is blocked waiting (for that thread, it may be) or
   ``PRODUCER_PATIENCE`` real seconds pass: then the handle is queued at
   once, as asyncio queues it. An executor job's thread does not wait.

4. **Only with** ``wakeups=True`` (off by default): **how many iterations
   a task's step takes to come** (``("wake", loop, t, k)``: the k-th step
   of the t-th task, tasks numbered in the order their first step was
   queued): run in its iteration (0) or 1 .. *max_wake* iterations later,
   as if what it awaited had taken that many more ``await
   asyncio.sleep(0)`` hops (a library with one more await inside, another
   Python's asyncio). This is not a freedom asyncio has with the program
   as it is (it breaks ``call_soon`` FIFO between a task's step and the
   callbacks queued after it), so a failure that needs it is *latent*: a
   race one more await elsewhere would expose, never a false alarm
   counted against a correct program. Only task steps move (a handle whose
   callback belongs to an ``asyncio.Task``); every other callback keeps
   its place, and a delayed step keeps its place among steps delayed with
   it. While a step is delayed the loop does not block, and virtual time
   does not move.

Never varied, because asyncio guarantees them (outside the opt-in wake-up
mode above, which moves task steps only): ``call_soon`` callbacks run
in FIFO order (including ``call_soon_threadsafe`` from the loop's own
thread, which goes straight to the ready queue); callbacks queued in one
iteration run after those already queued; I/O callbacks run before the
timers due in the same iteration; timers run in deadline order and never
before their deadline; signal handlers are queued as they arrive.

Naming (for reports and the timeline): a Perturber whose log carries a
`Recording` (``_recording``: the one extra replay of a failing schedule
that a report is made from) also notes, for each deviation, who it
concerns in the program's terms (``_where``): the task that reads a
connection and the connection's ends; the line that armed a timer and its
delay; the function an executor job runs and the line that submitted it;
the thread and the line that called ``call_soon_threadsafe``; the timers a
held result came after. What the loop did (steps, timers, I/O, jobs) the
recording takes from the loop's recorder (``tideloop.Recorder``, which the
recording attaches when the loop first waits: `LoopRecorder.waiting`); the
Perturber tells it only what is the schedule's own: the fds it defers,
the thread results it holds (and when each arrives), its jobs' words.
Without a recording none of this runs: a search pays one call per timer
armed (`TimerTie`), nothing more, and no recorder is attached.

Reproducibility: decisions are keyed by identity, so the same strategy
makes the same decisions whenever the program presents the same points. A
program that stays on one loop with in-process loopback peers replays
exactly; with threads or out-of-process peers the decisions replay, but the
real input they are applied to can arrive differently (record/replay of
real input is not attempted). Not covered: interleavings inside the kernel
(partial reads and writes happen as the kernel does them) and the order in
which *other* threads run.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import select
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from time import perf_counter as _real_clock  # bound now: seeded_globals patches time.*
from typing import TYPE_CHECKING, Any, Final

from tideloop._core.clock import PollFn, WaitFn
from tideloop._core.handles import ReadyQueue
from tideloop._core.interfaces import LoopView, TimerTie
from tideloop._recorder import RecordedJob

from . import _where
from ._strategy import DecisionLog, RandomStrategy, Strategy
from ._threads import waits

if TYPE_CHECKING:
    from ._recording import LoopRecorder

#: Defaults of the model's knobs (see the module docstring).
DEFER_PROBABILITY: Final = 0.25
MAX_DEFER: Final = 3
HOLD_PROBABILITY: Final = 0.5
MAX_HOLD: Final = 4
THREAD_HORIZON: Final = 0.1
#: Real seconds a thread waits for its ``call_soon_threadsafe`` handle to be
#: admitted (`Perturber._pause`) before it lets the loop have it at once; and
#: the real seconds without an iteration, the loop not polling, after which
#: it does so sooner (the loop is stopped, or stuck in a callback).
PRODUCER_PATIENCE: Final = 0.5
PRODUCER_STALL: Final = 0.05
#: Probability of each dispatch priority 1..3 when several fds are ready.
PRIORITY_PROBABILITY: Final = 0.25
#: Probability that a tied timer jumps ahead (of 1..n, uniformly).
TIE_PROBABILITY: Final = 0.5
#: Wake-up mode: probability that a task's step is late by one more
#: iteration (each further one as likely again), and the most it is.
WAKE_PROBABILITY: Final = 0.1
MAX_WAKE: Final = 3

#: Task classes whose steps the wake-up mode moves (the C one and, where it
#: exists, the pure-Python one; PyPy has only the latter, as asyncio.Task).
_TASK_TYPES: Final = tuple({asyncio.Task, getattr(asyncio.tasks, "_PyTask", asyncio.Task)})


def _geometric(p: float, n: int) -> list[float]:
    """Probabilities of 1..n when each further step happens with *p*."""
    out = [p**k * (1 - p) for k in range(1, n)]
    out.append(p**n)
    return out


def _file_of(fd: int) -> tuple[int, int]:
    """What *fd* is open on (device, inode): a reused number shows as a new file."""
    try:
        st = os.fstat(fd)
    except OSError:
        return (-1, -1)
    return (st.st_dev, st.st_ino)


def _callback_name(handle: asyncio.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    name = getattr(callback, "__qualname__", None) or repr(callback)
    return str(name)


class _Arrival:
    """Another thread's handle on its way into the loop (`Perturber._inbox`)."""

    __slots__ = ("admitted", "handle", "site", "thread")

    def __init__(
        self, handle: asyncio.Handle, thread: str, site: dict[str, Any] | None = None
    ) -> None:
        self.handle = handle
        #: Its producer (a thread's name, or "executor job #i").
        self.thread = thread
        #: Recording only: the program's line that called call_soon_threadsafe.
        self.site = site
        #: In the ready queue: set once, under `Perturber._admission`, by
        #: the loop (`_admit`, `_release`) or by its producer (`_pause`).
        self.admitted = False


class _Held:
    """A held thread handle: timer firings still to wait, horizon, producer,
    and (recording) its deviation's detail, where the timers it came after go."""

    __slots__ = ("arrival", "deadline", "detail", "handle", "left", "thread")

    def __init__(
        self,
        arrival: _Arrival,
        left: int,
        deadline: float,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.arrival = arrival
        self.handle = arrival.handle
        self.left = left
        self.deadline = deadline
        self.thread = arrival.thread
        self.detail = detail


def _producer_pause(arrival: _Arrival) -> None:
    """One millisecond of a producer's wait for its handle's admission.

    A frame of its own, which `ThreadWatch` knows (``_threads``): a thread
    here waits for the loop (idle) until *arrival* is admitted. poll(2) of
    nothing, as ``_threads._pause``: a pause that is no call blockbuster
    takes for the program's.
    """
    select.poll().poll(1)


class Perturber:
    """A `Schedule` whose choices come from a `Strategy`: see the module docstring."""

    __slots__ = (
        "_admission",
        "_armed",
        "_arrivals",
        "_deadline",
        "_defer_weights",
        "_deferred",
        "_delayed",
        "_fd_count",
        "_fd_files",
        "_fd_ids",
        "_fd_nth",
        "_fd_words",
        "_held",
        "_hold_weights",
        "_horizon",
        "_inbox",
        "_inner",
        "_iterations",
        "_jobs",
        "_loop_no",
        "_loop_thread",
        "_max_defer",
        "_max_hold",
        "_now",
        "_polling",
        "_priority_weights",
        "_ready",
        "_rec",
        "_task_count",
        "_tasks",
        "_ties",
        "_view",
        "_wake",
        "_wake_weights",
        "_waker",
        "deferrals",
        "holds",
        "log",
        "seed",
        "shuffles",
        "ties",
        "wakes",
        "wakeups",
    )

    def __init__(
        self,
        seed: int | None = None,
        *,
        strategy: Strategy | None = None,
        log: DecisionLog | None = None,
        defer_probability: float = DEFER_PROBABILITY,
        max_defer: int = MAX_DEFER,
        hold_probability: float = HOLD_PROBABILITY,
        max_hold: int = MAX_HOLD,
        thread_horizon: float = THREAD_HORIZON,
        wakeups: bool = False,
        wake_probability: float = WAKE_PROBABILITY,
        max_wake: int = MAX_WAKE,
    ) -> None:
        """*seed*: a `RandomStrategy` of that seed; or give *strategy*, or a
        *log* (a run's `DecisionLog`, shared by the run's loops).
        *wakeups*: also vary how many iterations a task's step takes (the
        opt-in mode of the module docstring, item 4)."""
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        for name, p in (
            ("defer_probability", defer_probability),
            ("hold_probability", hold_probability),
            ("wake_probability", wake_probability),
        ):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, not {p!r}")
        if max_defer < 0 or max_hold < 0 or max_wake < 0 or not thread_horizon >= 0.0:
            raise ValueError(
                "max_defer, max_hold, max_wake and thread_horizon must not be negative"
            )
        if log is None:
            if strategy is None:
                if seed is None:
                    raise TypeError("Perturber() needs a seed, a strategy or a log")
                strategy = RandomStrategy(seed)
            log = DecisionLog(strategy)
        elif strategy is not None:
            raise TypeError("give a strategy or a log, not both")
        self.log = log
        self.seed = seed if seed is not None else getattr(log.strategy, "seed", None)
        self._loop_no = -1
        self._max_defer = max_defer
        self._max_hold = max_hold
        self._horizon = thread_horizon
        self._defer_weights = _geometric(defer_probability, max_defer) if max_defer else []
        self._priority_weights = [PRIORITY_PROBABILITY] * 3
        self._hold_weights = _geometric(hold_probability, max_hold) if max_hold else []
        self.wakeups = bool(wakeups) and max_wake > 0
        self._wake_weights = _geometric(wake_probability, max_wake) if max_wake else []
        #: task -> [its identity, steps seen]; steps delayed: (iterations
        #: left, handle), in the order they were delayed.
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], list[int]] = (
            weakref.WeakKeyDictionary()
        )
        self._task_count = 0  # not len(_tasks): a finished task leaves it
        self._delayed: list[tuple[int, asyncio.Handle]] = []
        #: fd -> identity (order of first readiness), its count of readiness
        #: instances, and its words; and the file it was (device, inode): a
        #: number closed and reused is a new fd, with a new identity.
        self._fd_ids: dict[int, int] = {}
        self._fd_files: dict[int, tuple[int, int]] = {}
        self._fd_count = 0
        #: The loop's waker fd (`bind`): its readiness is never a decision.
        self._waker = -1
        self._fd_nth: dict[int, int] = {}
        self._fd_words: dict[int, str] = {}
        #: fd -> iterations it is still to be deferred (only fds being deferred).
        self._deferred: dict[int, int] = {}
        #: Other threads' handles not seen yet, in arrival order. Appended
        #: from any thread, popped on the loop's (deque ops are atomic).
        self._inbox: collections.deque[_Arrival] = collections.deque()
        #: Guards an arrival's admission: by the loop, or by its producer.
        self._admission = threading.Lock()
        #: Iterations begun, and whether the loop is in its poll now: what a
        #: waiting producer reads to tell a loop at work from a stopped one.
        self._iterations = 0
        self._polling = False
        self._wake: Callable[[], object] | None = None
        self._held: list[_Held] = []
        self._arrivals = 0
        self._ties = 0
        self._loop_thread: int | None = None
        self._ready: ReadyQueue | None = None
        self._inner: WaitFn | None = None
        self._now: Callable[[], float] | None = None
        self._deadline: Callable[[], float | None] | None = None
        self._view: LoopView | None = None
        #: Recording only (`log.recording`): this loop's recorder, the timers
        #: armed (where, by whom, for when) and the executor jobs submitted.
        self._rec: LoopRecorder | None = None
        self._armed: weakref.WeakKeyDictionary[asyncio.TimerHandle, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._jobs: dict[int, dict[str, Any]] = {}
        #: Decisions taken that changed something (for tests and reports).
        self.shuffles = 0
        self.deferrals = 0
        self.holds = 0
        self.ties = 0
        self.wakes = 0

    def __repr__(self) -> str:
        return (
            f"<Perturber {self.log.strategy.describe()} shuffles={self.shuffles} "
            f"deferrals={self.deferrals} holds={self.holds} ties={self.ties}"
            f"{f' wakes={self.wakes}' if self.wakeups else ''}>"
        )

    # ------------------------------------------------------------------
    # The core's Schedule protocol

    def timer_tie(self) -> TimerTie:
        return self._timer

    def bind(self, view: LoopView) -> None:
        self._view = view
        self._waker = view.waker_fd()
        recording = self.log.recording
        if recording is not None:
            self._rec = recording.loop(self._loop_no, view)

    def attach(
        self,
        ready: ReadyQueue,
        wait: WaitFn | None,
        now: Callable[[], float],
        deadline: Callable[[], float | None],
        wake: Callable[[], object],
    ) -> WaitFn:
        if self._ready is not None:
            raise RuntimeError("a Perturber schedules one loop only; make one per loop")
        self._ready = ready
        self._wake = wake
        self._inner = wait
        self._now = now
        self._deadline = deadline
        self._loop_no = self.log.new_loop()
        return self._wait

    def admit_threadsafe(self, handle: asyncio.Handle) -> None:
        ready = self._ready
        assert ready is not None, "attach() first"
        owner = self._loop_thread
        if owner is None or owner == threading.get_ident():
            # The loop's own thread: FIFO with call_soon, never held.
            ready.append(handle)
            return
        site: dict[str, Any] | None = None
        if self._rec is not None:
            # The calling thread's own stack: the line of the program's
            # that handed the loop this callback.
            site, _ = _where.here()
        arrival = _Arrival(handle, threading.current_thread().name, site)
        self._inbox.append(arrival)
        assert self._wake is not None
        self._wake()  # the loop may be in its poll: it takes the arrival now
        self._pause(arrival, owner)

    def _pause(self, arrival: _Arrival, owner: int) -> None:
        """The producing thread waits until its handle is admitted.

        Facts / what this means for us: holding a thread's handle models a
        thread that was slow to make the call. A thread that really was
        slow did nothing after the call earlier either; but this one has
        made it, and what it does next (``queue.task_done()``, setting an
        event, writing to a socket) the loop may see, and asyncio
        guarantees that by then the handle is queued (anyio's
        ``test_asyncio_worker_reused_after_cancelled_call`` joins the
        worker's queue, then expects the worker's handle to have run: a
        false alarm when the handle was held past that). So the thread
        waits here until the handle is admitted, as a slow thread would
        have been elsewhere. Unless the loop's thread is blocked waiting
        (maybe for this very thread: it must not wait forever), or after
        `PRODUCER_PATIENCE` real seconds (the loop is not iterating): then
        the handle goes into the ready queue at once, as asyncio's
        ``call_soon_threadsafe`` puts it.
        """
        now = _real_clock()
        give_up = now + PRODUCER_PATIENCE
        seen, since = self._iterations, now
        while not arrival.admitted:
            frame = sys._current_frames().get(owner)
            if frame is None or waits(frame):
                break
            now = _real_clock()
            if now > give_up:
                break
            if self._iterations != seen or self._polling:
                seen, since = self._iterations, now
            elif now - since > PRODUCER_STALL:
                break  # no iteration, no poll: the loop is stopped or stuck
            _producer_pause(arrival)
        ready = self._ready
        assert ready is not None
        with self._admission:
            if not arrival.admitted:
                arrival.admitted = True
                ready.append(arrival.handle)

    def admit_thread_result(self, handle: asyncio.Handle, job: int) -> None:
        # Named by submission order, which the program fixes (arrival order
        # is the threads'); jobs are not ordered among themselves. The
        # job's thread does not wait: what it does next is the executor's.
        self._inbox.append(_Arrival(handle, f"executor job #{job}"))

    def job_submitted(self, job: int, func: Callable[..., object]) -> None:
        rec = self._rec
        if rec is None:
            return
        submitted = func
        if isinstance(func, RecordedJob):
            func = func.__wrapped__  # the recorder's: it runs the program's
        site, api = _where.here()
        expr = _where.argument_text(site, "run_in_executor", 1) or _where.argument_text(
            site, "to_thread", 0
        )
        task = asyncio.current_task()
        info: dict[str, Any] = {
            "job": job,
            "func": _where.function_name(func),
            "api": api,
            "submitted": self._now() if self._now is not None else 0.0,
        }
        if expr:
            info["expr"] = expr
        if site is not None:
            info["site"] = site
        defined = _where.function_site(func)
        if defined is not None:
            info["defined"] = defined
        if task is not None:
            info["task"] = {"task": task.get_name(), "coro": _where.task_words(task)["coro"]}
        self._jobs[job] = info
        rec.job_submitted(job, submitted, info)

    # ------------------------------------------------------------------
    # Timers armed

    def _timer(self, handle: asyncio.TimerHandle, tied: Sequence[asyncio.TimerHandle]) -> int:
        """Every timer pushed (the core's `TimerTie`): noted when recording;
        a decision when it ties others' deadline."""
        if self._rec is not None:
            self._note_timer(handle)
        n = len(tied)
        return self._tie(n, handle, tied) if n else 0

    def _note_timer(self, handle: asyncio.TimerHandle) -> None:
        assert self._rec is not None and self._now is not None
        site, api = _where.here(2)
        now = self._now()
        info: dict[str, Any] = {
            "when": handle.when(),
            "delay": handle.when() - now,
            "armed": now,
            "callback": _where.callback_words(handle._callback),  # type: ignore[attr-defined]
        }
        if api:
            info["api"] = api
        if site is not None:
            info["site"] = site
        task = asyncio.current_task()
        if task is not None:
            info["task"] = {"task": task.get_name(), "coro": _where.task_words(task)["coro"]}
        self._armed[handle] = info

    def _timer_words(self, handle: asyncio.TimerHandle) -> dict[str, Any]:
        info = self._armed.get(handle)
        if info is not None:
            return dict(info)
        return {
            "when": handle.when(),
            "callback": _where.callback_words(handle._callback),  # type: ignore[attr-defined]
        }

    # ------------------------------------------------------------------
    # Timers with equal deadlines

    def _tie(self, n: int, handle: asyncio.TimerHandle, tied: Sequence[asyncio.TimerHandle]) -> int:
        i = self._ties
        self._ties = i + 1
        weights = [TIE_PROBABILITY / n] * n

        def words(v: int) -> str:
            if not v:
                return f"timer tie #{i}: after the {n} timer(s) with its deadline, in order"
            return f"timer tie #{i}: ran before {v} of the {n} timer(s) armed earlier for it"

        detail = None
        if self._rec is not None:

            def detail(v: int) -> dict[str, Any]:
                return {
                    "kind": "tie",
                    "timer": self._timer_words(handle),
                    "ahead_of": [self._timer_words(h) for h in tied[n - v :]],
                    "tied": n,
                }

        v = self.log.choose(("tie", self._loop_no, i), n + 1, weights, words, detail)
        if v:
            self.ties += 1
        return n - v

    # ------------------------------------------------------------------
    # Once per iteration, where the loop blocks

    def _wait(self, poll: PollFn, timeout: float | None) -> list[tuple[int, int]]:
        self._loop_thread = threading.get_ident()
        self._iterations += 1
        inner = self._inner
        held = self._held
        rec = self._rec
        if rec is not None:
            rec.waiting()
        if self.wakeups and (self._ready or self._delayed):
            self._vary_steps()
            if self._delayed or self._ready:
                # A late step is an iteration away, not a wait; one due now
                # was queued after the loop computed its timeout.
                timeout = 0.0
        if self._deferred or self._inbox:
            # Deferred fds are ready: nothing to wait for. A thread's handle
            # already in the inbox may have lost its wake-up (the waker skips
            # writing while its last wake is being drained; the core relies
            # on finding the handle in ready, but it is here): take it now.
            timeout = 0.0
        elif held and timeout != 0.0:
            assert self._now is not None
            now = self._now()
            if timeout is None:
                # Nothing else is due: a held result cannot wait for anything.
                self._release(held)
                timeout = 0.0
            else:
                late = [h for h in held if h.deadline < now + timeout]
                if late:
                    # The next timer is past their horizon: admitted first.
                    self._release(late)
                    timeout = 0.0
        self._polling = True
        try:
            events = self._poll(poll, inner, timeout)
        finally:
            self._polling = False
        if self._inbox:
            self._take_arrivals()
        if self._held:
            self._admit()
        if events or self._deferred:
            events = self._perturb(events)
        if rec is not None and self._deferred:
            rec.deferred(self._deferred)
        return events

    def _poll(
        self, poll: PollFn, inner: WaitFn | None, timeout: float | None
    ) -> list[tuple[int, int]]:
        """The poll (or the clock's wait around it) of one iteration."""
        if inner is not None:
            return inner(poll, timeout)
        if timeout:
            # Real time, blocking until a timer is due: when nothing else
            # comes, that is real time asleep (the log's ``slept``, which
            # the pytest plugin reports: virtual time would skip it).
            started = _real_clock()
            events = poll(timeout)
            if not events:
                self.log.slept += _real_clock() - started
            return events
        return poll(timeout)

    def _release(self, which: list[_Held]) -> None:
        """Admit *which* now, and every earlier handle of their threads."""
        chosen = {id(h) for h in which}
        threads: set[str] = set()
        out: list[_Held] = []
        for h in reversed(self._held):
            if id(h) in chosen or h.thread in threads:
                threads.add(h.thread)
                out.append(h)
        gone = {id(h) for h in out}
        for h in reversed(out):
            self._admit_one(h.arrival)
        self._held = [h for h in self._held if id(h) not in gone]

    def _admit_one(self, arrival: _Arrival) -> None:
        """Into the ready queue, unless its producer put it there already."""
        with self._admission:
            if not arrival.admitted:
                arrival.admitted = True
                self._ready.append(arrival.handle)  # type: ignore[union-attr]

    def _take_arrivals(self) -> None:
        inbox = self._inbox
        assert self._now is not None
        deadline = self._now() + self._horizon
        weights = self._hold_weights
        n = self._max_hold + 1
        rec = self._rec
        while inbox:
            arrival = inbox.popleft()
            handle, thread, site = arrival.handle, arrival.thread, arrival.site
            name = _callback_name(handle)
            point: tuple[str | int, ...]
            if thread.startswith("executor job #"):
                point = ("job", self._loop_no, int(thread[14:]))
                what = f"the result of {thread}"
            else:
                i = self._arrivals
                self._arrivals = i + 1
                point = ("thread", self._loop_no, i)
                what = f"handle #{i} from thread {thread!r} ({name})"
            if arrival.admitted:
                # Its producer queued it (`_pause`): no decision left.
                if rec is not None:
                    rec.arrived(point, handle, thread, site, 0)
                continue

            def words(v: int, what: str = what) -> str:
                if not v:
                    return f"{what}: admitted at once"
                return f"{what}: arrived after {v} more timer firing(s)"

            detail = None
            if rec is not None:
                detail = functools.partial(self._arrival_detail, point, handle, thread, site)
            v = self.log.choose(point, n, weights, words, detail) if n > 1 else 0
            # One thread's handles keep their order: never before an earlier one.
            for h in self._held:
                if h.thread == thread and h.left > v:
                    v = h.left
            if v:
                self.holds += 1
            chosen = self.log.deviations.get(point) if v and rec is not None else None
            self._held.append(
                _Held(arrival, v, deadline, chosen.detail if chosen is not None else None)
            )
            if rec is not None:
                rec.arrived(point, handle, thread, site, v)

    def _arrival_detail(
        self,
        point: tuple[str | int, ...],
        handle: asyncio.Handle,
        thread: str,
        site: dict[str, Any] | None,
        v: int,
    ) -> dict[str, Any]:
        """A held thread result in the program's terms (recording only)."""
        if point[0] == "job":
            job = dict(self._jobs.get(int(point[2]), {"job": point[2]}))
            job["kind"] = "job"
            job["after"] = []
            return job
        callback = handle._callback  # type: ignore[attr-defined]
        out: dict[str, Any] = {
            "kind": "thread",
            "thread": thread,
            "callback": _where.callback_words(callback),
            "after": [],
        }
        if site is not None:
            out["site"] = site
        loop = asyncio.events._get_running_loop()
        if loop is not None:
            owner = getattr(callback, "__self__", None)
            args = handle._args
            waiting = _where.tasks_waiting_on([owner, *args], _where.tasks_of(loop))
            out["wakes"] = [_where.task_words(t) for t in waiting]
        return out

    def _admit(self) -> None:
        """Admit the held handles whose timers have fired; count this iteration's."""
        assert self._deadline is not None and self._now is not None
        head = self._deadline()
        # Timers fall due in this iteration: they run after what is admitted
        # now, so a handle waiting for one more firing is admitted next time.
        now = self._now()
        fired = head is not None and head <= now
        keep: list[_Held] = []
        blocked: set[str] = set()
        due: list[dict[str, Any]] | None = None
        for h in self._held:
            if h.arrival.admitted:
                continue  # its producer stopped waiting and queued it
            if h.left <= 0 and h.thread not in blocked:
                self._admit_one(h.arrival)
                continue
            if fired:
                h.left -= 1
                if h.detail is not None:
                    # These timers run before it: name them (recording only).
                    if due is None:
                        due = self._due_timers(now)
                    h.detail["after"].extend(due)
            blocked.add(h.thread)
            keep.append(h)
        self._held = keep

    def _due_timers(self, now: float) -> list[dict[str, Any]]:
        view = self._view
        if view is None:
            return []
        due = sorted((t for t in view.timers() if t.when() <= now), key=lambda t: t.when())
        return [self._timer_words(t) for t in due]

    # ------------------------------------------------------------------
    # Task steps (wake-up mode)

    def _vary_steps(self) -> None:
        """Decide the task steps queued since the last iteration; queue the due.

        Called before the poll, when the ready queue holds exactly what the
        last iteration's callbacks (and the loop's own thread) queued: each
        is seen here once. A step delayed v iterations is queued again
        after v more of these calls, behind what is ready then.
        """
        ready = self._ready
        assert ready is not None
        due: list[asyncio.Handle] = []
        still: list[tuple[int, asyncio.Handle]] = []
        for left, late in self._delayed:
            if left <= 1:
                due.append(late)
            else:
                still.append((left - 1, late))
        if ready:
            kept: list[asyncio.Handle] | None = None
            handles = list(ready)
            for i, handle in enumerate(handles):
                task = getattr(getattr(handle, "_callback", None), "__self__", None)
                v = 0
                if isinstance(task, _TASK_TYPES) and not handle._cancelled:
                    v = self._wake_value(task)
                if v:
                    if kept is None:
                        kept = handles[:i]
                    still.append((v, handle))
                elif kept is not None:
                    kept.append(handle)
            if kept is not None:
                ready.clear()
                ready.extend(kept)
        self._delayed = still
        ready.extend(due)

    def _wake_value(self, task: asyncio.Task[Any]) -> int:
        seen = self._tasks.get(task)
        if seen is None:
            seen = self._tasks[task] = [self._task_count, 0]
            self._task_count += 1
        ident, k = seen
        seen[1] = k + 1
        coro = task.get_coro()
        what = f"step #{k} of task #{ident} ({getattr(coro, '__qualname__', coro)})"

        def words(v: int) -> str:
            if not v:
                return f"{what}: in its iteration"
            return f"{what}: {v} iteration(s) late (latent: as if it awaited {v} more time(s))"

        detail = None
        if self._rec is not None:

            def detail(v: int) -> dict[str, Any]:
                return {"kind": "wake", "task": _where.task_words(task), "step": k, "late": v}

        n = len(self._wake_weights) + 1
        v = self.log.choose(("wake", self._loop_no, ident, k), n, self._wake_weights, words, detail)
        if v:
            self.wakes += 1
        return v

    # ------------------------------------------------------------------
    # Ready fds

    def _perturb(self, events: list[tuple[int, int]]) -> list[tuple[int, int]]:
        ids = self._fd_ids
        deferred = self._deferred
        log = self.log
        loop_no = self._loop_no
        batch: list[tuple[int, int, tuple[int, int]]] = []
        still: dict[int, int] = {}
        several = sum(1 for e in events if e[0] not in deferred) > 1
        for event in events:
            fd = event[0]
            left = deferred.get(fd)
            if left is not None:
                # A readiness being deferred: reported again, not a new point.
                if left > 0:
                    still[fd] = left - 1
                else:
                    batch.append((0, ids[fd], event))
                continue
            ident = ids.get(fd)
            file = _file_of(fd)
            if ident is None or file != self._fd_files[fd]:
                ident = ids[fd] = self._fd_count
                self._fd_count += 1
                self._fd_files[fd] = file
                self._fd_nth[fd] = 0
                self._fd_words[fd] = _where.describe_fd(fd)
            k = self._fd_nth.get(fd, 0)
            self._fd_nth[fd] = k + 1
            if fd == self._waker:
                # The loop's waker: what it reports (other threads' handles,
                # executor results) is held and reordered by points of its
                # own (3. above), by thread and job. Deferring the waker
                # would hold all of them at once, a duration no point names.
                batch.append((0, ident, event))
                continue
            n = 1 + self._max_defer
            weights: list[float] = list(self._defer_weights)
            if several:
                n += 3
                weights += self._priority_weights
            if n == 1:
                batch.append((0, ident, event))
                continue
            detail = None if self._rec is None else functools.partial(self._fd_detail, fd, k)
            v = log.choose(("fd", loop_no, ident, k), n, weights, self._fd_words_for(fd, k), detail)
            if not v:
                batch.append((0, ident, event))
            elif v <= self._max_defer:
                self.deferrals += 1
                still[fd] = v - 1  # iterations still to skip after this one
            else:
                self.shuffles += 1
                batch.append((v - self._max_defer, ident, event))
        self._deferred = still
        batch.sort(key=lambda b: (-b[0], b[1]))
        return [b[2] for b in batch]

    def _fd_detail(self, fd: int, k: int, v: int) -> dict[str, Any]:
        """A deviating readiness in the program's terms (recording only)."""
        out: dict[str, Any] = {"kind": "fd", "fd": fd, "nth": k}
        if v <= self._max_defer:
            out["deferred"] = v
        else:
            out["priority"] = v - self._max_defer
        out.update(_where.fd_words(self._view, fd))
        view = self._view
        if view is not None and any(view.fd_handles(fd)) and fd not in view.watched_fds():
            # The loop's own waker or signal pipe: its readiness is a
            # thread's call_soon_threadsafe (or a signal) reaching the loop,
            # so deferring it holds that thread's news: a duration, not an
            # order (`_report.classify`).
            out["own"] = True
        return out

    def _fd_words_for(self, fd: int, k: int) -> Callable[[int], str]:
        what = f"readiness #{k} of {self._fd_words[fd]}"
        max_defer = self._max_defer

        def words(v: int) -> str:
            if not v:
                return f"{what}: dispatched in order"
            if v <= max_defer:
                return f"{what}: deferred {v} iteration(s)"
            return f"{what}: dispatched ahead of the others ready (priority {v - max_defer})"

        return words
