"""call_soon_threadsafe from threads: 4 threads each schedule n/4 callbacks on the loop.

The worker process is pinned to one CPU like every other workload, so this
measures the loop's cost per thread-safe callback (queueing, waking the loop,
running it) under GIL hand-offs, not parallelism.
"""

from __future__ import annotations

import asyncio
import threading

from bench.api import Primitive, Sample

THREADS = 4


async def run(n: int) -> Sample:
    loop = asyncio.get_running_loop()
    per_thread = max(1, n // THREADS)
    total = per_thread * THREADS
    done = loop.create_future()
    count = 0

    def callback() -> None:
        nonlocal count
        count += 1
        if count == total:
            done.set_result(None)

    def produce() -> None:
        schedule = loop.call_soon_threadsafe
        for _ in range(per_thread):
            schedule(callback)

    threads = [threading.Thread(target=produce) for _ in range(THREADS)]
    for t in threads:
        t.start()
    await done
    for t in threads:
        t.join()
    return Sample(total)


WORKLOAD = Primitive(
    name="threadsafe",
    title="call_soon_threadsafe from 4 threads",
    unit="callbacks",
    run=run,
    quick_n=100_000,
    full_n=1_000_000,
)
