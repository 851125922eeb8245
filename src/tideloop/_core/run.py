"""CoreLoop: scheduling, the run loop, lifecycle, errors, threads, debug.

Layer: core. Everything an event loop does that needs no file descriptors of
its own: the ready queue, the timer queue, the clock, the run loop,
``run_until_complete``/``stop``/``close``, tasks and futures, exception
handling, debug mode, async generator hooks, ``call_soon_threadsafe`` and
the default executor.

CoreLoop is the only base class of `tideloop.Loop` with an ``__init__``:
the Loop builds the components (see ``docs/architecture.md``) and hands the
core what it needs through the constructor. The core is given an `IoSource`
(the fd registry): the core blocks in ``io.poll`` and passes what it
returned to ``io.dispatch``, which queues the ready fds' callbacks. The core
never learns what an fd is. Components that hold kernel resources are
handed to `_own`, and `close` closes them, last owned first.

A `Schedule` may be handed to the constructor too (``tideloop.testing``'s
seeded perturbation). It decides the orderings asyncio leaves open, and only
through three seams fixed at construction: the timer queue's tie function
(where a timer goes among others with its deadline), where other threads'
``call_soon_threadsafe`` handles go, and a wait function wrapped around the
clock's (which sees each poll's results before they are dispatched).
Without one (the default), `_run_once`, ``call_soon``, the timers and fd
dispatch run exactly the code they ran before schedules existed: the seams
are attributes bound here, not tests on the hot path.

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
- ``_executor_jobs`` counts the executor jobs whose results have not
  reached their futures yet (``loop.metrics()``' executor_pending). Under
  a clock with a ``wait`` (virtual time), ``_jobs_running`` holds a token
  per job whose thread has not yet *sent* its result (the token is dropped
  by the thread right after its ``call_soon_threadsafe``, or when the
  future is done); the clock is not allowed to jump while it is non-empty
  (see ``clock``). A result that was sent but not yet admitted (a
  Schedule holding it, as a slow thread) does not hold time still.
- ``_counters`` (see `metrics`) only grows and is written only by the
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
import functools
import numbers
import operator
import sys
import threading
import warnings
import weakref
from _thread import _count as _other_threads
from asyncio.futures import _copy_future_state  # type: ignore[attr-defined]
from asyncio.futures import _set_result_unless_cancelled as _sleep_callback  # type: ignore[attr-defined]
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
)
from contextvars import copy_context
from time import monotonic as _real_time
from time import sleep as _yield_gil
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, TypeVarTuple, Unpack, cast

from . import debug as _debug
from .clock import Clock, PollFn, WaitFn
from .errors import callback_error_context, log_context, logger
from .handles import (
    THREADSAFE_LOCKS,
    THREADSAFE_TRIM,
    Handle,
    LockedRun,
    ReadyQueue,
    ThreadSafeHandle,
    TimerHandle,
)
from .metrics import Counters, LoopMetrics, SlowCallbackHook, describe_slow
from .timers import FAR_DELAY, TimerQueue
from .waker import make_waker

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

#: asyncio's MAXIMUM_SELECT_TIMEOUT: never block longer than a day at a time.
MAX_POLL_TIMEOUT: Final = 24 * 3600.0

# 3.12 started running a custom exception handler in the context of the
# handle/task it reports on.
_HANDLER_IN_CONTEXT: Final = sys.version_info >= (3, 12)
# How create_task() hands its keywords to a task factory differs between
# releases, patch releases included; follow the running Python's stdlib,
# read off its create_task's code object rather than a version number:
# - LEGACY (3.11 .. early 3.13): create_task(coro, *, name=None, context=None);
#   a factory gets (loop, coro) or (loop, coro, context=...), then the task
#   is renamed.
# - NAMED_KWARGS (later 3.13 releases): the same plus **kwargs, which go to
#   the factory with context; name still does not, the task is renamed.
# - KWARGS (3.14+): create_task(coro, **kwargs); every keyword, name
#   included, goes to the factory (or to Task) and nothing is renamed.
_CT_LEGACY: Final = 0
_CT_NAMED_KWARGS: Final = 1
_CT_KWARGS: Final = 2


def _create_task_mode() -> int:
    code = asyncio.BaseEventLoop.create_task.__code__
    if not code.co_flags & 0x08:  # CO_VARKEYWORDS
        return _CT_LEGACY
    kwonly = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    return _CT_NAMED_KWARGS if "name" in kwonly else _CT_KWARGS


_CREATE_TASK_MODE: Final = _create_task_mode()


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


class IoSource(Protocol):
    """What the run loop needs from the fd layer (the fd registry provides it)."""

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        """Block until fds are ready or *timeout* passes (None: no limit)."""
        ...

    def dispatch(self, events: list[tuple[int, int]]) -> None:
        """Queue the callbacks of the fds that *poll* reported ready."""
        ...

    def registrations(self) -> int:
        """Readers plus writers registered now (for `CoreLoop.metrics`)."""
        ...

    #: Registered fds whose readiness is an event of its own: all but the
    #: waker's. While it is 0 a poll that may not block can only report the
    #: waker, whose news (the ready queue grew) the loop sees anyway.
    polled: int

    def close(self) -> None: ...


class Resource(Protocol):
    """A component that holds kernel resources until the loop closes."""

    def close(self) -> None: ...


class Schedule(Protocol):
    """Decides the orderings asyncio leaves open (``tideloop.testing.Perturber``).

    The core consults it only through what it returns at construction, so a
    loop without one runs no schedule code at all.
    """

    def timer_tie(self) -> Callable[[int], int]:
        """Where a timer goes among *n* with its deadline, 0..n (see `TimerQueue`)."""
        ...

    def attach(
        self,
        ready: ReadyQueue,
        wait: WaitFn | None,
        now: Callable[[], float],
        deadline: Callable[[], float | None],
    ) -> WaitFn:
        """Bind to a loop's ready queue; return the wait function the loop calls.

        *wait* is the clock's (None for real time: block in *poll*); *now*
        the loop's time; *deadline* the earliest timer's deadline (None
        without timers; it may be a cancelled timer's). The returned
        function is called once per iteration, like a clock's wait, and
        returns the events the loop dispatches, in dispatch order.
        """
        ...

    def admit_threadsafe(self, handle: asyncio.Handle) -> None:
        """Queue a ``call_soon_threadsafe`` handle. Called from any thread."""
        ...

    def admit_thread_result(self, handle: asyncio.Handle, job: int) -> None:
        """Queue the result of the loop's *job*-th executor job (counted from
        0 in submission order), from whichever thread finished it.

        A job that finished before the loop chained its future is completed
        by the loop's own thread; its result is still a thread's (it could
        have been late), so it is admitted as one, never straight to ready.
        """
        ...


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
    ) -> None:
        self._debug = False
        self._thread_id: int | None = None
        self._stopping = False
        self._ready = ready
        # Always-on metrics (see tideloop._core.metrics): updated by _run_once
        # and the timer queue, read by metrics().
        self._counters = counters = Counters()
        self._timers = TimerQueue(None if schedule is None else schedule.timer_tie(), counters)
        # Per-callback timing: only with a slow-callback hook or detailed metrics.
        self._timed = False
        self._metrics_detailed = False
        self._slow_hook: SlowCallbackHook | None = None
        self._slow_hook_threshold = 0.1
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
        # What _run_once calls to block: None (the poller itself), or the
        # clock's wait behind the executor-job gate, or the schedule's wait
        # around either. Composed once, here.
        wait = self._virtual_wait = clock.wait
        self._executor_jobs = 0
        #: Under virtual time: a token per thread job whose result is not sent yet.
        self._jobs_running: set[object] | None = None if wait is None else set()
        #: Called (tideloop.testing sets it, with virtual time) where the
        #: loop would block with nothing ready, no timer and no executor job:
        #: it may raise to report that nothing can ever happen again.
        self._stuck_hook: Callable[[], None] | None = None
        #: Under virtual time (tideloop.testing sets it): True while another
        #: thread looks busy, so the clock must not jump yet; the loop then
        #: polls for `BUSY_THREAD_SLICE` real seconds and asks again.
        self._threads_busy: Callable[[], bool] | None = None
        #: Called after each callback (tideloop.testing's property checks);
        #: while set, callbacks run one by one in _run_ready_timed, so the
        #: fast path never looks at it. It may raise to stop the loop.
        self._after_callback: Callable[[asyncio.Handle], None] | None = None
        if wait is not None:
            wait = self._wait_behind_executor_jobs
        self._admit_threadsafe: Callable[[asyncio.Handle], None] = ready.append
        if schedule is not None:
            wait = schedule.attach(ready, wait, clock.now, self._head_deadline)
            self._admit_threadsafe = schedule.admit_threadsafe
        self._schedule = schedule
        self._jobs_chained = 0  # executor jobs submitted under the schedule
        self._clock_wait = wait
        self._io = io
        self._poll = io.poll
        self._dispatch = io.dispatch
        self._resources: list[Resource] = []
        self._waker = make_waker()
        self._exception_handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | (
            None
        ) = None
        self._task_factory: Any = None
        # The context asyncio.sleep()'s timers run in (call_later). One per
        # loop: a context can be entered by one thread at a time.
        self._bare_context = contextvars.Context()
        self._current_handle: asyncio.Handle | None = None
        self.slow_callback_duration = 0.1
        self._coroutine_tracking = False
        self._coroutine_tracking_saved_depth = 0
        self._asyncgens: weakref.WeakSet[AsyncGenerator[Any, Any]] = weakref.WeakSet()
        self._asyncgens_shutdown_called = False
        self._old_agen_hooks: Any = None
        self._default_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_shutdown_called = False
        self.set_debug(_debug.debug_from_environment())
        self._closed = False

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

    def _timer_handle_cancelled(self, handle: TimerHandle) -> None:
        # Called by TimerHandle.cancel() (asyncio's and ours): the timer
        # queue's count, without a further call (TimerQueue.note_cancelled).
        if handle._scheduled:
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

        if self._timed or self._debug:
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
        if not self._timed and not self._debug:
            self._counters.slow_callbacks += 1

    def _run_ready_timed(self) -> None:
        """The run phase with each callback timed: debug mode, a hook, or detailed metrics.

        Debug mode adds asyncio's: ``_current_handle`` and a warning for a
        callback that took ``slow_callback_duration`` of the loop's time.
        """
        ready = self._ready
        counters = self._counters
        debug = self._debug
        hook = self._slow_hook
        threshold = self.slow_callback_duration if hook is None else self._slow_hook_threshold
        after = self._after_callback
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
                if after is not None:
                    after(handle)
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

    def _wait_behind_executor_jobs(
        self, poll: PollFn, timeout: float | None
    ) -> list[tuple[int, int]]:
        """The virtual clock's wait, told "no deadline" while thread jobs run."""
        running = self._jobs_running
        if timeout:
            if running:
                timeout = None
            elif self._threads_busy is not None and self._threads_busy():
                # A thread may be about to call_soon_threadsafe: wait for it
                # in real time, without moving the clock.
                return poll(BUSY_THREAD_SLICE)
        wait = self._virtual_wait
        assert wait is not None
        if timeout is None and self._stuck_hook is not None and not running:
            # Only if a look finds nothing ready either.
            events = wait(poll, 0.0)
            if events:
                return events
            self._stuck_hook()
        return wait(poll, timeout)

    def _executor_job_done(self, fut: asyncio.Future[Any]) -> None:
        self._executor_jobs -= 1
        running = self._jobs_running
        if running is not None:
            running.discard(fut)

    async def _in_thread(
        self,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
        undo: Callable[[_T], Awaitable[object]] | None = None,
        undo_unwatched: Callable[[_T], object] | None = None,
        name: str = "tideloop-fs",
    ) -> _T:
        """``func(*args)`` on a helper thread of its own, for the blocking
        calls that must not run on the loop's thread (a child's start; stat,
        unlink, bind to a path) and must not wait behind the default
        executor's jobs. Counted as an executor job: virtual time waits.

        Cancelling the caller does not stop *func*: the caller returns once
        it is done, after ``await undo(result)`` if *func* succeeded, so it
        never runs on behind the caller's back. If the loop is closed by the
        time *func* returns, the thread calls ``undo_unwatched(result)``.
        """
        future: asyncio.Future[_T] = self._thread_job_future()

        def work() -> None:
            try:
                result = func(*args)
            except BaseException as exc:  # handed to the caller
                self._post_from_thread(future, None, exc)
            else:
                if not self._post_from_thread(future, result, None) and undo_unwatched:
                    undo_unwatched(result)

        threading.Thread(target=work, name=name, daemon=True).start()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            try:
                result = await future
            except Exception:  # func failed: nothing to undo
                pass
            else:
                if undo is not None:
                    await undo(result)
            raise

    def _post_from_thread(
        self, future: asyncio.Future[Any], result: object, exc: BaseException | None
    ) -> bool:
        """Hand a helper thread's outcome to *future*; False if the loop is closed."""
        try:
            self.call_soon_threadsafe(_resolve, future, result, exc)
        except RuntimeError:
            return False  # the loop is closed: nobody waits any more
        running = self._jobs_running
        if running is not None:
            running.discard(future)  # sent: virtual time may move on
        return True

    def _thread_job_future(self) -> asyncio.Future[Any]:
        """A future that a helper thread of ours completes, counted as an
        executor job until it is done (virtual time waits for it)."""
        future = self.create_future()
        self._executor_jobs += 1
        running = self._jobs_running
        if running is not None:
            running.add(future)
        future.add_done_callback(self._executor_job_done)
        return future

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
        self._old_agen_hooks = sys.get_asyncgen_hooks()
        self._thread_id = threading.get_ident()
        sys.set_asyncgen_hooks(
            firstiter=self._asyncgen_firstiter_hook, finalizer=self._asyncgen_finalizer_hook
        )
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
        if self._old_agen_hooks is not None:
            sys.set_asyncgen_hooks(*self._old_agen_hooks)
            self._old_agen_hooks = None

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
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)
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
        c = self._counters
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
            if c.seq == seq:
                break
        # The run and the poll in progress, up to now.
        if run_start:
            run_time += now - run_start
        if poll_start:
            idle += now - poll_start
        busy = run_time - idle
        timers = self._timers
        return LoopMetrics(
            iterations=iterations,
            callbacks=callbacks,
            busy_time=busy,
            idle_time=idle,
            ready=len(self._ready),
            timers=timers.size - timers.cancelled,
            fds=0 if self._closed else self._io.registrations(),
            executor_pending=self._executor_jobs,
            max_lag=max_lag,
            lag_sum=lag_sum,
            lag_counts=lag_counts,
            slow_callbacks=slow,
            slow_callback_threshold=(
                self.slow_callback_duration
                if self._slow_hook is None
                else self._slow_hook_threshold
            ),
        )

    def set_metrics(self, *, detailed: bool) -> None:
        """Time every callback (exact ``slow_callbacks``), or only each run phase."""
        self._metrics_detailed = bool(detailed)
        self._retime()

    def set_slow_callback_hook(self, hook: SlowCallbackHook | None, threshold: float = 0.1) -> None:
        """Call ``hook(SlowCallback)`` after each callback that ran *threshold* s or more.

        None removes the hook. The hook runs in the loop's thread, right
        after the slow callback; for a task step it gets the task, its name
        and its coroutine stack where it stopped.
        """
        if hook is not None and not callable(hook):
            raise TypeError(f"a callable or None is expected, got {hook!r}")
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold!r}")
        self._slow_hook = hook
        self._slow_hook_threshold = float(threshold)
        self._retime()

    def _set_after_callback(self, check: Callable[[asyncio.Handle], None] | None) -> None:
        """Call *check(handle)* after every callback (None: stop)."""
        self._after_callback = check
        self._retime()

    def _retime(self) -> None:
        self._timed = (
            self._metrics_detailed
            or self._slow_hook is not None
            or self._after_callback is not None
        )

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
        elif _CREATE_TASK_MODE == _CT_KWARGS:
            # 3.14 semantics: every keyword goes to the factory or to Task.
            if factory is not None:
                task = factory(self, coro, **kwargs)
                return task
            task = asyncio.Task(c, loop=self, **kwargs)
        else:
            name = kwargs.pop("name", None)
            context = kwargs.pop("context", None)
            if kwargs and _CREATE_TASK_MODE == _CT_LEGACY:
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
        return self._exception_handler

    def set_exception_handler(
        self, handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None
    ) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        # asyncio's first touch of *context* is .get(): a context that is
        # not a dict fails with its AttributeError, here too.
        context.get("message")
        current = self._current_handle
        if (
            "source_traceback" not in context and current is not None and current._source_traceback  # type: ignore[attr-defined]
        ):
            context["handle_traceback"] = current._source_traceback  # type: ignore[attr-defined]
        log_context(context)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                # The default handler may be overridden by a subclass.
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            ctx = None
            if _HANDLER_IN_CONTEXT:
                owner = context.get("task")
                if owner is None:
                    owner = context.get("future")
                if owner is None:
                    owner = context.get("handle")
                if owner is not None and hasattr(owner, "get_context"):
                    ctx = owner.get_context()
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(handler, self, context)
            else:
                handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an "
                    "unexpected error in custom exception handler",
                    exc_info=True,
                )

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
    # Async generators

    def _asyncgen_firstiter_hook(self, agen: AsyncGenerator[Any, Any]) -> None:
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning,
                source=self,
            )
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen: AsyncGenerator[Any, Any]) -> None:
        # May run in any thread (whichever drops the last reference).
        self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    async def shutdown_asyncgens(self) -> None:
        """Close every asynchronous generator still alive (``asyncio.run`` calls this at exit)."""
        self._asyncgens_shutdown_called = True
        if not len(self._asyncgens):
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await asyncio.gather(*[ag.aclose() for ag in closing], return_exceptions=True)
        for result, agen in zip(results, closing, strict=True):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of "
                        f"asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )

    # ------------------------------------------------------------------
    # Threads: the default executor

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
    ) -> asyncio.Future[_T]:
        self._check_closed()
        if self._debug:
            _debug.check_callback(func, "run_in_executor")
        if executor is None:
            if self._executor_shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            executor = self._default_executor
            if executor is None:
                executor = self._default_executor = concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix="asyncio"
                )
        # Counted before it is submitted: the job may run, and another thread
        # read loop.metrics() (its executor_pending), before submit() returns.
        self._executor_jobs += 1
        schedule = self._schedule
        try:
            job = executor.submit(func, *args)
            if schedule is None:
                fut = asyncio.wrap_future(job, loop=self)
            else:
                fut = self._chain_job_to_schedule(job, schedule)
        except BaseException:
            self._executor_jobs -= 1
            raise
        running = self._jobs_running
        if running is not None:
            # Virtual time: the job holds the clock until its thread has sent
            # the result. The job's callbacks run in the order added, so this
            # one runs after the chaining callback has handed the result over.
            running.add(fut)
            job.add_done_callback(functools.partial(_discard, running, fut))
        fut.add_done_callback(self._executor_job_done)
        return fut

    def _chain_job_to_schedule(
        self, job: concurrent.futures.Future[_T], schedule: Schedule
    ) -> asyncio.Future[_T]:
        """``wrap_future`` under a Schedule: the result always reaches the
        loop as a thread's result (`Schedule.admit_thread_result`), also when
        the job is already done (asyncio 3.14+ then sets the future at once,
        and earlier versions queue it from the loop's thread)."""
        fut: asyncio.Future[_T] = self.create_future()
        number = self._jobs_chained
        self._jobs_chained = number + 1

        def job_done(job: concurrent.futures.Future[_T]) -> None:  # any thread
            if self._closed:
                return
            handle = Handle(_copy_future_state, (job, fut), self, None)
            schedule.admit_thread_result(handle, number)
            self._waker.wake()

        def fut_done(fut: asyncio.Future[_T]) -> None:
            if fut.cancelled():
                job.cancel()

        fut.add_done_callback(fut_done)
        job.add_done_callback(job_done)
        return fut

    def set_default_executor(self, executor: concurrent.futures.Executor) -> None:
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Join the default executor's threads, waiting at most *timeout* seconds."""
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        future: asyncio.Future[None] = self._thread_job_future()
        # Joining the pool's threads blocks, so a helper thread does it.
        thread = threading.Thread(target=self._join_executor, args=(executor, future))
        thread.start()
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            warnings.warn(
                f"The executor did not finishing joining its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=2,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _join_executor(
        self, executor: concurrent.futures.ThreadPoolExecutor, future: asyncio.Future[None]
    ) -> None:
        try:
            executor.shutdown(wait=True)
            if not self.is_closed():
                self.call_soon_threadsafe(_set_result_unless_cancelled, future, None)
        except Exception as ex:
            if not self.is_closed() and not future.cancelled():
                self.call_soon_threadsafe(future.set_exception, ex)
        running = self._jobs_running
        if running is not None:
            running.discard(future)


#: Real seconds a virtual-time loop polls while another thread looks busy.
BUSY_THREAD_SLICE: Final = 0.002


def _discard(running: set[object], token: object, _job: object) -> None:
    """An executor job's done-callback (in its thread): its result was sent."""
    running.discard(token)


def _resolve(fut: asyncio.Future[Any], result: object, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(result)
    else:
        fut.set_exception(exc)


def _set_result_unless_cancelled(fut: asyncio.Future[_T], result: _T) -> None:
    if not fut.cancelled():
        fut.set_result(result)
