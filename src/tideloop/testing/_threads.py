"""ThreadWatch: under virtual time, is another thread still working?

Layer: top (``tideloop.testing``). A virtual clock jumps to the next timer
as soon as the loop is idle. Work handed to the loop's own executor is
counted by the core (the clock waits until the job's thread has sent its
result). A thread the loop did not start (``threading.Thread`` of the
program's own, anyio's worker threads, a library's pool) is invisible to
that count: it may be one millisecond away from ``call_soon_threadsafe``,
and a jump past a 20 ms timeout would make it late on every run. The core
asks a `ThreadWatch` (``CoreLoop._threads_busy``) before each jump; while
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
- A thread that is starting or ending (in ``Thread._bootstrap_inner``,
  outside its target) counts as busy: a new thread has its whole target
  ahead of it, and an ending one is gone a moment later.
- So a busy thread holds the clock still; an idle one does not. The threads
  alive when the loop was made (a test runner's) are never counted.
- A thread can stay busy forever (a polling loop, a blocking ``recv`` on a
  socket nobody writes): after *grace* real seconds busy without a pause,
  it is ignored until it is next seen idle, so it costs one grace period,
  not an hour of real time for an hour of virtual sleep.

Invariant: the watch only ever delays a jump; it never moves time.
"""

from __future__ import annotations

import sys
import threading
from time import perf_counter as _real_clock  # bound now: seeded_globals patches time.*
from types import FrameType
from typing import Final

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


def _idle(frame: FrameType) -> bool:
    code = frame.f_code
    name = code.co_filename
    slash = name.rfind("/")
    where = (name[slash + 1 :], code.co_name)
    if where not in _IDLE_FRAMES:
        return False
    if where == ("threading.py", "wait"):
        # Condition.wait (under Event.wait, Queue.get, Future.result):
        # with a timeout, the thread acts when it expires (threading.Timer,
        # a poll loop), so it is busy; without one it waits for others.
        return frame.f_locals.get("timeout") is None
    return True


class ThreadWatch:
    """``watch()`` is True while a thread not in *baseline* looks busy."""

    __slots__ = ("_baseline", "_busy_since", "_grace", "_ignored")

    def __init__(self, baseline: frozenset[int], *, grace: float = GRACE) -> None:
        self._baseline = baseline
        self._grace = grace
        #: thread ident -> real time it was first seen busy (without a pause)
        self._busy_since: dict[int, float] = {}
        self._ignored: set[int] = set()

    def __call__(self) -> bool:
        # (No cheaper pre-check: threading's count misses threads started
        # with _thread, which the baseline has; this runs once per jump.)
        baseline = self._baseline
        me = threading.get_ident()
        busy_since = self._busy_since
        ignored = self._ignored
        now = _real_clock()
        busy = False
        seen: set[int] = set()
        for ident, frame in sys._current_frames().items():
            if ident == me or ident in baseline:
                continue
            seen.add(ident)
            if _idle(frame):
                busy_since.pop(ident, None)
                ignored.discard(ident)
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
        return busy
