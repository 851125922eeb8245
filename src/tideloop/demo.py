"""``python -m tideloop.demo``: what tideloop is for, in three parts of a few seconds each.

Layer: top (a user of the public API only; nothing imports it). It needs
nothing but Python and tideloop, so it runs right after ``pip install`` on a
fresh machine (the README's first command). ``--part`` runs some parts only.

1. **speed**: the same asyncio code on the stdlib loop and on tideloop, side
   by side, each loop in a fresh process, rounds interleaved (asyncio,
   tideloop, asyncio, ...), the median of the rounds shown:

   - **network** (when tideloop can run servers): a line echo server written
     the way most asyncio servers are, with streams (``start_server``,
     ``readline``, ``write``, ``drain``), on 127.0.0.1 in one process, driven
     by a small load generator in another (plain non-blocking sockets and
     epoll/poll, no event loop, so it costs less per message than the
     server). Each is pinned to its own CPU where the platform allows; the
     CPU use of both during the measurement is shown (the server's read from
     ``/proc`` on Linux), to show whether the server was the bottleneck.
   - **core** (otherwise, or with ``--core``): a mixed in-process workload of
     many tasks, queues, futures, timeouts and timers: clients send requests
     through an asyncio.Queue to workers and wait for each answer under
     ``asyncio.wait_for``.

   The full, careful comparison (with uvloop, more workloads, latency
   percentiles, CPU per request) is the benchmark suite in the source tree:
   ``python -m bench``.
2. **time**: an hour in the life of a service (a heartbeat a minute, a
   watchdog with a 90 s timeout) under ``tideloop.testing``'s virtual time:
   an hour of loop time in milliseconds of real time.
3. **race**: a small program with a real ordering bug that the stdlib loop
   never shows (two clients' requests read in the order they were sent);
   ``tideloop.testing.explore`` finds a schedule that breaks it, shrinks it
   to the one deviation that matters, and replays it from its tape.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any, Final, cast

import tideloop
from tideloop import testing
from tideloop._pollers import READ, make_poller

__all__ = ["main"]

LOOPS: Final = ("asyncio", "tideloop")
PARTS: Final = ("speed", "time", "race")
MESSAGE_SIZE: Final = 1024
CONNECTIONS: Final = 50
CORE_CLIENTS: Final = 500
CORE_WORKERS: Final = 20


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    return tideloop.new_event_loop if name == "tideloop" else asyncio.new_event_loop


def _pin(cpu: int | None) -> None:
    """Pin this process to *cpu* where the platform can (Linux); otherwise do nothing."""
    setaffinity = getattr(os, "sched_setaffinity", None)
    if cpu is not None and setaffinity is not None:
        try:
            setaffinity(0, {cpu})
        except OSError:
            pass


def _cpu_count() -> int:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return len(getaffinity(0))
    return os.cpu_count() or 1


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by process *pid*, or None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{model} ({os.cpu_count()} CPUs), {platform.system()} {platform.release()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"tideloop {tideloop.__version__}"
    )


def _percentile(ordered: list[float], p: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100.0))]


# -- the echo server (child process) --------------------------------------------------------


async def _echo_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The handler users write: read a line, write it back, respect flow control."""
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _serve() -> None:
    try:
        server = await asyncio.start_server(_echo_lines, "127.0.0.1", 0, backlog=1024)
    except NotImplementedError as exc:
        print(json.dumps({"unavailable": f"NotImplementedError {exc}".strip()}), flush=True)
        return
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    await asyncio.Event().wait()  # serve until the parent terminates this process


# -- the load generator (child process) -----------------------------------------------------


