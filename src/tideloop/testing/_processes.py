"""ChildWatch: under virtual time, is a child process of the loop's at work?

Layer: top (``tideloop.testing``). The virtual clock jumps to the next timer
as soon as the loop is idle, and `ThreadWatch` holds it while a thread of
the program's may be about to hand the loop work. A child process the loop
started (``subprocess_exec``, ``create_subprocess_shell``) is the same kind
of actor: while it runs, it may be about to write to a pipe the loop reads
or to exit (the loop's pidfd). A 5 s timeout around ``await proc.wait()``
on a child that exits 30 ms later must not fire first: a real clock would
not (anyio's suite under virtual time did, twice).

Facts / what this means for us:

- The kernel shows each process's state in ``/proc/PID/stat``, the field
  after the command's closing parenthesis: ``R`` (running or ready to
  run: at work, or just woken by what the loop did, such as closing its
  stdin), ``D`` (in uninterruptible disk I/O: at work), ``S`` (asleep
  until something happens: a read of a pipe nobody writes, a ``select``,
  a ``sleep``), ``T`` and ``t`` (stopped), ``Z`` (exited, not reaped: its
  pidfd is ready, so the loop is not idle anyway), ``I`` (idle).
- So a child in ``R`` or ``D`` is *busy* and holds the clock; any other
  state is *idle*. Its descendants count as it does: a grandchild holds
  the pipes it inherited, and a child often waits for one (``Popen`` reads
  its grandchild's exec status, asleep, while the grandchild starts). The
  kernel lists each task's children in ``/proc/PID/task/TID/children``;
  only a process's main thread's are read (listing its threads is a
  directory read, a blocking call blockbuster fails on the loop's thread),
  so a child that a process's other thread started is not seen.
- A descendant outlives its parent (anyio's suite: a child starts a
  grandchild that keeps the child's pipes, and exits; the grandchild
  exits once the program closes its stdin). Re-parented, it is no longer
  below any child of the loop's, so each descendant seen is remembered
  (with its start time: a pid is reused) and watched until it exits.
- A child asleep on a timer of its own (``time.sleep`` in the child) is
  idle here: the clock may pass its wake-up, as it would for anything
  outside the loop's process that the loop cannot see.
- A child busy for `COMPUTE_GRACE` real seconds in a row (it computes for
  long) is let go of, with a `VirtualTimeWarning` naming it, until it is
  next seen idle: nothing hangs on a child.
- procfs answers at once; it is opened non-blocking (blockbuster fails a
  blocking read on a loop's thread). Where it is missing (not Linux), a
  child is idle: the clock moves as it did before this watch.

Invariant: the watch only ever delays a jump; it never moves time.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from time import perf_counter as _real_clock  # bound now: seeded_globals patches time.*

from ._threads import COMPUTE_GRACE, VirtualTimeWarning

__all__ = ["ChildWatch", "descendants", "process_state"]

#: States of a process at work (running or ready to run, disk I/O).
_BUSY_STATES = frozenset({b"R", b"D"})


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command's name (the state
    first, its start time 20th), or [] (no procfs, or no such process)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        stat = os.read(fd, 1024)
    except OSError:
        return []
    finally:
        os.close(fd)
    # "PID (comm) S ...": the state follows the last ")" (comm may hold one).
    return stat[stat.rfind(b")") + 1 :].split()


def process_state(pid: int) -> bytes | None:
    """The state letter of process *pid* in ``/proc/PID/stat``, or None
    (no procfs, or no such process)."""
    fields = _stat(pid)
    return fields[0] if fields else None


def _started(pid: int) -> bytes | None:
    """When process *pid* started (clock ticks since boot): a pid taken by
    another process has another."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else None


def descendants(pid: int) -> list[int]:
    """The processes below *pid* (children first), from procfs; [] where it
    cannot say. Each process's main thread's children: the children a
    process's other threads started are not seen (listing a process's
    threads is a directory read, which blockbuster fails on a loop's
    thread, as a blocking call)."""
    found: list[int] = []
    below = [pid]
    while below and len(found) < _MAX_DESCENDANTS:
        parent = below.pop()
        try:
            fd = os.open(f"/proc/{parent}/task/{parent}/children", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            text = os.read(fd, 4096)
        except OSError:
            text = b""
        finally:
            os.close(fd)
        for child in text.split():
            found.append(int(child))
            below.append(int(child))
    return found


#: At most this many descendants are looked at (a fork bomb is not waited for).
_MAX_DESCENDANTS = 64


class ChildWatch:
    """``watch(pids)`` is True while one of the child processes *pids*, or a
    descendant of one, is at work (see the module docstring), for at most
    *grace* real seconds of one child's busy spell."""

    __slots__ = ("_busy_since", "_family", "_grace", "_let_go")

    def __init__(self, *, grace: float = COMPUTE_GRACE) -> None:
        self._grace = grace
        #: descendant pid -> its start time: watched until it exits, though
        #: its parent exits first
        self._family: dict[int, bytes] = {}
        #: pid -> real time its current busy spell began
        self._busy_since: dict[int, float] = {}
        #: pids let go of (busy too long), until next seen idle
        self._let_go: set[int] = set()

    def __call__(self, pids: Iterable[int]) -> bool:
        now = _real_clock()
        busy = False
        seen = set()
        family = self._family
        groups = [(pid, [pid, *descendants(pid)]) for pid in pids]
        for _, group in groups:
            for below in group[1:]:
                if below not in family and (started := _started(below)) is not None:
                    family[below] = started
        for below, started in list(family.items()):
            if _started(below) != started:
                del family[below]  # exited (its pid free, or another's)
        orphans = [p for p in family if not any(p in group for _, group in groups)]
        groups.extend((p, [p]) for p in orphans)
        for pid, group in groups:
            seen.add(pid)
            states = [process_state(p) for p in group]
            if not any(state in _BUSY_STATES for state in states):
                self._busy_since.pop(pid, None)
                self._let_go.discard(pid)
                continue
            if pid in self._let_go:
                continue
            since = self._busy_since.setdefault(pid, now)
            if now - since <= self._grace:
                busy = True
                continue
            self._let_go.add(pid)
            del self._busy_since[pid]
            warnings.warn(
                f"virtual time moves on without child process {pid}: it looked busy "
                f"(running) for {now - since:.1f} s of real time; the clock no longer "
                "waits for it (until it is next seen idle)",
                VirtualTimeWarning,
                stacklevel=2,
            )
        for pid in [p for p in self._busy_since if p not in seen]:
            del self._busy_since[pid]
        self._let_go &= seen
        return busy
