"""SimNetwork.spawn keeps its tasks; crash and the end of the run cancel them.

asyncio holds tasks weakly: a server spawned and forgotten would be
collected in the middle of its run ("Task was destroyed but it is
pending!"), and a run that collects garbage (the 5th of 12 in one process,
in the issue) would stall. The network holds what it spawned until it is
done.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

from tideloop import testing
from tideloop.testing import SimNetwork

from sim_support import serve


def twelve_lines() -> Any:
    """The issue's scenario: a server on ``db``, four clients on app0..app3
    doing three request/reply round trips each, and main waiting until the
    server has logged 12 lines. Nothing but the network refers to the tasks,
    and main collects garbage while it waits."""
    lines: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            lines.append(line)
            writer.write(b"ok " + line)
            await writer.drain()
        writer.close()

    async def client(i: int) -> None:
        reader, writer = await asyncio.open_connection("db", 5432)
        for k in range(3):
            writer.write(f"app{i} {k}\n".encode())
            await writer.drain()
            assert await reader.readline() == f"ok app{i} {k}\n".encode()
        writer.close()
        await writer.wait_closed()

    async def main(net: SimNetwork) -> int:
        net.spawn("db", serve(5432, handle))
        await asyncio.sleep(0.01)
        for i in range(4):
            net.spawn(f"app{i}", client(i))
        while len(lines) < 12:
            await asyncio.sleep(0.01)
            gc.collect()
        # The clients have closed; give their FINs a virtual second to arrive,
        # so the handlers end on EOF (the run's end then cancels only the server).
        await asyncio.sleep(1)
        return len(lines)

    return main


def test_twelve_runs_in_one_process_all_pass() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a destroyed pending task, an unclosed socket
        for run in range(12):
            net = SimNetwork(seed=run)
            main = twelve_lines()
            assert testing.run(asyncio.wait_for(main(net), 60), network=net) == 12, run
            assert not net.spawned  # the end of the run cancelled the server


def test_the_network_holds_a_spawned_task_until_it_is_done() -> None:
    async def main(net: SimNetwork) -> tuple[bool, bool, bool]:
        started = asyncio.Event()
        release = asyncio.Event()

        async def worker() -> str:
            started.set()
            await release.wait()
            return "done"

        task = net.spawn("db", worker())
        await started.wait()
        held = task in net.spawned
        del task
        gc.collect()
        [again] = net.spawned  # still there, still pending
        pending = not again.done()
        release.set()
        assert await again == "done"
        return held, pending, not net.spawned

    net = SimNetwork(seed=1)
    assert testing.run(main(net), network=net) == (True, True, True)


def test_crash_cancels_the_hosts_spawned_tasks_and_only_those() -> None:
    async def main(net: SimNetwork) -> tuple[bool, bool, str]:
        db = net.spawn("db", asyncio.sleep(3600))
        app = net.spawn("app", asyncio.sleep(1, "app"))
        await asyncio.sleep(0)
        net.crash("db")
        with pytest.raises(asyncio.CancelledError):
            await db
        return db.cancelled(), db in net.spawned, await app

    net = SimNetwork(seed=2)
    assert testing.run(main(net), network=net) == (True, False, "app")


def test_the_end_of_the_run_cancels_what_is_left() -> None:
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def main(net: SimNetwork) -> None:
        for host in ("db", "cache"):
            net.spawn(host, forever(host))
        await asyncio.sleep(1)

    net = SimNetwork(seed=3)
    testing.run(main(net), network=net)
    assert sorted(cancelled) == ["cache", "db"]
    assert not net.spawned


def test_a_network_reused_by_a_hand_run_loop_lets_the_last_loops_tasks_go() -> None:
    """A loop closed with a spawned task pending (run by hand, not by a
    runner that cancels what is left): the network lets it go with that
    loop, and the next run starts with none of it."""
    net = SimNetwork(seed=4)
    loop = testing.new_event_loop(network=net)

    async def start() -> None:
        net.spawn("db", asyncio.sleep(3600))

    try:
        loop.run_until_complete(start())
        assert len(net.spawned) == 1
    finally:
        loop.close()

    async def main() -> int:
        return len(net.spawned)

    assert testing.run(main(), network=net) == 0