def _client(port: int, server_pid: int, warmup: float, seconds: float) -> dict[str, Any]:
    """Closed-loop echo load: one message in flight per connection; results as a dict."""
    message = b"x" * (MESSAGE_SIZE - 1) + b"\n"
    socks: dict[int, socket.socket] = {}
    poller = make_poller()  # tideloop's own: epoll, kqueue or poll
    for _ in range(CONNECTIONS):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        socks[sock.fileno()] = sock
        poller.register(sock.fileno(), READ)
    clock = time.perf_counter
    remaining = dict.fromkeys(socks, MESSAGE_SIZE)
    started = dict.fromkeys(socks, clock())
    for sock in socks.values():
        sock.send(message)
    latencies: list[float] = []
    measuring = False
    t_start = clock() + warmup
    t_end = t_start + seconds
    cpu0 = srv0 = 0.0
    while True:
        events = poller.poll(0.01)
        now = clock()
        if not measuring and now >= t_start:
            measuring = True
            t_start = now
            cpu0 = time.process_time()
            srv0 = _proc_cpu(server_pid) or 0.0
        if measuring and now >= t_end:
            break
        for fd, _ in events:
            sock = socks[fd]
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed a connection")
            left = remaining[fd] - len(data)
            if left > 0:
                remaining[fd] = left
                continue
            if measuring:
                latencies.append(now - started[fd])
            remaining[fd] = MESSAGE_SIZE
            started[fd] = now
            if sock.send(message) != MESSAGE_SIZE:  # a 1 KiB send never splits on loopback
                raise ConnectionError("short send")
    elapsed = now - t_start
    client_cpu = time.process_time() - cpu0
    server_cpu = _proc_cpu(server_pid)
    for sock in socks.values():
        sock.close()
    poller.close()
    latencies.sort()
    return {
        "ops": len(latencies),
        "seconds": elapsed,
        "p50_us": _percentile(latencies, 50) * 1e6,
        "p99_us": _percentile(latencies, 99) * 1e6,
        "client_cpu": client_cpu / elapsed,
        "server_cpu": None if server_cpu is None else (server_cpu - srv0) / elapsed,
    }


# -- the core workload (child process) ------------------------------------------------------


