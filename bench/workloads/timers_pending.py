"""Pending timers at scale: the cost of one call_later + cancel as the timer heap grows.

A server with many connections keeps one timeout armed per connection.
Each run arms *n* timers (100,000 or 1,000,000), 100-200 s out and in a
scrambled order so that inserts land all over the heap, runs one loop
iteration with all of them pending, cancels every one, and runs until the
loop has dropped them (it must not keep a million dead timers). One op is
one timer armed and cancelled: a loop whose cost per timer grows faster
than log(n) shows here as falling ops/s from the smaller case to the larger.
"""

from __future__ import annotations

import asyncio

from bench.api import Primitive, Sample
from bench.workloads._timers import arm_and_cancel


async def run(n: int) -> Sample:
    # A stride coprime with n visits every slot once: deadlines out of order.
    stride = 7919 if n % 7919 else 7907
    delays = [100.0 + ((i * stride) % n) * (100.0 / n) for i in range(n)]
    await arm_and_cancel(asyncio.get_running_loop(), delays)
    return Sample(n)


WORKLOAD = Primitive(
    name="timers_pending",
    title="n timers pending: call_later + cancel per timer (100k and 1M)",
    unit="timers",
    run=run,
    quick_n=100_000,
    full_n=1_000_000,
    scale=(100_000, 1_000_000),
)
