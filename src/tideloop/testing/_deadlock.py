"""Deadlock: a virtual-time run that can never make progress again, reported.

Layer: testing. On the stdlib loop (or on real time) a program whose tasks
all wait for each other hangs until a test timeout kills it, with no word
of who waited for what. Under virtual time tideloop knows more: the core
asks the loop's `Supervisor` (``_supervisor.py``), which calls `check`,
where it would block with no callback ready, no timer and no executor job
in flight. `check` sees the loop only through its read-only `LoopView`. If, in addition,
nothing outside the loop can wake it, nothing ever will, and `check`
raises `Deadlock` out of ``run_forever`` with every task's await stack
(3.14's call graph where the interpreter has it), instead of hanging.

"Nothing outside can wake it" is decided conservatively; any of these
means the loop just waits, as before:

- another thread exists (it may call ``call_soon_threadsafe``), other than
  the loop's baseline and the idle workers of the loop's default executor.
  The baseline is the threads that looked busy when the loop was made (a
  test runner's: pytest-xdist's reader, pytest-timeout's timer; see
  ``tideloop.testing._threads``), less any that has since called
  ``call_soon_threadsafe`` on the loop. A thread idle then (waiting on a
  queue, an event, a select) counts: the program may wake it. The main
  thread always counts when the loop runs on another: it is the program's
  (it started the loop's thread, directly or not, as anyio's blocking
  portal does), and its look when the loop was made says nothing (busy
  starting the thread, it then waits for what the loop hands it, and calls
  into the loop after: anyio's suite under virtual time had this false
  alarm);
- a real fd is registered, by the program or by the loop for it (a
  socket, a pipe, a child process's pidfd may yet become ready); only the
  loop's waker (written by threads, above) and signal pipe (below) and
  simulated sockets (a `SimNetwork` delivers only through timers) do not
  count;
- a signal handler other than the one ``asyncio.Runner`` installs for
  SIGINT.

The report shows each task as its author knows it (``_where``): its name,
its coroutine, the program's own frames of its await chain (outermost
first, each with its line of source) and the library call it waits in.
The frames of asyncio and tideloop are left out, and counted, unless
``TIDELOOP_FULL_FRAMES=1`` asks for them (`_report.full_frames`); under
pytest, the frames of this check are hidden from the traceback the same
way (``__tracebackhide__``).

Invariant: `check` raises only when the loop would otherwise block forever;
it never changes what the loop does otherwise.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from tideloop._core.debug import FULL_FRAMES_ENV, full_frames
from tideloop._core.interfaces import LoopView

from . import _where
from ._report import hide_loop_frames, site_text, task_text

#: Stack frames shown per task.
_FRAMES = 8


class Deadlock(RuntimeError):
    """Every task waits, and nothing (no timer, thread, real fd, signal) can wake them."""

    #: A report: the loop's frames are hidden from its traceback under pytest.
    tideloop_report = True


Deadlock.__module__ = "tideloop.testing"  # where users import it from


def check(
    view: LoopView,
    baseline: AbstractSet[int] = frozenset(),
    simulated: Callable[[int], bool] | None = None,
) -> None:
    """Raise `Deadlock` if the loop *view* shows (about to block with no
    timer) can never wake.

    Threads in *baseline* (busy when the loop was made: pytest-xdist's and
    pytest-timeout's, say; see `runner_threads`) and the idle workers of the
    loop's default executor (an executor job in flight is counted by the
    core) are not taken for possible wakers; any other thread is, and the
    main thread always is when the loop runs on another. An fd for
    which *simulated* is true is a simulated socket (a `SimNetwork`
    delivers only through timers): it cannot wake the loop either.
    """
    __tracebackhide__ = hide_loop_frames  # pytest: the program's frames first
    idle_workers = view.executor_threads()
    current = threading.get_ident()
    main = threading.main_thread().ident
    for thread in threading.enumerate():
        ident = thread.ident
        if ident == current:
            continue
        if ident == main or (ident not in baseline and ident not in idle_workers):
            return
    # Every registered fd may yet fire (a child's pidfd is the loop's own
    # registration, and a child's exit wakes it) except the waker, which
    # only a thread writes, and the signal pipe, decided below: the view
    # leaves those two out.
    if any(simulated is None or not simulated(fd) for fd in view.watched_fds()):
        return
    if any(sig != signal.SIGINT for sig in view.signals()):
        return
    raise Deadlock(report(list(view.tasks()), view.time()))


def report(tasks: list[asyncio.Task[Any]], now: float, *, full: bool | None = None) -> str:
    """What each task waits for: the program's frames of its await chain
    (outermost first), and with *full* (default: `TIDELOOP_FULL_FRAMES`)
    every frame, asyncio's and tideloop's too, and the future it awaits."""
    if full is None:
        full = full_frames()
    lines = [
        f"deadlock at virtual time {now!r}: {len(tasks)} task(s) wait, and no timer, "
        "thread, real fd or signal can wake any of them"
    ]
    hidden = 0
    for task in sorted(tasks, key=lambda t: t.get_name()):
        lines.append(f"- {task_text(_where.task_words(task))}")
        chain, n = _await_chain(task, full)
        lines.extend(chain)
        hidden += n
    if hidden:
        lines.append(
            f"({hidden} frame(s) of asyncio and tideloop left out; {FULL_FRAMES_ENV}=1 shows them)"
        )
    return "\n".join(lines)


def _await_chain(task: asyncio.Task[Any], full: bool) -> tuple[list[str], int]:
    """The task's frames, from its coroutine's down to what it awaits, and how
    many were left out (the loop's own, without *full*)."""
    frames, awaited = _where.await_chain(task)
    lines: list[str] = []
    hidden = 0
    for frame in frames[:_FRAMES] if full else frames:
        if not full and _where.kind_of_file(frame.f_code.co_filename) in _where.LIBRARY:
            hidden += 1
            continue
        site = _where.site_of(frame)
        lines.append(f"    {site['function']} at {site_text(site)}")
    if full and isinstance(awaited, asyncio.Future):
        lines.append(f"    awaits {awaited!r}")
    return lines, hidden