async def _core(requests: int) -> int:
    """Clients send requests through a queue to workers and wait for answers with a timeout."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, asyncio.Future[int]]] = asyncio.Queue(maxsize=1000)
    per_client = max(1, requests // CORE_CLIENTS)
    ticks = 0

    def tick() -> None:  # a periodic timer, like a heartbeat
        nonlocal ticks
        ticks += 1
        handle_box[0] = loop.call_later(0.001, tick)

    handle_box = [loop.call_later(0.001, tick)]

    async def worker() -> None:
        while True:
            n, fut = await queue.get()
            await asyncio.sleep(0)  # stands in for I/O
            if not fut.done():
                fut.set_result(n * 2)
            queue.task_done()

    async def client(cid: int) -> int:
        done = 0
        for i in range(per_client):
            fut: asyncio.Future[int] = loop.create_future()
            await queue.put((cid + i, fut))
            await asyncio.wait_for(fut, timeout=10.0)
            done += 1
        return done

    workers = [loop.create_task(worker()) for _ in range(CORE_WORKERS)]
    counts = await asyncio.gather(*(client(c) for c in range(CORE_CLIENTS)))
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    handle_box[0].cancel()
    return sum(counts)


def _run_core(loop_name: str, requests: int) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as runner:
        runner.run(_core(max(CORE_CLIENTS, requests // 10)))  # warm-up
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        ops = runner.run(_core(requests))
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return {"ops": ops, "seconds": elapsed, "server_cpu": cpu / elapsed}


# -- the parent: orchestration and output ---------------------------------------------------


def _child(args: list[str], cpu: int | None) -> list[str]:
    extra = [] if cpu is None else ["--cpu", str(cpu)]
    return [sys.executable, "-m", "tideloop.demo", *extra, *args]


def _read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any] | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    return cast(dict[str, Any], json.loads(line)) if line.strip() else None


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _network_round(loop_name: str, cpus: tuple[int | None, int | None], seconds: float) -> Any:
    """One measured echo run; a result dict, or a string saying why there is none."""
    server = subprocess.Popen(
        _child(["--serve", loop_name], cpus[0]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        hello = _read_json_line(server, 30)
        if hello is None:
            _stop(server)
            assert server.stderr is not None
            err = server.stderr.read().strip().splitlines()
            return err[-1] if err else "the server did not start"
        if "port" not in hello:
            return str(hello.get("unavailable", hello))
        client = subprocess.run(
            _child(["--client", str(hello["port"]), str(server.pid), str(seconds)], cpus[1]),
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
        )
        if client.returncode != 0 or not client.stdout.strip():
            err = client.stderr.strip().splitlines()
            return f"load generator failed: {err[-1] if err else client.returncode}"
        return json.loads(client.stdout)
    finally:
        _stop(server)


def _core_round(loop_name: str, cpu: int | None, requests: int) -> Any:
    proc = subprocess.run(
        _child(["--core-run", loop_name, str(requests)], cpu),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        err = proc.stderr.strip().splitlines()
        return err[-1] if err else f"exit status {proc.returncode}"
    return json.loads(proc.stdout)


def _rounds(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"


def _say(text: str, indent: str = "") -> None:
    print(
        textwrap.fill(
            text,
            width=78,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    )


def _fmt_us(us: float) -> str:
    return f"{us / 1000:.1f}ms" if us >= 1000 else f"{us:.0f}us"


def _fmt_pct(v: float | None) -> str:
    return "  n/a" if v is None else f"{100 * v:4.0f}%"


def _report(results: dict[str, list[dict[str, Any]]], unit: str, network: bool) -> None:
    print()
    head = f"  {'loop':<10}{unit + '/s':>14}{'vs asyncio':>12}"
    if network:
        head += f"{'p50':>9}{'p99':>9}{'server CPU':>12}{'client CPU':>12}"
    else:
        head += f"{'CPU':>8}"
    print(head)
    base = statistics.median(r["ops"] / r["seconds"] for r in results["asyncio"])
    for name in LOOPS:
        runs = results[name]
        rate = statistics.median(r["ops"] / r["seconds"] for r in runs)
        line = f"  {name:<10}{rate:>14,.0f}{rate / base:>11.2f}x"
        server = [r["server_cpu"] for r in runs if r.get("server_cpu") is not None]
        srv = statistics.median(server) if server else None
        if network:
            p50 = statistics.median(r["p50_us"] for r in runs)
            p99 = statistics.median(r["p99_us"] for r in runs)
            cli = statistics.median(r["client_cpu"] for r in runs)
            line += f"{_fmt_us(p50):>9}{_fmt_us(p99):>9}{_fmt_pct(srv):>12}{_fmt_pct(cli):>12}"
        else:
            line += f"{_fmt_pct(srv):>8}"
        print(line)


def _demo_network(rounds: int, seconds: float, cpus: tuple[int | None, int | None]) -> bool:
    """The echo demo; False (after saying why) if tideloop cannot run it here."""
    probe = _network_round("tideloop", cpus, 0.2)
    if isinstance(probe, str):
        print(f"tideloop cannot serve TCP here yet ({probe}); showing the core demo instead.\n")
        return False
    pinning = (
        f"The server is pinned to CPU {cpus[0]}, the load generator to CPU {cpus[1]}."
        if cpus[0] is not None
        else "No CPU pinning (it needs 2 CPUs on Linux)."
    )
    _say(
        "Workload: a TCP line-echo server written with asyncio streams (start_server, "
        f"readline, write, drain) on 127.0.0.1; {MESSAGE_SIZE}-byte lines, {CONNECTIONS} "
        "connections with one line in flight each. The load generator is plain non-blocking "
        f"sockets in another process. {pinning}"
    )
    print(f"{_rounds(rounds)} of {seconds:g} s per loop, interleaved; median shown.\n")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in LOOPS}
    for r in range(rounds):
        for name in LOOPS:
            res = _network_round(name, cpus, seconds)
            if isinstance(res, str):
                print(f"  round {r + 1} {name}: failed: {res}")
                if name == "tideloop":
                    print("tideloop's server failed; showing the core demo instead.\n")
                    return False
                raise SystemExit(1)
            results[name].append(res)
            print(
                f"  round {r + 1}  {name:<9}{res['ops'] / res['seconds']:>10,.0f} msgs/s   "
                f"server CPU {_fmt_pct(res['server_cpu'])}   "
                f"client CPU {_fmt_pct(res['client_cpu'])}",
                flush=True,
            )
    _report(results, "msgs", network=True)
    server = [r["server_cpu"] for rs in results.values() for r in rs if r["server_cpu"]]
    if server and min(server) < 0.9:
        print()
        _say(
            "Note: in some runs the server used less than 90% of its CPU, so it was not "
            "saturated: those numbers may be limited by the load generator or by other "
            "programs running on this machine. Compare CPU use, or run again on a quiet machine."
        )
    elif server:
        print("\nEvery server ran at ~100% of its CPU: the servers, not the client, set the pace.")
    return True


def _demo_core(rounds: int, cpu: int | None, requests: int) -> None:
    _say(
        f"Workload: {CORE_CLIENTS} client tasks send {requests:,} requests through an "
        f"asyncio.Queue to {CORE_WORKERS} worker tasks and wait for each answer with "
        "asyncio.wait_for (a timer armed and cancelled per request), while a 1 ms heartbeat "
        "timer runs. One fresh process per run"
        + (f", pinned to CPU {cpu}." if cpu is not None else ".")
    )
    print(f"{_rounds(rounds)} per loop, interleaved; median shown.\n")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in LOOPS}
    for r in range(rounds):
        for name in LOOPS:
            res = _core_round(name, cpu, requests)
            if isinstance(res, str):
                print(f"  round {r + 1} {name}: failed: {res}")
                raise SystemExit(1)
            results[name].append(res)
            print(
                f"  round {r + 1}  {name:<9}{res['ops'] / res['seconds']:>10,.0f} requests/s"
                f"   ({res['seconds']:.2f} s)",
                flush=True,
            )
    _report(results, "requests", network=False)


# -- part 2: virtual time ------------------------------------------------------------------


async def _an_hour_of_heartbeats() -> int:
    """An hour of a service's life: a heartbeat a minute, a watchdog that allows 90 s of silence."""
    beats = 0
    beat = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal beats
        for _ in range(60):
            await asyncio.sleep(60)
            beats += 1
            beat.set()

    async def watchdog() -> None:
        while beats < 60:
            beat.clear()
            async with asyncio.timeout(90):  # raises TimeoutError after 90 s of silence
                await beat.wait()

    await asyncio.gather(heartbeat(), watchdog())
    return beats


