"""Running one case under one loop, once: processes, pinning, measurement windows.

Every run is a fresh worker process (``bench/_worker.py``) pinned to the
server CPU, on the interpreter the loop's name says (`worker_command`: the
host's Python, or PyPy in the Debian root for ``pypy/...``; the process
started is the worker itself, whatever the interpreter). Every worker
warms up before it is measured (`warmup_for`): ``--warmup`` seconds, and on
an interpreter with a JIT (PyPy) at least ``--jit-warmup``. For a server workload
the load generator (the compiled echo client or ``wrk``) runs pinned to the
other CPU, and the measurement window is the load generator's, after its
warm-up:

- echo client: it prints ``START`` when warm-up ends and ``END`` when
  measurement ends; the server's CPU time is read from ``/proc/<pid>/stat``
  at each, so set-up and teardown are outside the window;
- wrk: a warm-up ``wrk`` run first, then the server's CPU time is read
  just before the measured ``wrk`` starts and just after it exits.

Memory (echo client only): the server's RSS (``/proc/<pid>/status``) once it
listens and again at ``END``, with every connection open and busy;
``rss_per_conn_kib`` is the growth divided by the number of connections.

Saturation is reported, not assumed: ``cpu_pct`` is the server's CPU time
over wall time in the window (100 = one core fully busy), ``client_cpu_pct``
the load generator's. A server near 100% with a client well below it is
server-bound; anything else is flagged in the table.

``other_cpu_pct`` is what everything else on the machine used meanwhile
(all CPUs' busy time from ``/proc/stat`` minus the measured processes'; it
includes kernel work not charged to them, such as some softirq time): a run
with a high value was disturbed.

Each run returns a flat dict (see `finish`), never an exception: a loop
that raises NotImplementedError for what the workload needs (rloop's
``create_unix_server``) is ``status: "cannot_run"`` with the reason the
worker gives (`bench._worker.cannot_run`); something missing on the
machine (wrk, a package) is ``status: "unavailable"``; any other failure
``status: "error"`` with the reason.

A worker's environment is its interpreter's, with ``TIDELOOP_PURE=1`` for
``tideloop-pure`` and without it for every other loop
(`bench.loops.worker_env`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import interpreters, loops
from bench.api import Primitive, Server
from bench.clients import build
from bench.interpreters import Interpreter

__all__ = ["Config", "run_case", "worker_command"]

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
WRK_LUA = Path(__file__).resolve().parent / "clients" / "wrk_report.lua"


@dataclass
class Config:
    quick: bool
    repeats: int
    warmup: float  # seconds of load (servers) or of warm-up runs (primitives) before measuring
    duration: float  # seconds measured (server workloads)
    server_cpu: int | None
    client_cpu: int | None
    python: str = sys.executable  # the host's interpreter for the workers (not pypy/...)
    #: A primitive's measured run of n is repeated until this many seconds have passed.
    min_seconds: float = 0.0
    #: The least warm-up on an interpreter with a JIT (PyPy), servers and primitives.
    jit_warmup: float = 0.0
    _echo_client: Path | str | None = field(default=None, repr=False)
    _tls_echo_client: Path | str | None = field(default=None, repr=False)

    def echo_client(self) -> Path:
        """The compiled echo client (built on first use); raises RuntimeError if unavailable."""
        if self._echo_client is None:
            try:
                self._echo_client = build.echo_client()
            except RuntimeError as exc:
                self._echo_client = str(exc)
        if isinstance(self._echo_client, str):
            raise RuntimeError(self._echo_client)
        return self._echo_client

    def tls_echo_client(self) -> Path:
        """The echo client with its TLS mode (built on first use); RuntimeError if unavailable."""
        if self._tls_echo_client is None:
            try:
                self._tls_echo_client = build.echo_client_tls()
            except RuntimeError as exc:
                self._tls_echo_client = str(exc)
        if isinstance(self._tls_echo_client, str):
            raise RuntimeError(self._tls_echo_client)
        return self._tls_echo_client


def pin(cpu: int | None) -> list[str]:
    """Command prefix pinning a process to *cpu* (nothing if pinning is off or impossible)."""
    if cpu is None or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(cpu)]


def worker_command(loop: str, spec: dict[str, Any], cfg: Config) -> tuple[Interpreter, list[str]]:
    """The interpreter that runs *loop* and the pinned command of its worker for *spec*.

    The worker is given the loop's plain name (``tideloop`` for
    ``pypy/tideloop``): which interpreter it runs on is decided here, from
    the name's prefix. Every program in the command execs the next, so the
    process started is the worker: its pid is the one measured.
    """
    prefix, inner = interpreters.split(loop)
    interp = interpreters.interpreter(prefix, cfg.python)
    args = ["-m", "bench._worker", json.dumps({**spec, "loop": inner})]
    return interp, [*pin(cfg.server_cpu), *interp.command(args)]


def warmup_for(interp: Interpreter, cfg: Config) -> float:
    """Seconds of warm-up before measuring a worker on *interp*.

    ``--warmup`` for every loop, and at least ``--jit-warmup`` on an
    interpreter with a JIT. PyPy compiles as it runs: aiohttp's server on
    PyPy needed 5-7 s of load before its CPU time per request fell from
    1.8 ms to its steady 80 us, where CPython's loops run at their steady
    speed after a second. A longer warm-up changes nothing for a loop that
    is already steady, so each loop is measured at its interpreter's steady
    state; the warm-up each run had is in its result (``warmup_s``).
    """
    return max(cfg.warmup, cfg.jit_warmup) if interp.jit else cfg.warmup


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process *pid*, all threads, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "pid (comm) ": state is field 3 of proc(5), utime 14, stime 15.
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_rss(pid: int) -> int:
    """Resident set size of process *pid* in bytes, from /proc/<pid>/status (VmRSS)."""
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(rss_idle: int, rss_busy: int, conns: int) -> dict[str, float]:
    """The server's RSS listening and serving, and its growth per connection (KiB)."""
    return {
        "rss_idle_kib": rss_idle / 1024,
        "rss_kib": rss_busy / 1024,
        "rss_per_conn_kib": (rss_busy - rss_idle) / 1024 / conns,
    }


