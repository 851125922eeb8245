"""Liveness: `leads_to` properties, and livelocks told apart from deadlocks.

Layer: testing. Both watch a loop through its public callback observers
(``loop.add_callback_observer``: the observer runs after every callback,
and one that raises stops the loop, as ``always`` does).

- ``leads_to(p, q, within=s)``: from now until the returned function is
  called, whenever *p* holds after a callback, *q* must hold (after that
  callback or a later one) within *s* seconds of loop time; otherwise the
  loop stops with `PropertyViolation`, naming the callback after which *p*
  became true and when. A timer at the deadline wakes the loop so that a
  run which goes quiet is still caught at the deadline.
- **Livelock.** A *deadlock* is a run that can never wake: every task
  waits and nothing can wake them (`Deadlock`, from the loop's
  supervisor). A *livelock* is a run that never stops working and never
  gets anywhere: tasks keep stepping (retrying, polling, backing off) and
  no declared progress point (`progress`) is reached. With
  ``livelock_after=N`` (``tideloop.testing.run``, ``new_event_loop``,
  ``explore``, the pytest plugin), `LivelockWatch` raises `Livelock` when
  N seconds of loop time pass without a `progress` call and tasks stepped
  at two instants or more within the last N seconds (a task that wakes
  once after a long sleep is not busy), or when the loop spins at one
  instant of virtual time for `SPIN_STEPS` task steps without one (a busy
  loop never lets virtual time move). The report names the tasks that
  stepped in that time (with their hosts on a `SimNetwork`), the await
  sites each cycled through (and how often), where each waits now, and
  the tasks that did not step.

`progress()` is a no-op anywhere else (no watch on the running loop, or no
running loop), so it can stay in code that ships. Call it from the loop's
thread (a task or a callback).

Invariant: a watch raises at most once per loop and only from its
observer; it then stops observing, so the cleanup that follows (cancelling
the tasks) runs unwatched.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import collections
import os
import sysconfig
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from tideloop._core.debug import full_frames
from tideloop._loop import Loop
from tideloop._versions import FUTURE_AWAIT_CODE

from . import _where
from ._deadlock import _await_chain
from ._properties import PropertyViolation, _describe, _name
from ._sim import SimNetwork

#: Task steps at one instant of virtual time, without a progress point,
#: that count as a livelock (a busy loop: virtual time cannot move).
SPIN_STEPS: Final = 200_000

#: Await sites listed per task in a report.
_SITES: Final = 6


class Livelock(RuntimeError):
    """Tasks kept stepping, but no progress point was reached in time."""


def _step_owner(handle: asyncio.Handle) -> asyncio.Task[Any] | None:
    owner = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
    return owner if isinstance(owner, asyncio.Task) else None


#: Where library code lives: an await site there is named by the
#: innermost frame of the program's own code above it instead.
_LIBRARY: Final = tuple(
    os.path.normcase(os.path.abspath(p)) + os.sep
    for p in {sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.dirname(__file__))}
)


def _site(task: asyncio.Task[Any]) -> str | None:
    """Where the task waits now, in the program's terms: the innermost frame
    of its await chain outside the standard library and tideloop (the
    innermost of all when every frame is theirs), as ``function at file:line``."""
    awaited: Any = task.get_coro()
    innermost: FrameType | None = None
    own: FrameType | None = None
    depth = 0
    while awaited is not None and depth < 32:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None or frame.f_code is FUTURE_AWAIT_CODE:
            break
        innermost = frame
        # (Not os.path.abspath: this runs on the loop's thread, where its
        # getcwd() is a call blockbuster fails; code objects' names are
        # absolute already.)
        path = os.path.normcase(frame.f_code.co_filename)
        if not path.startswith(_LIBRARY):
            own = frame
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        depth += 1
    frame = own or innermost
    if frame is None:
        return None
    site = _where.site_of(frame)
    return f"{site['function']} at {site['where']}"


class LivelockWatch:
    """Raises `Livelock` on its loop (see the module docstring).

    *after*: seconds of loop time without a `progress` call, while tasks
    step, that make a livelock. *spin*: task steps at one instant that do.
    """

    def __init__(self, loop: Loop, after: float, *, spin: int = SPIN_STEPS) -> None:
        if not after > 0:
            raise ValueError(f"livelock_after must be > 0 seconds, not {after!r}")
        self._loop = weakref.ref(loop)
        self.after = after
        self.spin = spin
        self._start = loop.time()
        self._instant = self._start
        self._instant_steps = 0
        #: The instants tasks stepped at, within the last `after` seconds.
        self._recent: collections.deque[float] = collections.deque()
        self._steps: collections.Counter[asyncio.Task[Any]] = collections.Counter()
        self._sites: dict[asyncio.Task[Any], collections.Counter[str]] = {}
        self._progressed = False
        self._last: tuple[str, float] | None = None
        self._done = False
        loop.add_callback_observer(self._observe)
        _WATCHES[loop] = self

    def progress(self, label: str | None) -> None:
        loop = self._loop()
        self._progressed = True
        self._last = (label or "progress()", loop.time() if loop is not None else 0.0)

    def stop(self) -> None:
        """Stop watching (at most once)."""
        if self._done:
            return
        self._done = True
        loop = self._loop()
        if loop is not None:
            _WATCHES.pop(loop, None)
            try:
                loop.remove_callback_observer(self._observe)
            except ValueError:
                pass

    def _observe(self, handle: asyncio.Handle) -> None:
        loop = self._loop()
        if loop is None or self._done:
            return
        now = loop.time()
        if self._progressed:
            self._progressed = False
            self._start = now
            self._instant, self._instant_steps = now, 0
            self._recent.clear()
            self._steps.clear()
            self._sites.clear()
            return
        task = _step_owner(handle)
        if task is not None:
            self._steps[task] += 1
            site = _site(task) if not task.done() else None
            if site is not None:
                self._sites.setdefault(task, collections.Counter())[site] += 1
            if now == self._instant and self._recent:
                self._instant_steps += 1
            else:
                self._instant, self._instant_steps = now, 1
                self._recent.append(now)
        recent = self._recent
        while recent and recent[0] < now - self.after:
            recent.popleft()
        # Busy: tasks stepped at two instants or more within the last
        # `after` seconds (one wake-up after a long sleep is no livelock).
        if now - self._start >= self.after and len(recent) >= 2:
            self._raise(loop, now, f"no progress point for {now - self._start:g} s of loop time")
        if self._instant_steps >= self.spin:
            self._raise(
                loop,
                now,
                f"{self._instant_steps} task steps at loop time {now!r} without a progress "
                "point (a busy loop: time cannot move)",
            )

    def _raise(self, loop: Loop, now: float, what: str) -> None:
        self.stop()
        raise Livelock(self.report(loop, now, what))

    @staticmethod
    def _named(loop: Loop, task: asyncio.Task[Any]) -> str:
        """The task's name, and its host on a simulated network."""
        network = loop.network
        host = network.host_of(task) if isinstance(network, SimNetwork) else None
        return task.get_name() + (f" (on host {host})" if host is not None else "")

    def report(self, loop: Loop, now: float, what: str) -> str:
        stepped = sorted(self._steps.items(), key=lambda kv: (-kv[1], kv[0].get_name()))
        total = sum(n for _, n in stepped)
        lines = [
            f"livelock at loop time {now!r}: {what} (since {self._start!r}), while "
            f"{len(stepped)} task(s) kept stepping ({total} step(s)):"
        ]
        for task, count in stepped:
            state = "done" if task.done() else "waiting"
            lines.append(
                f"- {self._named(loop, task)}: {count} step(s), {state}; {task.get_coro()!r}"
            )
            sites = self._sites.get(task, collections.Counter())
            repeated = [(s, n) for s, n in sites.most_common(_SITES) if n > 1]
            if repeated:
                lines.append("    cycles through (where it was suspended, how often):")
                lines.extend(f"      {site}  x{n}" for site, n in repeated)
            if not task.done():
                lines.append("    waits now in:")
                chain, _ = _await_chain(task, full_frames())
                lines.extend("  " + line for line in chain)
        idle = sorted(
            (t for t in asyncio.all_tasks(loop) if t not in self._steps),
            key=lambda t: t.get_name(),
        )
        if idle:
            lines.append(f"{len(idle)} task(s) did not step in that time:")
            for task in idle:
                lines.append(f"- {self._named(loop, task)}: {task.get_coro()!r}")
                chain, _ = _await_chain(task, full_frames())
                lines.extend("  " + line for line in chain)
        if self._last is None:
            lines.append("no progress point was reached in this run (testing.progress())")
        else:
            label, at = self._last
            lines.append(f"the last progress point: {label} at loop time {at!r}")
        return "\n".join(lines)


