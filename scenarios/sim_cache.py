"""A cache in front of a key-value store that is not linearizable: a planted bug.

Plain asyncio (streams, a line protocol); the simulator is only the
network object the scenario is given (``SimNetwork``: ``spawn``,
``set_latency``). The clients record what they asked and what they got
in a ``tideloop.testing.History``, which ``check_linearizable`` checks
against the ``KeyValue`` model.

- **The store**, on host ``db``: ``PUT k v`` -> ``OK``, ``GET k`` -> ``VAL v``
  (``VAL -`` for a key never put).
- **Two app servers**, ``app1`` and ``app2``, each with its own read-through
  cache: a ``GET`` is answered from the cache, or fetched from the store and
  cached; a ``PUT`` goes to the store, updates the app's own cache, and
  tells the other app to drop the key (``INVAL k``).
- **Clients** ``c1``, ``c2`` use ``app1``; ``c3``, ``c4`` use ``app2``. Each
  client on its own sees its writes and never goes back in time (per-client
  checks pass): the bug is only visible across clients.
- **The planted bug** (``mode="async"``): the app acknowledges a ``PUT``
  before the other app has dropped the key (the invalidation is sent in
  the background): a client of the other app that reads right after the
  write completed reads the old value from that app's cache.
- ``mode="sync"``: the app waits for the other app's acknowledgement of
  the invalidation before acknowledging the write. Still not linearizable,
  in two rarer ways: a read that missed the other app's cache and is
  fetching from the store when the invalidation arrives caches the value
  it fetched, from before the write, and serves it afterwards (the classic
  read-through race); and an app caches its own write after the store
  acknowledged it, when the other app's invalidation for a later write of
  the same key may already have come and gone.
- ``mode="correct"``: before a write goes to the store, both apps drop the
  key and stop serving it from their caches (``HOLD k``, acknowledged);
  after the store acknowledged it, both start again (``RELEASE k``). A read
  caches what it fetched only if no write of the key began or ended
  meanwhile (a generation per key). Reads meanwhile go to the store, which
  is linearizable. (Without the hold, a read through the writer's app can
  see the new value while the other app still serves the old one: the
  checker found that in an earlier version of this control.)

``python -m scenarios.sim_cache [SEED]`` runs each mode on tideloop's
simulation and prints the checker's verdict.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Coroutine
from typing import Any, Literal, Protocol

from tideloop.testing import History

Mode = Literal["async", "sync", "correct"]

PORT_DB = 7200
PORT_APP = 7201
APPS = {"app1": "app2", "app2": "app1"}
CLIENTS = {"c1": "app1", "c2": "app1", "c3": "app2", "c4": "app2"}
KEYS = ("x", "y")
#: Operations each client makes.
OPERATIONS = 12


class Network(Protocol):
    """What the scenario needs of a simulated network (``SimNetwork`` has it)."""

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None: ...


class Conn:
    """One request at a time over a stream connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        return cls(*await asyncio.open_connection(host, port))

    async def ask(self, line: str) -> str:
        async with self.lock:
            self.writer.write(line.encode() + b"\n")
            reply = await self.reader.readline()
            if not reply:
                raise ConnectionError("closed")
            return reply.decode().strip()

    def close(self) -> None:
        self.writer.close()


async def serve(handler: Any, host: str, port: int, ready: asyncio.Event) -> None:
    server = await asyncio.start_server(handler, host, port)
    ready.set()
    try:
        await server.serve_forever()
    finally:
        server.close()


