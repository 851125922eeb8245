"""The process's clocks on a virtual-time loop's thread: the loop's clock.

Layer: testing (above ``_clock`` and ``_patching``; the pytest plugin and
``tideloop.testing.run`` apply `loop_clocks` for a run on virtual time).

Facts:

- asyncio's ``loop.time()`` *is* ``time.monotonic()``, and code relies on
  it: aiohttp's connector stores ``loop.time()`` with a pooled connection
  and compares it with ``monotonic()`` for the keep-alive expiry; its cookie
  jar expires a ``Max-Age`` cookie by ``time.time()``. Under virtual time
  the loop's clock moves without real time passing, so a process clock
  that stays real disagrees with it: every pooled connection looks expired,
  and a one-second ``Max-Age`` outlives ``asyncio.sleep(1.1)``. That is a
  clock asyncio cannot produce.
- A thread other than the loop's (an executor job, a thread the program
  started) runs at real speed: its sleeps are real, and its timeouts
  (``queue.get(timeout=)``, a polling helper's deadline) must expire in
  real time, or a job that gives up after five seconds on the stdlib loop
  waits forever on a clock that moves only when that job is done.
- So does the standard library's code on any thread: its timed waits are
  waits on real primitives (``threading``, ``queue``, ``subprocess``,
  ``concurrent.futures``).

What this means for us: while `loop_clocks` is applied,

- ``time.monotonic()`` and ``time.monotonic_ns()`` return ``loop.time()``
  when called on a thread whose running loop is a tideloop loop with a
  `VirtualClock`; ``time.time()`` and ``time.time_ns()`` return that
  clock's `VirtualClock.wall` (the real time of day when the clock was
  made, moved as far as the clock has moved since). Under the pytest
  plugin the test's own thread reads the test's clock while no loop runs
  there too (before ``asyncio.run``, after it, in a sync fixture), so a
  value read in the loop and one read after it compare as on one clock.
  Everywhere else they are the real clocks: on other threads, on a
  thread whose loop is not running (but that test thread), under a
  running loop of another kind (its ``time()`` is the real clock's), and
  in calls from the standard library's, tideloop's or the test runner's
  own code;
- module-level references to them (``from time import monotonic``) in the
  loaded modules outside the standard library and tideloop are replaced too
  (`Patches.everywhere`);
- a simulated run's clocks (``seeded_globals``, applied inside) take over:
  once something else has replaced ``time.time`` or ``time.monotonic``,
  these functions return what it returns;
- ``datetime.now()`` and ``time.localtime()`` stay real: only a simulated
  run makes them virtual (``_wallclock``);
- code that waits for the clock inside one callback (a busy-wait on
  ``time.monotonic()`` on the loop's thread) does not wait forever: once
  many reads have found the clock unmoved for `SPIN_GRACE` real seconds,
  the clock moves by the real time spent, as a real one would have
  (`_moves_if_spun`).

Invariant: every replacement is undone when `loop_clocks` exits, and off a
running virtual-time loop (and off the thread given a clock) each function
returns what the real one would.
"""

from __future__ import annotations

import asyncio.events
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from tideloop._core.coreloop import CoreLoop

from ._clock import VirtualClock
from ._patching import Patches

_get_running_loop: Final = asyncio.events._get_running_loop
_real_clock: Final = time.perf_counter  # bound now, as the clocks below

#: The real clocks, bound now (before any run patches ``time``).
_REAL: Final[dict[str, Callable[[], Any]]] = {
    "monotonic": time.monotonic,
    "monotonic_ns": time.monotonic_ns,
    "time": time.time,
    "time_ns": time.time_ns,
}

_STDLIB: Final = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}

#: module name -> whether a call from it reads the real clocks.
_REAL_CALLERS: dict[str, bool] = {}

#: Set while one of these functions calls a replacement made after it, so
#: that a replacement which calls back into it gets the real clock.
_delegating = threading.local()


#: The test runner's own code reads the real clocks too (its reports'
#: timestamps, its timeouts).
_RUNNER: Final = frozenset({"_pytest", "pytest", "pluggy", "xdist", "execnet", "pytest_timeout"})


def _reads_real(module: str) -> bool:
    known = _REAL_CALLERS.get(module)
    if known is None:
        top = module.partition(".")[0]
        known = top in _STDLIB or top == "tideloop" or top in _RUNNER
        _REAL_CALLERS[module] = known
    return known