async def _timed_hour() -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    beats = await _an_hour_of_heartbeats()
    return beats, loop.time() - start


def _demo_time() -> None:
    _say(
        "A service's hour: a heartbeat every 60 s and a watchdog that raises if 90 s pass "
        "without one (asyncio.sleep, asyncio.timeout, an Event). On the stdlib loop a test "
        "of it takes an hour. With tideloop.testing's virtual time, the clock jumps to the "
        "next timer whenever every task waits:"
    )
    print("\n    testing.run(main(), virtual_time=True)\n")
    t0 = time.perf_counter()
    beats, loop_seconds = testing.run(_timed_hour(), virtual_time=True)
    real = time.perf_counter() - t0
    _say(
        f"{beats} heartbeats, {loop_seconds:,.0f} s of loop time "
        f"({loop_seconds / 3600:g} h) in {real * 1000:.1f} ms of real time.",
        "  ",
    )
    print()
    _say(
        "Timeouts, wait_for, call_later and library timeouts (aiohttp, anyio) follow the "
        "same clock; a run where every task waits and nothing can wake them is reported as "
        "a deadlock instead of hanging. In pytest: pytest --tideloop-virtual-time."
    )


# -- part 3: a race found, shrunk and replayed -------------------------------------------------


async def requests_in_order() -> None:
    """Two clients send one request each, A before B; the server expects A's first."""
    seen: list[bytes] = []
    both = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readline())
        if len(seen) == 2:
            both.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, a = await asyncio.open_connection("127.0.0.1", port)
    _, b = await asyncio.open_connection("127.0.0.1", port)
    a.write(b"A\n")
    b.write(b"B\n")
    await both.wait()
    a.close()
    b.close()
    server.close()
    await server.wait_closed()
    assert seen == [b"A\n", b"B\n"], f"the server read {seen[0]!r} first"


def _source(function: Callable[..., object]) -> str:
    try:
        return textwrap.indent(inspect.getsource(function), "    ")
    except (OSError, TypeError):  # no source shipped (a zip app, a frozen build)
        return f"    {function.__qualname__}: {function.__doc__}\n"


