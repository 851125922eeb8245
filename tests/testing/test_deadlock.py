"""Deadlock reports: a virtual-time run that can never wake raises, naming what each task awaits.

The same programs hang forever on the stdlib loop (and on real time), so
there is nothing of asyncio's to compare with; what is checked is that the
report comes exactly when nothing can ever happen again, and never when a
thread, a real fd, a signal or a timer could still wake the loop.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import socket
import sys
import threading
import time

import pytest

from tideloop import testing
from tideloop.testing import Deadlock, SimNetwork
from tideloop.testing._threads import _idle


def _until_idle(thread: threading.Thread) -> None:
    """Wait until *thread* looks idle, as a loop made now will see it."""
    deadline = time.monotonic() + 5.0
    while not _idle(sys._current_frames()[thread.ident or 0]):
        assert time.monotonic() < deadline, "the thread never looked idle"
        time.sleep(0.001)


async def crossed_locks() -> None:
    lock_a, lock_b = asyncio.Lock(), asyncio.Lock()

    async def one() -> None:
        async with lock_a:
            await asyncio.sleep(1)
            async with lock_b:
                pass

    async def two() -> None:
        async with lock_b:
            await asyncio.sleep(1)
            async with lock_a:
                pass

    await asyncio.gather(
        asyncio.create_task(one(), name="one"), asyncio.create_task(two(), name="two")
    )


def test_crossed_locks_are_reported_with_every_tasks_stack() -> None:
    with pytest.raises(Deadlock) as caught:
        testing.run(crossed_locks(), virtual_time=True)
    report = str(caught.value)
    assert report.startswith("deadlock at virtual time 1.0: 3 task(s) wait")
    lines = report.splitlines()
    # Each task by name and coroutine, where it waits by the program's line and
    # source, in what (the lock's acquire), and its own frames after it.
    one = lines.index(
        "- task 'one' (one, waiting at tests/testing/test_deadlock.py:41 "
        "`async with lock_b:` in Lock.__aenter__)"
    )
    assert lines[one + 1] == (
        "    crossed_locks.<locals>.one at tests/testing/test_deadlock.py:41 `async with lock_b:`"
    )
    assert any(line.startswith("- task 'two' (two, waiting at") for line in lines)
    assert any(line.startswith("- task 'Task-") for line in lines)
    # asyncio's frames (the lock's) are left out, and counted; not tideloop's.
    assert "asyncio" + os.sep not in report and "tideloop" + os.sep not in report
    assert lines[-1] == (
        "(4 frame(s) of asyncio and tideloop left out; TIDELOOP_FULL_FRAMES=1 shows them)"
    )
    assert type(caught.value).__module__ == "tideloop.testing"


def test_the_loops_frames_are_shown_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELOOP_FULL_FRAMES", "1")
    with pytest.raises(Deadlock) as caught:
        testing.run(crossed_locks(), virtual_time=True)
    report = str(caught.value)
    assert "left out" not in report
    assert f"asyncio{os.sep}locks.py:" in report and "Lock.acquire at " in report
    assert "Lock.acquire at asyncio/locks.py:" in report and "`await fut`" in report


def test_threads_that_cannot_wake_the_loop_do_not_hide_a_deadlock() -> None:
    # A thread busy when the loop was made (a test runner's, as
    # pytest-xdist's channel reader, blocked in a read) and the default
    # executor's idle worker.
    r, w = os.pipe()
    runner_thread = threading.Thread(target=os.read, args=(r, 1))
    runner_thread.start()

    async def main() -> None:
        await asyncio.to_thread(sum, [1, 2])
        await asyncio.Event().wait()

    try:
        with pytest.raises(Deadlock, match="1 task"):
            testing.run(main(), virtual_time=True)
    finally:
        os.write(w, b"x")
        runner_thread.join()
        os.close(r)
        os.close(w)


def test_a_thread_idle_before_the_loop_was_made_may_still_wake_it() -> None:
    """A thread started before the loop and idle then (a fixture's worker on a
    queue) is one the program can wake: no report while it works (it was a
    false alarm), and the result arrives as on the stdlib loop."""
    jobs: queue.Queue[tuple[asyncio.AbstractEventLoop, asyncio.Future[str]] | None]
    jobs = queue.Queue()

    def worker() -> None:
        while (job := jobs.get()) is not None:
            loop, fut = job
            time.sleep(0.05)
            loop.call_soon_threadsafe(fut.set_result, "worker")

    thread = threading.Thread(target=worker)
    thread.start()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        jobs.put((loop, fut))
        return await fut

    try:
        assert asyncio.run(main()) == "worker"
        _until_idle(thread)  # as a fixture's worker waits before a test
        assert testing.run(main(), virtual_time=True) == "worker"
    finally:
        jobs.put(None)
        thread.join()


def test_a_partition_nobody_heals_is_a_deadlock_in_the_simulation() -> None:
    async def main(net: SimNetwork) -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(await reader.readline())
            finally:
                writer.close()

        server = await asyncio.start_server(echo, None, 80)
        reader, writer = await asyncio.open_connection("localhost", 80)
        net.partition("client", "client")
        writer.write(b"lost in the partition\n")
        try:
            await reader.readline()  # no timeout, and nobody calls heal()
        finally:
            writer.close()
            server.close()

    net = SimNetwork()

    async def run() -> None:
        await main(net)

    with pytest.raises(Deadlock, match="2 task"):  # the client, and the server's handler
        testing.run(run(), network=net)


def test_no_report_while_a_thread_a_real_fd_or_a_signal_can_still_wake_the_loop() -> None:
    async def woken_by_a_thread() -> str:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        thread = threading.Timer(0.05, loop.call_soon_threadsafe, (fut.set_result, "thread"))
        thread.start()
        try:
            return await fut
        finally:
            thread.join()

    async def woken_by_a_real_fd() -> bytes:
        a, b = socket.socketpair()
        with a, b:
            reader, writer = await asyncio.open_connection(sock=a)
            threading.Timer(0.05, b.sendall, (b"real\n",)).start()
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
            return line

    async def woken_by_a_signal() -> str:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR2, fut.set_result, "signal")
        try:
            loop.call_soon(os.kill, os.getpid(), signal.SIGUSR2)
            return await fut
        finally:
            loop.remove_signal_handler(signal.SIGUSR2)

    async def woken_by_a_child_exiting() -> int:
        # Its pipe closes first: then only the loop's own watch of the child
        # (a pidfd) is left to wake it.
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import os, time; os.close(1); time.sleep(0.3)",
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdout is not None
        assert await child.stdout.read() == b""
        return await child.wait()

    assert testing.run(woken_by_a_child_exiting(), virtual_time=True) == 0
    assert testing.run(woken_by_a_thread(), virtual_time=True) == "thread"
    assert testing.run(woken_by_a_real_fd(), virtual_time=True) == b"real\n"
    assert testing.run(woken_by_a_signal(), virtual_time=True) == "signal"


def test_real_time_keeps_asyncios_behaviour() -> None:
    # Without virtual time nothing is decided for the program: a deadlocked
    # run waits (here, until its own timeout), as on the stdlib loop.
    async def bounded() -> None:
        await asyncio.wait_for(crossed_locks(), 0.2)

    for run in (asyncio.run, testing.run):
        with pytest.raises(TimeoutError):
            run(bounded())


@pytest.mark.parametrize("runner", ["asyncio", "tideloop-virtual-time"])
def test_the_main_thread_may_wake_a_loop_on_another_thread(runner: str) -> None:
    """anyio's blocking portal: a loop runs on a thread the main thread started.
    The main thread is busy while the loop is made, then waits for what the
    loop hands it, then calls into the loop. While it waits, the loop has
    nothing to do: no report (it was a false alarm in anyio's suite under
    virtual time), and the portal stops when told, as on the stdlib loop."""
    import concurrent.futures

    handed: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]]
    handed = concurrent.futures.Future()
    outcome: list[object] = []

    async def portal() -> str:
        stop = asyncio.Event()
        handed.set_result((asyncio.get_running_loop(), stop))
        await stop.wait()
        return "stopped"

    def run_portal() -> None:
        try:
            if runner == "asyncio":
                outcome.append(asyncio.run(portal()))
            else:
                outcome.append(testing.run(portal(), virtual_time=True))
        except BaseException as exc:  # the test's thread reports it
            outcome.append(exc)

    thread = threading.Thread(target=run_portal)
    thread.start()
    spin_until = time.monotonic() + 0.05  # busy while the loop is made
    while time.monotonic() < spin_until:
        pass
    loop, stop = handed.result(timeout=5)
    time.sleep(0.05)  # waiting on the main thread, the loop has nothing to do
    if not outcome:
        loop.call_soon_threadsafe(stop.set)
    thread.join(5)
    assert not thread.is_alive()
    assert outcome == ["stopped"]
