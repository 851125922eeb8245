"""bench._worker: a primitive's warm-up and measured window, the same for every loop.

A JIT (PyPy) needs a few hundred milliseconds of a workload before its
speed settles, and finishes CPython-sized runs in milliseconds: the warm-up
repeats n/10 runs for ``warmup`` seconds, the measured part repeats runs of
n for ``min_seconds``, and both default to what the worker did before (one
warm-up run, one measured run).
"""

from __future__ import annotations

import json
import time

import pytest

from bench import _worker
from bench.api import Primitive, Sample


def workload(calls: list[int], seconds: float, latencies: bool = False) -> Primitive:
    async def run(n: int) -> Sample:
        calls.append(n)
        time.sleep(seconds)
        return Sample(n, [1000] * n if latencies else None)

    return Primitive(name="fake", title="fake", unit="ops", run=run, quick_n=100, full_n=100)


def result(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return out


def test_by_default_one_warm_up_run_and_one_measured_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[int] = []
    _worker.run_primitive(workload(calls, 0.0), "asyncio", 100)
    assert calls == [10, 100]
    out = result(capsys)
    assert (out["ops"], out["warmup_runs"], out["runs"]) == (100, 1, 1)


def test_warm_up_and_measured_runs_repeat_for_their_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[int] = []
    _worker.run_primitive(
        workload(calls, 0.01, latencies=True), "asyncio", 100, warmup=0.1, min_seconds=0.05
    )
    warm = [n for n in calls if n == 10]
    measured = [n for n in calls if n == 100]
    assert len(warm) >= 5  # ~10 runs of 10 ms in 0.1 s
    assert len(measured) >= 3  # ~5 runs of 10 ms in 0.05 s
    assert calls == warm + measured  # all the warm-up first
    out = result(capsys)
    assert out["ops"] == 100 * len(measured)
    assert out["runs"] == len(measured)
    assert out["warmup_runs"] == len(warm)
    assert isinstance(out["seconds"], float) and out["seconds"] >= 0.05
    assert out["p50_us"] == 1.0  # latencies of every measured run
