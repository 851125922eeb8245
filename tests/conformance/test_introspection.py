"""Python 3.14's task introspection on each loop: the call graph, ``python -m asyncio ps``.

``asyncio.capture_call_graph()`` / ``print_call_graph()`` read a task's
awaiters; ``python -m asyncio ps PID`` / ``pstree PID`` read another
process's tasks from its memory (the remote debugging support of 3.14).
Both work on any loop whose tasks are asyncio's: each test runs the same
program on the stdlib loop and on tideloop and expects the same answer.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 14), reason="task introspection is new in Python 3.14"
)


def test_capture_call_graph(loop: asyncio.AbstractEventLoop) -> None:
    async def leaf(started: asyncio.Event, release: asyncio.Event) -> None:
        started.set()
        await release.wait()

    async def middle(started: asyncio.Event, release: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(leaf(started, release), name="the-leaf")

    async def main() -> tuple[list[str], list[str], str]:
        started, release = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(middle(started, release), name="the-middle")
        await started.wait()
        [leaf_task] = [t for t in asyncio.all_tasks() if t.get_name() == "the-leaf"]
        graph: Any = asyncio.capture_call_graph(leaf_task)  # type: ignore[attr-defined]
        frames = [entry.frame.f_code.co_name for entry in graph.call_stack]
        awaited_by = [g.future.get_name() for g in graph.awaited_by]
        out = io.StringIO()
        asyncio.print_call_graph(leaf_task, file=out)  # type: ignore[attr-defined]
        release.set()
        await task
        return frames, awaited_by, out.getvalue()

    frames, awaited_by, printed = loop.run_until_complete(main())
    assert frames[:2] == ["wait", "leaf"]  # innermost first: Event.wait, then leaf
    assert awaited_by == ["the-middle"]
    assert "the-leaf" in printed and "the-middle" in printed


PROGRAM = textwrap.dedent(
    """
    import asyncio, sys

    async def worker(ready):
        ready.set()
        await asyncio.sleep(3600)

    async def supervisor():
        ready = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(worker(ready), name="introspected-worker")
            await ready.wait()
            print("ready", flush=True)
            await asyncio.sleep(3600)

    async def main():
        await asyncio.create_task(supervisor(), name="introspected-supervisor")

    if sys.argv[1] == "tideloop":
        import tideloop
        factory = lambda: tideloop.new_event_loop(poller=sys.argv[2])
    else:
        factory = asyncio.SelectorEventLoop
    asyncio.run(main(), loop_factory=factory)
    """
)


@pytest.mark.parametrize("command", ["ps", "pstree"])
def test_asyncio_ps_and_pstree_read_a_running_program(loop_name: str, command: str) -> None:
    """``python -m asyncio ps|pstree PID`` lists the tasks of a program running on the loop."""
    kind, _, poller = loop_name.partition("-")
    program = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, kind, poller],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout is not None
        assert program.stdout.readline() == "ready\n"
        result = subprocess.run(
            [sys.executable, "-m", "asyncio", command, str(program.pid)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0 and "Permission" in result.stderr:
            pytest.skip(f"this machine refuses to read another process: {result.stderr!r}")
        assert result.returncode == 0, result.stderr
        assert "introspected-worker" in result.stdout
        assert "introspected-supervisor" in result.stdout
        if command == "ps":
            # One row per task, with the task that awaits it.
            [row] = [line for line in result.stdout.splitlines() if "introspected-worker" in line]
            assert "introspected-supervisor" in row
    finally:
        program.kill()
        program.communicate()
