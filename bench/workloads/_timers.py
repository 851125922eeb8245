"""The timer round shared by the timer workloads (call_later_cancel, timers_pending)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

__all__ = ["arm_and_cancel"]


def _noop() -> None:
    pass


async def arm_and_cancel(loop: asyncio.AbstractEventLoop, delays: Sequence[float]) -> None:
    """One timer per delay; one loop iteration with all pending; cancel all; fire one more.

    The second iteration is where a loop drops (or compacts away) the
    cancelled timers; the last timer checks that the queue still fires.
    """
    call_later = loop.call_later
    handles = [call_later(d, _noop) for d in delays]
    await asyncio.sleep(0)
    for h in handles:
        h.cancel()
    await asyncio.sleep(0)
    fut = loop.create_future()
    call_later(0.0, fut.set_result, None)
    await fut