#: The thread `loop_clocks` was applied on, and the clock it reads while no
#: loop runs there (the pytest plugin's: the test's), innermost last.
_threads: list[tuple[int, Callable[[], VirtualClock | None]]] = []


def _clock_here() -> VirtualClock | None:
    """The clock this thread reads: its running virtual-time loop's, or, on
    the thread of a `loop_clocks` given one, that clock."""
    loop = _get_running_loop()
    if loop is not None:  # another kind of loop's time is the real clock's
        clock = loop.clock if isinstance(loop, CoreLoop) else None
        return clock if isinstance(clock, VirtualClock) else None
    if _threads:
        ident, clock_of = _threads[-1]
        if ident == threading.get_ident():
            return clock_of()
    return None


#: Real seconds one callback may read an unmoved virtual clock before it
#: moves at real speed (`_moves_if_spun`).
SPIN_GRACE: Final = 0.25

#: ... and as many reads of it, at least: a busy-wait reads it millions of
#: times a second, a run of callbacks that each read it once far fewer.
SPIN_READS: Final = 1_000

#: Per thread: [the clock, its time at the first read of a spell of reads
#: that found it unmoved, the real time of that read, reads since].
_spell = threading.local()


def _moves_if_spun(clock: VirtualClock) -> None:
    """Move *clock* at real speed for a callback that keeps reading it.

    Virtual time moves only while the loop waits, so code that waits for
    the clock inside one callback (``while time.monotonic() < end: ...``,
    a busy-wait, a retry loop with its own deadline) would wait forever,
    where a real clock moves by the callback's own duration. Once
    `SPIN_READS` reads or more have found the clock unmoved for
    `SPIN_GRACE` real seconds, it is advanced by the real time since the
    first of them, as a real clock would have moved. (The real clock is
    read once every `SPIN_READS` reads: a read costs no more than that.)"""
    at = clock.now()
    spell = getattr(_spell, "state", None)
    if spell is None or spell[0] is not clock or spell[1] != at:
        _spell.state = [clock, at, _real_clock(), 0]
        return
    spell[3] += 1
    if spell[3] % SPIN_READS:
        return
    now = _real_clock()
    spent = now - spell[2]
    if spent >= SPIN_GRACE:
        clock.advance(spent)
        _spell.state = [clock, clock.now(), now, 0]


def _make(name: str, mine: dict[str, Any]) -> Callable[[], Any]:
    real = _REAL[name]
    wall = name.startswith("time")
    ns = name.endswith("_ns")

    def clock() -> Any:
        current = getattr(time, name)
        if current is not mine[name] and not getattr(_delegating, "on", False):
            # Replaced after us (a simulated run's seeded_globals): its clock.
            _delegating.on = True
            try:
                return current()
            finally:
                _delegating.on = False
        virtual = _clock_here()
        if virtual is None or _reads_real(sys._getframe(1).f_globals.get("__name__", "")):
            return real()
        _moves_if_spun(virtual)
        seconds = virtual.wall() if wall else virtual.now()  # now() is loop.time()
        return int(seconds * 1e9) if ns else seconds

    clock.__name__ = clock.__qualname__ = name
    clock.__doc__ = (
        f"time.{name}(), or the virtual clock of this thread's running tideloop "
        "loop (tideloop.testing: the loop's clocks)"
    )
    return clock


@contextlib.contextmanager
def loop_clocks(clock: Callable[[], VirtualClock | None] | None = None) -> Iterator[None]:
    """Make ``time.monotonic()`` and ``time.time()`` follow a virtual-time
    loop on its own thread until exit (see the module docstring); with
    *clock*, on this thread while no loop runs here too, the clock it
    returns (None: the real ones)."""
    patches = Patches()
    if clock is not None:
        entry = (threading.get_ident(), clock)
        _threads.append(entry)
        patches.on_undo(lambda: _threads.remove(entry))
    mine: dict[str, Any] = {}
    for name in _REAL:
        mine[name] = _make(name, mine)
    try:
        for name, fn in mine.items():
            patches.attribute(time, name, fn)
        patches.everywhere(
            {id(_REAL[name]): (_REAL[name], fn) for name, fn in mine.items()},
            skip=_reads_real,
        )
        yield
    finally:
        patches.undo()


__all__ = ["loop_clocks"]
