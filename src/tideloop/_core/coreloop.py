"""CoreLoop: the core loop, built and wired; its lifecycle and its components.

Layer: core. `CoreLoop` is `Scheduler` (``scheduler.py``: scheduling, the
run phase, running; with its native twin in front of it on a build that has
one) plus what surrounds a run: the constructor,
``run_until_complete``, ``close``, tasks and futures, and the public
methods that delegate to components of their own modules, which this
class builds and keeps:

    _jobs         executor.py    the default executor, helper threads, their accounting
    _asyncgens    asyncgens.py   async generator hooks and shutdown_asyncgens
    _errors       errors.py      the exception handler and asyncio's rules for it
    _instruments  metrics.py     counters, metrics(), slow-callback hook, observers

CoreLoop is the only base class of `tideloop.Loop` with an ``__init__``:
the Loop builds the other components (see ``docs/architecture.md``) and
hands the core what it needs through the constructor, typed in
``interfaces.py``. The core is given an `IoSource` (the fd registry): it
blocks in ``io.poll`` and passes what it returned to ``io.dispatch``,
which queues the ready fds' callbacks. The core never learns what an fd
is. Components that hold kernel resources are handed to `_own`, and
`close` closes them, last owned first.

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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import math
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator
from time import monotonic as _real_time
from typing import Any, TypeVar, TypeVarTuple, Unpack, cast

from tideloop._versions import CREATE_TASK_MODE, CT_KWARGS, CT_LEGACY

from . import debug as _debug
from .asyncgens import AsyncGenerators
from .clock import Clock
from .errors import ExceptionHandling, default_report, logger
from .executor import ThreadJobs
from .interfaces import IoSource, ReadyQueue, Resource, Schedule, Supervisor
from .metrics import CallbackObserver, Instruments, LoopMetrics, SlowCallbackHook
from .scheduler import MAX_POLL_TIMEOUT, LoopBase, Scheduler, trim
from .timers import TimerQueue
from .waker import make_waker

#: pytest hides these frames from a testing report's traceback (`debug.hide_from_reports`).
__tracebackhide__ = _debug.hide_from_reports

__all__ = [
    "MAX_POLL_TIMEOUT",
    "CoreLoop",
    "IoSource",
    "Resource",
    "Schedule",
    "Supervisor",
]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


def _stop_when_done(fut: asyncio.Future[Any]) -> None:
    """run_until_complete's done-callback: stop the future's loop."""
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # run_forever() is already unwinding with this exception.
            return
    fut.get_loop().stop()


class CoreLoop(LoopBase):
    """The core loop: `Scheduler` (with its native twin in front, where built), wired."""

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
        if type(self).time is not Scheduler.__dict__["time"]:
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
        self._threads_busy: Callable[[float], bool] | None = None
        self._stuck: Callable[[], None] | None = None
        #: A virtual clock's ``reach(deadline)``, if it has one: time moved
        #: forward to a timer's deadline before the timer runs
        #: (`Scheduler._wait_behind_thread_jobs`).
        self._clock_reach: Callable[[float], object] | None = (
            None if wait is None else getattr(clock, "reach", None)
        )
        #: The instant a timer has been due at, and for how many iterations.
        self._spin_at = -math.inf
        self._spins = 0
        if wait is not None:
            wait = self._wait_behind_thread_jobs
            if supervisor is not None:
                self._threads_busy = supervisor.threads_busy
                self._stuck = supervisor.stuck
        # How other threads' call_soon_threadsafe handles are queued: the
        # ready queue's append, or the schedule's admission, maybe watched.
        admit: Callable[[asyncio.Handle], None] = ready.append
        if schedule is not None:
            wait = schedule.attach(ready, wait, clock.now, self._head_deadline, self._waker.wake)
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
