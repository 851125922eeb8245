"""Planted races: programs with a real ordering bug that the fixed loop never shows.

Each race is a coroutine function that raises AssertionError when the bug
bites. Under tideloop's normal (fixed-order) loop each passes every time;
under a `Perturber` some seeds expose it, and replaying such a seed exposes
it again. `test_races.py` checks both; run this file to print the numbers
the issue asks for (seeds to find, over several base seeds, and the
negative check):

    python tests/testing/races.py [--runs 1000] [--bases 10]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tideloop import testing

Race = Callable[[], Coroutine[Any, Any, None]]


class _Server:
    """A loopback stream server that knows when its handlers have finished."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self.connected = 0
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connected += 1
        self.active += 1
        self.idle.clear()
        try:
            await self._handler(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()
            self.active -= 1
            if not self.active:
                self.idle.set()

    async def __aenter__(self) -> _Server:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self.idle.wait()
        await self._server.wait_closed()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


async def _close(*writers: asyncio.StreamWriter) -> None:
    for writer in writers:
        writer.close()
    for writer in writers:
        await writer.wait_closed()


async def two_clients_in_order() -> None:
    """A server that assumes requests arrive in the order the clients sent them.

    Two clients are connected; A sends its request, then B sends its own (in
    the same callback, A strictly first). The server logs each request as it
    reads it and the test expects [A, B]. Nothing orders two connections'
    data: which fd the loop dispatches first is the kernel's readiness order.
    """
    log: list[bytes] = []
    both_connected = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if server.connected == 2:
            both_connected.set()
        log.append(await reader.readline())
        await reader.read()

    async with _Server(handle) as server:
        _, wa = await server.connect()
        _, wb = await server.connect()
        await both_connected.wait()
        wa.write(b"A\n")
        wb.write(b"B\n")
        while len(log) < 2:
            await asyncio.sleep(0)
        await _close(wa, wb)
    assert log == [b"A\n", b"B\n"], log


async def check_then_act_across_io() -> None:
    """A cache filled by check-then-act across an await on a socket.

    Two requests for the same key: the first misses and fetches over one
    pooled connection; the second first pings over another connection, then
    checks the cache. The author expects the first fetch to have filled the
    cache by then (it started first), so the backend is asked once.
    """
    cache: dict[bytes, bytes] = {}
    fetches: list[bytes] = []

    async def backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)

    async with _Server(backend) as server:
        conn1 = await server.connect()
        conn2 = await server.connect()

        async def get(key: bytes, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
            if key not in cache:  # check ...
                reader, writer = conn
                writer.write(key + b"\n")
                value = await reader.readline()
                fetches.append(key)
                cache[key] = value  # ... then act
            return cache[key]

        async def ping_then_get() -> bytes:
            reader, writer = conn2
            writer.write(b"ping\n")
            await reader.readline()
            return await get(b"key", conn2)

        await asyncio.gather(get(b"key", conn1), ping_then_get())
        await _close(conn1[1], conn2[1])
    assert fetches == [b"key"], fetches


def _fee(balance: int) -> int:
    time.sleep(0.001)  # a blocking call (a pricing service, a database)
    return balance // 100


async def executor_result_vs_timer() -> None:
    """A lost update between an executor result and a timer.

    The task reads the balance, computes a fee in the default executor (a
    blocking call of about 1 ms) and writes back ``balance - fee``. A timer
    credits interest 20 ms later. The author assumes the thread always beats
    the timer; a thread that is descheduled for longer loses the credit.
    """
    loop = asyncio.get_running_loop()
    account = {"balance": 100}

    def credit_interest() -> None:
        account["balance"] += 10

    loop.call_later(0.02, credit_interest)
    balance = account["balance"]
    fee = await loop.run_in_executor(None, _fee, balance)
    account["balance"] = balance - fee  # read-modify-write across the await
    await asyncio.sleep(0.03)
    assert account["balance"] == 109, account


async def timers_at_the_same_instant() -> None:
    """Under virtual time: a keep-alive and an idle timeout due at the same instant.

    Both are armed in the same callback for 30 s, so their deadlines are
    equal. The idle timeout closes the session unless the keep-alive ran
    first; the author relies on "armed first, fires first", which asyncio
    does not promise.
    """
    session = {"open": True, "kept_alive": False}

    async def keep_alive() -> None:
        await asyncio.sleep(30)
        session["kept_alive"] = True

    async def idle_timeout() -> None:
        await asyncio.sleep(30)
        if not session["kept_alive"]:
            session["open"] = False

    async with asyncio.TaskGroup() as tg:
        tg.create_task(keep_alive())
        tg.create_task(idle_timeout())
    assert session["open"], session


@dataclass(frozen=True)
class Planted:
    name: str
    race: Race
    virtual_time: bool


RACES = [
    Planted("two_clients_in_order", two_clients_in_order, False),
    Planted("check_then_act_across_io", check_then_act_across_io, False),
    Planted("executor_result_vs_timer", executor_result_vs_timer, False),
    Planted("timers_at_the_same_instant", timers_at_the_same_instant, True),
]


def fails(planted: Planted, seed: int | None) -> bool:
    """Run the race once (seed None: the normal loop); True if the bug showed."""
    try:
        testing.run(planted.race(), virtual_time=planted.virtual_time, seed=seed)
    except AssertionError:
        return True
    return False


def seeds_to_find(planted: Planted, base: int, limit: int = 100) -> int | None:
    """How many seeds, from *base* on, until one exposes the race (None: not within limit)."""
    for i in range(limit):
        if fails(planted, base + i):
            return i + 1
    return None


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000, help="normal-loop runs per race")
    parser.add_argument("--bases", type=int, default=10, help="base seeds per race")
    parser.add_argument("--replays", type=int, default=5)
    args = parser.parse_args(argv)
    for planted in RACES:
        t0 = time.perf_counter()
        normal_failures = sum(fails(planted, None) for _ in range(args.runs))
        t_normal = time.perf_counter() - t0
        counts: list[int] = []
        replays_failed = 0
        replays = 0
        for b in range(args.bases):
            base = b * 1000
            n = seeds_to_find(planted, base)
            assert n is not None, f"{planted.name}: not found within 100 seeds from {base}"
            counts.append(n)
            seed = base + n - 1
            for _ in range(args.replays):
                replays += 1
                replays_failed += fails(planted, seed)
        print(
            f"{planted.name:28} normal loop: {normal_failures}/{args.runs} failed "
            f"({t_normal:.1f} s); seeds to find over {args.bases} bases: "
            f"median {statistics.median(counts)}, worst {max(counts)} {counts}; "
            f"replays failing: {replays_failed}/{replays}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
