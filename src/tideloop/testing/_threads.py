"""ThreadWatch: under virtual time, is another thread still working?

Layer: top (``tideloop.testing``). A virtual clock jumps to the next timer
as soon as the loop is idle. Work handed to the loop's own executor is
counted by the core (the clock waits until the job's thread has sent its
result). A thread the loop did not start (``threading.Thread`` of the
program's own, anyio's worker threads, a library's pool) is invisible to
that count: it may be one millisecond away from ``call_soon_threadsafe``,
and a jump past a 20 ms timeout would make it late on every run. The core
asks a `ThreadWatch` (through the loop's `Supervisor`, ``_supervisor.py``)
before each jump; while
it says a thread is busy, the loop polls in real time and asks again.

Facts / what this means for us:

- Python cannot tell a thread's state, but ``sys._current_frames()`` gives
  each thread's innermost Python frame. A thread blocked waiting for
  something (``Condition.wait`` without a timeout, under ``Event.wait``,
  ``Queue.get``, ``Future.result``; ``Thread.join``; an idle executor
  worker in ``_worker``; another loop's ``select``; ``accept``) shows one
  of a few known frames: that thread is *idle*, it will not act until
  someone else does. Anything else (Python code running, ``time.sleep``,
  a wait with a timeout such as ``threading.Timer``'s, a blocking ``recv``
  or C call made from the thread's own code) is *busy*.
- blockbuster wraps a lock's ``acquire`` (and other blocking calls) in a
  frame of its own, ``wrapper``: the wait is the frame below it.
- A thread notified in ``Condition.wait`` (its waiter taken out of the
  condition's list) is busy, though its frame is still the wait's: it is
  only waiting for the GIL, and a jump now would pass the work it was
  just handed (a job put on an idle worker's queue).
- The same holds for a thread in ``select`` or ``accept`` that the kernel
  has woken (a request the loop just sent to a fixture's server thread):
  its frame stays the wait's until the loop's thread lets go of the GIL.
  A ``select`` leaves its fds ready (level-triggered), so a zero-timeout
  poll(2) of them shows the wake (`_woken`); ``accept`` has already taken
  the connection off the queue, so before a jump past such a thread the
  watch leaves the GIL free for `SETTLE` real seconds and looks again.
- A thread that is starting or ending (in ``Thread._bootstrap_inner``,
  outside its target) counts as busy: a new thread has its whole target
  ahead of it, and an ending one is gone a moment later.
- So a busy thread holds the clock still; an idle one does not.
- A test runner's threads (pytest-xdist's channel reader in ``read``,
  pytest-timeout's timed wait) look busy all the time and never act on the
  loop. The threads that look busy when the loop is made are its
  *baseline* and are not counted (`runner_threads`); a thread idle then (a
  server thread a fixture started, waiting in ``select`` or ``accept``; a
  worker waiting on a queue) is, and so is a baseline thread from the
  moment it calls ``call_soon_threadsafe`` on the loop (`track_producers`
  wraps the loop's admission of thread handles and takes it out of the
  baseline: it is a producer of this loop's work).
- A thread can stay busy forever (a polling loop, a blocking ``recv`` on a
  socket nobody writes): after *grace* real seconds busy without a pause,
  it is ignored until it is next seen idle, so it costs one grace period,
  not an hour of real time for an hour of virtual sleep.

Invariant: the watch only ever delays a jump; it never moves time.
"""

from __future__ import annotations

import asyncio
import select
import selectors
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from time import perf_counter as _real_clock  # bound now: seeded_globals patches time.*
from types import FrameType
from typing import Any, Final

#: (file name ending, function name) of frames a thread waits in.
_IDLE_FRAMES: Final = frozenset(
    {
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("threading.py", "join"),
        ("threading.py", "acquire"),
        ("queue.py", "get"),
        ("queue.py", "put"),
        ("thread.py", "_worker"),  # concurrent.futures' idle worker
        ("selectors.py", "select"),
        ("socket.py", "accept"),
        ("socketserver.py", "serve_forever"),
    }
)

