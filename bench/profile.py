"""Where a loop's time goes: call counts per operation, and cProfile of a server under load.

Not a benchmark (profilers change what they measure): these tools explain
the numbers ``python -m bench`` reports. Three modes:

``calls WORKLOAD [--loop L] [-n N]``
    Runs a primitive workload once under ``sys.setprofile`` and prints the
    Python and C calls per operation, by function. On CPython 3.11+ a
    Python call costs about as much as ten simple bytecodes, so the call
    count per operation is a cost model that needs no timer.

``server WORKLOAD [--loop L] [--size B] [--conns C] [--seconds S]``
    Runs an echo workload's server in this process under cProfile while the
    C echo client (``bench/clients/echo_client.c``, pinned to the other CPU)
    drives it, then prints the functions by own time, with the time per
    message. cProfile makes every call dearer, so compare functions with
    each other, not with the benchmark's absolute numbers.

``iteration [--loops L,...] [--fds F] [--rounds R] [-n N]``
    The cost of a loop iteration and of a callback, apart from any
    workload: F socketpairs that stay readable, ``add_reader`` on each, a
    reader that only counts. Each loop runs in a fresh process pinned to
    CPU 0, loops interleaved, R rounds; each process prints its best of
    three runs of N callbacks and the median over rounds is shown. With one
    fd every callback is one iteration (its poll may block: the ready queue
    is empty when it polls); with many, the iteration is shared. A loop
    on PyPy (``--loops tideloop,pypy/tideloop``) runs on PyPy in the Debian
    root, as ``python -m bench`` runs it (``bench/interpreters.py``).

    python -m bench.profile calls sleep0 --loop tideloop
    python -m bench.profile server unix_echo --loop tideloop --conns 10
    python -m bench.profile iteration --fds 1

For kernel versus user time, ``perf record -e cpu-clock`` on the server
process works here (no hardware counters in this VM); on Python 3.12+
``python -X perf`` names Python functions in perf's reports.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from types import FrameType
from typing import Any

from bench import interpreters, loops
from bench.api import Primitive, Server
from bench.workloads import get


def count_calls(workload: Primitive, loop_name: str, n: int, top: int) -> None:
    factory = loops.factory(loop_name)
    counts: collections.Counter[str] = collections.Counter()

    def profiler(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
            counts[f"py {getattr(code, 'co_qualname', code.co_name)} ({where})"] += 1
        elif event == "c_call":
            counts[f"c  {getattr(arg, '__qualname__', arg)}"] += 1

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(workload.run(max(1, n // 10)))  # warm-up: imports, caches
        sys.setprofile(profiler)
        try:
            sample = runner.run(workload.run(n))
        finally:
            sys.setprofile(None)
    ops = sample.ops
    py = sum(v for k, v in counts.items() if k.startswith("py"))
    c = sum(v for k, v in counts.items() if k.startswith("c "))
    print(
        f"{workload.name} on {loop_name}: {py / ops:.2f} Python calls/op, {c / ops:.2f} C calls/op"
    )
    for name, v in counts.most_common(top):
        if v / ops >= 0.01:
            print(f"  {v / ops:7.2f}  {name}")


def profile_server(
    workload: Server, loop_name: str, *, size: int, conns: int, seconds: float, top: int
) -> None:
    from bench.clients import build

    if workload.client != "echo":
        raise SystemExit(f"{workload.name}: only echo workloads (the C echo client) are supported")
    client = build.echo_client()
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    result: list[str] = []

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="tideloop-profile-") as tmp:
            address: Any = (
                os.path.join(tmp, "s.sock") if workload.family == "unix" else ("127.0.0.1", 0)
            )
            server: Any = await workload.start(address, {"size": size, "conns": conns})
            bound = server.sockets[0].getsockname()
            target = ["unix", bound] if isinstance(bound, str) else ["tcp", *map(str, bound[:2])]
            # No warm-up: the profile covers the whole run, and so do the counts.
            args = [*target, str(conns), str(size), "0", str(seconds)]
            proc = await asyncio.create_subprocess_exec(
                *pin, str(client), *args, stdout=subprocess.PIPE
            )
            out, _ = await proc.communicate()
            server.close()
            await server.wait_closed()
            result.extend(out.decode().splitlines())

    profiler = cProfile.Profile()
    with asyncio.Runner(loop_factory=loops.factory(loop_name)) as runner:
        profiler.enable()
        runner.run(main())
        profiler.disable()
    stats = json.loads(next(line for line in result if line.startswith("{")))
    messages = int(stats["messages"])
    print(f"{workload.name} on {loop_name}, {size} B x {conns}: {messages:,} messages")
    raw: Any = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    rows = sorted(raw.items(), key=lambda item: -item[1][2])[:top]
    print(f"  {'own us/msg':>10}  {'calls/msg':>9}  function")
    for (filename, line, name), (_, ncalls, tottime, _, _) in rows:
        where = name if filename == "~" else f"{name} ({os.path.basename(filename)}:{line})"
        print(f"  {tottime / messages * 1e6:10.3f}  {ncalls / messages:9.3f}  {where}")


def iteration_worker(loop_name: str, fds: int, n: int) -> float:
    """Best of three: ns per callback of *fds* always-ready readers on *loop_name*."""
    import socket

    loop = loops.factory(loop_name)()
    pairs = [socket.socketpair() for _ in range(fds)]
    count = 0

    def reader() -> None:
        nonlocal count
        count += 1
        if count == n:
            loop.stop()

    try:
        for a, b in pairs:
            b.send(b"x")  # never read: a stays readable (level-triggered)
            loop.add_reader(a.fileno(), reader)
        best = float("inf")
        for _ in range(3):
            count = 0
            start = time.perf_counter()
            loop.run_forever()
            best = min(best, (time.perf_counter() - start) / n * 1e9)
        for a, _ in pairs:
            loop.remove_reader(a.fileno())
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()
    return best


def iteration_cost(requested: list[str], fds: int, rounds: int, n: int) -> None:
    loop_names = []
    for name in requested:
        reason = loops.unavailable_reason(name)
        if reason is None:
            loop_names.append(name)
        else:
            print(f"skipping {name}: {reason}", file=sys.stderr)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    results: dict[str, list[float]] = {name: [] for name in loop_names}
    for _ in range(rounds):
        for name in loop_names:
            prefix, inner = interpreters.split(name)
            interp = interpreters.interpreter(prefix)
            args = ["-m", "bench.profile", "_iteration", inner, "--fds", str(fds), "-n", str(n)]
            out = subprocess.run(
                [*pin, *interp.command(args)],
                check=True,
                capture_output=True,
                env=loops.worker_env(name, interp),
                cwd=interpreters.REPO,
            )
            results[name].append(float(out.stdout))
    what = "iteration" if fds == 1 else "callback"
    print(f"ns per {what}, {fds} ready fd(s), median of {rounds} (best of 3 x {n:,} each):")
    for name, values in results.items():
        spread = ", ".join(f"{v:.0f}" for v in values)
        print(f"  {name:18} {statistics.median(values):7.0f}   ({spread})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("mode", choices=("calls", "server", "iteration", "_iteration"))
    parser.add_argument("workload", nargs="?", help="the workload (calls, server)")
    parser.add_argument("--loop", default="tideloop")
    parser.add_argument("--loops", default="asyncio,uvloop,tideloop", help="iteration mode")
    parser.add_argument("--fds", type=int, default=1, help="ready fds (iteration mode)")
    parser.add_argument("--rounds", type=int, default=7, help="processes per loop (iteration)")
    parser.add_argument("-n", type=int, default=None, help="operations (calls, iteration)")
    parser.add_argument("--size", type=int, default=1024, help="message size (server mode)")
    parser.add_argument("--conns", type=int, default=100, help="connections (server mode)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time (server mode)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.mode == "_iteration":  # one worker process of the iteration mode
        print(f"{iteration_worker(args.workload, args.fds, args.n or 300_000):.1f}")
        return
    if args.mode == "iteration":
        iteration_cost(args.loops.split(","), args.fds, args.rounds, args.n or 300_000)
        return
    if args.workload is None:
        parser.error(f"{args.mode} needs a workload")
    workload = get(args.workload)
    if args.mode == "calls":
        if not isinstance(workload, Primitive):
            raise SystemExit(f"{args.workload} is not a primitive workload")
        count_calls(workload, args.loop, args.n or 20_000, args.top)
    else:
        if not isinstance(workload, Server):
            raise SystemExit(f"{args.workload} is not a server workload")
        profile_server(
            workload,
            args.loop,
            size=args.size,
            conns=args.conns,
            seconds=args.seconds,
            top=args.top,
        )


if __name__ == "__main__":
    main()
