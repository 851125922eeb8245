"""What the numbers were measured on: CPU, kernel, Python, packages, tools, background load."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = [
    "background_cpu",
    "describe",
    "git_commit",
    "loadavg",
    "source_fingerprint",
    "wait_quiet",
]

ROOT = Path(__file__).resolve().parent.parent


def _first(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs, from the first line of /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values)
    return total - idle, total


def background_cpu(seconds: float = 1.0) -> float | None:
    """Percent of all CPUs busy over *seconds* while this suite does nothing (other load)."""
    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    if before is None or after is None or after[1] == before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


def wait_quiet(max_pct: float, timeout: float) -> None:
    """Wait (up to *timeout* s) until other programs use at most *max_pct* % of one core."""
    ncpu = os.cpu_count() or 1
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = background_cpu(0.5)
        if busy is None or busy * ncpu <= max_pct:
            return


def source_fingerprint() -> str | None:
    """sha256 over tideloop's source files: shows whether the code changed during a run."""
    src = ROOT / "src" / "tideloop"
    if not src.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(src.rglob("*.py")):
        digest.update(str(path.relative_to(src)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def git_commit() -> str | None:
    git = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])
    return git + ("-dirty" if dirty else "") if git else None


def describe() -> dict[str, Any]:
    """Machine and software facts for the results JSON."""
    return {
        "host": socket.gethostname(),
        "cpu_model": _first("/proc/cpuinfo", "model name") or platform.processor() or "?",
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory": _first("/proc/meminfo", "MemTotal"),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": {
            name: _version(name)
            for name in ("tideloop", "uvloop", "rloop", "aiohttp", "matplotlib")
        },
        "tools": {
            "wrk": _run(["wrk", "-v"]),
            "gcc": _run(["gcc", "--version"]),
            "taskset": shutil.which("taskset") is not None,
        },
        "git_commit": git_commit(),
        "tideloop_source_sha256": source_fingerprint(),
    }
