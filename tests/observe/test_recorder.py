"""The recorder (``tideloop._recorder``): what it records, in the program's terms, and
that it changes nothing it should not.

Each test runs a real program on a real tideloop loop (loopback sockets,
threads, a child process) or on a simulated network under virtual time,
and checks the events against what the program did: which task, which line
of this file, which fd and peer, which job, which pid, and which event made
which happen (``cause``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import itertools
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

import tideloop
from tideloop import testing
from tideloop._recorder import Event, Recorder, Site, TaskInfo, await_chain, site_text
from tideloop.testing import SimNetwork

T = TypeVar("T")

HERE = __file__


def line_of(marker: str) -> int:
    """The line of this file that contains *marker* (a comment at an await)."""
    with open(HERE) as f:
        for number, text in enumerate(f, 1):
            if marker in text and "line_of(" not in text:
                return number
    raise AssertionError(f"no line with {marker!r}")


def run_recorded(
    main: Callable[[], Coroutine[Any, Any, T]], recorder: Recorder | None = None
) -> tuple[Recorder, T]:
    rec = Recorder() if recorder is None else recorder
    loop = tideloop.new_event_loop()
    try:
        rec.attach(loop)
        result = loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_default_executor())
        rec.detach(loop)
    finally:
        loop.close()
    return rec, result


def by_seq(rec: Recorder) -> dict[int, Event]:
    return {e.seq: e for e in rec.events}


def kinds(rec: Recorder, kind: str) -> list[Event]:
    return sorted((e for e in rec.events if e.kind == kind), key=lambda e: (e.real, e.seq))


def steps_of(rec: Recorder, name: str) -> list[Event]:
    return [e for e in kinds(rec, "step") if e.name.startswith(name + " ")]


def main_steps(rec: Recorder) -> list[Event]:
    """The steps of the first task that ran (run_until_complete's main)."""
    steps = kinds(rec, "step")
    return [e for e in steps if e.task == steps[0].task]


# ----------------------------------------------------------------------
# Tasks


def test_steps_name_the_task_its_coroutine_and_the_lines_it_waited_at() -> None:
    async def child() -> str:
        await asyncio.sleep(0.001)  # marker: child-sleep
        await asyncio.sleep(0)  # marker: child-yield
        return "ok"

    async def main() -> str:
        return await asyncio.create_task(child(), name="the-child")  # marker: main-awaits

    rec, result = run_recorded(main)
    assert result == "ok"
    steps = steps_of(rec, "the-child")
    assert [s.args["outcome"] for s in steps] == ["await", "yield", "done"]
    assert all(s.args["coro"].endswith("child") for s in steps)
    first, second, last = steps
    assert first.args["suspended"] == Site(HERE, line_of("marker: child-sleep"), first.args["coro"])
    assert first.args["waits_in"] == "asyncio.sleep"
    assert second.args["resumed"] == first.args["suspended"]
    assert second.args["suspended"].line == line_of("marker: child-yield")
    assert last.args["suspended"] is None and last.args["resumed"].line == line_of("child-yield")
    # All on one task, numbered; its info adds up the steps.
    assert len({s.task for s in steps}) == 1
    info = rec.tasks[first.task]
    assert isinstance(info, TaskInfo)
    assert (info.name, info.steps, info.self_wakes, info.outcome) == ("the-child", 3, 1, "done")
    assert info.started_seen and info.wakeups == 2
    assert info.busy == pytest.approx(sum(s.dur for s in steps))
    assert main_steps(rec)[0].args["suspended"].line == line_of("marker: main-awaits")


def test_a_step_points_at_what_woke_it() -> None:
    async def waiter(fut: asyncio.Future[int]) -> int:
        return await fut  # marker: waits-for-future

    async def setter(fut: asyncio.Future[int]) -> None:
        await asyncio.sleep(0)
        fut.set_result(7)  # marker: resolves

    async def main() -> int:
        fut = asyncio.get_running_loop().create_future()
        w = asyncio.create_task(waiter(fut), name="waiter")
        s = asyncio.create_task(setter(fut), name="setter")
        await s
        return await w

    rec, result = run_recorded(main)
    assert result == 7
    seqs = by_seq(rec)
    last_waiter = steps_of(rec, "waiter")[-1]
    # The waiter's last step was queued by the setter's step that resolved the future.
    cause = seqs[last_waiter.cause]
    assert cause.kind == "step" and cause.name.startswith("setter ")
    assert cause.args["outcome"] == "done"
    # The setter's own second step was its own doing (a bare yield).
    setter_steps = steps_of(rec, "setter")
    assert seqs[setter_steps[1].cause] == setter_steps[0]
    assert setter_steps[0].args["outcome"] == "yield"
    # A task's first step was queued by the step that created it.
    assert seqs[steps_of(rec, "waiter")[0].cause] == main_steps(rec)[0]


def test_failed_and_cancelled_outcomes_and_a_failure_stays_unretrieved() -> None:
    reported: list[dict[str, Any]] = []

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def sleeps() -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: reported.append(ctx))
        t = asyncio.create_task(fails(), name="fails")
        s = asyncio.create_task(sleeps(), name="sleeps")
        await asyncio.sleep(0.01)
        s.cancel()
        await asyncio.sleep(0)
        assert t.done() and s.cancelled()
        del t
        gc.collect()  # the failed task, never retrieved, is reported now

    rec, _ = run_recorded(main)
    assert steps_of(rec, "fails")[-1].args["outcome"] == "error"
    assert steps_of(rec, "sleeps")[-1].args["outcome"] == "cancelled"
    # Recording did not retrieve the exception: asyncio still reported it.
    assert [ctx["message"] for ctx in reported] == ["Task exception was never retrieved"]
    errors = kinds(rec, "error")
    assert [e.name for e in errors] == ["Task exception was never retrieved"]
    assert errors[0].args["task_name"] == "fails" and "boom" in errors[0].args["exception"]
    assert list(rec.errors) == errors


