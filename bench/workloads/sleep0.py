"""One sleep(0) round: a task yields to the loop and is resumed (one loop iteration).

Every round is timed on its own, so p50/p99 are the latency of one trip
through the loop (including its zero-timeout poll).
"""

from __future__ import annotations

import asyncio
import time
from array import array

from bench.api import Primitive, Sample


async def run(n: int) -> Sample:
    clock = time.perf_counter_ns
    sleep = asyncio.sleep
    lat = array("q")
    append = lat.append
    for _ in range(n):
        t0 = clock()
        await sleep(0)
        append(clock() - t0)
    return Sample(n, lat)


WORKLOAD = Primitive(
    name="sleep0",
    title="one sleep(0) round (yield to the loop and back)",
    unit="rounds",
    run=run,
    quick_n=50_000,
    full_n=500_000,
)
