"""VirtualTimeWatch: the `Supervisor` a testing loop under virtual time is built with.

Layer: top (``tideloop.testing``). The core loop consults a supervisor only
through the seams it binds at construction (``_core/interfaces.py``):
before a virtual-time jump (`threads_busy`), where the loop would block
forever (`stuck`), and around the admission of other threads' handles
(`admit`). This one puts together what ``tideloop.testing`` knows about a
run that the loop does not:

- the threads that were busy when the loop was made are a test runner's
  (its *baseline*, `runner_threads`), until one calls
  ``call_soon_threadsafe`` on the loop (`track_producers`);
- a child process of the loop's that runs holds the clock too
  (`ChildWatch`): it may be about to write to the loop or exit;
- a thread of the program's that looks busy holds the clock still
  (`ThreadWatch`), an executor job's included: the core leaves the
  decision about jobs in flight here, so a job blocked waiting for the
  program lets the clock move (where the program will wake it), and one
  that tideloop cannot tell from a working one is let go of after a bounded
  real time, with a `VirtualTimeWarning`;
- a run that can never wake is a `Deadlock`, reported with every task's
  await chain (`_deadlock.check`), through the loop's read-only `LoopView`
  and the `SimNetwork` (whose sockets wake the loop only through timers).

Invariants: it never changes what the loop does but to delay a jump or to
raise `Deadlock`, which it does at most once per loop (the cleanup that
follows, cancelling the tasks, may block as it likes).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from tideloop._core.interfaces import LoopView

from . import _deadlock
from ._processes import ChildWatch
from ._report import hide_loop_frames
from ._sim import SimNetwork
from ._threads import ThreadWatch, runner_threads, track_producers

__all__ = ["VirtualTimeWatch"]


class VirtualTimeWatch:
    """Busy threads and deadlocks of one virtual-time loop (a `Supervisor`)."""

    __slots__ = ("_baseline", "_children", "_network", "_reported", "_threads", "_view")

    def __init__(self, network: SimNetwork | None = None) -> None:
        # Threads busy now (a test runner's) are not taken for the program's,
        # until one calls call_soon_threadsafe on this loop.
        self._baseline = runner_threads()
        self._threads = ThreadWatch(self._baseline)
        self._children = ChildWatch()
        self._network = network
        self._view: LoopView | None = None
        self._reported = False

    def bind(self, view: LoopView) -> None:
        self._view = view

    def threads_busy(self, jump: float) -> bool:
        view = self._view
        if view is None:
            return self._threads((), jump)
        return self._threads(view.thread_jobs(), jump) or self._children(view.children())

    def stuck(self) -> None:
        __tracebackhide__ = hide_loop_frames  # pytest: the program's frames first
        view = self._view
        if self._reported or view is None:
            return
        network = self._network
        self._baseline.refresh(sys._current_frames())
        try:
            _deadlock.check(view, self._baseline, None if network is None else network.is_simulated)
        except _deadlock.Deadlock:
            self._reported = True
            raise

    def admit(self, admit: Callable[[asyncio.Handle], None]) -> Callable[[asyncio.Handle], None]:
        return track_producers(admit, self._baseline)