def test_await_chain_lists_every_frame_outermost_first() -> None:
    chains: list[tuple[Site, ...]] = []

    async def inner() -> None:
        await asyncio.sleep(0.01)  # marker: inner-sleep

    async def outer() -> None:
        await inner()  # marker: outer-awaits

    async def main() -> None:
        t = asyncio.create_task(outer())
        await asyncio.sleep(0.001)
        chains.append(await_chain(t))
        await t

    run_recorded(main)
    (chain,) = chains
    assert [s.func for s in chain[:3]] == [
        "test_await_chain_lists_every_frame_outermost_first.<locals>.outer",
        "test_await_chain_lists_every_frame_outermost_first.<locals>.inner",
        "sleep",
    ]
    assert chain[0].line == line_of("marker: outer-awaits")
    assert chain[1].line == line_of("marker: inner-sleep")
    assert site_text(chain[0]).startswith("test_recorder.py:")


# ----------------------------------------------------------------------
# Timers, I/O, jobs, subprocesses


def test_timers_name_the_line_that_armed_them_and_the_step_they_woke() -> None:
    fired: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.002, lambda: fired.append(loop.time()))  # marker: call-later
        loop.call_at(loop.time() + 0.5, fired.append, -1.0).cancel()  # marker: call-at
        await asyncio.sleep(0.01)  # marker: sleep-timer

    rec, _ = run_recorded(main)
    timers = kinds(rec, "timer")
    assert [t.args["site"].line for t in timers] == [
        line_of("marker: call-later"),
        line_of("marker: call-at"),
        line_of("marker: sleep-timer"),
    ]
    assert timers[0].args["delay"] == 0.002 and timers[0].name.startswith("timer 0.002 s")
    assert timers[1].args["delay"] == pytest.approx(0.5, abs=1e-3)
    assert timers[2].name == "sleep 0.01 s"
    assert len({t.args["timer"] for t in timers}) == 3
    seqs = by_seq(rec)
    timer_callbacks = [c for c in kinds(rec, "callback") if c.args["source"] == "timer"]
    # The cancelled one never fired; the two others did, each pointing at its arming.
    assert sorted(seqs[c.cause].args["site"].line for c in timer_callbacks) == [
        line_of("marker: call-later"),
        line_of("marker: sleep-timer"),
    ]
    assert all(c.args["lag"] >= 0 for c in timer_callbacks)
    sleep_fired = next(c for c in timer_callbacks if seqs[c.cause] == timers[2])
    assert sleep_fired.args["timer"] == timers[2].args["timer"]
    last_main = main_steps(rec)[-1]
    assert last_main.cause == sleep_fired.seq and last_main.args["outcome"] == "done"


