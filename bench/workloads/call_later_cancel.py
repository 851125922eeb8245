"""call_later + cancel churn: timeouts that are armed and then cancelled, as in real servers.

Each round arms 1000 timers 10-11 s out, lets the loop run one iteration,
cancels them all, runs another iteration (the loop drops cancelled timers),
and fires one short timer, so that the timer queue is exercised both ways.
"""

from __future__ import annotations

import asyncio

from bench.api import Primitive, Sample
from bench.workloads._timers import arm_and_cancel

BATCH = 1000


async def run(n: int) -> Sample:
    loop = asyncio.get_running_loop()
    delays = [10.0 + i * 1e-3 for i in range(BATCH)]
    rounds = max(1, n // BATCH)
    for _ in range(rounds):
        await arm_and_cancel(loop, delays)
    return Sample(rounds * (BATCH + 1))


WORKLOAD = Primitive(
    name="call_later_cancel",
    title="call_later + cancel churn (1000 timers armed, then cancelled)",
    unit="timers",
    run=run,
    quick_n=100_000,
    full_n=1_000_000,
)
