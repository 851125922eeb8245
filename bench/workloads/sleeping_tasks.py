"""100k tasks sleeping and waking: n tasks, each sleeping 3 times for 1-10 ms.

One op is one wake-up (a timer firing and a task step). The sleeps are far
shorter than the time the loop needs to wake 100k tasks, so the run is
CPU-bound: it measures the timer queue and task stepping, not the clock.
The garbage collector stays on, as in production: with this many live
tasks its share of the time is large and the same for every loop. Quick
mode uses 30k tasks.
"""

from __future__ import annotations

import asyncio

from bench.api import Primitive, Sample

ROUNDS = 3


async def _sleeper(delay: float) -> None:
    for _ in range(ROUNDS):
        await asyncio.sleep(delay)


async def run(n: int) -> Sample:
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_sleeper(0.001 * (1 + i % 10))) for i in range(n)]
    await asyncio.gather(*tasks)
    return Sample(n * ROUNDS)


WORKLOAD = Primitive(
    name="sleeping_tasks",
    title="100k tasks sleeping and waking (3 sleeps of 1-10 ms each)",
    unit="wakeups",
    run=run,
    quick_n=30_000,
    full_n=100_000,
)