def test_io_readiness_names_the_fd_the_peer_and_wakes_the_reading_task() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main() -> tuple[int, int, bytes]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        own_port = writer.get_extra_info("sockname")[1]
        writer.write(b"ping\n")
        line = await reader.readline()  # marker: client-reads
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return port, own_port, line

    rec, (port, client_port, line) = run_recorded(main)
    assert line == b"ping\n"
    ios = kinds(rec, "io")
    targets = {e.args["target"] for e in ios}
    # The server's side reads from the client's port; the client's from the server's.
    assert f"127.0.0.1:{client_port}" in targets and f"127.0.0.1:{port}" in targets
    assert any(t.startswith("Loop._accept_connection on 127.0.0.1:") for t in targets)
    assert all(e.args["mode"] in ("read", "write") and e.args["fd"] > 2 for e in ios)
    seqs = by_seq(rec)
    # The client's read: readiness -> the transport's read callback -> the main task.
    reading = line_of("marker: client-reads")
    woke = next(
        s for s in main_steps(rec) if s.args["resumed"] and s.args["resumed"].line == reading
    )
    callback = seqs[woke.cause]
    assert callback.kind == "callback" and callback.args["source"] == "io"
    readiness = seqs[callback.cause]
    assert readiness.kind == "io" and readiness.args["target"] == f"127.0.0.1:{port}"
    assert callback.args["fd"] == readiness.args["fd"] and callback.args["mode"] == "read"
    # The transport's callback names it; the task waited in the call it made.
    assert callback.args["transport"] == f"127.0.0.1:{port}"
    before_read = next(s for s in main_steps(rec) if s.args["suspended"] == woke.args["resumed"])
    assert before_read.args["waits_in"] == "StreamReader.readline"


def test_timers_and_jobs_name_the_call_the_program_made() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.001)  # marker: api-sleep
        fut = loop.create_future()
        loop.call_later(0.001, fut.set_result, 1)  # marker: api-call-later
        await fut
        async with asyncio.timeout(5):  # marker: api-timeout
            await asyncio.to_thread(len, "abc")  # marker: api-to-thread
        await loop.run_in_executor(None, len, "abc")  # marker: api-run-in-executor

    rec, _ = run_recorded(main)
    timers = {t.args["site"].line: t.args["api"] for t in kinds(rec, "timer")}
    assert timers == {
        line_of("marker: api-sleep"): "asyncio.sleep",
        line_of("marker: api-call-later"): "loop.call_later",
        line_of("marker: api-timeout"): "asyncio.timeout",
    }
    jobs = kinds(rec, "job")
    assert [(j.args["site"].line, j.args["api"], j.args["func"]) for j in jobs] == [
        (line_of("marker: api-to-thread"), "asyncio.to_thread", "len"),
        (line_of("marker: api-run-in-executor"), "loop.run_in_executor", "len"),
    ]


def test_a_timer_armed_by_a_callback_with_no_line_of_the_program_has_no_site() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        # The program's line queues the callback; what arms the timer is the
        # loop's call, with nothing of the program's above it.
        loop.call_soon(functools.partial(loop.call_later, 0.001, fut.set_result, 5))
        return await fut

    rec, value = run_recorded(main)
    assert value == 5
    (timer,) = [t for t in kinds(rec, "timer") if t.args["delay"] == 0.001]
    assert timer.args["site"] is None and timer.args["api"] == "loop.call_later"
    assert by_seq(rec)[timer.cause].kind == "callback"


def test_what_queues_a_handle_itself_names_its_cause() -> None:
    """`Recorder.queued` and `note(cause=)`: the extension point tideloop.testing's
    schedule uses for the thread results it holds and queues later."""
    rec = Recorder()
    ran: list[int] = []

    async def main() -> tuple[Event | None, Event | None]:
        loop = asyncio.get_running_loop()
        arrival = rec.note(loop, "arrived", "a thread's result arrives")
        assert arrival is not None
        handle = loop.call_soon(ran.append, 1)
        rec.queued(loop, handle, arrival.seq, "thread")
        later = rec.note(loop, "held", "named by its cause", cause=arrival.seq)
        await asyncio.sleep(0)
        return arrival, later

    rec, (arrival, later) = run_recorded(main, rec)
    assert ran == [1] and arrival is not None and later is not None
    assert later.cause == arrival.seq and later.args == {}
    (delivered,) = [c for c in kinds(rec, "callback") if c.args["callback"] == "list.append"]
    assert delivered.cause == arrival.seq and delivered.args["source"] == "thread"
    # Every task the events name can be looked up by its number.
    step = kinds(rec, "step")[0]
    info = rec.task_info(step.task)
    assert info is not None and info.number == step.task and rec.task_info(10**9) is None


