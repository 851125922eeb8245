"""asyncio's own primitives run on the loop exactly as on the stdlib loop."""

from __future__ import annotations

import asyncio
import time

import pytest


def test_sleep_and_result(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[str, float]:
        start = loop.time()
        value = await asyncio.sleep(0.02, result="slept")
        return value, loop.time() - start

    value, elapsed = loop.run_until_complete(main())
    assert value == "slept"
    assert elapsed >= 0.02


def test_gather_order_and_exceptions(loop: asyncio.AbstractEventLoop) -> None:
    async def item(i: int) -> int:
        await asyncio.sleep(0.001 * (5 - i))
        if i == 3:
            raise ValueError(i)
        return i

    async def main() -> list[object]:
        return await asyncio.gather(*(item(i) for i in range(5)), return_exceptions=True)

    results = loop.run_until_complete(main())
    assert results[:3] == [0, 1, 2]
    assert isinstance(results[3], ValueError)
    assert results[4] == 4


def test_wait_for_timeout_and_success(loop: asyncio.AbstractEventLoop) -> None:
    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> int:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow(), 0.01)
        return await asyncio.wait_for(asyncio.sleep(0, 5), 1)

    assert loop.run_until_complete(main()) == 5
    assert cancelled == [True]


def test_timeout_context_manager(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bool, bool]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01) as cm:
                await asyncio.sleep(10)
        expired = cm.expired()
        async with asyncio.timeout(None) as cm2:
            cm2.reschedule(loop.time() + 10)
            await asyncio.sleep(0)
        return expired, cm2.expired()

    assert loop.run_until_complete(main()) == (True, False)


def test_shield(loop: asyncio.AbstractEventLoop) -> None:
    async def inner() -> str:
        await asyncio.sleep(0.02)
        return "inner done"

    async def main() -> str:
        task = asyncio.ensure_future(inner())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 0.005)
        return await task

    assert loop.run_until_complete(main()) == "inner done"