_WATCHES: weakref.WeakKeyDictionary[Loop, LivelockWatch] = weakref.WeakKeyDictionary()


def progress(label: str | None = None) -> None:
    """Declare that the program got somewhere (a request served, a commit, a
    leader elected): a livelock watch (``livelock_after=``) resets its clock.
    Anywhere else it does nothing."""
    loop = asyncio.events._get_running_loop()
    watch = _WATCHES.get(loop) if isinstance(loop, Loop) else None
    if watch is not None:
        watch.progress(label)


def watch_livelocks(loop: Loop, after: float) -> LivelockWatch:
    """Watch *loop* for livelocks of *after* seconds (see `LivelockWatch`)."""
    return LivelockWatch(loop, after)


# ----------------------------------------------------------------------
# leads_to


class _LeadsTo:
    """One ``leads_to`` property on one loop."""

    def __init__(
        self,
        loop: Loop,
        p: Callable[[], object],
        q: Callable[[], object],
        within: float,
        label: str,
    ) -> None:
        self._loop = weakref.ref(loop)
        self.p, self.q, self.within, self.label = p, q, within, label
        #: (loop time p held at, the callback after which it did) while q is owed.
        self.owed: tuple[float, str] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.active = True

    def check(self, after: str) -> None:
        loop = self._loop()
        if loop is None or not self.active:
            return
        now = loop.time()
        if self.owed is not None:
            if self.q():
                self.owed = None
                self._disarm()
            elif now >= self.owed[0] + self.within:
                since, cause = self.owed
                self.stop()
                raise PropertyViolation(
                    f"leads_to({self.label}, within={self.within!r}): the first held after "
                    f"{cause}, at loop time {since!r}, and the second did not hold by "
                    f"{since + self.within!r} (checked until {now!r})"
                )
        if self.owed is None and self.p() and not self.q():
            self.owed = (now, after)
            self.timer = loop.call_at(now + self.within, _wake)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self._disarm()
        loop = self._loop()
        if loop is not None:
            try:
                loop.remove_callback_observer(self.observe)
            except ValueError:
                pass

    def observe(self, handle: asyncio.Handle) -> None:
        self.check(_describe(handle))


def _wake() -> None:
    """A leads_to deadline: the loop wakes, and its observer checks."""


def leads_to(
    p: Callable[[], object],
    q: Callable[[], object],
    *,
    within: float,
    name: str | None = None,
) -> Callable[[], None]:
    """Whenever *p* holds, *q* must hold within *within* seconds of loop time.

    Checked now and after every callback the loop runs, until the returned
    function is called; the first time *q* is late the loop stops with
    `PropertyViolation`. *name* names the pair in the report (default: the
    predicates' names).
    """
    if not within > 0:
        raise ValueError(f"within must be > 0 seconds, not {within!r}")
    loop = asyncio.get_running_loop()
    if not isinstance(loop, Loop):
        raise RuntimeError("leads_to needs a tideloop loop (tideloop.testing.run)")
    label = name or f"{_name(p)}, {_name(q)}"
    prop = _LeadsTo(loop, p, q, within, label)
    prop.check("the property was set")
    loop.add_callback_observer(prop.observe)
    return prop.stop


__all__ = ["SPIN_STEPS", "Livelock", "LivelockWatch", "leads_to", "progress", "watch_livelocks"]