def test_a_threads_call_soon_threadsafe_is_always_the_threads() -> None:
    """The loop may run the handle before the wrapper has noted it: still "thread"."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        got: list[int] = []

        def add(i: int) -> None:
            got.append(i)
            if len(got) == 300:
                done.set_result(None)

        def produce() -> None:
            for i in range(300):
                loop.call_soon_threadsafe(add, i)

        thread = threading.Thread(target=produce)
        thread.start()
        await done
        thread.join()
        return len(got)

    rec, count = run_recorded(main)
    assert count == 300
    added = [c for c in kinds(rec, "callback") if c.args["callback"].endswith("add")]
    assert len(added) == 300 and {c.args["source"] for c in added} == {"thread"}


def test_executor_jobs_record_submission_run_and_result() -> None:
    # The job waits until the loop has taken its future (run_in_executor
    # returned): its result then reaches the loop from the job's thread,
    # however slow the machine (a job done before that would hand its
    # result over from the loop's own thread).
    taken = threading.Event()

    def work(x: int) -> int:
        taken.wait(10)
        time.sleep(0.005)
        return x * 2

    def fails() -> None:
        raise KeyError("no")

    async def main() -> int:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, work, 21)  # marker: submit
        taken.set()
        value = await future
        with pytest.raises(KeyError):
            await loop.run_in_executor(None, fails)
        return value

    rec, value = run_recorded(main)
    assert value == 42
    jobs = kinds(rec, "job")
    runs = kinds(rec, "job-run")
    assert [j.args["func"] for j in jobs] == [
        "test_executor_jobs_record_submission_run_and_result.<locals>.work",
        "test_executor_jobs_record_submission_run_and_result.<locals>.fails",
    ]
    assert jobs[0].args["site"].line == line_of("marker: submit")
    assert [r.args["ok"] for r in runs] == [True, False]
    assert [r.cause for r in runs] == [j.seq for j in jobs]
    assert runs[0].dur >= 0.004 and runs[0].thread != jobs[0].thread
    assert jobs[0].task == main_steps(rec)[0].task
    # The result reached the loop through a thread-safe callback caused by the job.
    arrivals = [c for c in kinds(rec, "callback") if c.args["source"] == "thread"]
    assert {c.cause for c in arrivals} >= {jobs[0].seq}


class PicklingExecutor(concurrent.futures.Executor):
    """Runs jobs inline, after pickling the function as a process pool would."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        fn = pickle.loads(pickle.dumps(fn))
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_a_job_for_an_executor_that_pickles_is_handed_over_unwrapped() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(PicklingExecutor(), pow, 3, 4)

    rec, value = run_recorded(main)
    assert value == 81
    assert kinds(rec, "job") == [] and kinds(rec, "job-run") == []


def test_subprocesses_record_spawn_and_exit() -> None:
    async def main() -> int:
        proc = await asyncio.create_subprocess_exec(  # marker: spawn
            sys.executable, "-c", "raise SystemExit(3)", stdout=subprocess.DEVNULL
        )
        return await proc.wait()

    rec, code = run_recorded(main)
    assert code == 3
    (spawn,) = kinds(rec, "spawn")
    (exit_,) = kinds(rec, "exit")
    assert spawn.args["program"] == sys.executable
    assert spawn.args["site"].line == line_of("marker: spawn")
    assert exit_.args == {"pid": spawn.args["pid"], "returncode": 3}
    assert exit_.real >= spawn.real + spawn.dur


# ----------------------------------------------------------------------
# The loop's structure


def test_iterations_tile_the_run_and_polls_sit_inside_them() -> None:
    async def main() -> None:
        for _ in range(3):
            await asyncio.sleep(0.002)

    rec, _ = run_recorded(main)
    iterations = kinds(rec, "iteration")
    assert len(iterations) >= 4
    for a, b in itertools.pairwise(iterations):
        assert b.real == pytest.approx(a.real + a.dur, abs=1e-9)
        assert b.args["n"] == a.args["n"] + 1
    assert sum(i.args["ran"] for i in iterations) == len(kinds(rec, "step")) + len(
        kinds(rec, "callback")
    )
    polls = kinds(rec, "poll")
    blocking = [p for p in polls if p.args["timeout"]]
    assert len(blocking) >= 3 and all(p.dur >= 0 for p in polls)
    assert sum(i.args["blocked"] for i in iterations) >= 0.004
    for poll in polls:
        holder = [i for i in iterations if i.real <= poll.real <= i.real + i.dur]
        assert holder, poll


