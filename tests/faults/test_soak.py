"""The soak's short version: 30 s of the mixed workload of ``bench/soak.py``.

The promise held (issue 27): under a long mixed load (TCP, TLS, UDP,
subprocesses, timers, the executor), every echo comes back as it was sent
and the loop's resources stay flat: no error, every worker makes progress,
open fds and tasks after the warm-up stay within what the workers hold at
once, and RSS grows by less than a bound no leak of one object per
operation could stay under. 30 s cannot measure a slope worth quoting: the
10-minute runs that do are in docs/reliability.md (``python -m bench.soak``).
The same run on the stdlib loop must pass the same checks.
"""

from __future__ import annotations

import ssl

import pytest
from fault_support import RSS_TELLS_LEAKS

from bench.soak import TCP_CONNECTIONS, soak

DURATION = 30.0
WARMUP = 10.0


@pytest.mark.parametrize("soak_loop", ["asyncio", "tideloop"])
def test_soak_30s(
    soak_loop: str, fault_tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    result = soak(soak_loop, DURATION, WARMUP, tls=fault_tls_contexts)
    assert result.errors == []
    # Every worker ran, and many times (each does hundreds a second here).
    for worker in ("tcp", "churn", "udp", "timers", "executor", "tls", "tls-persistent"):
        assert result.ops.get(worker, 0) >= 50, (worker, result.ops)
    assert result.ops.get("subprocess", 0) >= 20, result.ops
    assert result.ops["udp-lost"] <= result.ops["udp"] // 100, result.ops
    after = [s for s in result.samples if s["t"] >= WARMUP]
    assert len(after) >= DURATION - WARMUP - 2
    # Resources held at once: the persistent connections (both ends), one
    # churn, TLS and child connection each, the UDP pair, the loop's own.
    first = after[0]
    for s in after:
        assert s["fds"] <= first["fds"] + 12, (s, first)
        assert s["tasks"] <= TCP_CONNECTIONS * 2 + 20, s
    # A leak of a kilobyte per operation would grow RSS by tens of MiB here.
    growth_mib = (max(s["rss_kib"] for s in after) - first["rss_kib"]) / 1024
    assert growth_mib < 24 or not RSS_TELLS_LEAKS, (growth_mib, result.summary())
    if soak_loop.startswith("tideloop"):
        last = after[-1]["metrics"]
        # The executor worker's digest and a child being started (tideloop
        # starts children on a thread of its own) may both be in flight.
        assert last["executor_pending"] <= 2, last
        assert last["timers"] < 200, last