#: Real seconds a thread may look busy before the watch stops waiting for it.
GRACE: Final = 1.0


def _where(frame: FrameType) -> tuple[FrameType, tuple[str, str]]:
    """The frame a thread waits in, and its (file name, function name)."""
    code = frame.f_code
    if code.co_name == "wrapper" and code.co_filename.endswith("blockbuster.py"):
        # blockbuster (anyio's and aiohttp's suites run under it) wraps
        # blocking calls, a lock's acquire among them, in a Python frame:
        # the wait is the frame below.
        caller = frame.f_back
        if caller is not None:
            frame, code = caller, caller.f_code
    name = code.co_filename
    slash = name.rfind("/")
    return frame, (name[slash + 1 :], code.co_name)


def _idle(frame: FrameType) -> bool:
    return _idle_at(*_where(frame))


def _idle_at(frame: FrameType, where: tuple[str, str]) -> bool:
    if where not in _IDLE_FRAMES:
        return False
    if where == ("threading.py", "wait"):
        # Condition.wait (under Event.wait, Queue.get, Future.result):
        # with a timeout, the thread acts when it expires (threading.Timer,
        # a poll loop), so it is busy; without one it waits for others,
        # until notified: notify() takes its waiter out of the condition's
        # list before the thread runs again (it may wait for the GIL a
        # while, still in this frame), and from then on it is busy.
        local = frame.f_locals
        if local.get("timeout") is not None:
            return False
        condition, waiter = local.get("self"), local.get("waiter")
        waiters = getattr(condition, "_waiters", None)
        return waiter is None or waiters is None or waiter in waiters
    return True


#: The one wait that leaves no trace once woken: ``accept`` takes the
#: connection off the queue in the kernel, then waits for the GIL with the
#: frame unchanged, so nothing left to poll shows that it is about to act.
#: Before a jump past such a thread the watch leaves the GIL free for
#: `SETTLE` real seconds and looks again.
_ACCEPT: Final = ("socket.py", "accept")

#: poll(2) events that mean a waiting thread's call returns now (POLLNVAL,
#: an fd closed under it, does not: its owner closed it and moved on).
_WAKES: Final = select.POLLIN | select.POLLPRI | select.POLLOUT | select.POLLERR | select.POLLHUP


def _woken(frame: FrameType) -> bool:
    return _woken_at(*_where(frame))


def _woken_at(frame: FrameType, where: tuple[str, str]) -> bool:
    """Is a thread idle in ``select`` or ``accept`` already woken by its fds?

    The kernel wakes such a thread the moment data arrives (a request the
    loop just sent to a fixture's server thread), but its innermost frame
    stays the wait's until it has the GIL again, which the loop's thread
    holds: without this look at the fds themselves the clock would jump
    past the reply it is about to send. A zero-timeout poll(2) of the same
    fds answers without consuming anything (level-triggered, as selectors
    and accept are).
    """
    interest: dict[int, int] = {}
    if where in (("selectors.py", "select"), ("socketserver.py", "serve_forever")):
        local = frame.f_locals
        selector = local.get("self") if where[0] == "selectors.py" else local.get("selector")
        if isinstance(selector, selectors.BaseSelector):
            # None once closed, whatever typeshed says.
            mapping: Mapping[Any, selectors.SelectorKey] | None = selector.get_map()
            if mapping is None:
                return False
            try:
                keys = list(mapping.values())
            except RuntimeError:  # changed under us
                return False
            for key in keys:
                mask = 0
                if key.events & selectors.EVENT_READ:
                    mask |= select.POLLIN | select.POLLPRI
                if key.events & selectors.EVENT_WRITE:
                    mask |= select.POLLOUT
                interest[key.fd] = interest.get(key.fd, 0) | mask
    elif where == _ACCEPT:
        sock = frame.f_locals.get("self")
        if isinstance(sock, socket.socket) and (fd := sock.fileno()) >= 0:
            interest[fd] = select.POLLIN
    if not interest:
        return False
    poller = select.poll()
    for fd, mask in interest.items():
        poller.register(fd, mask)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(ev & _WAKES and not ev & select.POLLNVAL for _, ev in events)