def test_a_slow_callback_is_kept_with_its_task() -> None:
    async def blocks() -> None:
        time.sleep(0.06)

    async def main() -> None:
        await asyncio.create_task(blocks(), name="blocker")

    rec, _ = run_recorded(main, Recorder(slow=0.05))
    (slow,) = rec.slow
    assert slow.name.startswith("blocker ") and slow.args["slow"] and slow.dur >= 0.06


def test_note_records_an_event_of_ones_own_caused_by_the_running_callback() -> None:
    rec = Recorder()
    notes: list[Event | None] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        notes.append(rec.note(loop, "message", "a -> b", size=3))

    run_recorded(main, rec)
    (note,) = kinds(rec, "message")
    assert notes == [note]
    assert note.args == {"size": 3} and note.name == "a -> b"
    step = kinds(rec, "step")[0]
    assert note.cause == step.seq and note.task == step.task


def test_note_on_a_loop_not_recorded_is_none() -> None:
    rec = Recorder()
    loop = tideloop.new_event_loop()
    try:
        assert rec.note(loop, "message", "nobody listens") is None
    finally:
        loop.close()


def test_limit_keeps_the_latest_events() -> None:
    async def main() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    rec, _ = run_recorded(main, Recorder(limit=10))
    assert len(rec.events) == 10 and rec.dropped > 0
    assert rec.events[-1].kind == "iteration"
    with pytest.raises(ValueError, match="limit"):
        Recorder(limit=-1)


def test_subscribers_see_events_as_they_happen() -> None:
    seen: list[str] = []
    rec = Recorder(limit=0)
    rec.subscribe(lambda e: seen.append(e.kind))

    async def main() -> None:
        await asyncio.sleep(0)

    run_recorded(main, rec)
    assert "step" in seen and "iteration" in seen
    assert rec.events == []


def test_events_false_records_only_task_statistics_slow_steps_and_errors() -> None:
    rec = Recorder(events=False, slow=0.03)
    infos: list[TaskInfo] = []

    async def spins() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        time.sleep(0.04)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert "call_soon" not in vars(loop) and "call_exception_handler" in vars(loop)
        t = asyncio.create_task(spins(), name="spinner")
        await asyncio.sleep(0.001)
        info = rec.info_of(t)
        assert info is not None
        infos.append(info)
        await t

    run_recorded(main, rec)
    assert rec.events == []
    (info,) = infos
    assert (info.name, info.steps, info.self_wakes) == ("spinner", 6, 5)
    assert [e.name.split()[0] for e in rec.slow] == ["spinner"]


# ----------------------------------------------------------------------
# Attaching and detaching


def hooks(loop: tideloop.Loop) -> dict[str, Any]:
    return {
        "dict": sorted(k for k in vars(loop) if not k.startswith("_")),
        "poll": loop._poll,
        "dispatch": loop._dispatch,
        "recorder": loop._instruments.recorder,
        "timed": loop._instruments.timed,
    }


def test_detaching_puts_the_loop_back_as_it_was() -> None:
    loop = tideloop.new_event_loop()
    try:
        before = hooks(loop)
        assert before["dispatch"] == loop._fds.dispatch and not before["timed"]
        one, two = Recorder(), Recorder(events=False)
        one.attach(loop)
        two.attach(loop)
        two.attach(loop)  # twice is once
        assert loop._instruments.timed and "call_soon" in vars(loop)
        assert one.loops == [loop] and one.loop_number(loop) == two.loop_number(loop) > 0
        one.detach(loop)
        assert "call_soon" not in vars(loop) and loop._dispatch == loop._fds.dispatch
        assert loop._instruments.timed  # two still records
        two.detach()
        assert hooks(loop) == before
    finally:
        loop.close()


def test_an_entry_point_replaced_after_attaching_is_left_to_its_owner() -> None:
    loop = tideloop.new_event_loop()
    seen: list[str] = []
    try:
        rec = Recorder()
        rec.attach(loop)
        ours = loop.call_exception_handler

        def theirs(context: dict[str, Any]) -> None:
            seen.append(context["message"])
            ours(context)

        loop.call_exception_handler = theirs  # type: ignore[method-assign]
        loop.set_exception_handler(lambda _l, ctx: seen.append("handled"))
        rec.detach(loop)
        assert loop.call_exception_handler is theirs
        loop.call_exception_handler({"message": "after"})
        assert seen == ["after", "handled"]
        assert kinds(rec, "error") == []
    finally:
        loop.close()