def _demo_race(runs: int, schedules: int) -> bool:
    """The race part; False if exploring did not find the race (it should, at once)."""
    _say(
        "A program with an ordering bug: two connections' data have no order, but the "
        "server assumes it reads A's request first because A sent it first."
    )
    print()
    print(_source(requests_in_order))
    failures = 0
    for _ in range(runs):
        try:
            asyncio.run(requests_in_order())
        except AssertionError:
            failures += 1
    _say(f"On the stdlib loop: {runs} runs, {failures} failed. The bug hides.", "  ")
    print("\n    found = testing.explore(requests_in_order, schedules=1000)\n")
    t0 = time.perf_counter()
    found = testing.explore(requests_in_order, strategy="random", schedules=schedules)
    elapsed = time.perf_counter() - t0
    tape = found.tape
    if tape is None:
        print(f"  No failing schedule in {found.schedules} schedules ({elapsed:.2f} s).")
        return False
    _say(
        f"Schedule {found.schedules} of up to {schedules} failed ({tape.failure}); "
        f"shrunk from {tape.shrunk_from} deviation(s) to {len(tape.deviations)} in "
        f"{found.shrink_runs} reruns, {elapsed * 1000:.0f} ms in all:",
        "  ",
    )
    print()
    print(textwrap.indent(tape.words(), "    "))
    with tempfile.TemporaryDirectory() as tmp:
        path = tape.save(os.path.join(tmp, "requests_in_order.tape.json"))
        print(f"\n    found.tape.save({path.name!r}); testing.replay(requests_in_order, ...)\n")
        try:
            testing.replay(requests_in_order, path)
        except AssertionError as exc:
            _say(f"Replayed from the tape: it fails again ({type(exc).__name__}: {exc}).", "  ")
        else:
            _say("Replayed from the tape: it passed this time.", "  ")
            return False
    print()
    _say(
        "The search varies only what asyncio leaves open (which ready socket is served "
        "first, equal timer deadlines, when a thread's result arrives), so every failure "
        "is a schedule the program can meet in production. In pytest: "
        "pytest --tideloop-seeds=100."
    )
    return True


def _heading(n: int, title: str) -> None:
    print(f"\n{n}. {title}\n{'-' * (len(title) + 3)}\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m tideloop.demo``."""
    p = argparse.ArgumentParser(
        prog="python -m tideloop.demo",
        description="What tideloop is for: speed side by side with the stdlib loop, "
        "virtual time, and a race found, shrunk and replayed.",
    )
    p.add_argument(
        "--part",
        action="append",
        choices=PARTS,
        help="run this part only (repeatable; default: all three)",
    )
    p.add_argument("--core", action="store_true", help="speed: the in-process core workload")
    p.add_argument("--rounds", type=int, default=2, help="speed: rounds per loop (default 2)")
    p.add_argument(
        "--seconds", type=float, default=1.0, help="speed: measured seconds per echo run (1)"
    )
    p.add_argument("--requests", type=int, default=100_000, help="speed: requests per core run")
    p.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--core-run", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    _pin(args.cpu)
    if args.serve:  # child: an echo server
        with asyncio.Runner(loop_factory=_loop_factory(args.serve)) as runner:
            runner.run(_serve())
        return
    if args.client:  # child: the load generator
        port, pid, seconds = args.client
        print(json.dumps(_client(int(port), int(pid), 0.5, float(seconds))))
        return
    if args.core_run:  # child: one core-workload run
        print(json.dumps(_run_core(args.core_run[0], int(args.core_run[1]))))
        return

    parts = [part for part in PARTS if part in (args.part or PARTS)]
    print("tideloop demo: a drop-in asyncio event loop, and what it lets you test")
    print(f"Machine: {_machine()}")
    ok = True
    for n, part in enumerate(parts, 1):
        if part == "speed":
            _heading(n, "Speed: the same asyncio code on the stdlib loop and on tideloop")
            pinned = _cpu_count() >= 2 and hasattr(os, "sched_setaffinity")
            cpus: tuple[int | None, int | None] = (0, 1) if pinned else (None, None)
            if args.core or not _demo_network(args.rounds, args.seconds, cpus):
                _demo_core(args.rounds, cpus[0], args.requests)
            print()
            _say(
                "Measured just now on this machine; numbers vary between machines and runs "
                "(other programs, CPU frequency). For the full comparison with uvloop and more "
                "workloads, run the benchmark suite from a source checkout: python -m bench"
            )
        elif part == "time":
            _heading(n, "Virtual time: an hour of asyncio in milliseconds")
            _demo_time()
        else:
            _heading(n, "A race found, shrunk and replayed")
            ok = _demo_race(runs=100, schedules=1000) and ok
    print()
    print("Use it:       tideloop.run(main())")
    print("              asyncio.run(main(), loop_factory=tideloop.new_event_loop)")
    print("Test with it: pytest --tideloop    (README.md, docs/quickstart.md)")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
