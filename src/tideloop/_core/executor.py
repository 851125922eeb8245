"""ThreadJobs: the work a loop hands to other threads, and what it owes them.

Layer: core. A component the core loop builds (it needs the loop's schedule
and clock kind) and keeps as ``_jobs``; it holds no reference to the loop
(each call is given it), so it makes no cycle with it; the loop's public methods
``run_in_executor``, ``set_default_executor`` and
``shutdown_default_executor`` validate their arguments and delegate here.
Other layers reach it through the loop's ``_in_thread`` (a blocking call on
a helper thread of its own: a child's start, stat, bind to a path).

It owns:

- the default executor (a ``ThreadPoolExecutor`` made on first use, shut
  down without waiting when the loop closes);
- ``pending``: the jobs whose results have not reached their futures yet
  (``loop.metrics()``' ``executor_pending``). Counted *before* a job is
  submitted: it may run, and another thread read the metrics, before
  ``submit`` returns;
- ``running`` (only under a clock with a ``wait``: virtual time): a token
  per job whose thread has not yet *sent* its result: the executor's
  ``concurrent.futures.Future`` for a ``run_in_executor`` job, the loop's
  future for a helper thread's. The token is dropped by the thread right
  after its ``call_soon_threadsafe`` (or when the future is done). Without
  a supervisor the core does not let the clock jump while the set is
  non-empty; with one, the supervisor decides (it tells a job that computes
  from one blocked waiting for the program). A result sent but not yet
  admitted (a `Schedule` holding it, as a slow thread's) does not hold time
  still;
- under a `Schedule`, the numbering of executor jobs by submission order
  (``("job", loop, i)``: the program fixes it, arrival order it does not),
  and the chaining that hands every result to the schedule as a thread's.

Invariant: ``pending`` and ``running`` are written by the loop's thread,
except that a job's own thread discards its token from ``running`` (a set
operation, atomic under the GIL).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import warnings
from asyncio.futures import _copy_future_state  # type: ignore[attr-defined]
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .handles import Handle
from .interfaces import HandleOwner, Schedule, ThreadPoster

__all__ = ["ThreadJobs"]

_T = TypeVar("_T")


class JobsOwner(HandleOwner, ThreadPoster, Protocol):
    """What `ThreadJobs` needs of its loop."""

    def create_future(self) -> asyncio.Future[Any]: ...


class ThreadJobs:
    """The default executor, helper threads, and the accounting of their jobs."""

    __slots__ = (
        "_chained",
        "_schedule",
        "_wake",
        "default",
        "pending",
        "running",
        "shutdown_called",
    )

    def __init__(
        self,
        *,
        schedule: Schedule | None,
        virtual: bool,
        wake: Callable[[], object],
    ) -> None:
        self._schedule = schedule
        self._wake = wake
        self._chained = 0  # executor jobs submitted under the schedule
        self.default: concurrent.futures.ThreadPoolExecutor | None = None
        self.shutdown_called = False
        self.pending = 0
        #: Under virtual time: a token per thread job whose result is not sent yet.
        self.running: set[object] | None = set() if virtual else None

    # ------------------------------------------------------------------
    # run_in_executor

    def submit(
        self,
        loop: JobsOwner,
        executor: concurrent.futures.Executor | None,
        func: Callable[..., _T],
        args: tuple[Any, ...],
    ) -> asyncio.Future[_T]:
        """``run_in_executor`` after the loop's checks: submit, count, chain."""
        if executor is None:
            if self.shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            executor = self.default
            if executor is None:
                executor = self.default = concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix="asyncio"
                )
        self.pending += 1
        schedule = self._schedule
        try:
            job = executor.submit(func, *args)
            if schedule is None:
                fut = asyncio.wrap_future(job, loop=loop)  # type: ignore[arg-type]
            else:
                fut = self._chain_to_schedule(loop, job, schedule, func)
        except BaseException:
            self.pending -= 1
            raise
        running = self.running
        if running is not None:
            # Virtual time: the job holds the clock until its thread has sent
            # the result. The job's callbacks run in the order added, so this
            # one runs after the chaining callback has handed the result over.
            # The token is the executor's own future: a supervisor finds the
            # thread that runs it (``LoopView.thread_jobs``).
            running.add(job)
            job.add_done_callback(functools.partial(_discard, running, job))
            fut.add_done_callback(functools.partial(_discard, running, job))
        fut.add_done_callback(self._job_done)
        return fut

    def _chain_to_schedule(
        self,
        loop: JobsOwner,
        job: concurrent.futures.Future[_T],
        schedule: Schedule,
        func: Callable[..., object],
    ) -> asyncio.Future[_T]:
        """``wrap_future`` under a Schedule: the result always reaches the
        loop as a thread's result (`Schedule.admit_thread_result`), also when
        the job is already done (asyncio 3.14+ then sets the future at once,
        and earlier versions queue it from the loop's thread). The schedule
        is told the job's number and *func* first (`Schedule.job_submitted`)."""
        fut: asyncio.Future[_T] = loop.create_future()
        number = self._chained
        self._chained = number + 1
        schedule.job_submitted(number, func)
        wake = self._wake

        def job_done(job: concurrent.futures.Future[_T]) -> None:  # any thread
            if loop.is_closed():
                return
            handle = Handle(_copy_future_state, (job, fut), loop, None)
            schedule.admit_thread_result(handle, number)
            wake()

        def fut_done(fut: asyncio.Future[_T]) -> None:
            if fut.cancelled():
                job.cancel()

        fut.add_done_callback(fut_done)
        job.add_done_callback(job_done)
        return fut

    def _job_done(self, fut: asyncio.Future[Any]) -> None:
        self.pending -= 1
        running = self.running
        if running is not None:
            running.discard(fut)

    # ------------------------------------------------------------------
    # The default executor's end

    async def shutdown_default(self, loop: JobsOwner, timeout: float | None) -> None:
        """``shutdown_default_executor``: join its threads, waiting at most *timeout* s."""
        self.shutdown_called = True
        executor = self.default
        if executor is None:
            return
        future: asyncio.Future[None] = self.thread_job_future(loop)
        # Joining the pool's threads blocks, so a helper thread does it.
        thread = threading.Thread(target=self._join, args=(loop, executor, future))
        thread.start()
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            warnings.warn(
                f"The executor did not finishing joining its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=3,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _join(
        self,
        loop: JobsOwner,
        executor: concurrent.futures.ThreadPoolExecutor,
        future: asyncio.Future[None],
    ) -> None:
        try:
            executor.shutdown(wait=True)
            if not loop.is_closed():
                loop.call_soon_threadsafe(_set_result_unless_cancelled, future, None)
        except Exception as ex:
            if not loop.is_closed() and not future.cancelled():
                loop.call_soon_threadsafe(future.set_exception, ex)
        running = self.running
        if running is not None:
            running.discard(future)

    def close(self) -> None:
        """The loop closes: no more jobs; the default executor stops, unjoined."""
        self.shutdown_called = True
        executor = self.default
        if executor is not None:
            self.default = None
            executor.shutdown(wait=False)

    # ------------------------------------------------------------------
    # Helper threads of the loop's own

    async def in_thread(
        self,
        loop: JobsOwner,
        func: Callable[..., _T],
        args: tuple[Any, ...],
        *,
        undo: Callable[[_T], Awaitable[object]] | None,
        undo_unwatched: Callable[[_T], object] | None,
        name: str,
    ) -> _T:
        """``func(*args)`` on a helper thread of its own (see ``CoreLoop._in_thread``)."""
        future: asyncio.Future[_T] = self.thread_job_future(loop)

        def work() -> None:
            try:
                result = func(*args)
            except BaseException as exc:  # handed to the caller
                self._post(loop, future, None, exc)
            else:
                if not self._post(loop, future, result, None) and undo_unwatched:
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

    def _post(
        self,
        loop: ThreadPoster,
        future: asyncio.Future[Any],
        result: object,
        exc: BaseException | None,
    ) -> bool:
        """Hand a helper thread's outcome to *future*; False if the loop is closed."""
        try:
            loop.call_soon_threadsafe(_resolve, future, result, exc)
        except RuntimeError:
            return False  # the loop is closed: nobody waits any more
        running = self.running
        if running is not None:
            running.discard(future)  # sent: virtual time may move on
        return True

    def thread_job_future(self, loop: JobsOwner) -> asyncio.Future[Any]:
        """A future that a helper thread of ours completes, counted as an
        executor job until it is done (virtual time waits for it)."""
        future = loop.create_future()
        self.pending += 1
        running = self.running
        if running is not None:
            running.add(future)
        future.add_done_callback(self._job_done)
        return future


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