def test_queue_producer_consumer(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[int]:
        queue: asyncio.Queue[int | None] = asyncio.Queue(maxsize=3)
        out: list[int] = []

        async def producer() -> None:
            for i in range(20):
                await queue.put(i)
            await queue.put(None)

        async def consumer() -> None:
            while (item := await queue.get()) is not None:
                out.append(item)
                queue.task_done()
            queue.task_done()

        await asyncio.gather(producer(), consumer())
        await queue.join()
        return out

    assert loop.run_until_complete(main()) == list(range(20))


def test_priority_and_lifo_queues(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[list[int], list[int]]:
        pq: asyncio.PriorityQueue[int] = asyncio.PriorityQueue()
        lq: asyncio.LifoQueue[int] = asyncio.LifoQueue()
        for i in (3, 1, 2):
            await pq.put(i)
            await lq.put(i)
        return [pq.get_nowait() for _ in range(3)], [lq.get_nowait() for _ in range(3)]

    assert loop.run_until_complete(main()) == ([1, 2, 3], [2, 1, 3])


def test_lock_serialises(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[str]:
        lock = asyncio.Lock()
        log: list[str] = []

        async def worker(name: str) -> None:
            async with lock:
                log.append(f"{name}-in")
                await asyncio.sleep(0.001)
                log.append(f"{name}-out")

        await asyncio.gather(*(worker(str(i)) for i in range(3)))
        return log

    log = loop.run_until_complete(main())
    assert log == ["0-in", "0-out", "1-in", "1-out", "2-in", "2-out"]


def test_event_condition_semaphore(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[int, list[int], int]:
        event = asyncio.Event()
        woken = 0

        async def waiter() -> None:
            nonlocal woken
            await event.wait()
            woken += 1

        waiters = [asyncio.ensure_future(waiter()) for _ in range(5)]
        await asyncio.sleep(0)
        event.set()
        await asyncio.gather(*waiters)

        cond = asyncio.Condition()
        items: list[int] = []

        async def consumer() -> None:
            async with cond:
                await cond.wait_for(lambda: len(items) == 3)

        task = asyncio.ensure_future(consumer())
        for i in range(3):
            async with cond:
                items.append(i)
                cond.notify_all()
            await asyncio.sleep(0)
        await task

        sem = asyncio.Semaphore(2)
        active = peak = 0

        async def limited() -> None:
            nonlocal active, peak
            async with sem:
                active += 1
                peak = max(peak, active)
                await asyncio.sleep(0.001)
                active -= 1

        await asyncio.gather(*(limited() for _ in range(6)))
        return woken, items, peak

    assert loop.run_until_complete(main()) == (5, [0, 1, 2], 2)


def test_taskgroup(loop: asyncio.AbstractEventLoop) -> None:
    async def ok(i: int) -> int:
        await asyncio.sleep(0.001)
        return i

    async def fail() -> None:
        await asyncio.sleep(0.002)
        raise ValueError("in group")

    async def main() -> tuple[list[int], list[str]]:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(ok(i)) for i in range(3)]
        results = [t.result() for t in tasks]
        cancelled: list[str] = []

        async def victim() -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append("victim")
                raise

        with pytest.raises(ExceptionGroup) as info:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(victim())
                tg.create_task(fail())
        assert isinstance(info.value.exceptions[0], ValueError)
        return results, cancelled

    assert loop.run_until_complete(main()) == ([0, 1, 2], ["victim"])


def test_cancellation_semantics(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[bool, str, int]:
        async def sleeper() -> None:
            await asyncio.sleep(10)

        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)
        task.cancel("because")
        try:
            await task
        except asyncio.CancelledError as exc:
            msg = str(exc.args[0]) if exc.args else ""
        me = asyncio.current_task()
        assert me is not None
        return task.cancelled(), msg, me.cancelling()

    assert loop.run_until_complete(main()) == (True, "because", 0)


def test_wait_first_completed(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[int, int]:
        fast = asyncio.ensure_future(asyncio.sleep(0.001, "fast"))
        slow = asyncio.ensure_future(asyncio.sleep(10, "slow"))
        done, pending = await asyncio.wait({fast, slow}, return_when=asyncio.FIRST_COMPLETED)
        for p in pending:
            p.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(done), len(pending)

    assert loop.run_until_complete(main()) == (1, 1)


def test_as_completed(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[int]:
        aws = [asyncio.sleep(0.003, 3), asyncio.sleep(0.001, 1)]
        return [await fut for fut in asyncio.as_completed(aws)]

    assert loop.run_until_complete(main()) == [1, 3]


def test_many_tasks_sleeping(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> int:
        async def one(i: int) -> int:
            await asyncio.sleep(0.01 * (i % 5) / 5)
            return i

        results = await asyncio.gather(*(one(i) for i in range(2000)))
        return sum(results)

    assert loop.run_until_complete(main()) == sum(range(2000))


def test_sleep_zero_rounds_interleave(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> list[str]:
        log: list[str] = []

        async def ping(name: str) -> None:
            for i in range(3):
                log.append(f"{name}{i}")
                await asyncio.sleep(0)

        await asyncio.gather(ping("a"), ping("b"))
        return log

    assert loop.run_until_complete(main()) == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_to_thread_does_not_block_loop(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        def blocks_until_ticked() -> str:
            # The thread blocks (sleeps) until the loop has ticked 5 times:
            # it can only return if the loop runs meanwhile, however slow
            # the machine (a fixed sleep and a tick count was flaky under load).
            deadline = time.monotonic() + 30
            while ticks < 5 and time.monotonic() < deadline:
                time.sleep(0.001)
            return "ticked" if ticks >= 5 else "loop blocked"

        tick_task = asyncio.ensure_future(ticker())
        result = await asyncio.to_thread(blocks_until_ticked)
        tick_task.cancel()
        await asyncio.gather(tick_task, return_exceptions=True)
        return result, ticks

    result, ticks = loop.run_until_complete(main())
    assert result == "ticked"
    assert ticks >= 5
