"""Deadlock: a virtual-time run that can never make progress again, reported.

Layer: testing. On the stdlib loop (or on real time) a program whose tasks
all wait for each other hangs until a test timeout kills it, with no word
of who waited for what. Under virtual time tideloop knows more: the core
calls `check` (``CoreLoop._stuck_hook``) where it would block with no
callback ready, no timer and no executor job in flight. If, in addition,
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
  queue, an event, a select) counts: the program may wake it;
- a real fd is registered, by the program or by the loop for it (a
  socket, a pipe, a child process's pidfd may yet become ready); only the
  loop's waker (written by threads, above) and signal pipe (below) and
  simulated sockets (a `SimNetwork` delivers only through timers) do not
  count;
- a signal handler other than the one ``asyncio.Runner`` installs for
  SIGINT.

Invariant: `check` raises only when the loop would otherwise block forever;
it never changes what the loop does otherwise.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Set as AbstractSet
from typing import Any

from tideloop._loop import Loop

from ._sim import SimNetwork

#: Stack frames shown per task.
_FRAMES = 8


class Deadlock(RuntimeError):
    """Every task waits, and nothing (no timer, thread, real fd, signal) can wake them."""


def check(loop: Loop, baseline: AbstractSet[int] = frozenset()) -> None:
    """Raise `Deadlock` if *loop* (about to block with no timer) can never wake.

    Threads in *baseline* (busy when the loop was made: pytest-xdist's and
    pytest-timeout's, say; see `runner_threads`) and the idle workers of the
    loop's default executor (an executor job in flight is counted by the
    core) are not taken for possible wakers; any other thread is.
    """
    executor = loop._default_executor
    idle_workers = {t.ident for t in getattr(executor, "_threads", ())}
    current = threading.get_ident()
    for thread in threading.enumerate():
        ident = thread.ident
        if ident != current and ident not in baseline and ident not in idle_workers:
            return
    network = getattr(loop, "_network", None)
    simulated = network.is_simulated if isinstance(network, SimNetwork) else lambda fd: False
    # Every registered fd may yet fire (a child's pidfd is the loop's own
    # registration, and a child's exit wakes it) except the waker, which
    # only a thread writes, and the signal pipe, decided below.
    fds = loop._fds
    own = {loop._waker.fileno(), loop._signals._sig_rfd}
    if any(not simulated(fd) and fd not in own for fd in fds.readers.keys() | fds.writers.keys()):
        return
    handlers = loop._signals.handlers
    if any(sig != signal.SIGINT for sig in handlers):
        return
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    # Reported once: the cleanup that follows (cancelling the tasks) may block as it likes.
    loop._stuck_hook = None
    raise Deadlock(report(tasks, loop.time()))


def report(tasks: list[asyncio.Task[Any]], now: float) -> str:
    """What each task waits for: its await stack, innermost last."""
    lines = [
        f"deadlock at virtual time {now!r}: {len(tasks)} task(s) wait, and no timer, "
        "thread, real fd or signal can wake any of them"
    ]
    graph = getattr(asyncio, "format_call_graph", None)  # Python 3.14+
    for task in sorted(tasks, key=lambda t: t.get_name()):
        lines.append(f"- {task.get_name()}: {task.get_coro()!r}")
        if graph is not None:
            lines.extend("    " + line for line in graph(task).splitlines()[1:])
            continue
        lines.extend(_await_chain(task))
    return "\n".join(lines)


def _await_chain(task: asyncio.Task[Any]) -> list[str]:
    """The coroutine frames from the task's own down to what it awaits.

    ``Task.get_stack`` shows a suspended coroutine's own frame only; the
    chain is followed through ``cr_await`` (and ``gi_yieldfrom`` for
    generator-based awaitables), as 3.14's call graph does.
    """
    lines: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(lines) < _FRAMES:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            break
        code = frame.f_code
        lines.append(f"    {code.co_qualname} at {code.co_filename}:{frame.f_lineno}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    if isinstance(awaited, asyncio.Future):
        lines.append(f"    awaits {awaited!r}")
    return lines
