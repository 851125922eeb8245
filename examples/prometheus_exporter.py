"""Export a tideloop loop's metrics to Prometheus (an example; needs prometheus-client).

    # tideloop is not on PyPI yet: install it from a clone of the repository
    pip install . -r examples/requirements.txt             # from the repository's root
    python examples/prometheus_exporter.py --port 9464     # then scrape :9464/metrics
    python examples/prometheus_exporter.py --self-test     # scrape once, print, exit

The recipe is `LoopCollector`: a prometheus_client collector that reads
``loop.metrics()`` when Prometheus scrapes. The scrape runs in the HTTP
server's thread; ``metrics()`` may be called from any thread and returns a
consistent snapshot, so no locking or loop callback is needed. Counters map
to Prometheus counters, the instantaneous fields to gauges, and the timer lag
buckets to a histogram (tideloop's buckets are per-bucket counts;
Prometheus wants cumulative ones).

Utilisation over the scrape interval, in PromQL:

    rate(tideloop_busy_seconds_total[1m])
      / (rate(tideloop_busy_seconds_total[1m]) + rate(tideloop_idle_seconds_total[1m]))
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
import urllib.request
from collections.abc import Iterator

from prometheus_client import start_http_server
from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

import tideloop


class LoopCollector(Collector):
    """Prometheus metrics of one tideloop loop, labelled ``loop=<name>``."""

    def __init__(self, loop: tideloop.Loop, name: str = "main") -> None:
        self.loop = loop
        self.name = name

    def collect(self) -> Iterator[Metric]:
        m = self.loop.metrics()
        labels = [self.name]

        def counter(name: str, doc: str, value: float) -> Metric:
            family = CounterMetricFamily(name, doc, labels=["loop"])
            family.add_metric(labels, value)
            return family

        def gauge(name: str, doc: str, value: float) -> Metric:
            family = GaugeMetricFamily(name, doc, labels=["loop"])
            family.add_metric(labels, value)
            return family

        yield counter("tideloop_iterations", "Loop iterations (polls).", m.iterations)
        yield counter("tideloop_callbacks", "Callbacks run.", m.callbacks)
        yield counter("tideloop_busy_seconds", "Time spent running, not polling.", m.busy_time)
        yield counter("tideloop_idle_seconds", "Time blocked in the poller.", m.idle_time)
        yield counter(
            "tideloop_slow_callbacks", "Callbacks over the slow threshold.", m.slow_callbacks
        )
        yield gauge("tideloop_ready_callbacks", "Callbacks queued now.", m.ready)
        yield gauge("tideloop_timers", "Pending timers (cancelled excluded).", m.timers)
        yield gauge("tideloop_fds", "Registered readers plus writers.", m.fds)
        yield gauge("tideloop_executor_pending", "Executor jobs not finished.", m.executor_pending)
        yield gauge("tideloop_max_lag_seconds", "Largest timer lag so far.", m.max_lag)
        cumulative = list(itertools.accumulate(m.lag_counts))
        buckets = [
            (str(bound), float(n))
            for bound, n in zip(tideloop.LAG_BOUNDS, cumulative, strict=False)
        ]
        buckets.append(("+Inf", float(cumulative[-1])))
        lag = HistogramMetricFamily(
            "tideloop_timer_lag_seconds", "How late timers fired.", labels=["loop"]
        )
        lag.add_metric(labels, buckets, sum_value=m.lag_sum)
        yield lag


async def ticker(stop: asyncio.Event, period: float, block_every: int = 0) -> None:
    n = 0
    while not stop.is_set():
        await asyncio.sleep(period)
        n += 1
        if block_every and n % block_every == 0:
            time.sleep(0.03)  # a blocking call: busy time, and lag for the other ticker


async def workload(stop: asyncio.Event) -> None:
    """Something to measure: two tickers, one of which blocks now and then."""
    await asyncio.gather(ticker(stop, 0.01), ticker(stop, 0.013, block_every=7))


async def main(port: int, self_test: bool) -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, tideloop.Loop), "run this on tideloop"
    REGISTRY.register(LoopCollector(loop))
    server, thread = start_http_server(port, addr="127.0.0.1")
    stop = asyncio.Event()
    task = asyncio.create_task(workload(stop))
    try:
        if not self_test:
            print(f"serving metrics on http://127.0.0.1:{server.server_port}/metrics")
            await asyncio.Event().wait()  # until interrupted
        await asyncio.sleep(0.5)
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        print("\n".join(line for line in body.decode().splitlines() if "tideloop_" in line))
    finally:
        stop.set()
        await task
        server.shutdown()
        server.server_close()
        thread.join()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9464)
    parser.add_argument("--self-test", action="store_true", help="scrape once, print, exit")
    args = parser.parse_args()
    tideloop.run(main(0 if args.self_test else args.port, args.self_test))
