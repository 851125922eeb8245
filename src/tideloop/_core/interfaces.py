"""The typed interfaces between the core loop and everything around it.

Layer: core. Each `Protocol` here is one side of a seam, so that no module
imports `CoreLoop` only to name it in an annotation (that import made
circles: handles <-> the run loop), and so that what a part may ask of
the loop is written down and checked by mypy:

- `HandleOwner`: what asyncio's handles read of their loop;
- `ThreadPoster`: what a thread of the loop's may call on it;
- `LoopServices`: what transports and components ask of the loop: its
  public scheduling, futures, tasks and error reporting (asyncio's API, no
  private state beyond the debug flag the handles read);
- what the core is *given*: an `IoSource` (the fd registry: where it
  blocks and whose readiness it dispatches), `Resource`s it closes, an
  optional `Schedule` (``tideloop.testing``'s seeded perturbation) and an
  optional `Supervisor` (``tideloop.testing``'s watch over a virtual-time
  run: busy threads, deadlocks, per-callback checks).

Invariant: nothing here has behaviour; these are names for what the code
already does, so the pure loop and any other implementation of the core
present the same seams.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar, TypeVarTuple, Unpack

if TYPE_CHECKING:
    import concurrent.futures

    from .clock import WaitFn

__all__ = [
    "HandleOwner",
    "IoSource",
    "LoopServices",
    "LoopView",
    "ReadyQueue",
    "Resource",
    "Schedule",
    "Supervisor",
    "ThreadPoster",
    "TimerTie",
]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class ReadyQueue(Protocol):
    """The ready queue: handles whose callbacks run in the loop's next run phase.

    A ``collections.deque`` on the pure core, the native core's own ring
    (``_native.ReadyQueue``) on the native one; the fd registry, the timer
    queue and ``tideloop.testing`` use only these methods.
    """

    def append(self, handle: asyncio.Handle, /) -> None: ...

    def popleft(self) -> asyncio.Handle: ...

    def extend(self, handles: Iterable[asyncio.Handle], /) -> None: ...

    def clear(self) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[asyncio.Handle]: ...


class HandleOwner(Protocol):
    """What a handle reads of its loop (asyncio's ``Handle`` and ``TimerHandle``)."""

    #: The debug flag, read directly: asyncio's ``get_debug()`` is a call per handle.
    _debug: bool

    def get_debug(self) -> bool: ...

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None: ...


class ThreadPoster(Protocol):
    """What another thread may call on a loop: hand it a callback, see it closed."""

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle: ...

    def is_closed(self) -> bool: ...


class LoopServices(HandleOwner, ThreadPoster, Protocol):
    """What transports and components may ask of the loop they are handed.

    The public asyncio methods they call (including the ones higher method
    groups provide, such as ``sendfile`` for a stream transport's
    fallback), plus the debug flag.
    """

    slow_callback_duration: float

    def time(self) -> float: ...

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle: ...

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle: ...

    def create_future(self) -> asyncio.Future[Any]: ...

    def create_task(
        self, coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T], **kwargs: Any
    ) -> asyncio.Task[_T]: ...

    def call_exception_handler(self, context: dict[str, Any]) -> None: ...

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
    ) -> asyncio.Future[_T]: ...

    async def getaddrinfo(
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[tuple[Any, ...]]: ...

    async def sendfile(
        self,
        transport: asyncio.WriteTransport,
        file: IO[bytes],
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool = True,
    ) -> int: ...


class IoSource(Protocol):
    """What the run loop needs from the fd layer (the fd registry provides it)."""

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        """Block until fds are ready or *timeout* passes (None: no limit)."""
        ...

    def dispatch(self, events: list[tuple[int, int]]) -> None:
        """Queue the callbacks of the fds that *poll* reported ready."""
        ...

    def registrations(self) -> int:
        """Readers plus writers registered now (for ``loop.metrics()``)."""
        ...

    #: Registered fds whose readiness is an event of its own: all but the
    #: waker's. While it is 0 a poll that may not block can only report the
    #: waker, whose news (the ready queue grew) the loop sees anyway.
    polled: int

    def close(self) -> None: ...


class Resource(Protocol):
    """A component that holds kernel resources until the loop closes."""

    def close(self) -> None: ...


class TimerTie(Protocol):
    """A `Schedule`'s answer to where an armed timer goes (see `TimerQueue`)."""

    def __call__(self, handle: asyncio.TimerHandle, tied: Sequence[asyncio.TimerHandle]) -> int:
        """Where *handle* goes among *tied*, the timers already queued with its
        deadline in their firing order: an index ``0 .. len(tied)``. Called
        for every timer pushed; with *tied* empty the answer is not used."""
        ...


class Schedule(Protocol):
    """Decides the orderings asyncio leaves open (``tideloop.testing.Perturber``).

    The core consults it only through what it returns at construction, so a
    loop without one runs no schedule code at all. The calls that only
    *tell* it something (a timer armed with no tie, `job_submitted`,
    `bind`) let it name what it decides about in the program's terms
    (which line armed a timer, which function a job runs).
    """

    def timer_tie(self) -> TimerTie:
        """The function the timer queue asks for every timer pushed."""
        ...

    def bind(self, view: LoopView) -> None:
        """Once, when the loop is built: its read-only `LoopView`."""
        ...

    def job_submitted(self, job: int, func: Callable[..., object]) -> None:
        """The loop's *job*-th executor job (the number `admit_thread_result`
        gets) was submitted to run *func*. Called on the loop's thread, inside
        ``run_in_executor``: the caller's frames are the submitting code's."""
        ...

    def attach(
        self,
        ready: ReadyQueue,
        wait: WaitFn | None,
        now: Callable[[], float],
        deadline: Callable[[], float | None],
        wake: Callable[[], object],
    ) -> WaitFn:
        """Bind to a loop's ready queue; return the wait function the loop calls.

        *wait* is the clock's (None for real time: block in *poll*); *now*
        the loop's time; *deadline* the earliest timer's deadline (None
        without timers; it may be a cancelled timer's); *wake* wakes the
        loop from its poll (any thread). The returned function is called
        once per iteration, like a clock's wait, and returns the events the
        loop dispatches, in dispatch order.
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


class LoopView(Protocol):
    """A read-only look at a loop's state, for a `Supervisor` (``Loop.view``).

    Everything a deadlock check needs to decide that nothing outside the
    loop can wake it; nothing here changes the loop.
    """

    def time(self) -> float:
        """The loop's time."""
        ...

    def tasks(self) -> set[asyncio.Task[Any]]:
        """The loop's tasks that are not done."""
        ...

    def waker_fd(self) -> int:
        """The fd of the loop's waker (other threads' way to wake it)."""
        ...

    def watched_fds(self) -> set[int]:
        """Registered fds that some event outside the loop may make ready:
        every reader's and writer's but the loop's own waker and signal pipe."""
        ...

    def fd_handles(self, fd: int) -> tuple[asyncio.Handle | None, asyncio.Handle | None]:
        """The handles registered to read and to write *fd* (None: none), to
        name whoever uses it (a transport, a server's accept, a connect)."""
        ...

    def timers(self) -> list[asyncio.TimerHandle]:
        """The queued timers that are not cancelled, in no particular order."""
        ...

    def signals(self) -> set[int]:
        """The signals with a handler installed through the loop."""
        ...

    def executor_threads(self) -> set[int]:
        """Thread idents of the default executor's workers (idle or not)."""
        ...

    def pending_thread_jobs(self) -> int:
        """Executor and helper-thread jobs whose results have not arrived."""
        ...

    def thread_jobs(self) -> list[object]:
        """Under virtual time, the jobs whose threads have not sent their results:
        the executor's ``concurrent.futures.Future`` of each ``run_in_executor``
        job, the loop's future of each helper thread's."""
        ...

    def children(self) -> set[int]:
        """The pids of the loop's child processes that have not exited (or
        whose exit the loop has not seen yet)."""
        ...


class Supervisor(Protocol):
    """A watch over a loop's run, given at construction (``tideloop.testing``).

    The core calls it only at these points, all bound at construction, so a
    loop without one runs none of its code:

    - `bind` once, with the loop's `LoopView`, before anything else;
    - `threads_busy` under virtual time, before the clock would jump by
      *jump* seconds (to the next timer): True means a thread (an executor
      job's among them) may be about to hand the loop work within that
      time, so the loop polls in real time for a short slice and asks
      again; False lets the clock move, thread jobs in flight or not
      (without a supervisor, a job in flight holds the clock);
    - `stuck` under virtual time, where the loop would block with no
      callback ready, no timer and no thread job: it may raise (out of
      ``run_forever``) to report that nothing can ever happen again;
    - `admit`: it may wrap the function that queues another thread's
      ``call_soon_threadsafe`` handles, to see who calls it.
    """

    def bind(self, view: LoopView) -> None: ...

    def threads_busy(self, jump: float) -> bool: ...

    def stuck(self) -> None: ...

    def admit(
        self, admit: Callable[[asyncio.Handle], None]
    ) -> Callable[[asyncio.Handle], None]: ...