def machine_busy() -> float:
    """CPU seconds all CPUs have spent busy since boot (/proc/stat; idle and iowait excluded)."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / CLK_TCK


def other_load(busy: float, own: float, wall: float) -> float:
    """CPU % (100 = one core) used by everything but the measured processes during *wall*."""
    return max(0.0, 100.0 * (busy - own) / wall) if wall > 0 else 0.0


class LineReader:
    """Lines from a child's stdout pipe, with a deadline (no thread, no blocking forever)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""
        self.eof = False

    def readline(self, deadline: float) -> str | None:
        """The next line, or None at EOF; TimeoutError once *deadline* (monotonic) passes."""
        while b"\n" not in self.buf:
            if self.eof:
                rest, self.buf = self.buf, b""
                return rest.decode(errors="replace") if rest else None
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise TimeoutError("no output from the process in time")
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if ready:
                chunk = os.read(self.fd, 65536)
                if chunk:
                    self.buf += chunk
                else:
                    self.eof = True
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def last_line(text: str) -> str:
    """The last non-empty line of a child's stderr: the exception, for a traceback."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def tail(path: Path) -> str:
    try:
        return last_line(path.read_text(errors="replace"))
    except OSError:
        return ""


def finish(
    ops: int,
    *,
    seconds: float,
    cpu_user: float,
    cpu_sys: float,
    cpu_wall: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The flat result of a successful run (an error if nothing was done)."""
    if ops <= 0:
        return {"status": "error", "reason": "no operation completed in the measurement window"}
    result: dict[str, Any] = {
        "status": "ok",
        "ops": ops,
        "seconds": round(seconds, 6),
        "ops_per_s": ops / seconds if seconds > 0 else 0.0,
        "cpu_user_s": round(cpu_user, 4),
        "cpu_sys_s": round(cpu_sys, 4),
        "cpu_pct": 100.0 * (cpu_user + cpu_sys) / cpu_wall if cpu_wall > 0 else 0.0,
        "cpu_user_us_per_op": 1e6 * cpu_user / ops if ops else None,
        "cpu_sys_us_per_op": 1e6 * cpu_sys / ops if ops else None,
    }
    result.update(extra)
    return result


def run_case(
    workload: Primitive | Server, params: dict[str, int], loop: str, cfg: Config
) -> dict[str, Any]:
    """Run *workload* with *params* under *loop* once; never raises for a failed run."""
    try:
        if isinstance(workload, Primitive):
            return run_primitive(workload, params, loop, cfg)
        return run_server(workload, params, loop, cfg)
    except Exception as exc:  # a failed run is a result, not a crash of the suite
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}