def lines(handle: Any) -> Any:
    """A connection handler that answers each line with ``await handle(words)``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write((await handle(line.decode().split())).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return handler


async def store(ready: asyncio.Event) -> None:
    data: dict[str, str] = {}

    async def handle(words: list[str]) -> str:
        if words[0] == "PUT":
            data[words[1]] = words[2]
            return "OK"
        return f"VAL {data.get(words[1], '-')}"

    await serve(lines(handle), "db", PORT_DB, ready)


async def app(name: str, mode: Mode, ready: asyncio.Event, peers_up: asyncio.Event) -> None:
    cache: dict[str, str] = {}
    generation: dict[str, int] = {}
    held: dict[str, int] = {}
    db = await Conn.open("db", PORT_DB)
    peer: Conn | None = None
    background: set[asyncio.Task[Any]] = set()

    async def invalidate_peer(key: str) -> None:
        assert peer is not None
        await peer.ask(f"INVAL {key}")

    async def handle(words: list[str]) -> str:
        verb, key = words[0], words[1]
        if verb == "INVAL":
            cache.pop(key, None)
            return "OK"
        if verb == "HOLD":  # a write of the key is under way (mode="correct")
            cache.pop(key, None)
            held[key] = held.get(key, 0) + 1
            return "OK"
        if verb == "RELEASE":
            held[key] -= 1
            generation[key] = generation.get(key, 0) + 1
            return "OK"
        if verb == "GET":
            if key in cache and not held.get(key):
                return f"VAL {cache[key]}"
            before = generation.get(key, 0)
            value = (await db.ask(f"GET {key}")).split()[1]
            if mode != "correct" or (generation.get(key, 0) == before and not held.get(key)):
                cache[key] = value
            return f"VAL {value}"
        value = words[2]
        if mode == "correct":
            # Both apps stop serving the key from their caches before the store
            # changes, and start again (refilling from the store) after it did.
            assert peer is not None
            await peer.ask(f"HOLD {key}")
            await handle(["HOLD", key])
            try:
                await db.ask(f"PUT {key} {value}")
            finally:
                await handle(["RELEASE", key])
                await peer.ask(f"RELEASE {key}")
            return "OK"
        await db.ask(f"PUT {key} {value}")
        cache[key] = value
        if mode == "async":
            # The bug: the other app hears of the write after it is acknowledged.
            task = asyncio.create_task(invalidate_peer(key))
            background.add(task)
            task.add_done_callback(background.discard)
        else:
            await invalidate_peer(key)
        return "OK"

    server = await asyncio.start_server(lines(handle), name, PORT_APP)
    ready.set()
    await peers_up.wait()
    peer = await Conn.open(APPS[name], PORT_APP)
    try:
        await asyncio.Future()  # serve until cancelled
    finally:
        # Its own connections first: on 3.12+, a server's close waits for
        # the connections into it, and the other app's is one of them.
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        db.close()
        peer.close()
        server.close()


async def put(conn: Conn, key: str, value: str) -> None:
    if await conn.ask(f"PUT {key} {value}") != "OK":
        raise ConnectionError("the write was refused")


async def get(conn: Conn, key: str) -> str | None:
    value = (await conn.ask(f"GET {key}")).split()[1]
    return None if value == "-" else value


async def client(name: str, history: History, rng: random.Random) -> None:
    conn = await Conn.open(CLIENTS[name], PORT_APP)
    try:
        for i in range(OPERATIONS):
            await asyncio.sleep(rng.uniform(0, 0.02))
            key = rng.choice(KEYS)
            if rng.random() < 0.5:
                value = f"{name}.{i}"
                await history.record(name, "put", (key, value), put(conn, key, value))
            else:
                await history.record(name, "get", key, get(conn, key))
    finally:
        conn.close()


async def scenario(net: Network, *, mode: Mode, seed: int = 0) -> History:
    """One run: the store, both apps, four clients; returns their history."""
    for a in APPS:
        net.set_latency(a, "db", 0.002, 0.010)
    net.set_latency("app1", "app2", 0.005, 0.040)
    for c, a in CLIENTS.items():
        net.set_latency(c, a, 0.001, 0.003)
    history = History()
    db_up = asyncio.Event()
    tasks = [net.spawn("db", store(db_up))]
    await db_up.wait()
    apps_up = [asyncio.Event() for _ in APPS]
    peers_up = asyncio.Event()
    tasks += [net.spawn(a, app(a, mode, up, peers_up)) for a, up in zip(APPS, apps_up, strict=True)]
    await asyncio.gather(*(up.wait() for up in apps_up))
    peers_up.set()
    await asyncio.sleep(0.1)  # the apps connect to each other
    rng = random.Random(seed)
    clients = [net.spawn(c, client(c, history, random.Random(rng.random()))) for c in CLIENTS]
    try:
        await asyncio.gather(*clients)
        await asyncio.sleep(0.2)  # background invalidations land
    finally:
        # In order, so that every connection ends with an end of file: the
        # clients, the apps, then the store.
        for group in (clients, tasks[1:], tasks[:1]):
            for task in group:
                task.cancel()
            await asyncio.gather(*group, return_exceptions=True)
            await asyncio.sleep(0.1)
    return history


def main(argv: list[str]) -> int:
    from tideloop import testing
    from tideloop.testing.models import KeyValue

    seed = int(argv[0]) if argv else 0
    for mode in ("async", "sync", "correct"):
        net = testing.SimNetwork(seed=seed)
        history = testing.run(scenario(net, mode=mode, seed=seed), network=net)  # type: ignore[arg-type]
        print(f"mode={mode}: {testing.check_linearizable(history, KeyValue())}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
