"""Perturber: a seeded schedule that varies the orderings asyncio leaves open.

Layer: top (``tideloop.testing``). A `Perturber` is the core's `Schedule`
(``tideloop._core.run``), handed to ``Loop(schedule=...)``. The core asks it
for three things at construction and never consults it otherwise: the timer
queue's tie-break keys, where other threads' ``call_soon_threadsafe``
handles go, and a wait function around the clock's. A loop built without a
schedule runs none of this code.

The model (exactly what varies, and what never does)
----------------------------------------------------

asyncio fixes some orders and leaves others to the kernel, to thread
scheduling or to chance. A program that is correct on asyncio must be
correct under *every* choice of the open ones; a Perturber picks them
pseudo-randomly from its seed. It varies exactly these four, and nothing
else:

1. **Order of fds ready in the same poll.** The ``(fd, events)`` pairs one
   poll returns are shuffled before their callbacks are queued. (The kernel
   reports them in an order of its own.) An fd's reader still goes before
   its writer when both are ready: that is asyncio's fixed order.
2. **Deferring an fd's readiness.** Each ready fd is, with probability
   *defer_probability*, left out of this iteration's dispatch, at most
   *max_defer* iterations in a row; it is then dispatched. (The kernel may
   report readiness one poll later than it could.) Polls are level
   triggered, so a deferred fd is reported again; while any fd is deferred
   the loop does not block.
3. **Order of timers due at the same instant.** Timers with *equal*
   deadlines get seeded random tie-break keys instead of their scheduling
   order. (asyncio's heap orders them arbitrarily; tideloop's default is
   first scheduled, first run.) Timers with different deadlines still run in
   deadline order, each in the first iteration at or after its deadline.
4. **When other threads' callbacks are admitted.** A handle that another
   thread queues with ``call_soon_threadsafe`` (this includes every
   executor result: ``run_in_executor``, ``asyncio.to_thread``) waits in an
   inbox; at each iteration the inbox is, with probability
   *hold_probability*, held (or only an older part of it admitted), at most
   *max_hold* iterations for any handle. (A thread may be descheduled at
   any moment.) Under real time a holding iteration may block in the poller
   for up to *hold_time* seconds, so a held result can arrive after a timer
   that falls due meanwhile, as a slow thread's would. Under virtual time a
   holding iteration never blocks, so the clock never jumps past a held
   handle. Handles from one thread keep their order.

Never varied, because asyncio guarantees them: ``call_soon`` callbacks run
in FIFO order (including ``call_soon_threadsafe`` from the loop's own
thread, which goes straight to the ready queue); callbacks queued in one
iteration run after those already queued; I/O callbacks run before the
timers due in the same iteration; timers run in deadline order and never
before their deadline; signal handlers are queued as they arrive.

Reproducibility: each of the four kinds of decision draws from its own
random stream, derived from the seed, so the same seed makes the same
decisions whenever the program presents the same choices (same fds ready in
the same polls, same thread arrivals per iteration). A program that stays on
one loop with in-process loopback peers replays exactly; with threads or
out-of-process peers the decisions replay, but the real input they are
applied to can arrive differently (record/replay of real input is not
attempted). Not covered either: interleavings inside the kernel (partial
reads and writes happen as the kernel does them), the order in which
*other* threads run, and exhaustive search of orderings: a seed samples one
schedule; many seeds sample many.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
from collections.abc import Iterator
from typing import Final

from tideloop._core.clock import PollFn, WaitFn
from tideloop._core.handles import ReadyQueue

#: Defaults of the model's knobs (see the module docstring).
DEFER_PROBABILITY: Final = 0.25
MAX_DEFER: Final = 3
HOLD_PROBABILITY: Final = 0.5
MAX_HOLD: Final = 3
HOLD_TIME: Final = 0.01


def _stream(seed: int, kind: str) -> random.Random:
    # A str seed is hashed with SHA-512 by random.Random: stable across runs
    # and processes (unlike hash()), independent per kind.
    return random.Random(f"tideloop:{seed}:{kind}")


def _timer_keys(rng: random.Random) -> Iterator[int]:
    getrandbits = rng.getrandbits
    while True:
        yield getrandbits(62)


class Perturber:
    """A seeded `Schedule`: see the module docstring for what it varies."""

    __slots__ = (
        "_defer_p",
        "_deferred",
        "_fd_rng",
        "_held_for",
        "_hold_p",
        "_hold_time",
        "_inbox",
        "_inner",
        "_loop_thread",
        "_max_defer",
        "_max_hold",
        "_ready",
        "_thread_rng",
        "_timer_rng",
        "deferrals",
        "holds",
        "seed",
        "shuffles",
    )

    def __init__(
        self,
        seed: int,
        *,
        defer_probability: float = DEFER_PROBABILITY,
        max_defer: int = MAX_DEFER,
        hold_probability: float = HOLD_PROBABILITY,
        max_hold: int = MAX_HOLD,
        hold_time: float = HOLD_TIME,
    ) -> None:
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        for name, p in (
            ("defer_probability", defer_probability),
            ("hold_probability", hold_probability),
        ):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, not {p!r}")
        if max_defer < 0 or max_hold < 0 or not hold_time >= 0.0:
            raise ValueError("max_defer, max_hold and hold_time must not be negative")
        self.seed = seed
        self._fd_rng = _stream(seed, "fds")
        self._timer_rng = _stream(seed, "timers")
        self._thread_rng = _stream(seed, "threads")
        self._defer_p = defer_probability
        self._max_defer = max_defer
        self._hold_p = hold_probability
        self._max_hold = max_hold
        self._hold_time = hold_time
        #: fd -> iterations in a row it has been deferred (only fds deferred
        #: in the last iteration are here).
        self._deferred: dict[int, int] = {}
        #: Other threads' handles not admitted yet, oldest first. Appended
        #: from any thread, popped on the loop's (deque ops are atomic).
        self._inbox: collections.deque[asyncio.Handle] = collections.deque()
        self._held_for = 0
        self._loop_thread: int | None = None
        self._ready: ReadyQueue | None = None
        self._inner: WaitFn | None = None
        #: Decisions taken that changed something (for tests and reports).
        self.shuffles = 0
        self.deferrals = 0
        self.holds = 0

    def __repr__(self) -> str:
        return (
            f"<Perturber seed={self.seed} shuffles={self.shuffles} "
            f"deferrals={self.deferrals} holds={self.holds}>"
        )

    # ------------------------------------------------------------------
    # The core's Schedule protocol

    def timer_keys(self) -> Iterator[int]:
        return _timer_keys(self._timer_rng)

    def attach(self, ready: ReadyQueue, wait: WaitFn | None) -> WaitFn:
        if self._ready is not None:
            raise RuntimeError("a Perturber schedules one loop only; make one per loop")
        self._ready = ready
        self._inner = wait
        return self._wait

    def admit_threadsafe(self, handle: asyncio.Handle) -> None:
        ready = self._ready
        assert ready is not None, "attach() first"
        owner = self._loop_thread
        if owner is None or owner == threading.get_ident():
            # The loop's own thread: FIFO with call_soon, never held.
            ready.append(handle)
        else:
            self._inbox.append(handle)

    # ------------------------------------------------------------------
    # Once per iteration, where the loop blocks

    def _wait(self, poll: PollFn, timeout: float | None) -> list[tuple[int, int]]:
        self._loop_thread = threading.get_ident()
        inner = self._inner
        if self._deferred:
            timeout = 0.0  # deferred fds are ready: nothing to wait for
        elif self._inbox and timeout != 0.0:
            if inner is not None:
                timeout = 0.0  # virtual time must not pass a held handle
            elif timeout is None or timeout > self._hold_time:
                timeout = self._hold_time
        events = poll(timeout) if inner is None else inner(poll, timeout)
        if self._inbox:
            self._admit()
        if events or self._deferred:
            events = self._perturb(events)
        return events

    def _admit(self) -> None:
        inbox = self._inbox
        n = len(inbox)
        if self._held_for >= self._max_hold or self._thread_rng.random() >= self._hold_p:
            k = n
        else:
            k = self._thread_rng.randrange(n)  # 0 .. n-1: hold at least the newest
        if k < n:
            self.holds += 1
            self._held_for += 1
        append = self._ready.append  # type: ignore[union-attr]
        popleft = inbox.popleft
        for _ in range(k):
            append(popleft())
        if not inbox:
            self._held_for = 0

    def _perturb(self, events: list[tuple[int, int]]) -> list[tuple[int, int]]:
        rng = self._fd_rng
        if len(events) > 1:
            events = list(events)
            rng.shuffle(events)
            self.shuffles += 1
        previous = self._deferred
        deferred: dict[int, int] = {}
        kept: list[tuple[int, int]] = []
        max_defer = self._max_defer
        defer_p = self._defer_p
        for event in events:
            fd = event[0]
            count = previous.get(fd, 0)
            if count < max_defer and rng.random() < defer_p:
                deferred[fd] = count + 1
            else:
                kept.append(event)
        if deferred:
            self.deferrals += len(deferred)
        self._deferred = deferred
        return kept
