"""CoreLoop: scheduling, the run phase, and the loop's lifecycle.

Layer: core. What an event loop does that needs no file descriptors of its
own: ``call_soon``/``call_later``/``call_at``/``call_soon_threadsafe``, the
ready queue and the timer queue, the run loop (`_run_once`),
``run_forever``/``run_until_complete``/``stop``/``close``, tasks and
futures, debug mode. The rest of the core's public methods delegate to
components of their own modules, which this class builds and keeps:

    _jobs         executor.py    the default executor, helper threads, their accounting
    _asyncgens    asyncgens.py   async generator hooks and shutdown_asyncgens
    _errors       errors.py      the exception handler and asyncio's rules for it
    _instruments  metrics.py     counters, metrics(), slow-callback hook, observers

CoreLoop is the only base class of `tideloop.Loop` with an ``__init__``:
the Loop builds the other components (see ``docs/architecture.md``) and hands the
core what it needs through the constructor. The core is given an `IoSource`
(the fd registry): the core blocks in ``io.poll`` and passes what it
returned to ``io.dispatch``, which queues the ready fds' callbacks. The core
never learns what an fd is. Components that hold kernel resources are
handed to `_own`, and `close` closes them, last owned first.

What the core is given and what it shows is typed in ``interfaces.py``.
A `Schedule` may be handed to the constructor too (``tideloop.testing``'s
seeded perturbation). It decides the orderings asyncio leaves open, and only
through three seams fixed at construction: the timer queue's tie function
(where a timer goes among others with its deadline), where other threads'
``call_soon_threadsafe`` handles go, and a wait function wrapped around the
clock's (which sees each poll's results before they are dispatched).
Without one (the default), `_run_once`, ``call_soon``, the timers and fd
dispatch run exactly the code they ran before schedules existed: the seams
are attributes bound here, not tests on the hot path. A `Supervisor`
(``tideloop.testing``'s watch over virtual time: busy threads, deadlocks)
is consulted the same way: through functions bound here, only under a
clock with a ``wait``, and around the admission of other threads' handles.

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
  to jump while ``_jobs.running`` (see `executor`) is non-empty: a thread
  job whose result is not sent yet.
- ``_counters`` (``_instruments.counters``, see `metrics`) only grows and is written only by the
  loop's thread; the time accounting in it, inside ``seq`` windows that
  contain no user code.
- ``_thread_id`` is not None exactly while ``run_forever`` runs; it is what
  ``is_running()`` and the debug-mode thread check read.
- An exception from a callback goes to the exception handler and never stops
  the loop; only SystemExit and KeyboardInterrupt propagate (out of
  ``run_forever``, leaving the not-yet-run callbacks queued).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import concurrent.futures
import contextvars
import numbers
import operator
import sys
import threading
import warnings
from _thread import _count as _other_threads
from asyncio.futures import _set_result_unless_cancelled as _sleep_callback  # type: ignore[attr-defined]
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextvars import copy_context
from time import monotonic as _real_time
from typing import TYPE_CHECKING, Any, Final, TypeVar, TypeVarTuple, Unpack, cast

from tideloop._versions import CREATE_TASK_MODE, CT_KWARGS, CT_LEGACY

from . import debug as _debug
from .asyncgens import AsyncGenerators
from .clock import Clock, PollFn
from .errors import ExceptionHandling, callback_error_context, default_report, logger
from .executor import ThreadJobs
from .handles import (
    THREADSAFE_LOCKS,
    THREADSAFE_TRIM,
    Handle,
    LockedRun,
    ReadyQueue,
    ThreadSafeHandle,
    TimerHandle,
)
from .interfaces import IoSource, Resource, Schedule, Supervisor
from .metrics import CallbackObserver, Instruments, LoopMetrics, SlowCallbackHook, describe_slow
from .timers import FAR_DELAY, TimerQueue
from .waker import make_waker

__all__ = ["MAX_POLL_TIMEOUT", "CoreLoop", "IoSource", "Resource", "Schedule", "Supervisor"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

#: asyncio's MAXIMUM_SELECT_TIMEOUT: never block longer than a day at a time.
MAX_POLL_TIMEOUT: Final = 24 * 3600.0


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


def _stop_when_done(fut: asyncio.Future[Any]) -> None:
    """run_until_complete's done-callback: stop the future's loop."""
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # run_forever() is already unwinding with this exception.
            return
    fut.get_loop().stop()


class CoreLoop(asyncio.AbstractEventLoop):
    # Closed until fully built: a loop whose construction failed (even
    # before this __init__ ran) must not warn or close anything in __del__.
    _closed: bool = True

    def __init__(
        self,
        *,
        ready: ReadyQueue,
        io: IoSource,
        clock: Clock,
        schedule: Schedule | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._debug = False
        self._thread_id: int | None = None
        self._stopping = False
        self._ready = ready
        # Always-on metrics (see tideloop._core.metrics): updated by _run_once
        # and the timer queue, read by metrics(); they also decide whether
        # callbacks are timed one by one.
        self._instruments = instruments = Instruments()
        self._counters = counters = instruments.counters
        self._timers = TimerQueue(None if schedule is None else schedule.timer_tie(), counters)
        self._clock = clock
        self._now = clock.now
        self._now_is_real = clock.now is _real_time
        # What `loop.time` returns (see `time` below): the clock's own
        # function until a caller replaces it.
        self._time: Callable[[], float] = clock.now
        if type(self).time is not CoreLoop.__dict__["time"]:
            # A subclass overrides time(): the scheduler reads it, as the
            # stdlib loop's does (its super().time() reads the clock).
            self._now = self.time
            self._now_is_real = False
        self._clock_resolution = clock.resolution
        self._waker = make_waker()
        try:
            self._init_seams(ready, io, clock, schedule, supervisor)
        except BaseException:
            self._waker.close()
            raise
        self._resources: list[Resource] = []
        self._errors = ExceptionHandling()
        self._asyncgens = AsyncGenerators(self)
        self._task_factory: Any = None
        # The context asyncio.sleep()'s timers run in (call_later). One per
        # loop: a context can be entered by one thread at a time.
        self._bare_context = contextvars.Context()
        self._current_handle: asyncio.Handle | None = None
        self.slow_callback_duration = 0.1
        self._coroutine_tracking = False
        self._coroutine_tracking_saved_depth = 0
        self.set_debug(_debug.debug_from_environment())
        self._closed = False

    def _init_seams(
        self,
        ready: ReadyQueue,
        io: IoSource,
        clock: Clock,
        schedule: Schedule | None,
        supervisor: Supervisor | None,
    ) -> None:
        """Bind what the run loop calls: the wait, the admission of thread
        handles, the poll and dispatch (a schedule may refuse to attach)."""
        # What _run_once calls to block: None (the poller itself), or the
        # clock's wait behind the thread-job gate, or the schedule's wait
        # around either. Composed once, here.
        wait = self._virtual_wait = clock.wait
        self._jobs = ThreadJobs(schedule=schedule, virtual=wait is not None, wake=self._waker.wake)
        #: Under virtual time, with a supervisor: True while another thread
        #: looks busy, so the clock must not jump yet (the loop then polls
        #: for `BUSY_THREAD_SLICE` real seconds and asks again); and what is
        #: called where the loop would block with nothing ready, no timer and
        #: no thread job (it may raise: nothing can ever happen again).
        self._threads_busy: Callable[[], bool] | None = None
        self._stuck: Callable[[], None] | None = None
        if wait is not None:
            wait = self._wait_behind_thread_jobs
            if supervisor is not None:
                self._threads_busy = supervisor.threads_busy
                self._stuck = supervisor.stuck
        # How other threads' call_soon_threadsafe handles are queued: the
        # ready queue's append, or the schedule's admission, maybe watched.
        admit: Callable[[asyncio.Handle], None] = ready.append
        if schedule is not None:
            wait = schedule.attach(ready, wait, clock.now, self._head_deadline)
            admit = schedule.admit_threadsafe
        if supervisor is not None:
            admit = supervisor.admit(admit)
        self._admit_threadsafe = admit
        self._clock_wait = wait
        self._io = io
        self._poll = io.poll
        self._dispatch = io.dispatch

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

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
            self._check_thread()
            _debug.check_callback(callback, "call_soon")
            handle = Handle(callback, args, self, context)
            if handle._source_traceback:
                trim(handle._source_traceback, 1)
            self._ready.append(handle)
            return handle
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
            return self._call_at(when, callback, args, context)
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
        return self._call_at(when, callback, args, context)

    def _call_at(
        self,
        when: object,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> TimerHandle:
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
            # Trim this frame and the public method's.
            trim(timer._source_traceback, 2)
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
            # no other thread exists (_thread._count(): 40 ns). anyio's
            # run() relies on it: its worker thread exits before the loop
            # it references is closed.
            events = self._poll(0.0) if self._io.polled or _other_threads() else _NO_EVENTS
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
        metrics, or callback observers (called after each callback).

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
        ran = slow = 0
        try:
            for _ in range(len(ready)):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                ran += 1
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
                for observe in observers:
                    observe(handle)
        finally:
            counters.callbacks += ran
            counters.slow_callbacks += slow

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
            if running:
                timeout = None
            elif self._threads_busy is not None and self._threads_busy():
                # A thread may be about to call_soon_threadsafe: wait for it
                # in real time, without moving the clock.
                return poll(BUSY_THREAD_SLICE)
        wait = self._virtual_wait
        assert wait is not None
        if timeout is None and self._stuck is not None and not running:
            # Only if a look finds nothing ready either.
            events = wait(poll, 0.0)
            if events:
                return events
            self._stuck()
        return wait(poll, timeout)

    def _in_thread(
        self,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
        undo: Callable[[_T], Awaitable[object]] | None = None,
        undo_unwatched: Callable[[_T], object] | None = None,
        name: str = "tideloop-fs",
    ) -> Coroutine[Any, Any, _T]:
        """``func(*args)`` on a helper thread of its own, for the blocking
        calls that must not run on the loop's thread (a child's start; stat,
        unlink, bind to a path) and must not wait behind the default
        executor's jobs. Counted as an executor job: virtual time waits.

        Cancelling the caller does not stop *func*: the caller returns once
        it is done, after ``await undo(result)`` if *func* succeeded, so it
        never runs on behind the caller's back. If the loop is closed by the
        time *func* returns, the thread calls ``undo_unwatched(result)``.
        """
        return self._jobs.in_thread(
            self, func, args, undo=undo, undo_unwatched=undo_unwatched, name=name
        )

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

    def run_until_complete(self, future: Awaitable[_T] | Generator[Any, None, _T]) -> _T:
        self._check_closed()
        self._check_running()
        new_task = not asyncio.isfuture(future)
        fut: asyncio.Future[_T] = asyncio.ensure_future(cast(Awaitable[_T], future), loop=self)
        if new_task:
            # The caller gets the outcome raised, so a task that is left
            # pending need not be reported when destroyed.
            fut._log_destroy_pending = False  # type: ignore[attr-defined]
        fut.add_done_callback(_stop_when_done)
        try:
            self.run_forever()
        except BaseException:
            if new_task and fut.done() and not fut.cancelled():
                # The coroutine itself raised a BaseException; the caller
                # cannot reach the task, so mark its exception retrieved.
                fut.exception()
            raise
        finally:
            fut.remove_done_callback(_stop_when_done)
        if not fut.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return fut.result()

    def stop(self) -> None:
        self._stopping = True

    def is_running(self) -> bool:
        return self._thread_id is not None

    def is_closed(self) -> bool:
        return self._closed

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def close(self) -> None:
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        self._close()

    def _own(self, resource: Resource) -> None:
        """Close *resource* when the loop closes (the last owned first)."""
        self._resources.append(resource)

    def _close(self) -> None:
        self._closed = True
        self._ready.clear()
        self._timers.clear()
        self._jobs.close()
        resources = self._resources
        try:
            while resources:
                resources.pop().close()
        finally:
            # The fd layer goes last: components unregister their fds first.
            self._io.close()
            self._waker.close()

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not self.is_closed():
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # ------------------------------------------------------------------
    # Metrics (tideloop's own API; see tideloop._core.metrics)

    def metrics(self) -> LoopMetrics:
        """A consistent snapshot of the loop's metrics. Any thread may call it."""
        timers = self._timers
        return self._instruments.snapshot(
            ready=len(self._ready),
            timers=timers.size - timers.cancelled,
            fds=0 if self._closed else self._io.registrations(),
            executor_pending=self._jobs.pending,
            slow_callback_duration=self.slow_callback_duration,
        )

    def set_metrics(self, *, detailed: bool) -> None:
        """Time every callback (exact ``slow_callbacks``), or only each run phase."""
        self._instruments.set_detailed(detailed)

    def set_slow_callback_hook(self, hook: SlowCallbackHook | None, threshold: float = 0.1) -> None:
        """Call ``hook(SlowCallback)`` after each callback that ran *threshold* s or more.

        None removes the hook. The hook runs in the loop's thread, right
        after the slow callback; for a task step it gets the task, its name
        and its coroutine stack where it stopped.
        """
        self._instruments.set_slow_hook(hook, threshold)

    def add_callback_observer(self, observer: CallbackObserver) -> None:
        """Call ``observer(handle)`` in the loop's thread after every callback it runs.

        Observers run in the order added, after the slow-callback hook; one
        that raises stops the loop (the exception leaves ``run_forever``),
        as a property check does (``tideloop.testing.always``). While any
        is added, callbacks are timed one by one (the path debug mode
        takes), so a loop without observers pays nothing for them.
        """
        self._instruments.add_observer(observer)

    def remove_callback_observer(self, observer: CallbackObserver) -> None:
        """Stop calling *observer*; ValueError if it was not added."""
        self._instruments.remove_observer(observer)

    @property
    def clock(self) -> Clock:
        """The clock this loop was built with (``Loop(clock=...)``)."""
        return self._clock

    # ------------------------------------------------------------------
    # Futures and tasks

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self, coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T], **kwargs: Any
    ) -> asyncio.Task[_T]:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        factory = self._task_factory
        task: asyncio.Task[_T]
        # Typed Any by assignment (typeshed's Task() takes coroutines only on
        # 3.12+); typing.cast would be a call per task.
        c: Any = coro
        if factory is None and not kwargs:
            # The common case: no name, context or factory to consider.
            task = asyncio.Task(c, loop=self)
        elif CREATE_TASK_MODE == CT_KWARGS:
            # 3.14 semantics: every keyword goes to the factory or to Task.
            if factory is not None:
                task = factory(self, coro, **kwargs)
                return task
            task = asyncio.Task(c, loop=self, **kwargs)
        else:
            name = kwargs.pop("name", None)
            context = kwargs.pop("context", None)
            if kwargs and CREATE_TASK_MODE == CT_LEGACY:
                raise TypeError(
                    f"{type(self).__name__}.create_task() got an unexpected keyword "
                    f"argument {next(iter(kwargs))!r}"
                )
            if factory is not None:
                # Factories written for 3.10 take (loop, coro) only: context
                # is passed only when given, as asyncio does.
                if context is not None:
                    kwargs["context"] = context
                task = factory(self, coro, **kwargs)
                # 3.13 renames the task to 'None' when no name is given:
                # tideloop does not (divergence factory-task-name-3.13).
                if name is not None:
                    task.set_name(name)
                return task
            task = asyncio.Task(c, loop=self, name=name, context=context, **kwargs)
        if task._source_traceback:  # type: ignore[attr-defined]
            trim(task._source_traceback, 1)  # type: ignore[attr-defined]
        return task

    def set_task_factory(self, factory: Any) -> None:
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self) -> Any:
        return self._task_factory

    # ------------------------------------------------------------------
    # Errors

    def get_exception_handler(
        self,
    ) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None:
        return self._errors.handler

    def set_exception_handler(
        self, handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None
    ) -> None:
        self._errors.set(handler)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        default_report(context, self._current_handle)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self._errors.call(self, context)

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

    # ------------------------------------------------------------------
    # Async generators (the component: asyncgens.py)

    async def shutdown_asyncgens(self) -> None:
        """Close every asynchronous generator still alive (``asyncio.run`` calls this at exit)."""
        await self._asyncgens.shutdown()

    # ------------------------------------------------------------------
    # Threads: the default executor (the component: executor.py)

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
    ) -> asyncio.Future[_T]:
        self._check_closed()
        if self._debug:
            _debug.check_callback(func, "run_in_executor")
        return self._jobs.submit(self, executor, func, args)

    def set_default_executor(self, executor: concurrent.futures.Executor) -> None:
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._jobs.default = executor

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Join the default executor's threads, waiting at most *timeout* seconds."""
        await self._jobs.shutdown_default(self, timeout)

    @property
    def _default_executor(self) -> concurrent.futures.ThreadPoolExecutor | None:
        # asyncio's attribute, read by CPython's own tests (set_default_executor).
        return self._jobs.default


#: Real seconds a virtual-time loop polls while another thread looks busy.
BUSY_THREAD_SLICE: Final = 0.002
