"""Task create + await: create a task for a coroutine that returns at once, await it."""

from __future__ import annotations

import asyncio

from bench.api import Primitive, Sample


async def _child() -> None:
    return None


async def run(n: int) -> Sample:
    create_task = asyncio.get_running_loop().create_task
    for _ in range(n):
        await create_task(_child())
    return Sample(n)


WORKLOAD = Primitive(
    name="task_create",
    title="task create + await",
    unit="tasks",
    run=run,
    quick_n=50_000,
    full_n=500_000,
)
