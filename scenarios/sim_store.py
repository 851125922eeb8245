"""A three-node replicated key-value store with a planted stale-read bug, and its scenario.

The store is plain asyncio (streams, a line protocol) and knows nothing of
any simulator: `scenario` runs it on whatever network object it is given
(`Network`: tideloop's ``SimNetwork`` as it is, simloom's world through the
adapter in ``bench/sim_store_simloom.py``). Only `run_tideloop` (at the end,
for the tests, the benchmark and the command line) imports tideloop.

The store:

- **n1 is the leader.** ``SET id k v`` gives the write the next version,
  applies it, sends ``REPL ver k v`` to both followers over one connection
  each, and replies ``OK id ver`` once one follower has acknowledged
  (``ACK ver``): two of three nodes, a majority. Every `HEARTBEAT` seconds it
  sends ``HB`` on both links.
- **n2 and n3 are followers.** They apply ``REPL`` in order and ack it.
  ``GET id k`` is answered ``VAL id ver v`` (``ERR id reason`` if refused).
- **The planted bug** (``stale_reads=True``): a follower answers ``GET``
  from its own state while it holds a *lease*, renewed for `LEASE` seconds by
  every message from the leader as it arrives. Nothing stops the leader from
  acknowledging writes the leased follower has not seen: when a partition
  cuts a follower off, it serves stale values until its lease runs out; and
  when the partition heals, the first held message renews the lease while
  later held ``REPL`` are still in flight, so it serves stale values again
  for a few milliseconds (a follower behind a slow link does too, without
  any partition). Only some timings show it: about one schedule in six
  fails, nearly always in the lease's first window, a few after a heal or
  with no partition at all.
- **The correct control** (``stale_reads=False``): followers forward every
  ``GET`` to the leader, whose state includes every acknowledged write.

The check (linearizability-lite, one key, one writer): a read that starts
after a write was acknowledged must return that write's version or a later
one. `Result.check` raises AssertionError naming the first stale read.

Run a seed from the command line (prints the digest of the network's log
and the failure, the way the tests' fresh-process replay does)::

    python -m scenarios.sim_store 17           # one seed (from the repository root)
    python -m scenarios.sim_store --search 0   # seeds from 0 to the first failure
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

LEADER = "n1"
FOLLOWERS = ("n2", "n3")
NODES = (LEADER, *FOLLOWERS)
WRITER = "c1"
READER = "c2"
CLIENTS = (WRITER, READER)
PORT = 7000
KEY = "x"

#: Seconds between the leader's heartbeats.
HEARTBEAT = 0.010
#: Seconds a follower serves reads after its last message from the leader.
LEASE = 0.030
#: Seconds a client waits for a reply before giving the request up.
READ_TIMEOUT = 0.050
WRITE_TIMEOUT = 0.500


class Network(Protocol):
    """What `scenario` needs of a simulated network (tideloop's ``SimNetwork`` has it)."""

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None: ...

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None: ...

    def heal(self, a: str | None = None, b: str | None = None) -> None: ...


# -- the store -------------------------------------------------------------


def _line(*parts: object) -> bytes:
    return (" ".join(str(p) for p in parts) + "\n").encode()


class _Link:
    """The leader's connection to one follower."""

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.name = name
        self.reader = reader
        self.writer = writer
        self.acked = 0
        self.task: asyncio.Task[None] | None = None


class Node:
    """One replica; `run` serves until `stop`, then closes everything it opened."""

    def __init__(self, name: str, *, stale_reads: bool = True) -> None:
        self.name = name
        self.is_leader = name == LEADER
        self.stale_reads = stale_reads
        self.data: dict[str, tuple[int, str]] = {}
        self.version = 0
        self.lease_until = -1.0
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._links: list[_Link] = []
        self._acked = asyncio.Condition()
        self._conns: set[asyncio.StreamWriter] = set()
        self._handlers: list[asyncio.Task[None]] = []
        self._forward: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._forward_lock = asyncio.Lock()
        self._forward_ids = 0

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # Bind the host's own name: both simulators resolve it to the host.
        server = await asyncio.start_server(self._handle, self.name, PORT)
        heartbeat: asyncio.Task[None] | None = None
        try:
            if self.is_leader:
                for follower in FOLLOWERS:
                    reader, writer = await asyncio.open_connection(follower, PORT)
                    link = _Link(follower, reader, writer)
                    link.task = loop.create_task(self._read_acks(link))
                    self._links.append(link)
                heartbeat = loop.create_task(self._heartbeat())
            self.ready.set()
            await self._stop.wait()
        finally:
            server.close()
            # Our own tasks are cancelled; the servers' handler tasks are not
            # (on 3.11 streams log a cancelled handler as an error): every
            # connection is closed instead, so each handler reads EOF and returns.
            tasks = [t for t in (heartbeat, *(link.task for link in self._links)) if t]
            for task in tasks:
                task.cancel()
            async with self._acked:
                self._acked.notify_all()  # a SET waiting for acks gives up
            writers = [link.writer for link in self._links] + list(self._conns)
            if self._forward is not None:
                writers.append(self._forward[1])
            for writer in writers:
                writer.close()
            await asyncio.gather(*tasks, *self._handlers, return_exceptions=True)
            for writer in writers:
                try:
                    await writer.wait_closed()
                except (ConnectionError, OSError):
                    pass
            await server.wait_closed()

    # -- the leader's side --

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            for link in self._links:
                link.writer.write(b"HB\n")

    async def _read_acks(self, link: _Link) -> None:
        while line := await link.reader.readline():
            parts = line.split()
            if parts[0] == b"ACK":
                link.acked = max(link.acked, int(parts[1]))
                async with self._acked:
                    self._acked.notify_all()

    async def _set(self, key: str, value: str) -> int:
        self.version += 1
        version = self.version
        self.data[key] = (version, value)
        for link in self._links:
            link.writer.write(_line("REPL", version, key, value))
        async with self._acked:
            # The leader itself and one follower are a majority of three.
            await self._acked.wait_for(
                lambda: self._stop.is_set() or any(lk.acked >= version for lk in self._links)
            )
        if self._stop.is_set():
            raise ConnectionAbortedError("the node is stopping")
        return version

    # -- every node's server --

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.append(task)
        self._conns.add(writer)
        try:
            while line := await reader.readline():
                reply = await self._request(line.decode().split())
                if reply:
                    writer.write(reply)
        except (ConnectionError, OSError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _request(self, parts: list[str]) -> bytes:
        loop = asyncio.get_running_loop()
        match parts:
            case ["REPL", version, key, value]:  # from the leader
                self.data[key] = (int(version), value)
                self.version = int(version)
                self.lease_until = loop.time() + LEASE
                return _line("ACK", version)
            case ["HB"]:
                self.lease_until = loop.time() + LEASE
                return b""
            case ["SET", rid, key, value]:
                if not self.is_leader:
                    return _line("ERR", rid, "not-leader")
                return _line("OK", rid, await self._set(key, value))
            case ["GET", rid, key]:
                if self.is_leader:
                    return self._value(rid, key)
                if not self.stale_reads:
                    return await self._forward_get(rid, key)
                if loop.time() >= self.lease_until:
                    return _line("ERR", rid, "no-lease")
                return self._value(rid, key)  # the planted bug
        return _line("ERR", parts[1] if len(parts) > 1 else "-", "bad-request")

    def _value(self, rid: str, key: str) -> bytes:
        version, value = self.data.get(key, (0, "-"))
        return _line("VAL", rid, version, value)

    async def _forward_get(self, rid: str, key: str) -> bytes:
        async with self._forward_lock:
            if self._stop.is_set():
                raise ConnectionAbortedError("the node is stopping")
            if self._forward is None:
                self._forward = await asyncio.open_connection(LEADER, PORT)
            reader, writer = self._forward
            self._forward_ids += 1
            fid = str(self._forward_ids)
            writer.write(_line("GET", fid, key))
            while True:
                line = await reader.readline()
                if not line:
                    raise ConnectionResetError("the leader closed the forwarding connection")
                parts = line.decode().split()
                if parts[1] == fid:
                    return _line(parts[0], rid, *parts[2:])


# -- the clients -------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One completed request as its client saw it (virtual times)."""

    client: str
    kind: str  # "set" or "get"
    node: str
    start: float
    end: float
    version: int  # written or read; 0: nothing (refused, or timed out: see `outcome`)
    outcome: str  # "ok", "timeout" or the node's refusal

    def describe(self) -> str:
        what = "SET" if self.kind == "set" else "GET"
        return (
            f"{self.client}'s {what} {KEY} on {self.node} "
            f"[{self.start:.6f}, {self.end:.6f}] -> version {self.version} ({self.outcome})"
        )


class Client:
    """One connection per node, opened on first use; request ids skip late replies."""

    def __init__(self, name: str, history: list[Op]) -> None:
        self.name = name
        self.history = history
        self._conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._ids = 0

    async def request(self, node: str, kind: str, *args: object, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._ids += 1
        rid = str(self._ids)
        start = loop.time()
        version, outcome = 0, "timeout"
        try:
            async with asyncio.timeout(timeout):
                if node not in self._conns:
                    self._conns[node] = await asyncio.open_connection(node, PORT)
                reader, writer = self._conns[node]
                writer.write(_line(kind.upper(), rid, KEY, *args))
                while True:
                    line = await reader.readline()
                    if not line:
                        raise ConnectionResetError(f"{node} closed the connection")
                    parts = line.decode().split()
                    if parts[1] == rid:
                        break
            if parts[0] in ("OK", "VAL"):
                version, outcome = int(parts[2]), "ok"
            else:
                outcome = parts[2]
        except TimeoutError:
            pass
        self.history.append(Op(self.name, kind, node, start, loop.time(), version, outcome))

    async def close(self) -> None:
        writers = [writer for _reader, writer in self._conns.values()]
        for writer in writers:
            writer.close()
        for writer in writers:
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass


# -- the scenario ---------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Everything `scenario` draws from its generator, before it starts."""

    latency: dict[tuple[str, str], tuple[float, float]]
    #: (follower, "both" / "to-follower" / "from-follower", start, end) of the
    #: partition between the leader and one follower; None: no partition.
    fault: tuple[str, str, float, float] | None
    writes: list[float]  # start times
    reads: list[tuple[float, str]]  # start times and nodes

    @classmethod
    def draw(cls, rng: random.Random) -> Plan:
        hosts = NODES + CLIENTS
        latency = {}
        for i, a in enumerate(hosts):
            for b in hosts[i + 1 :]:
                low = rng.uniform(0.0002, 0.002)
                spread = rng.choice((0.001, 0.003, 0.010))
                latency[a, b] = (low, low + rng.uniform(0.0, spread))
        fault = None
        if rng.random() < 0.85:
            follower = rng.choice(FOLLOWERS)
            how = rng.choice(("both", "both", "to-follower", "from-follower"))
            start = rng.uniform(0.02, 0.25)
            fault = (follower, how, start, start + rng.uniform(0.02, 0.20))
        writes, t = [], 0.01
        for _ in range(10):
            t += rng.uniform(0.005, 0.04)
            writes.append(t)
        reads, t = [], 0.01
        while t < writes[-1] + 0.05:
            t += rng.uniform(0.002, 0.02)
            reads.append((t, rng.choice(NODES)))
        return cls(latency, fault, writes, reads)

    def describe(self) -> str:
        if self.fault is None:
            return "no partition"
        follower, how, start, end = self.fault
        return f"partition {LEADER}/{follower} ({how}) from {start:.6f} to {end:.6f}"


@dataclass
class Result:
    plan: Plan
    history: list[Op] = field(default_factory=list)

    def stale_reads(self) -> list[tuple[Op, Op]]:
        """(read, the latest write acknowledged before it started) for each stale read."""
        writes = sorted(
            (op for op in self.history if op.kind == "set" and op.outcome == "ok"),
            key=lambda op: op.end,
        )
        stale = []
        for read in self.history:
            if read.kind != "get" or read.outcome != "ok":
                continue
            before = [w for w in writes if w.end < read.start]
            if before:
                latest = max(before, key=lambda w: w.version)
                if read.version < latest.version:
                    stale.append((read, latest))
        return stale

    def check(self) -> None:
        stale = self.stale_reads()
        if stale:
            read, write = stale[0]
            raise AssertionError(
                f"stale read: {read.describe()}, but {write.describe()} was acknowledged "
                f"before the read started ({self.plan.describe()}; "
                f"{len(stale)} stale read(s) in all)"
            )


async def _at(t0: float, t: float) -> None:
    await asyncio.sleep(max(0.0, t0 + t - asyncio.get_running_loop().time()))


async def scenario(
    net: Network, rng: random.Random, *, stale_reads: bool = True, check: bool = True
) -> Result:
    """Run the store under a fault schedule drawn from *rng*; `Result.check` it
    (AssertionError naming the first stale read) unless not *check*."""
    plan = Plan.draw(rng)
    for (a, b), (low, high) in plan.latency.items():
        net.set_latency(a, b, low, high)
    result = Result(plan)
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    nodes = {name: Node(name, stale_reads=stale_reads) for name in NODES}
    tasks = {}
    for name in (*FOLLOWERS, LEADER):  # the leader connects to the followers
        tasks[name] = net.spawn(name, nodes[name].run())
        await nodes[name].ready.wait()

    async def writer() -> None:
        client = Client(WRITER, result.history)
        for i, t in enumerate(plan.writes, 1):
            await _at(t0, t)
            await client.request(LEADER, "set", f"v{i}", timeout=WRITE_TIMEOUT)
        await client.close()

    async def reader() -> None:
        client = Client(READER, result.history)
        for t, node in plan.reads:
            await _at(t0, t)
            await client.request(node, "get", timeout=READ_TIMEOUT)
        await client.close()

    async def faults() -> None:
        if plan.fault is None:
            return
        follower, how, start, end = plan.fault
        await _at(t0, start)
        if how == "both":
            net.partition(LEADER, follower)
        elif how == "to-follower":
            net.partition(LEADER, follower, oneway=True)
        else:
            net.partition(follower, LEADER, oneway=True)
        await _at(t0, end)
        net.heal(LEADER, follower)

    clients = [net.spawn(WRITER, writer()), net.spawn(READER, reader())]
    await faults()
    await asyncio.gather(*clients)
    net.heal()
    for name in (LEADER, *FOLLOWERS):
        nodes[name].stop()
        await tasks[name]
    if check:
        result.check()
    return result


# -- running it on tideloop -------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One seed's run on tideloop: its network log's digest and its failure, if any."""

    seed: int
    digest: str
    failure: str | None
    log: list[tuple[float, str, str, str, str]]
    result: Result


def log_digest(log: list[tuple[float, str, str, str, str]]) -> str:
    return hashlib.sha256(repr(log).encode()).hexdigest()


def run_tideloop(seed: int, *, stale_reads: bool = True, perturb: bool = False) -> Outcome:
    """Run `scenario` for *seed* on tideloop's SimNetwork (and its schedule
    perturbed by the same seed if *perturb*)."""
    from tideloop import testing

    net = testing.SimNetwork(seed=seed)
    result = testing.run(
        scenario(net, random.Random(seed), stale_reads=stale_reads, check=False),
        network=net,
        seed=seed if perturb else None,
    )
    failure = None
    try:
        result.check()
    except AssertionError as exc:
        failure = str(exc)
    return Outcome(seed, log_digest(net.log), failure, net.log, result)


def first_failure(base: int, limit: int, **kwargs: Any) -> int | None:
    """How many seeds from *base* on run until the first failure (None: none in *limit*)."""
    for n in range(1, limit + 1):
        if run_tideloop(base + n - 1, **kwargs).failure is not None:
            return n
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--search"]:
        base = int(argv[1]) if len(argv) > 1 else 0
        n = first_failure(base, 10_000)
        if n is None:
            print(f"no failure in 10000 seeds from {base}")
            return 1
        argv = [str(base + n - 1)]
        print(f"first failure from {base}: after {n} schedule(s)")
    for arg in argv:
        outcome = run_tideloop(int(arg))
        print(f"seed {outcome.seed}: log {outcome.digest}")
        print(f"  {outcome.failure or 'ok'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
