"""call_soon throughput: batches of 1000 no-op callbacks, then wait for the batch."""

from __future__ import annotations

import asyncio

from bench.api import Primitive, Sample

BATCH = 1000


def _noop() -> None:
    pass


async def run(n: int) -> Sample:
    loop = asyncio.get_running_loop()
    call_soon = loop.call_soon
    rounds = max(1, n // BATCH)
    for _ in range(rounds):
        for _ in range(BATCH - 1):
            call_soon(_noop)
        fut = loop.create_future()
        call_soon(fut.set_result, None)  # FIFO: runs after the 999 before it
        await fut
    return Sample(rounds * BATCH)


WORKLOAD = Primitive(
    name="call_soon",
    title="call_soon throughput (batches of 1000)",
    unit="callbacks",
    run=run,
    quick_n=200_000,
    full_n=2_000_000,
)