def run_primitive(
    workload: Primitive, params: dict[str, int], loop: str, cfg: Config
) -> dict[str, Any]:
    spec = {
        "kind": "primitive",
        "workload": workload.name,
        "loop": loop,
        "n": params["n"],
        "min_seconds": cfg.min_seconds,
    }
    interp = interpreters.interpreter(interpreters.split(loop)[0], cfg.python)
    warmup = spec["warmup"] = warmup_for(interp, cfg)
    _, cmd = worker_command(loop, spec, cfg)
    # Children's rusage grows by exactly this worker's once it is reaped.
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, t0 = machine_busy(), time.monotonic()
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=loops.worker_env(loop, interp),
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    busy1, t1 = machine_busy(), time.monotonic()
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        why = last_line(proc.stderr) or f"exit {proc.returncode}"
        return {"status": "error", "reason": why}
    out = json.loads(lines[-1])
    if out["status"] != "ok":
        return dict(out)
    keep = ("p50_us", "p90_us", "p99_us", "max_us", "warmup_runs", "runs", "build")
    extra = {k: out[k] for k in keep if k in out}
    # Over the worker's whole life (start-up included): a busy machine shows here.
    extra["other_cpu_pct"] = other_load(busy1 - busy0, own, t1 - t0)
    extra["warmup_s"] = warmup
    return finish(
        out["ops"],
        seconds=out["seconds"],
        cpu_user=out["cpu_user_s"],
        cpu_sys=out["cpu_sys_s"],
        cpu_wall=out["seconds"],
        extra=extra,
    )


def run_server(workload: Server, params: dict[str, int], loop: str, cfg: Config) -> dict[str, Any]:
    if workload.client in ("http", "https") and shutil.which("wrk") is None:
        return {"status": "unavailable", "reason": "wrk is not installed (apt-get install wrk)"}
    client = None
    if workload.client == "echo":
        client = cfg.echo_client()
    elif workload.client == "tls_echo":
        client = cfg.tls_echo_client()
    interp = interpreters.interpreter(interpreters.split(loop)[0], cfg.python)
    # The load generators warm the server up for this long (their window follows).
    cfg = dataclasses.replace(cfg, warmup=warmup_for(interp, cfg))
    # A Unix socket's directory must be one both the worker and the client see.
    with tempfile.TemporaryDirectory(prefix="tideloop-bench-", dir=interp.scratch_dir()) as tmp:
        address: Any = ["127.0.0.1", 0]
        if workload.family == "unix":
            address = interp.to_inside(Path(tmp) / "s.sock")
        spec = {
            "kind": "server",
            "workload": workload.name,
            "loop": loop,
            "params": params,
            "address": address,
        }
        errlog = Path(tmp) / "server.err"
        _, cmd = worker_command(loop, spec, cfg)
        with open(errlog, "wb") as err:
            server = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=err,
                env=loops.worker_env(loop, interp),
                cwd=ROOT,
            )
        try:
            line = LineReader(server).readline(time.monotonic() + 60)
            if line is None:
                server.wait()
                why = tail(errlog) or f"exit {server.returncode}"
                return {"status": "error", "reason": f"server did not start: {why}"}
            status = json.loads(line)
            if status["status"] != "ready":
                return dict(status)
            bound = status["address"]
            if isinstance(bound, str):  # a Unix socket, by the worker's name for it
                bound = str(interp.to_host(bound))
            tls = workload.client in ("tls_echo", "https")
            # Listening, before any connection: the base of the per-connection memory.
            rss_idle = proc_rss(server.pid)
            if client is not None:
                result = drive_echo(client, bound, params, server.pid, cfg, tls=tls)
            else:
                result = drive_wrk(bound, params, server.pid, cfg, tls=tls)
            if result.get("status") == "ok" and "rss_busy" in result:
                result.update(memory(rss_idle, result.pop("rss_busy"), params["conns"]))
            if result.get("status") == "ok":
                result["warmup_s"] = cfg.warmup
                if "build" in status:
                    result["build"] = status["build"]
            if server.poll() is not None:
                why = tail(errlog) or f"exit {server.returncode}"
                return {"status": "error", "reason": f"server died: {why}"}
            return result
        finally:
            stop(server)
            if server.stdout is not None:
                server.stdout.close()


