"""Scheduler: scheduling, the run phase, and running: the part of the loop with a native twin.

Layer: core. The pure-Python reference of the core's hot paths, and of
everything they call: ``call_soon``/``call_later``/``call_at``/
``call_soon_threadsafe``, the run loop (`_run_once`), ``run_forever`` and
``stop``, debug mode. `CoreLoop` (``coreloop.py``) extends it with the
constructor, the lifecycle around a run (``run_until_complete``,
``close``) and the public methods that delegate to components.

The optional native core (``_native.c``, the module ``_core._native``)
defines a type with the same names for some of these methods (the hot
ones); on a build that has it, `CoreLoop`'s bases are ``(native.Core,
Scheduler, asyncio.AbstractEventLoop)``, so the native methods take
precedence and everything else is this class's. The two must behave the
same in every observable way: every test runs on both builds, and the
state the native methods read (the ready queue, the flags, the timer
queue, the counters) is what this class reads, by the same names.

Semantics are asyncio's (``Lib/asyncio/base_events.py``) for the running
Python. One iteration, `_run_once`, has asyncio's phases in asyncio's order:

1. drop cancelled timers (or compact the heap; see `timers`);
2. compute the poll timeout: 0 if callbacks are ready or the loop is
   stopping, else until the earliest timer (at most a day), else forever;
3. poll, and queue the callbacks of ready fds (``io.dispatch``);
4. queue every timer due before ``now + clock resolution``;
5. run the callbacks that are ready *now*, in FIFO order. Callbacks they
   schedule run in the next iteration, after another poll.

Invariants (principles 3 and 4 of ``docs/architecture.md``):
- `_run_once` is the only place callbacks are called; every other method
  only appends handles to ``_ready``.
- `_run_once` is the only place the loop blocks (``io.poll``, or the
  clock's ``wait`` around it), and ``_now`` (the injected clock) is the
  only source of the loop's time (the metrics read real time, for
  themselves only).
- Under a clock with a ``wait`` (virtual time), the clock is not allowed
  to jump while ``_jobs.running`` (see `executor`) is non-empty (a thread
  job whose result is not sent yet), unless a `Supervisor` says no thread,
  those jobs' included, is busy: it tells a job blocked waiting for the
  program (which would otherwise wait for the clock forever) from one at
  work.
- ``_counters`` (``_instruments.counters``, see `metrics`) only grows and
  is written only by the loop's thread; the time accounting in it, inside
  ``seq`` windows that contain no user code.
- ``_thread_id`` is not None exactly while ``run_forever`` runs; it is what
  ``is_running()`` and the debug-mode thread check read.
- An exception from a callback goes to the exception handler and never stops
  the loop; only SystemExit and KeyboardInterrupt propagate (out of
  ``run_forever``, leaving the not-yet-run callbacks queued).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import collections
import contextvars
import numbers
import operator
import sys
import threading
from _thread import _count as _other_threads
from asyncio.futures import _set_result_unless_cancelled as _sleep_callback  # type: ignore[attr-defined]
from collections.abc import Callable
from contextvars import copy_context
from time import monotonic as _real_time
from typing import TYPE_CHECKING, Any, Final, TypeVarTuple, Unpack

from . import debug as _debug
from . import native as _choice
from . import quiet as _quiet
from .asyncgens import AsyncGenerators
from .clock import Clock, PollFn, WaitFn
from .errors import callback_error_context, logger
from .executor import ThreadJobs
from .handles import (
    THREADSAFE_LOCKS,
    THREADSAFE_TRIM,
    Handle,
    LockedRun,
    ThreadSafeHandle,
    TimerHandle,
)
from .interfaces import IoSource, ReadyQueue
from .metrics import Counters, Instruments, SlowCallbackHook, describe_slow
from .timers import FAR_DELAY, TimerQueue
from .waker import Waker

#: pytest hides these frames from a testing report's traceback (`debug.hide_from_reports`).
__tracebackhide__ = _debug.hide_from_reports

__all__ = [
    "BUSY_THREAD_SLICE",
    "MAX_POLL_TIMEOUT",
    "SPIN_LIMIT",
    "SPIN_STEP",
    "LoopBase",
    "Scheduler",
    "make_ready_queue",
    "trim",
]

_Ts = TypeVarTuple("_Ts")

#: asyncio's MAXIMUM_SELECT_TIMEOUT: never block longer than a day at a time.
MAX_POLL_TIMEOUT: Final = 24 * 3600.0

#: Real seconds a virtual-time loop polls while another thread looks busy.
BUSY_THREAD_SLICE: Final = 0.002

#: Under a virtual clock: iterations in a row with a timer due at one instant
#: before time is moved on by `SPIN_STEP` seconds, as a real clock would
#: have moved (`Scheduler._keep_virtual_time_moving`).
SPIN_LIMIT: Final = 1000
SPIN_STEP: Final = 1e-6


def trim(stack: list[Any], own: int, others: int = 0) -> None:
    """Drop our frames off the end of a debug-mode source traceback.

    *own*: frames of this module's methods; *others*: frames of the code
    they call (asyncio's ``__init__`` of a handle, say).
    """
    n = own + others
    if n:
        del stack[len(stack) - n :]


#: What a skipped poll reports (never mutated).
_NO_EVENTS: Final[list[tuple[int, int]]] = []

#: ``object.__new__``: builds a Handle or TimerHandle without its __init__.
_new_object: Final = object.__new__


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real)


class Scheduler(asyncio.AbstractEventLoop):
    """Scheduling, the run phase and running (see the module docstring)."""

    # Closed until fully built: a loop whose construction failed (even
    # before its __init__ ran) must not warn or close anything in __del__.
    _closed: bool = True

    # The state these methods read, set by `CoreLoop.__init__`.
    _debug: bool
    _thread_id: int | None
    _stopping: bool
    _ready: ReadyQueue
    _instruments: Instruments
    _counters: Counters
    _timers: TimerQueue
    _clock: Clock
    _now: Callable[[], float]
    _now_is_real: bool
    _time: Callable[[], float]
    _clock_resolution: float
    _waker: Waker
    _virtual_wait: WaitFn | None
    _clock_wait: WaitFn | None
    _jobs: ThreadJobs
    _threads_busy: Callable[[float], bool] | None
    _clock_reach: Callable[[float], object] | None
    _spin_at: float
    _spins: int
    _stuck: Callable[[], None] | None
    _admit_threadsafe: Callable[[asyncio.Handle], None]
    _io: IoSource
    _poll: PollFn
    _dispatch: Callable[[list[tuple[int, int]]], None]
    _asyncgens: AsyncGenerators
    _bare_context: contextvars.Context
    _current_handle: asyncio.Handle | None
    _coroutine_tracking: bool
    _coroutine_tracking_saved_depth: int
    slow_callback_duration: float

    if TYPE_CHECKING:
        # Provided by CoreLoop (the exception handler's component).
        def call_exception_handler(self, context: dict[str, Any]) -> None: ...

    # ------------------------------------------------------------------
    # Scheduling callbacks

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> Handle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            return self._call_soon_debug(callback, args, context, 2)
        # Handle.__init__ inlined (every field of handles.new_handle_fields):
        # no constructor frame on the path every task step and future
        # callback takes.
        handle = _new_object(Handle)
        handle._context = copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)
        return handle

    def _call_soon_debug(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        frames: int,
    ) -> Handle:
        """``call_soon`` in debug mode: asyncio's checks, and a source traceback
        without our *frames* (this one and the caller's, or this one alone
        when the native core calls it)."""
        self._check_thread()
        _debug.check_callback(callback, "call_soon")
        handle = Handle(callback, args, self, context)
        if handle._source_traceback:
            trim(handle._source_traceback, frames)
        self._ready.append(handle)
        return handle

    # call_later/call_at take `object` for the time and check it themselves:
    # a wrong type fails with asyncio's error (or our documented one).
    def call_later(
        self,
        delay: object,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        # Typed Any by assignment: typing.cast would be a call per timer.
        d: Any = delay
        when = self._now() + d
        if type(when) is not float or self._closed or self._debug:
            # asyncio's debug checks name call_at() here too.
            return self._call_at(when, callback, args, context, 2)
        # The common case, _call_at and TimerHandle.__init__ inlined (every
        # field of handles.new_handle_fields, and the timer's two).
        timer = _new_object(TimerHandle)
        if context is None:
            # asyncio.sleep()'s timer: its callback reads no context variable
            # and its handle never reaches user code, so it needs no copy of
            # the current context (one GC-tracked object less per sleep).
            context = self._bare_context if callback is _sleep_callback else copy_context()
        timer._context = context
        timer._loop = self
        timer._callback = callback
        timer._args = args
        timer._cancelled = False
        timer._repr = None
        timer._source_traceback = None
        timer._when = when
        if d < FAR_DELAY:
            self._timers.push(timer, when)
        else:
            self._timers.push_far(timer, when)
        return timer

    def call_at(
        self,
        when: object,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        return self._call_at(when, callback, args, context, 2)

    def _call_at(
        self,
        when: object,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        frames: int,
    ) -> TimerHandle:
        """``call_at`` after its None check, and ``call_later`` off its fast path.

        *frames*: our frames to trim off a debug-mode source traceback (this
        one and the public method's, or this one alone when the native core
        calls it).
        """
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if type(when) is not float and not _is_real(when):
            # Divergence "call-at-rejects-non-numbers": asyncio fails later,
            # inside the heap, and can leave it broken.
            raise TypeError(f"when must be a real number, not {type(when).__name__}")
        # The handle keeps *when* as given (when() returns it); the heap
        # orders by its float value.
        w: Any = when  # typing.cast would be a call per timer
        key = w if type(w) is float else float(w)
        if self._debug:
            self._check_thread()
            _debug.check_callback(callback, "call_at")
        timer = TimerHandle(w, callback, args, self, context)
        if timer._source_traceback:
            trim(timer._source_traceback, frames)
        if key - self._now() < FAR_DELAY:
            self._timers.push(timer, key)
        else:
            self._timers.push_far(timer, key)
        return timer

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> Handle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            _debug.check_callback(callback, "call_soon_threadsafe")
        handle = ThreadSafeHandle(callback, args, self, context)
        if handle._source_traceback:
            trim(handle._source_traceback, 1, others=THREADSAFE_TRIM - 1)
        # The ready queue's append, or the schedule's admission (see __init__);
        # a locking handle goes behind an entry that runs it under its lock.
        if THREADSAFE_LOCKS:
            self._admit_threadsafe(LockedRun(handle._run, (), self, self._bare_context))
        else:
            self._admit_threadsafe(handle)
        self._waker.wake()
        return handle

    # `loop.time`: asyncio's scheduler reads self.time(), so a program that
    # patches it (mock.patch.object(loop, "time"), or assigns loop.time) or
    # a subclass that overrides it moves the loop's timers. tideloop's hot
    # paths read self._now instead, so `time` is a property whose setter
    # points _now at the replacement and whose deleter (the end of a patch)
    # puts the clock back: nothing is checked per timer or per iteration.
    def _set_time(self, value: Callable[[], float]) -> None:
        self._time = value
        self._now = value
        self._now_is_real = False

    def _del_time(self) -> None:
        clock = self._clock
        self._time = clock.now
        self._now = clock.now
        self._now_is_real = clock.now is _real_time

    if TYPE_CHECKING:

        def time(self) -> float: ...

    else:
        time = property(
            operator.attrgetter("_time"),
            _set_time,
            _del_time,
            doc="The loop's time function: its clock's (time.monotonic on the real "
            "clock), or what replaced it.",
        )

    def _head_deadline(self) -> float | None:
        """The earliest deadline in the timer heap (a Schedule's view)."""
        heap = self._timers.heap
        return heap[0] if heap else None

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        # Called by TimerHandle.cancel() (asyncio's and ours): the timer
        # queue's count, without a further call (TimerQueue.note_cancelled).
        if handle._scheduled:  # type: ignore[attr-defined]  # asyncio's slot
            self._timers.cancelled += 1

    def _add_callback(self, handle: asyncio.Handle) -> None:
        if not handle._cancelled:
            self._ready.append(handle)

    def _add_callback_signalsafe(self, handle: asyncio.Handle) -> None:
        self._add_callback(handle)
        self._waker.wake()

    def _write_to_self(self) -> None:
        # asyncio's name for "wake the loop"; some libraries call it.
        self._waker.wake()

    # ------------------------------------------------------------------
    # The run loop

    def _run_once(self) -> None:
        ready = self._ready
        timers = self._timers

        # With no cancelled timer queued the head is live: its deadline is
        # read here instead of in a call (the common case of every loop
        # that sleeps or times out).
        deadline: float | None = None
        if timers.heap:
            deadline = timers.next_deadline() if timers.cancelled else timers.heap[0]
        timeout: float | None
        if ready or self._stopping:
            timeout = 0.0
        elif deadline is None:
            timeout = None
        else:
            if timers.buckets[deadline] is timers.marker:
                # Far timers wait in slots behind a marker (timers.py): the
                # loop moves the first slot into the heap rather than wake
                # for it. Only here, where it may block: when busy, the
                # marker comes due and cancelled timers die unseen.
                deadline = timers.pass_markers()
            if deadline is None:
                timeout = None
            else:
                timeout = deadline - self._now()
                if timeout > MAX_POLL_TIMEOUT:
                    timeout = MAX_POLL_TIMEOUT
                elif timeout < 0.0:
                    timeout = 0.0

        wait = self._clock_wait
        counters = self._counters
        # Metrics (see metrics.py): one clock read per iteration. It ends the
        # previous phase (slow if it took the threshold or more) and starts
        # the poll.
        if timeout == 0.0 and wait is None:
            # A poll that cannot block counts as busy time: nothing to record.
            t = _real_time()
            if t - counters.mark >= self.slow_callback_duration:
                self._slow_phase()
            counters.mark = t
            # Facts: a zero-timeout epoll_wait is a syscall (about 0.3 us,
            # as much as the rest of an iteration); with only the waker
            # registered it can report nothing the ready queue does not
            # show already. libuv skips the poll without fds, too. The
            # waker stays readable and is drained by the next poll that may
            # block, which happens before the loop can sleep.
            # But the syscall releases the GIL: a thread a callback just
            # woke (a worker told to stop, a queue.put) runs at once, as on
            # the stdlib loop, which polls every iteration; skipped, it
            # waits for the switch interval (5 ms). So skip it only while
            # no other thread exists (_thread._count(): 40 ns) but quiet
            # ones (quiet.py: the console's, asleep). anyio's run() relies
            # on it: its worker thread exits before the loop it references
            # is closed.
            if self._io.polled or _other_threads() > _quiet.count:
                events = self._poll(0.0)
            else:
                events = _NO_EVENTS
        else:
            # A poll that may block is idle time, recorded inside seq windows
            # that read the clock only after opening (see Counters).
            counters.seq += 1
            t = _real_time()
            if t - counters.mark >= self.slow_callback_duration:
                self._slow_phase()
            counters.poll_start = t
            counters.seq += 1
            events = self._poll(timeout) if wait is None else wait(self._poll, timeout)
            counters.seq += 1
            t = counters.mark = _real_time()
            counters.idle_time += t - counters.poll_start
            counters.poll_start = 0.0
            counters.seq += 1
        counters.iterations += 1
        if events:
            self._dispatch(events)
        if deadline is not None:
            # On the real clock, the metrics' reading serves (it is at most
            # one zero-timeout poll old: a timer due within it fires on the
            # next iteration). No timer is due unless the head is: only then
            # call into the queue.
            now = t if self._now_is_real else self._now()
            end = now + self._clock_resolution
            if timers.heap[0] < end:
                timers.pop_due(now, end, ready)

        if self._instruments.timed or self._debug:
            self._run_ready_timed()
            return
        # Only what is ready now runs in this phase: callbacks scheduled by
        # these callbacks (or by other threads meanwhile) wait for the next
        # iteration, after another poll.
        # The body of asyncio's Handle._run, inlined: one Python call less
        # per callback.
        popleft = ready.popleft
        ntodo = len(ready)
        skipped = 0
        for _ in range(ntodo):
            handle: Any = popleft()
            if handle._cancelled:
                skipped += 1
                continue
            # ``context.run(callback, *args)`` builds a list, a tuple and a
            # bound method per call; with no argument (task steps, fd
            # readiness) or one (future callbacks) it builds nothing.
            args = handle._args
            try:
                if not args:
                    handle._context.run(handle._callback)
                elif len(args) == 1:
                    handle._context.run(handle._callback, args[0])
                else:
                    handle._context.run(handle._callback, *args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.call_exception_handler(callback_error_context(handle, exc, False))
        # A traceback made in this phase can keep this frame alive (through
        # the f_back of the frames it holds); the last callback's handle and
        # arguments must not stay reachable from it, or a future and its
        # exception would wait for the garbage collector (a cycle).
        handle = args = None
        counters.callbacks += ntodo - skipped

    def _slow_phase(self) -> None:
        """The phase that just ended took the threshold or more."""
        # When callbacks are timed one by one, they were counted there.
        if not self._instruments.timed and not self._debug:
            self._counters.slow_callbacks += 1

    def _run_ready_timed(self) -> None:
        """The run phase with each callback timed: debug mode, a hook, detailed
        metrics, callback observers (called after each callback), or a
        recorder (told of the phase and of each callback, see
        ``metrics.RunRecorder``).

        Debug mode adds asyncio's: ``_current_handle`` and a warning for a
        callback that took ``slow_callback_duration`` of the loop's time.
        """
        ready = self._ready
        instruments = self._instruments
        counters = instruments.counters
        debug = self._debug
        hook = instruments.slow_hook
        threshold = instruments.threshold(self.slow_callback_duration)
        observers = instruments.observers
        recorder = instruments.recorder
        ran = slow = 0
        if recorder is not None:
            recorder.phase_start()
        try:
            for _ in range(len(ready)):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                ran += 1
                if recorder is not None:
                    recorder.before(handle)
                start = _real_time()
                if debug:
                    self._run_handle_debug(handle)
                else:
                    handle._run()  # not the hot path: no inlining
                took = _real_time() - start
                if took >= threshold:
                    slow += 1
                    if hook is not None:
                        self._report_slow(hook, handle, took)
                if recorder is not None:
                    recorder.after(handle, start, took)
                for observe in observers:
                    observe(handle)
        finally:
            counters.callbacks += ran
            counters.slow_callbacks += slow
            if recorder is not None:
                recorder.phase_end(ran)

    def _run_handle_debug(self, handle: asyncio.Handle) -> None:
        try:
            self._current_handle = handle
            t0 = self._now()
            handle._run()
            dt = self._now() - t0
            if dt >= self.slow_callback_duration:
                logger.warning("Executing %s took %.3f seconds", _debug.format_handle(handle), dt)
        finally:
            self._current_handle = None
            # A task that failed in this callback keeps its coroutine's frame
            # (in the traceback), whose f_back chain keeps this frame's
            # locals once it returns: the handle would then keep the task
            # alive in a cycle, and its "exception never retrieved" report
            # would wait for the garbage collector.
            del handle

    def _report_slow(self, hook: SlowCallbackHook, handle: asyncio.Handle, duration: float) -> None:
        try:
            hook(describe_slow(handle, duration))
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.call_exception_handler(
                {"message": "slow callback hook failed", "exception": exc, "handle": handle}
            )

    def _wait_behind_thread_jobs(
        self, poll: PollFn, timeout: float | None
    ) -> list[tuple[int, int]]:
        """The virtual clock's wait, told "no deadline" while thread jobs run."""
        running = self._jobs.running
        if timeout:
            if self._threads_busy is not None:
                # The supervisor decides, thread jobs included: one that
                # computes (or may be about to call_soon_threadsafe) holds
                # the clock, so the loop waits for it in real time; one
                # blocked waiting for the program does not, or the two would
                # wait for each other forever.
                if self._threads_busy(timeout):
                    return poll(BUSY_THREAD_SLICE)
            elif running:
                timeout = None
        wait = self._virtual_wait
        assert wait is not None
        if timeout is None and self._stuck is not None and not running:
            # Only if a look finds nothing ready either.
            events = wait(poll, 0.0)
            if events:
                return events
            self._stuck()
        events = wait(poll, timeout)
        reach = self._clock_reach
        if reach is not None:
            self._keep_virtual_time_moving(reach)
        return events

    def _keep_virtual_time_moving(self, reach: Callable[[float], object]) -> None:
        """Under a virtual clock, before this iteration's timers run: no timer
        runs before its deadline, and none re-armed at the instant it runs
        runs there forever.

        Facts / what this means for us: on a real clock a timer runs a few
        microseconds after its deadline (every iteration takes that long),
        or up to one clock resolution before it (asyncio's rule for a
        deadline the clock cannot show exactly). A virtual clock does not
        move while callbacks run, so a program that re-arms a timer until
        ``loop.time()`` has passed a point (aioquic's loss detection: "lost
        if sent <= now - delay", with ``(sent + delay) - delay`` a rounding
        above ``sent``; its pacing, 1 ns ahead) would run that timer
        forever at one instant, where a real clock would have moved on.
        So a virtual clock is brought to the deadline of a timer about to
        run early, and, when a timer has been due at the same instant for
        `SPIN_LIMIT` iterations in a row, moved on by `SPIN_STEP`, as the
        iterations would have moved a real one.
        """
        head = self._head_deadline()
        if head is None:
            self._spins = 0
            return
        now = self._now()
        if head > now:
            if head < now + self._clock_resolution:
                reach(head)
            self._spins = 0
            return
        if now != self._spin_at:
            self._spin_at = now
            self._spins = 0
            return
        self._spins += 1
        if self._spins >= SPIN_LIMIT:
            self._spins = 0
            reach(now + SPIN_STEP)

    def _check_running(self) -> None:
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        # Looked up at call time, as asyncio does: code (and CPython's tests)
        # may swap these functions on asyncio.events after we are imported.
        if asyncio.events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _run_forever_setup(self) -> None:
        self._check_closed()
        self._check_running()
        counters = self._counters
        counters.seq += 1
        counters.run_start = counters.mark = _real_time()
        counters.seq += 1
        self._set_coroutine_origin_tracking(self._debug)
        self._thread_id = threading.get_ident()
        self._asyncgens.install()
        asyncio.events._set_running_loop(self)

    def _run_forever_cleanup(self) -> None:
        counters = self._counters
        counters.seq += 1
        t = _real_time()
        if t - counters.mark >= self.slow_callback_duration:
            self._slow_phase()  # the last phase: no poll after it
        counters.run_time += t - counters.run_start
        counters.run_start = counters.poll_start = 0.0
        counters.seq += 1
        self._stopping = False
        self._thread_id = None
        asyncio.events._set_running_loop(None)
        self._set_coroutine_origin_tracking(False)
        self._asyncgens.uninstall()

    def run_forever(self) -> None:
        self._run_forever_setup()
        try:
            run_once = self._run_once
            while True:
                run_once()
                if self._stopping:
                    break
        finally:
            self._run_forever_cleanup()

    def stop(self) -> None:
        self._stopping = True

    def is_running(self) -> bool:
        return self._thread_id is not None

    def is_closed(self) -> bool:
        return self._closed

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    # ------------------------------------------------------------------
    # Debug mode

    def get_debug(self) -> bool:
        return self._debug

    def set_debug(self, enabled: bool) -> None:
        self._debug = enabled
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _check_thread(self) -> None:
        """Debug mode: refuse non-threadsafe calls from a thread not running the loop."""
        if self._thread_id is None:
            return
        if threading.get_ident() != self._thread_id:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )

    def _set_coroutine_origin_tracking(self, enabled: bool) -> None:
        if bool(enabled) == self._coroutine_tracking:
            return
        if enabled:
            self._coroutine_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(_debug.DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._coroutine_tracking_saved_depth)
        self._coroutine_tracking = bool(enabled)


def make_ready_queue() -> ReadyQueue:
    """A new, empty ready queue of the kind the running core reads."""
    if _choice.core is None:
        return collections.deque()
    queue: ReadyQueue = _choice.core.ReadyQueue()
    return queue


if TYPE_CHECKING or _choice.core is None:
    LoopBase = Scheduler
else:

    class NativeScheduler(_choice.core.Core, Scheduler):
        """`Scheduler` with its native twin's methods first (``_native.c``)."""

        __slots__ = ()

    LoopBase = NativeScheduler
