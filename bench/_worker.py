"""One measured process: runs one workload under one loop, reports JSON on stdout.

    python -m bench._worker '{"kind": "primitive", "workload": "call_soon", "loop": "uvloop",
                              "n": 100000}'
    python -m bench._worker '{"kind": "server", "workload": "tcp_echo_protocol",
                              "loop": "tideloop", "params": {...}, "address": ["127.0.0.1", 0]}'

The harness starts a fresh one for every loop and every repeat, pinned to
one CPU, so that no loop inherits another's warm caches, heap or sockets.

A primitive warms up, then runs measured; the process's own CPU time
(``os.times``) and wall time around the measured runs are reported. The
warm-up is runs of n/10, repeated until the spec's ``warmup`` seconds have
passed (at least one run); the measured part is one run of n, repeated
until ``min_seconds`` have passed, so that a loop fast enough to finish n
in a few milliseconds (PyPy) is not measured over a window as short as
the 10 ms ticks of its CPU time. For the warm-up: PyPy's JIT needs a few hundred milliseconds of a
workload before its speed settles (a single n/10 run left ``call_soon``'s
measured run 3-5x slower than later ones), and every loop gets the same
warm-up so the comparison stays fair. CPython, which does not compile,
runs at its steady speed after the first run, so its numbers mean what
they meant with the single warm-up run this replaced.

A server prints ``{"status": "ready", "address": ...}`` once it listens
and then serves until the harness terminates it; the harness reads
its CPU time from ``/proc/<pid>/stat``. A missing required package is
reported as ``{"status": "unavailable", "reason": ...}``, not a crash.

``NotImplementedError`` from the loop (a loop without the feature: rloop
0.5 has no Unix sockets and no TLS) is ``{"status": "cannot_run",
"reason": ...}`` (`cannot_run`): what the workload needs (its ``needs``)
and which function raised, e.g. ``needs Unix sockets:
rloop.loop.RLoop.create_unix_server raises NotImplementedError``. For a
server that is while it starts; for a primitive, at any point of its runs.

Each result (a server's ``ready`` line) says, for a tideloop, which core
its import gave (``build``: ``native`` or ``pure``, `bench.loops.build`).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import loops
from bench.api import Address, Primitive, Server, needs_text
from bench.workloads import get


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def percentiles_us(latencies_ns: Any) -> dict[str, float]:
    ordered = sorted(latencies_ns)
    if not ordered:
        return {}
    last = len(ordered) - 1

    def pick(p: float) -> float:
        return float(ordered[min(last, int(len(ordered) * p / 100.0))]) / 1000.0

    return {"p50_us": pick(50), "p90_us": pick(90), "p99_us": pick(99), "max_us": pick(100)}


def cannot_run(workload: Primitive | Server, exc: NotImplementedError) -> dict[str, Any]:
    """The result of a run the loop cannot do: what the workload needs, and what raised.

    The function named is the innermost Python frame of the traceback: where
    ``raise NotImplementedError`` is, in the loop's own code (or the Python
    caller of a compiled function that raised it).
    """
    where = "the loop"
    tb = exc.__traceback__
    if tb is not None:
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code
        module = tb.tb_frame.f_globals.get("__name__", "?")
        where = f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
    reason = f"{where} raises NotImplementedError"
    if str(exc):
        reason += f" ({exc})"
    if workload.needs:
        reason = f"needs {needs_text(workload.needs)}: {reason}"
    return {"status": "cannot_run", "reason": reason}


def run_primitive(
    workload: Primitive, loop_name: str, n: int, warmup: float = 0.0, min_seconds: float = 0.0
) -> None:
    try:
        result = measure_primitive(workload, loops.factory(loop_name), n, warmup, min_seconds)
    except NotImplementedError as exc:
        emit(cannot_run(workload, exc))
        return
    built = loops.build(loop_name)
    if built is not None:
        result["build"] = built
    emit(result)


def measure_primitive(
    workload: Primitive,
    factory: Callable[[], asyncio.AbstractEventLoop],
    n: int,
    warmup: float,
    min_seconds: float,
) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=factory) as runner:
        warm_runs = 0
        deadline = time.perf_counter() + warmup
        while warm_runs == 0 or time.perf_counter() < deadline:
            runner.run(workload.run(max(1, n // 10)))
            warm_runs += 1
        gc.collect()
        ops, runs = 0, 0
        latencies: list[Any] = []  # each run's, joined after the window
        cpu0 = os.times()
        wall0 = time.perf_counter()
        while runs == 0 or time.perf_counter() - wall0 < min_seconds:
            sample = runner.run(workload.run(n))
            ops += sample.ops
            runs += 1
            if sample.latencies_ns is not None:
                latencies.append(sample.latencies_ns)
        wall1 = time.perf_counter()
        cpu1 = os.times()
    result: dict[str, Any] = {
        "status": "ok",
        "ops": ops,
        "seconds": wall1 - wall0,
        "cpu_user_s": cpu1.user - cpu0.user,
        "cpu_sys_s": cpu1.system - cpu0.system,
        "warmup_runs": warm_runs,
        "runs": runs,
    }
    if latencies:
        result.update(percentiles_us([v for run in latencies for v in run]))
    return result


async def serve(
    workload: Server, address: Address, params: dict[str, int], built: str | None = None
) -> None:
    try:
        server = await workload.start(address, params)
    except NotImplementedError as exc:
        emit(cannot_run(workload, exc))
        return
    sockets: Any = getattr(server, "sockets", None) or ()
    if not sockets:
        raise RuntimeError(f"{workload.name}: the server has no listening socket")
    bound = sockets[0].getsockname()
    ready: dict[str, Any] = {
        "status": "ready",
        "address": bound if isinstance(bound, str) else list(bound[:2]),
    }
    if built is not None:
        ready["build"] = built
    emit(ready)
    # Serve until the harness terminates this process.
    await asyncio.Event().wait()


def run_server(workload: Server, loop_name: str, spec: dict[str, Any]) -> None:
    for module in workload.requires:
        if importlib.util.find_spec(module) is None:
            emit({"status": "unavailable", "reason": f"{module} is not installed"})
            return
    raw = spec["address"]
    address: Address = raw if isinstance(raw, str) else (str(raw[0]), int(raw[1]))
    with asyncio.Runner(loop_factory=loops.factory(loop_name)) as runner:
        runner.run(serve(workload, address, dict(spec["params"]), loops.build(loop_name)))


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    workload = get(spec["workload"])
    if isinstance(workload, Primitive):
        run_primitive(
            workload,
            spec["loop"],
            int(spec["n"]),
            warmup=float(spec.get("warmup", 0.0)),
            min_seconds=float(spec.get("min_seconds", 0.0)),
        )
    else:
        run_server(workload, spec["loop"], spec)


if __name__ == "__main__":
    main(sys.argv)
