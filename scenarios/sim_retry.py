"""Two workers that retry each other forever: a planted livelock, and its scenario.

Plain asyncio (streams, a line protocol); the simulator is only the
network object the scenario is given (``SimNetwork``: ``spawn`` and
``set_latency``) and the ``progress`` function it calls when a worker gets
its job done (``tideloop.testing.progress``; a no-op anywhere else).

- **A lock service** on host ``locks`` answers ``TRY name owner`` with
  ``OK`` (the lock is now the owner's) or ``BUSY``, and ``RELEASE name
  owner`` with ``OK``.
- **Two workers**, on hosts ``w1`` and ``w2``, each need locks ``a`` and
  ``b``: w1 takes ``a`` then ``b``, w2 ``b`` then ``a``. A worker that
  finds its second lock busy releases its first (no deadlock: nobody waits
  holding a lock), sleeps, and tries again.
- **The planted bug** (``jitter=False``): the back-off is a fixed
  `BACKOFF`. The two workers start together over links of equal latency, so
  they meet the same way every round: each holds one lock, finds the other
  busy, lets go, sleeps the same time, and tries again, forever. Nothing
  waits for nothing (a timer is always pending), so no deadlock detector
  fires; a test timeout fires after however long it allows, naming nobody.
- **The fix** (``jitter=True``): the back-off is drawn from
  ``random.uniform(0, 2 * BACKOFF)`` (seeded in a simulated run), so the
  rounds drift apart and one worker gets both locks.

``python -m scenarios.sim_retry`` runs both on tideloop's simulation with
``livelock_after`` and prints what each did.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

PORT = 7100
LOCKS = "locks"
WORKERS = {"w1": ("a", "b"), "w2": ("b", "a")}
#: Seconds a worker waits before trying its locks again.
BACKOFF = 0.05
#: Each link's latency, both ways (the same everywhere).
LATENCY = 0.005


class Network(Protocol):
    """What the scenario needs of a simulated network (``SimNetwork`` has it)."""

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None: ...


async def lock_service(ready: asyncio.Event) -> None:
    """The lock service: serves until cancelled."""
    owners: dict[str, str] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                verb, name, owner = line.decode().split()
                if verb == "TRY":
                    if owners.get(name, owner) == owner:
                        owners[name] = owner
                        writer.write(b"OK\n")
                    else:
                        writer.write(b"BUSY\n")
                elif verb == "RELEASE":
                    if owners.get(name) == owner:
                        del owners[name]
                    writer.write(b"OK\n")
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, LOCKS, PORT)
    ready.set()
    try:
        await server.serve_forever()
    finally:
        server.close()


async def worker(
    name: str,
    jitter: bool,
    progress: Callable[[str], None],
    done: list[str],
) -> int:
    """Take both locks, do the job, let go; returns the rounds it took."""
    first, second = WORKERS[name]
    reader, writer = await asyncio.open_connection(LOCKS, PORT)

    async def ask(verb: str, lock: str) -> bytes:
        writer.write(f"{verb} {lock} {name}\n".encode())
        return await reader.readline()

    rounds = 0
    try:
        while True:
            rounds += 1
            if await ask("TRY", first) == b"OK\n":
                if await ask("TRY", second) == b"OK\n":
                    done.append(name)  # the job, done holding both locks
                    progress(f"{name} did its job")
                    await ask("RELEASE", second)
                    await ask("RELEASE", first)
                    return rounds
                await ask("RELEASE", first)
            delay = random.uniform(0, 2 * BACKOFF) if jitter else BACKOFF
            await asyncio.sleep(delay)
    finally:
        writer.close()


async def scenario(
    net: Network, *, jitter: bool, progress: Callable[[str], None] | None = None
) -> list[str]:
    """Both workers once; returns who did their job, in order."""
    if progress is None:
        from tideloop.testing import progress as tideloop_progress

        progress = tideloop_progress
    for host in WORKERS:
        net.set_latency(host, LOCKS, LATENCY)
    ready = asyncio.Event()
    service = net.spawn(LOCKS, lock_service(ready))
    await ready.wait()
    done: list[str] = []
    workers = [net.spawn(host, worker(host, jitter, progress, done)) for host in WORKERS]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in (*workers, service):
            task.cancel()
        await asyncio.gather(*workers, service, return_exceptions=True)
    return done


def main(argv: list[str]) -> int:
    from tideloop import testing

    for jitter in (False, True):
        net = testing.SimNetwork(seed=int(argv[0]) if argv else 0)
        try:
            done = testing.run(scenario(net, jitter=jitter), network=net, livelock_after=2.0)
        except testing.Livelock as exc:
            print(f"jitter={jitter}: {exc}\n")
        else:
            print(f"jitter={jitter}: done by {done}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
