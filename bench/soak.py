"""``python -m bench.soak``: a mixed workload for a given time, sampled every second.

Not a benchmark: it asks whether a loop holds its resources flat under a
long, varied load (issue 27's soak). One process runs, on the loop under
test, servers and clients of its own:

- ``tcp``: persistent connections echoing messages of 1 B to 64 KiB;
- ``churn``: connections opened, used once and closed, every 10th by a
  reset (SO_LINGER 0) instead of a FIN;
- ``tls``: TLS connections opened, used once and closed (one handshake
  each), and one persistent TLS echo;
- ``udp``: a datagram ping-pong (a lost datagram is counted, not an error);
- ``subprocess``: ``cat`` children fed 64 KiB through ``communicate()``;
- ``timers``: call_later handles made and half cancelled, wait_for and
  asyncio.timeout expiring;
- ``executor``: digests computed in the default executor.

Every echo is compared with what was sent, so a lost, repeated or
reordered byte is an error. Every second a sample records RSS
(``/proc/self/statm``), open fds (``/proc/self/fd``), the loop's tasks, the
operations done per worker and, on tideloop, ``loop.metrics()``. After the
warm-up the slope of RSS (KiB/min) and of fds (per minute) is fitted by
least squares; the run fails (exit 1) on any error. JSON goes to ``--out``
and a chart of RSS, fds and tasks over time to ``--chart`` (matplotlib, the
``bench`` extra).

    python -m bench.soak --loop tideloop --duration 600
    python -m bench.soak --loop asyncio --duration 30 --warmup 10
    python -m bench.soak --loop tideloop --duration 180 --skip tls,udp  # or --only tls

`soak()` is the same run as a function (the CI test, ``tests/faults/test_soak.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import random
import shutil
import socket
import ssl
import struct
import sys
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

__all__ = ["PARTS", "SoakResult", "main", "slope", "soak"]

#: The workload's parts, each of which can be left out (``--skip``, ``--only``).
PARTS = ("tcp", "churn", "tls", "udp", "subprocess", "timers", "executor")

#: Persistent TCP echo connections.
TCP_CONNECTIONS = 8
#: Bytes each ``subprocess`` child echoes.
CHILD_BYTES = 64 * 1024


@dataclasses.dataclass
class SoakResult:
    """What one soak run measured (`soak()`; JSON through `as_json`)."""

    loop: str
    python: str
    duration: float
    warmup: float
    #: One dict per second: t, rss_kib, fds, tasks, ops (per worker), metrics.
    samples: list[dict[str, Any]]
    ops: dict[str, int]
    errors: list[str]
    rss_slope_kib_per_min: float
    fd_slope_per_min: float
    max_tasks: int

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        after = [s for s in self.samples if s["t"] >= self.warmup]
        rss = [s["rss_kib"] for s in after] or [0]
        fds = [s["fds"] for s in after] or [0]
        ops = ", ".join(f"{k} {v:,}" for k, v in self.ops.items())
        return (
            f"{self.loop} on {self.python}, {self.duration:.0f} s (warm-up {self.warmup:.0f} s): "
            f"RSS {min(rss) / 1024:.1f}-{max(rss) / 1024:.1f} MiB after warm-up, slope "
            f"{self.rss_slope_kib_per_min:+.1f} KiB/min; fds {min(fds)}-{max(fds)}, slope "
            f"{self.fd_slope_per_min:+.2f}/min; tasks at most {self.max_tasks}; "
            f"errors {len(self.errors)}; ops: {ops}"
        )


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) *points* (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if not sxx:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _rss_kib() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _pypy_memory() -> dict[str, int] | None:
    """PyPy's own account (KiB): live GC memory, raw mallocs, JIT machine code."""
    if sys.implementation.name != "pypy":
        return None
    stats: Any = gc.get_stats()  # PyPy's GcStats, not CPython's list
    raw = stats._s  # the raw numbers (the attributes of stats are formatted strings)
    return {
        "gc_kib": raw.total_gc_memory // 1024,
        "rawmalloced_kib": raw.total_rawmalloced_memory // 1024,
        "jit_kib": raw.jit_backend_used // 1024,
    }


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """The loop called *name*: asyncio, uvloop, tideloop or tideloop-POLLER."""
    if name == "asyncio":
        return asyncio.SelectorEventLoop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "tideloop" or name.startswith("tideloop-"):
        import tideloop

        poller = name.partition("-")[2] or None
        return tideloop.new_event_loop(poller=poller) if poller else tideloop.new_event_loop()
    raise ValueError(f"unknown loop {name!r}")


