"""The registry of deliberate differences between tideloop and the stdlib loop.

Principle 1 of the design: any observable difference from the stdlib loop of
the running Python is a bug, unless it is written down here with its reason.
A test of such a behaviour is marked ``@pytest.mark.divergence(key)`` and runs
on tideloop only; `tests/conformance/test_divergences.py` checks, for each
entry that can be observed from a test, that the stdlib loop really does
behave differently (so an entry cannot outlive its reason).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

#: Does this Python's own shutdown_default_executor bound its wait with the
#: timeout (3.12.x later releases, 3.13+)? Read off the stdlib's code.
STDLIB_BOUNDED_EXECUTOR_SHUTDOWN = (
    "timeouts" in asyncio.BaseEventLoop.shutdown_default_executor.__code__.co_names
)


@dataclass(frozen=True)
class Divergence:
    what: str
    why: str


DIVERGENCES: dict[str, Divergence] = {
    "wakeup-fd-restored": Divergence(
        what="When the last signal handler is removed (or the loop closes), the wakeup fd "
        "installed before the loop's own is restored; asyncio resets it to -1.",
        why="The issue asks for it: a loop used inside a program (or another loop) that "
        "relies on its own signal.set_wakeup_fd must not silently disable it.",
    ),
    "equal-deadline-fifo": Divergence(
        what="Timers with the same deadline run in the order they were scheduled.",
        why="asyncio leaves the order undefined (heap order); a sequence number in the heap "
        "entry makes it deterministic at no cost. Programs cannot rely on asyncio's order, "
        "so nothing that works on asyncio breaks.",
    ),
    "handle-get-context-3.11": Divergence(
        what="On Python 3.11, handles have get_context() (added to asyncio in 3.12).",
        why="The issue asks handles to support get_context on every supported Python; "
        "adding a method cannot break code written for 3.11.",
    ),
    "factory-task-name-3.13.0": Divergence(
        what="On Python 3.13.0, create_task(coro) with a task factory and no name leaves "
        "the factory's name; 3.13.0 renames the task to 'None'.",
        why="A CPython 3.13.0 bug (create_task calls task.set_name(None)); later releases "
        "pass the name to the factory instead. Copying a bug would only confuse users.",
    ),
    "executor-shutdown-timeout": Divergence(
        what="shutdown_default_executor(timeout) stops waiting after *timeout* seconds, "
        "warns and leaves the threads behind, on every Python. asyncio 3.11 has no timeout "
        "argument, and early 3.12 releases (3.12.1 here) wait for the threads first and "
        "apply the timeout only to the final join, so a stuck executor hangs them.",
        why="The issue asks for shutdown_default_executor(timeout) on every supported "
        "Python; the bounded wait is what later CPython releases do and what the argument "
        "is for. An extra optional argument cannot break 3.11 code.",
    ),
    "call-at-rejects-non-numbers": Divergence(
        what="call_at/call_later reject a deadline that is not a real number with TypeError "
        "at the call; asyncio accepts it and fails later, inside the timer heap.",
        why="asyncio's failure happens while pushing onto the heap and can leave a broken "
        "entry behind that breaks every later timer; failing early loses nothing.",
    ),
}