def drive_echo(
    client: Path,
    bound: Any,
    params: dict[str, int],
    server_pid: int,
    cfg: Config,
    *,
    tls: bool = False,
) -> dict[str, Any]:
    if isinstance(bound, str):
        target = ["unix", bound]
    else:
        target = ["tls" if tls else "tcp", bound[0], str(bound[1])]
    cmd = [
        *pin(cfg.client_cpu),
        str(client),
        *target,
        str(params["conns"]),
        str(params["size"]),
        str(cfg.warmup),
        str(cfg.duration),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        reader = LineReader(proc)
        deadline = time.monotonic() + cfg.warmup + cfg.duration + 60
        marks: dict[str, tuple[float, float, float, float]] = {}
        rss_busy = 0
        result_line = None
        while (line := reader.readline(deadline)) is not None:
            if line in ("START", "END"):
                user, system = proc_cpu(server_pid)
                marks[line] = (time.monotonic(), user, system, machine_busy())
                if line == "END":  # every connection open and busy
                    rss_busy = proc_rss(server_pid)
            elif line.startswith("{"):
                result_line = line
                break
        proc.wait(timeout=30)
        if result_line is None or "START" not in marks or "END" not in marks:
            assert proc.stderr is not None
            why = last_line(proc.stderr.read().decode(errors="replace"))
            return {"status": "error", "reason": f"echo client failed: {why or proc.returncode}"}
    finally:
        stop(proc)
        if proc.stderr is not None:
            proc.stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()
    out = json.loads(result_line)
    (t0, u0, s0, b0), (t1, u1, s1, b1) = marks["START"], marks["END"]
    client_cpu = out["client_user_s"] + out["client_sys_s"]
    own = (u1 - u0) + (s1 - s0) + client_cpu
    extra = {
        "other_cpu_pct": other_load(b1 - b0, own, t1 - t0),
        "p50_us": out["p50_us"],
        "p90_us": out["p90_us"],
        "p99_us": out["p99_us"],
        "max_us": out["max_us"],
        "client_cpu_pct": 100.0 * client_cpu / out["seconds"] if out["seconds"] else None,
        "client": out,
        "rss_busy": rss_busy,
    }
    return finish(
        out["messages"],
        seconds=out["seconds"],
        cpu_user=u1 - u0,
        cpu_sys=s1 - s0,
        cpu_wall=t1 - t0,
        extra=extra,
    )


def wrk_cmd(url: str, conns: int, seconds: float, cpu: int | None) -> list[str]:
    return [
        *pin(cpu),
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(WRK_LUA),
        url,
    ]


def drive_wrk(
    bound: Any, params: dict[str, int], server_pid: int, cfg: Config, *, tls: bool = False
) -> dict[str, Any]:
    url = f"{'https' if tls else 'http'}://{bound[0]}:{bound[1]}/"
    conns = params["conns"]
    warm = subprocess.run(
        wrk_cmd(url, conns, cfg.warmup, cfg.client_cpu),
        capture_output=True,
        text=True,
        timeout=cfg.warmup + 60,
        check=False,
    )
    if warm.returncode != 0:
        return {"status": "error", "reason": f"wrk failed: {last_line(warm.stderr)}"}
    u0, s0 = proc_cpu(server_pid)
    b0, t0 = machine_busy(), time.monotonic()
    proc = subprocess.Popen(
        wrk_cmd(url, conns, cfg.duration, cfg.client_cpu),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # wait4 gives the client's own CPU time (its rusage) as it is reaped.
    _, status, usage = os.wait4(proc.pid, 0)
    b1, t1 = machine_busy(), time.monotonic()
    u1, s1 = proc_cpu(server_pid)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout.read().decode(errors="replace")
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stdout.close()
    proc.stderr.close()
    found = [ln for ln in stdout.splitlines() if ln.startswith("WRK_JSON ")]
    if proc.returncode != 0 or not found:
        return {"status": "error", "reason": f"wrk failed: {last_line(stderr or stdout)}"}
    out = json.loads(found[-1].removeprefix("WRK_JSON "))
    seconds = out["duration_us"] / 1e6
    errors = sum(out["errors"].values())
    if errors:
        # Errors would make req/s meaningless (e.g. non-2xx answers or resets).
        return {"status": "error", "reason": f"wrk saw errors: {out['errors']}"}
    client_cpu = usage.ru_utime + usage.ru_stime
    own = (u1 - u0) + (s1 - s0) + client_cpu
    extra = {
        "other_cpu_pct": other_load(b1 - b0, own, t1 - t0),
        "p50_us": out["p50_us"],
        "p90_us": out["p90_us"],
        "p99_us": out["p99_us"],
        "max_us": out["max_us"],
        "client_cpu_pct": 100.0 * client_cpu / seconds,
        "client": out,
    }
    return finish(
        out["requests"],
        seconds=seconds,
        cpu_user=u1 - u0,
        cpu_sys=s1 - s0,
        cpu_wall=t1 - t0,
        extra=extra,
    )
