"""The examples under examples/ run and do what their docstrings say.

The Prometheus exporter needs prometheus-client, a dependency of the
examples only (examples/requirements.txt). Without it the test skips,
unless ``TIDELOOP_REQUIRE_EXAMPLES=1`` (CI sets it and installs the
requirements): then it fails.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from needs import missing

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        missing(
            f"{module} is not installed (pip install -r examples/requirements.txt)",
            "TIDELOOP_REQUIRE_EXAMPLES",
        )


def samples(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus exposition, by name and labels."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_prometheus_exporter_serves_the_loop_metrics() -> None:
    require("prometheus_client")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "prometheus_exporter.py"), "--self-test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got = samples(out.stdout)
    label = '{loop="main"}'
    for name in (
        "tideloop_iterations_total",
        "tideloop_callbacks_total",
        "tideloop_busy_seconds_total",
        "tideloop_idle_seconds_total",
        "tideloop_slow_callbacks_total",
        "tideloop_ready_callbacks",
        "tideloop_timers",
        "tideloop_fds",
        "tideloop_executor_pending",
        "tideloop_max_lag_seconds",
    ):
        assert name + label in got, name
    assert got["tideloop_iterations_total" + label] > 10
    # The workload blocks the loop for 30 ms a few times: busy time and lag.
    assert got["tideloop_busy_seconds_total" + label] >= 0.03
    assert got["tideloop_max_lag_seconds" + label] > 0.005
    # The histogram is cumulative and its count is the +Inf bucket.
    buckets = [v for k, v in got.items() if k.startswith("tideloop_timer_lag_seconds_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] > 0
    assert got["tideloop_timer_lag_seconds_count" + label] == buckets[-1]
    assert got["tideloop_timer_lag_seconds_sum" + label] > 0
    # The scrape ran in the HTTP server's thread, while the loop waited on it.
    assert got["tideloop_executor_pending" + label] == 1