def test_recording_every_new_loop() -> None:
    async def main() -> None:
        await asyncio.sleep(0)

    rec = Recorder()
    with rec.recording():
        tideloop.run(main())
        tideloop.run(main())
    assert len({e.loop for e in kinds(rec, "step")}) == 2
    assert rec.loops == []


def test_a_stdlib_loop_or_a_closed_loop_cannot_be_recorded() -> None:
    rec = Recorder()
    loop = asyncio.SelectorEventLoop()
    try:
        with pytest.raises(TypeError, match="tideloop loop"):
            rec.attach(loop)
    finally:
        loop.close()
    closed = tideloop.new_event_loop()
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        rec.attach(closed)


def test_recording_changes_no_result_and_no_error() -> None:
    """The same program, recorded or not: the same outputs, in the same order,
    and the same errors from the entry points the recorder wraps."""

    async def program(log: list[object]) -> None:
        loop = asyncio.get_running_loop()

        async def worker(n: int) -> None:
            for i in range(3):
                log.append((n, i))
                await asyncio.sleep(0)

        loop.call_soon(log.append, "soon")
        log.append(await loop.run_in_executor(None, pow, 2, 10))
        loop.call_later(0.001, log.append, "later")
        await asyncio.sleep(0.002)
        await asyncio.gather(*(worker(n) for n in range(3)))
        for bad in (
            lambda: loop.call_later(None, print),  # type: ignore[arg-type]
            lambda: loop.call_at("x", print),
            lambda: loop.call_soon(print, 1, contxt=1),  # type: ignore[call-arg]
        ):
            try:
                bad()
            except Exception as exc:
                log.append((type(exc).__name__, str(exc)))
        with pytest.raises(TypeError):
            await loop.run_in_executor(None, 42)  # type: ignore[arg-type]

    def run(record: bool) -> list[object]:
        log: list[object] = []
        loop = tideloop.new_event_loop()
        rec = Recorder()
        try:
            if record:
                rec.attach(loop)
            loop.run_until_complete(program(log))
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            rec.detach()
            loop.close()
        return log

    assert run(True) == run(False)


def test_debug_mode_runs_recorded() -> None:
    async def main() -> int:
        await asyncio.sleep(0)
        return 1

    loop = tideloop.new_event_loop()
    loop.set_debug(True)
    rec = Recorder()
    try:
        rec.attach(loop)
        assert loop.run_until_complete(main()) == 1
        rec.detach()
    finally:
        loop.close()
    assert [s.args["outcome"] for s in kinds(rec, "step")] == ["yield", "done"]


def test_attaching_from_another_thread_while_it_runs() -> None:
    """The console's way: attach in the loop's thread through call_soon_threadsafe."""
    loop = tideloop.new_event_loop()
    rec = Recorder()
    started = threading.Event()

    async def main() -> None:
        started.set()
        for _ in range(200):
            await asyncio.sleep(0.001)
            if rec.events:
                break

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))
    thread.start()
    try:
        started.wait(5)
        loop.call_soon_threadsafe(rec.attach, loop)
    finally:
        thread.join(10)
        rec.detach()
        loop.close()
    assert kinds(rec, "step")


# ----------------------------------------------------------------------
# A simulated run (tideloop.testing): virtual time, simulated peers


def test_a_simulated_run_is_recorded_in_virtual_time_with_simulated_peers() -> None:
    rec = Recorder()
    net = SimNetwork()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(echo, "0.0.0.0", 5432)
        try:
            await asyncio.sleep(3600)
        finally:
            server.close()

    async def main() -> bytes:
        rec.attach(asyncio.get_running_loop())
        server = net.spawn("db", serve())
        await asyncio.sleep(5)  # marker: virtual-sleep
        reader, writer = await asyncio.open_connection("db", 5432)
        writer.write(b"hi\n")
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        rec.detach()
        return line

    real_start = time.monotonic()
    assert testing.run(main(), network=net) == b"hi\n"
    assert time.monotonic() - real_start < 5
    sleep_timer = next(t for t in kinds(rec, "timer") if t.name == "sleep 5 s")
    assert sleep_timer.args["site"].line == line_of("marker: virtual-sleep")
    fired = next(c for c in kinds(rec, "callback") if c.cause == sleep_timer.seq)
    assert fired.time - sleep_timer.time == pytest.approx(5.0, abs=1e-6)
    targets = {e.args["target"] for e in kinds(rec, "io")}
    assert "10.0.0.1:5432" in targets, targets
