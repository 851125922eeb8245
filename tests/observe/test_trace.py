"""Perfetto traces: ``tideloop.trace(FILE)`` and ``python -m tideloop --trace FILE``.

Every trace written here is checked against the trace-event format
(`trace_format.check`, written from the spec), and its content against
what the program did: tasks as tracks with their waits named by this file's
lines, callbacks on the loop thread inside iterations, I/O and timers,
executor jobs and subprocesses as async slices, flow arrows to the steps
they woke. The validator itself is tested on broken traces.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from trace_format import check, check_file, events

import tideloop
from children import python_env, run_python


def blocking_nap(seconds: float) -> None:
    """The executor job (a function of the program's: under --blockbuster,
    time.sleep itself is blockbuster's wrapper, named so)."""
    time.sleep(seconds)


async def workload() -> None:
    """Tasks, a server and a client on loopback, a timer, a job, a child."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def napper() -> None:
        await asyncio.sleep(0.002)  # marker: napper-sleeps

    loop = asyncio.get_running_loop()
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    nap = asyncio.create_task(napper(), name="napper")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x\n")
    assert await reader.readline() == b"x\n"
    writer.close()
    await writer.wait_closed()
    await loop.run_in_executor(None, blocking_nap, 0.003)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()
    await nap
    server.close()
    await server.wait_closed()


def load(path: Path) -> list[dict[str, Any]]:
    problems = check_file(path)
    assert not problems, "\n".join(problems[:20])
    return events(path.read_text())


def named(trace: list[dict[str, Any]], ph: str, cat: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in trace if e["ph"] == ph and (cat is None or cat in e.get("cat", "").split(","))
    ]


def test_a_trace_of_a_workload_is_well_formed_and_in_the_programs_terms(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with tideloop.trace(path) as trace:
        tideloop.run(workload())
    trace_events = load(path)
    assert trace.events_written == len(trace_events)
    pid = os.getpid()
    assert {e["pid"] for e in trace_events} == {pid}
    threads = {e["args"]["name"] for e in named(trace_events, "M") if e["name"] == "thread_name"}
    assert any(t.startswith("tideloop loop ") for t in threads), threads
    assert any(t.startswith("asyncio") for t in threads)  # the executor's worker
    # Iterations on the loop thread, with polls and callbacks inside.
    iterations = [e for e in named(trace_events, "X", "loop") if e["name"] == "iteration"]
    assert iterations and all(e["args"]["n"] > 0 for e in iterations)
    # Task steps named by task and coroutine; the napper's track and its wait.
    steps = named(trace_events, "X", "task")
    assert any(e["name"] == "napper workload.<locals>.napper" for e in steps)
    napper_track = [
        e
        for e in named(trace_events, "b", "task")
        if e["name"] == "napper workload.<locals>.napper"
    ]
    assert len(napper_track) == 1
    ident = napper_track[0]["id"]
    track = [e for e in trace_events if e.get("id") == ident and e["ph"] in "be"]
    waits = [e["name"] for e in track if e["ph"] == "b" and e["name"].startswith("await ")]
    assert any("test_trace.py:" in w and "(asyncio.sleep)" in w for w in waits), waits
    assert [e["args"]["outcome"] for e in track if e["ph"] == "e" and "args" in e] == ["done"]
    # I/O readiness and timers as instants, with the peer and the arming line.
    io = named(trace_events, "i", "io")
    assert any("127.0.0.1:" in e["name"] for e in io)
    timers = named(trace_events, "i", "timer")
    sleeps = [e for e in timers if e["name"] == "sleep 0.002 s"]
    assert any("test_trace.py:" in e["args"]["site"] for e in sleeps)
    # The executor job and the child as async slices; the job's run on its thread.
    jobs = named(trace_events, "b", "executor")
    assert [e["name"] for e in jobs] == ["job 1: blocking_nap"]
    (run,) = named(trace_events, "X", "executor")
    assert run["dur"] >= 3000 and run["tid"] != iterations[0]["tid"]
    (spawn,) = [e for e in named(trace_events, "b", "subprocess") if e["name"].startswith("exec ")]
    exit_ = [e for e in named(trace_events, "e", "subprocess") if e["name"] == spawn["name"]]
    assert exit_ and exit_[0]["args"]["returncode"] == 0
    # Wake-up arrows from the callback or step that woke a task.
    assert named(trace_events, "s", "wake") and named(trace_events, "f", "wake")


def test_what_is_open_at_the_end_is_ended_unfinished(tmp_path: Path) -> None:
    path = tmp_path / "open.json"
    loop = tideloop.new_event_loop()
    try:

        async def sleeper() -> None:
            await asyncio.sleep(3600)

        async def main() -> asyncio.Task[None]:
            t = asyncio.create_task(sleeper(), name="sleeper")
            await asyncio.sleep(0.001)
            return t

        with tideloop.trace(path, loop=loop):
            task = loop.run_until_complete(main())
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()
    trace_events = load(path)
    unfinished = [e for e in trace_events if e["ph"] == "e" and e.get("args", {}).get("unfinished")]
    names = {e["name"] for e in unfinished}
    assert "sleeper test_what_is_open_at_the_end_is_ended_unfinished.<locals>.sleeper" in names
    assert any(e["name"].startswith("await ") for e in unfinished)


def test_notes_become_instants_and_no_loop_means_an_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    loop = tideloop.new_event_loop()
    try:
        with tideloop.trace(path, loop=loop) as trace:

            async def main() -> None:
                trace.recorder.note(asyncio.get_running_loop(), "fault", "partition a|b", hosts=2)

            loop.run_until_complete(main())
    finally:
        loop.close()
    (fault,) = named(load(path), "i", "fault")
    assert fault["name"] == "partition a|b" and fault["args"] == {"hosts": 2}
    empty = tmp_path / "empty.json"
    with tideloop.trace(empty):
        pass
    assert [e["ph"] for e in load(empty)] == ["M"]


def test_python_m_tideloop_trace_writes_the_file_also_when_the_program_fails(
    tmp_path: Path,
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio

            async def main():
                await asyncio.sleep(0.001)
                raise SystemExit(3)

            asyncio.run(main())
            """
        )
    )
    out = tmp_path / "prog.json"
    env = python_env()
    done = run_python("-m", "tideloop", "--trace", out, script, env=env, timeout=60)
    assert done.returncode == 3, done.stderr
    trace_events = load(out)
    assert any(e["name"] == "Task-1 main" for e in named(trace_events, "X", "task"))
    nowhere = tmp_path / "no" / "x.json"
    bad = run_python("-m", "tideloop", "--trace", nowhere, script, env=env, timeout=60)
    assert bad.returncode == 2 and "--trace: cannot write" in bad.stderr
    missing = run_python("-m", "tideloop", "--trace", env=env, timeout=60)
    assert missing.returncode == 2 and "--trace needs a file name" in missing.stderr