def _tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    from bench.workloads._tls import server_context

    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    return server_context(), client


class _Soak:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None,
        seed: int,
        collect: bool = False,
        parts: Collection[str] = PARTS,
    ) -> None:
        self.loop = loop
        self.collect = collect
        self.parts = parts
        self.tls = tls
        self.rng = random.Random(seed)
        self.ops: dict[str, int] = {}
        self.errors: list[str] = []
        self.stopping = False

    def error(self, worker: str, what: object) -> None:
        if len(self.errors) < 100:
            self.errors.append(f"{worker}: {what}")

    async def forever(self, worker: str, step: Callable[[], Awaitable[None]]) -> None:
        """Run *step* until the soak stops, counting it; an exception is an error."""
        self.ops[worker] = 0
        while not self.stopping:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.error(worker, repr(exc))
                await asyncio.sleep(0.1)  # not a busy loop of failures
            else:
                self.ops[worker] += 1

    # -- servers ---------------------------------------------------------

    @staticmethod
    async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Length-prefixed messages, echoed back until EOF.
        try:
            while header := await reader.read(4):
                while len(header) < 4:
                    header += await reader.readexactly(4 - len(header))
                (size,) = struct.unpack("!I", header)
                body = await reader.readexactly(size)
                writer.write(header + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the churn worker's resets
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int
    ) -> None:
        body = self.rng.randbytes(size)
        writer.write(struct.pack("!I", size) + body)
        await writer.drain()
        (got_size,) = struct.unpack("!I", await reader.readexactly(4))
        got = await reader.readexactly(got_size)
        if got != body:
            raise AssertionError(f"echo of {size} bytes came back as {got_size} different bytes")

    # -- workers ---------------------------------------------------------

    async def tcp_client(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await self.forever(
                "tcp", lambda: self._exchange(reader, writer, self.rng.choice((1, 512, 65536)))
            )
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def churn_once(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await self._exchange(reader, writer, 1024)
        finally:
            if self.ops.get("churn", 0) % 10 == 9:
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            else:
                writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def tls_once(self, port: int, client: ssl.SSLContext) -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="localhost"
        )
        try:
            await self._exchange(reader, writer, 16 * 1024)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def tls_client(self, port: int, client: ssl.SSLContext) -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="localhost"
        )
        try:
            await self.forever("tls-persistent", lambda: self._exchange(reader, writer, 4096))
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def udp(self) -> None:
        loop = self.loop
        got: asyncio.Queue[bytes] = asyncio.Queue()

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: Any) -> None:
                self.transport.sendto(data, addr)  # type: ignore[attr-defined]

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                got.put_nowait(data)

        server, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        client, _ = await loop.create_datagram_endpoint(
            Client, remote_addr=server.get_extra_info("sockname")
        )
        self.ops["udp-lost"] = 0
        seq = 0

        async def ping() -> None:
            nonlocal seq
            seq += 1
            payload = struct.pack("!Q", seq) + self.rng.randbytes(1000)
            client.sendto(payload)
            try:
                async with asyncio.timeout(1):
                    while (data := await got.get()) != payload:
                        if struct.unpack("!Q", data[:8])[0] >= seq:
                            raise AssertionError("a datagram came back changed")
            except TimeoutError:
                self.ops["udp-lost"] += 1

        try:
            await self.forever("udp", ping)
        finally:
            client.close()
            server.close()

    async def child_once(self, cat: str) -> None:
        data = self.rng.randbytes(CHILD_BYTES)
        proc = await asyncio.create_subprocess_exec(
            cat,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate(data)
        if out != data or proc.returncode != 0:
            raise AssertionError(f"cat returned {len(out)} bytes, exit {proc.returncode}")

    async def timers_once(self) -> None:
        loop = self.loop
        done = loop.create_future()
        handles = [loop.call_later(self.rng.random() * 0.02, lambda: None) for _ in range(50)]
        for h in handles[::2]:
            h.cancel()
        loop.call_later(0.02, done.set_result, None)
        await done
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.create_future(), 0.001)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.001):
                await asyncio.sleep(1)

    async def executor_once(self) -> None:
        data = self.rng.randbytes(4096)
        digest = await self.loop.run_in_executor(None, hashlib.sha256, data)
        if digest.digest() != hashlib.sha256(data).digest():
            raise AssertionError("the executor's digest differs")

    # -- the run ---------------------------------------------------------

    async def run(
        self, duration: float, interval: float, on_sample: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        loop = self.loop
        server = await asyncio.start_server(self._echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        parts = self.parts
        workers: list[Awaitable[None]] = []
        if "tcp" in parts:
            workers += [self.tcp_client(port) for _ in range(TCP_CONNECTIONS)]
        if "churn" in parts:
            workers.append(self.forever("churn", lambda: self.churn_once(port)))
        if "udp" in parts:
            workers.append(self.udp())
        if "timers" in parts:
            workers.append(self.forever("timers", self.timers_once))
        if "executor" in parts:
            workers.append(self.forever("executor", self.executor_once))
        tls_server = None
        if self.tls is not None and "tls" in parts:
            server_ctx, client_ctx = self.tls
            tls_server = await asyncio.start_server(self._echo, "127.0.0.1", 0, ssl=server_ctx)
            tls_port = tls_server.sockets[0].getsockname()[1]
            workers += [
                self.forever("tls", lambda: self.tls_once(tls_port, client_ctx)),
                self.tls_client(tls_port, client_ctx),
            ]
        cat = shutil.which("cat")
        if cat is not None and "subprocess" in parts:
            workers.append(self.forever("subprocess", lambda: self.child_once(cat)))
        tasks = [asyncio.ensure_future(w) for w in workers]
        samples: list[dict[str, Any]] = []
        metrics = getattr(loop, "metrics", None)
        start = loop.time()
        try:
            while True:
                if self.collect:
                    gc.collect()
                t = loop.time() - start
                sample: dict[str, Any] = {
                    "t": round(t, 3),
                    "rss_kib": _rss_kib(),
                    "fds": _open_fds(),
                    "tasks": len(asyncio.all_tasks()),
                    "ops": dict(self.ops),
                }
                pypy = _pypy_memory()
                if pypy is not None:
                    sample["pypy"] = pypy
                if metrics is not None:
                    m = metrics()
                    sample["metrics"] = {
                        "callbacks": m.callbacks,
                        "ready": m.ready,
                        "timers": m.timers,
                        "fds": m.fds,
                        "executor_pending": m.executor_pending,
                        "max_lag": m.max_lag,
                        "utilisation": round(m.utilisation, 4),
                    }
                samples.append(sample)
                on_sample(sample)
                if t >= duration or any(task.done() for task in tasks):
                    break
                await asyncio.sleep(max(0.0, start + len(samples) * interval - loop.time()))
        finally:
            self.stopping = True
            # Each worker finishes its step and leaves (closing what it opened);
            # a worker stuck longer than that is cancelled.
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    exc = await asyncio.gather(task, return_exceptions=True)
                    if exc[0] is not None and not isinstance(exc[0], asyncio.CancelledError):
                        self.error("worker", repr(exc[0]))
            if pending:
                self.error("shutdown", f"{len(pending)} workers did not stop within 10 s")
            server.close()
            await server.wait_closed()
            if tls_server is not None:
                tls_server.close()
                await tls_server.wait_closed()
        return samples


def soak(
    loop_name: str = "tideloop",
    duration: float = 30.0,
    warmup: float | None = None,
    *,
    interval: float = 1.0,
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | bool | None = True,
    seed: int = 0,
    collect: bool = False,
    parts: Collection[str] = PARTS,
    on_sample: Callable[[dict[str, Any]], None] = lambda sample: None,
) -> SoakResult:
    """Run the soak for *duration* seconds on a fresh loop called *loop_name*.

    *warmup* (default: a third of the run, at most 60 s) is left out of the
    slopes. *tls* is a (server, client) context pair, True to make one with
    the openssl tool (`bench.workloads._tls`), or None/False for no TLS.
    *collect* runs a full garbage collection before each sample, which tells
    growth that is garbage not yet collected (PyPy collects late) from
    memory that is still referenced. *parts* are the workers run (`PARTS`:
    all of them by default).
    """
    if warmup is None:
        warmup = min(60.0, duration / 3)
    contexts = None if "tls" not in parts else _tls_contexts() if tls is True else (tls or None)
    loop = new_loop(loop_name)
    try:
        state = _Soak(loop, contexts, seed, collect, parts)
        samples = loop.run_until_complete(state.run(duration, interval, on_sample))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    after = [s for s in samples if s["t"] >= warmup]
    return SoakResult(
        loop=loop_name,
        python=f"{sys.implementation.name} {sys.version.split()[0]}",
        duration=duration,
        warmup=warmup,
        samples=samples,
        ops=dict(state.ops),
        errors=state.errors,
        rss_slope_kib_per_min=round(slope([(s["t"], s["rss_kib"]) for s in after]) * 60, 2),
        fd_slope_per_min=round(slope([(s["t"], s["fds"]) for s in after]) * 60, 3),
        max_tasks=max((s["tasks"] for s in samples), default=0),
    )


def chart(results: list[SoakResult], path: Path) -> None:
    """RSS, fds and tasks over time, one line per result (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for r in results:
        t = [s["t"] / 60 for s in r.samples]
        label = f"{r.loop} ({r.rss_slope_kib_per_min:+.0f} KiB/min)"
        axes[0].plot(t, [s["rss_kib"] / 1024 for s in r.samples], label=label)
        axes[1].plot(t, [s["fds"] for s in r.samples], label=r.loop)
        axes[2].plot(t, [s["tasks"] for s in r.samples], label=r.loop)
    for ax, what in zip(axes, ("RSS (MiB)", "open fds", "tasks"), strict=True):
        ax.set_ylabel(what)
        ax.axvline(results[0].warmup / 60, color="grey", linestyle=":", linewidth=1)
        ax.legend(loc="lower right", fontsize="small")
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("minutes (dotted: end of warm-up)")
    fig.suptitle(f"tideloop soak, {results[0].python}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--loop",
        default="tideloop",
        help="comma-separated loops, run one after another: asyncio, uvloop, tideloop[-POLLER]",
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds per loop")
    parser.add_argument("--warmup", type=float, default=None, help="seconds left out of slopes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-tls", action="store_true", help="leave the TLS workers out")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--skip", default="", help=f"comma-separated parts to leave out, of: {', '.join(PARTS)}"
    )
    which.add_argument("--only", default="", help="comma-separated parts to run, no others")
    parser.add_argument(
        "--collect", action="store_true", help="gc.collect() before each sample (PyPy: see soak())"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON of every sample")
    parser.add_argument("--chart", type=Path, default=None, help="PNG of RSS, fds, tasks")
    args = parser.parse_args(argv)
    skip = {p for p in args.skip.split(",") if p} | ({"tls"} if args.no_tls else set())
    only = {p for p in args.only.split(",") if p}
    if unknown := (skip | only) - set(PARTS):
        parser.error(f"unknown parts {', '.join(sorted(unknown))} (known: {', '.join(PARTS)})")
    parts = [p for p in PARTS if p not in skip and (not only or p in only)]
    results = []
    for name in args.loop.split(","):

        def progress(sample: dict[str, Any], name: str = name) -> None:
            print(
                f"[{name} {sample['t']:6.0f}s] RSS {sample['rss_kib'] / 1024:7.1f} MiB, "
                f"fds {sample['fds']:4d}, tasks {sample['tasks']:3d}",
                file=sys.stderr,
            )

        result = soak(
            name,
            args.duration,
            args.warmup,
            tls=not args.no_tls,
            seed=args.seed,
            collect=args.collect,
            parts=parts,
            on_sample=progress,
        )
        print(result.summary())
        for error in result.errors[:10]:
            print(f"  error: {error}")
        results.append(result)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps([r.as_json() for r in results], indent=1))
    if args.chart is not None:
        chart(results, args.chart)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
