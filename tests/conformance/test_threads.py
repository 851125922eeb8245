"""Threads: call_soon_threadsafe, run_in_executor, the default executor."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from divergences import STDLIB_BOUNDED_EXECUTOR_SHUTDOWN


def test_call_soon_threadsafe_wakes_a_blocked_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The loop sleeps in its poller with nothing scheduled; only the waker ends it."""
    results: list[str] = []

    def from_thread() -> None:
        time.sleep(0.05)
        loop.call_soon_threadsafe(results.append, "woken")
        loop.call_soon_threadsafe(loop.stop)

    thread = threading.Thread(target=from_thread)
    start = time.monotonic()
    thread.start()
    loop.run_forever()  # no timers: would block forever without the wakeup
    thread.join()
    assert results == ["woken"]
    assert time.monotonic() - start < 5


def test_call_soon_threadsafe_many_threads(loop: asyncio.AbstractEventLoop) -> None:
    n_threads, per_thread = 8, 500
    received: list[tuple[int, int]] = []
    done = threading.Barrier(n_threads + 1)

    def producer(tid: int) -> None:
        for i in range(per_thread):
            loop.call_soon_threadsafe(received.append, (tid, i))
        done.wait()

    async def main() -> None:
        threads = [threading.Thread(target=producer, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        await loop.run_in_executor(None, done.wait)
        for t in threads:
            t.join()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert len(received) == n_threads * per_thread
    for tid in range(n_threads):
        # Per-thread order is preserved.
        assert [i for t, i in received if t == tid] == list(range(per_thread))


def test_call_soon_threadsafe_returns_handle(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    handle = loop.call_soon_threadsafe(calls.append, 1)
    assert isinstance(handle, asyncio.Handle)
    handle.cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == []


def test_run_in_executor(loop: asyncio.AbstractEventLoop) -> None:
    main_thread = threading.get_ident()

    def work(a: int, b: int) -> tuple[int, bool]:
        return a + b, threading.get_ident() != main_thread

    fut = loop.run_in_executor(None, work, 2, 3)
    assert isinstance(fut, asyncio.Future)
    assert loop.run_until_complete(fut) == (5, True)


def test_run_in_executor_exception(loop: asyncio.AbstractEventLoop) -> None:
    def fails() -> None:
        raise KeyError("from thread")

    with pytest.raises(KeyError, match="from thread"):
        loop.run_until_complete(loop.run_in_executor(None, fails))


def test_run_in_explicit_executor(loop: asyncio.AbstractEventLoop) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        name = loop.run_until_complete(
            loop.run_in_executor(pool, lambda: threading.current_thread().name)
        )
    assert "ThreadPoolExecutor" in name


def test_default_executor_thread_names(loop: asyncio.AbstractEventLoop) -> None:
    name = loop.run_until_complete(
        loop.run_in_executor(None, lambda: threading.current_thread().name)
    )
    assert name.startswith("asyncio_")


def test_set_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mine")
    loop.set_default_executor(pool)
    name = loop.run_until_complete(
        loop.run_in_executor(None, lambda: threading.current_thread().name)
    )
    assert name.startswith("mine")
    loop.run_until_complete(loop.shutdown_default_executor())


def test_set_default_executor_rejects_other_executors(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="executor must be ThreadPoolExecutor instance"):
        loop.set_default_executor(object())  # type: ignore[arg-type]


def test_shutdown_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.run_in_executor(None, time.sleep, 0.001))
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
        loop.run_in_executor(None, time.sleep, 0)


def test_shutdown_default_executor_without_executor(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
        loop.run_in_executor(None, time.sleep, 0)


def test_shutdown_default_executor_timeout_warns(
    loop: asyncio.AbstractEventLoop, loop_name: str
) -> None:
    if loop_name == "asyncio" and not STDLIB_BOUNDED_EXECUTOR_SHUTDOWN:
        pytest.skip("this asyncio does not bound the wait (divergence executor-shutdown-timeout)")
    release = threading.Event()
    fut = loop.run_in_executor(None, release.wait)

    async def main() -> None:
        with pytest.warns(RuntimeWarning, match="did not finishing joining its threads within"):
            await loop.shutdown_default_executor(timeout=0.05)  # type: ignore[call-arg]

    try:
        loop.run_until_complete(main())
    finally:
        release.set()
    loop.run_until_complete(fut)


def test_run_in_executor_after_close(loop: asyncio.AbstractEventLoop) -> None:
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_in_executor(None, time.sleep, 0)


def test_to_thread(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> int:
        return await asyncio.to_thread(sum, range(10))

    assert loop.run_until_complete(main()) == 45


def test_run_coroutine_threadsafe(loop: asyncio.AbstractEventLoop) -> None:
    results: list[object] = []

    async def coro(x: int) -> int:
        await asyncio.sleep(0.001)
        return x * 2

    def from_thread() -> None:
        results.append(asyncio.run_coroutine_threadsafe(coro(21), loop).result(timeout=10))
        loop.call_soon_threadsafe(loop.stop)

    thread = threading.Thread(target=from_thread)
    thread.start()
    loop.run_forever()
    thread.join()
    assert results == [42]