#: Real seconds the GIL is left free before a jump past a thread in ``accept``.
SETTLE: Final = 0.002


def _pause() -> None:
    # poll(2) of nothing rather than time.sleep: the same pause, and not a
    # call blockbuster reports on a loop's thread. A poll object of its own:
    # two loops' threads may pause at once.
    select.poll().poll(SETTLE * 1000)


def runner_threads() -> set[int]:
    """The threads alive now that do not look idle: a loop's baseline.

    Taken when a loop is made. Threads started with ``_thread.start_new_thread``
    (execnet's, under pytest-xdist) are not in ``threading.enumerate()``; the
    interpreter's frame table has them all. A thread without a Python frame
    counts as busy.
    """
    frames = sys._current_frames()
    idents = {t.ident for t in threading.enumerate() if t.ident is not None}
    idents.update(frames)
    return {i for i in idents if i not in frames or not _idle(frames[i])}


def track_producers(
    admit: Callable[[asyncio.Handle], None], baseline: set[int]
) -> Callable[[asyncio.Handle], None]:
    """*admit* (a loop's admission of ``call_soon_threadsafe`` handles: the
    ready queue's append or a schedule's), wrapped to take the calling thread
    out of *baseline*. On testing loops only: one ``get_ident`` per call."""
    discard = baseline.discard
    get_ident = threading.get_ident

    def admit_from_a_producer(handle: asyncio.Handle) -> None:
        discard(get_ident())
        admit(handle)

    return admit_from_a_producer


class ThreadWatch:
    """``watch()`` is True while a thread not in *baseline* looks busy.

    *baseline* is shared with the loop's deadlock check and shrinks as
    `track_producers` finds producers among its threads.
    """

    __slots__ = ("_baseline", "_busy_since", "_grace", "_ignored")

    def __init__(self, baseline: AbstractSet[int], *, grace: float = GRACE) -> None:
        self._baseline = baseline
        self._grace = grace
        #: thread ident -> real time it was first seen busy (without a pause)
        self._busy_since: dict[int, float] = {}
        self._ignored: set[int] = set()

    def __call__(self) -> bool:
        busy, unsure = self._scan()
        if unsure and not busy:
            # A thread that has its connection but not the GIL yet would be
            # jumped past: leave the GIL free for a real slice, in which it
            # takes it and runs, then look again.
            _pause()
            busy = self._scan()[0]
        return busy

    def _scan(self) -> tuple[bool, bool]:
        """(a thread is busy, a thread's idle wait may hide a wake-up)."""
        # (No cheaper pre-check: threading's count misses threads started
        # with _thread, which the baseline has; this runs once per jump.)
        baseline = self._baseline
        me = threading.get_ident()
        busy_since = self._busy_since
        ignored = self._ignored
        now = _real_clock()
        busy = unsure = False
        seen: set[int] = set()
        for ident, innermost in sys._current_frames().items():
            if ident == me or ident in baseline:
                continue
            seen.add(ident)
            frame, where = _where(innermost)
            if _idle_at(frame, where) and not _woken_at(frame, where):
                busy_since.pop(ident, None)
                ignored.discard(ident)
                unsure = unsure or where == _ACCEPT
                continue
            if ident in ignored:
                continue
            since = busy_since.setdefault(ident, now)
            if now - since > self._grace:
                ignored.add(ident)
                del busy_since[ident]
                continue
            busy = True
        for ident in list(busy_since):
            if ident not in seen:
                del busy_since[ident]
        ignored &= seen
        return busy, unsure