# ----------------------------------------------------------------------
# The validator catches what it should


def base(**fields: Any) -> dict[str, Any]:
    return {"name": "x", "pid": 1, "tid": 1, "ts": 0, **fields}


@pytest.mark.parametrize(
    ("trace", "problem"),
    [
        ([base(ph="Q")], "unknown phase"),
        ([base(ph="X")], "X without a dur"),
        ([base(ph="X", dur=10), base(ph="X", ts=5, dur=10)], "without nesting"),
        ([base(ph="B")], "never ended"),
        ([base(ph="E")], "E without B"),
        ([base(ph="B"), base(ph="E", name="y", ts=1)], "ends B"),
        ([base(ph="b", cat="c")], "without cat and id"),
        ([base(ph="b", cat="c", id=1)], "never ended"),
        ([base(ph="b", cat="c", id=1), base(ph="e", cat="c", id=1, name="y", ts=2)], "ends b"),
        ([base(ph="e", cat="c", id=1)], "without b"),
        ([base(ph="i", s="x")], "instant scope"),
        ([base(ph="f", cat="c", id=1)], "one s first"),
        ([base(ph="s", cat="c", id=1, ts=5), base(ph="f", cat="c", id=1, ts=1)], "one s first"),
        ([base(ph="M", name="thread_name")], "without args.name"),
        ([base(ph="C", args={"v": "a"})], "non-numeric"),
        ([base(ph="X", dur=1, pid="1")], "pid is not an integer"),
        ([base(ph="X", dur=1, ts=-1)], "ts is not a number"),
    ],
)
def test_the_validator_rejects_malformed_traces(trace: list[dict[str, Any]], problem: str) -> None:
    problems = check(trace)
    assert any(problem in p for p in problems), problems


def test_the_validator_accepts_a_well_formed_trace() -> None:
    trace = [
        base(ph="M", name="thread_name", args={"name": "main"}),
        base(ph="X", dur=10),
        base(ph="X", ts=2, dur=3),
        base(ph="X", ts=10, dur=1),
        base(ph="B", ts=20),
        base(ph="E", ts=21),
        base(ph="b", cat="c", id="a", ts=1),
        base(ph="b", cat="c", id="a", name="inner", ts=2),
        base(ph="e", cat="c", id="a", name="inner", ts=3),
        base(ph="e", cat="c", id="a", ts=4),
        base(ph="s", cat="w", id=1, ts=1),
        base(ph="f", cat="w", id=1, ts=2, bp="e"),
        base(ph="i", s="g"),
        base(ph="C", args={"v": 1}),
    ]
    assert check(trace) == []
    assert events(json.dumps({"traceEvents": trace})) == trace
