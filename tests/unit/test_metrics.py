"""loop.metrics(), set_metrics() and the slow-callback hook (tideloop's own API).

Blocking callbacks show up as busy time, timer lag and slow callbacks with
the right task; an idle loop accumulates idle time; counters never go
backwards; snapshots taken from other threads are consistent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tideloop
from tideloop import LoopMetrics, SlowCallback
from tideloop._core.metrics import LAG_BOUNDS

COUNTERS = (
    "iterations",
    "callbacks",
    "busy_time",
    "idle_time",
    "slow_callbacks",
    "max_lag",
    "lag_sum",
)


@pytest.fixture
def loop() -> Iterator[tideloop.Loop]:
    loop = tideloop.new_event_loop()
    try:
        yield loop
    finally:
        if not loop.is_closed():
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


def assert_not_backwards(a: LoopMetrics, b: LoopMetrics) -> None:
    for name in COUNTERS:
        assert getattr(b, name) >= getattr(a, name), name
    assert all(y >= x for x, y in zip(a.lag_counts, b.lag_counts, strict=True))


def test_fresh_loop_is_all_zero(loop: tideloop.Loop) -> None:
    m = loop.metrics()
    assert isinstance(m, LoopMetrics)
    assert (m.iterations, m.callbacks, m.busy_time, m.idle_time) == (0, 0, 0.0, 0.0)
    assert (m.ready, m.timers, m.executor_pending, m.slow_callbacks) == (0, 0, 0, 0)
    assert m.lag_counts == (0,) * (len(LAG_BOUNDS) + 1)
    assert m.max_lag == m.lag_sum == 0.0 and m.utilisation == 0.0 and m.lag_quantile(0.99) == 0.0
    assert m.fds >= 1  # the loop's own wake-up fd
    assert m.slow_callback_threshold == loop.slow_callback_duration
    with pytest.raises(AttributeError):
        m.iterations = 5  # type: ignore[misc]


def test_blocking_callback_is_busy_time_lag_and_a_slow_task_step(loop: tideloop.Loop) -> None:
    reports: list[SlowCallback] = []
    loop.set_slow_callback_hook(reports.append, threshold=0.1)

    async def inner() -> None:
        time.sleep(0.2)  # blocks the loop
        await asyncio.sleep(0)

    async def blocker() -> None:
        await asyncio.sleep(0.001)
        await inner()

    async def main() -> None:
        ticker = asyncio.create_task(asyncio.sleep(0.05))  # falls due during the block
        await asyncio.create_task(blocker(), name="the-blocker")
        await ticker

    loop.run_until_complete(main())
    m = loop.metrics()
    assert m.busy_time >= 0.2
    assert m.max_lag >= 0.1  # the 50 ms timer ran ~150 ms late
    assert m.lag_quantile(1.0) == m.max_lag
    assert sum(m.lag_counts) >= 2
    assert m.max_lag <= m.lag_sum <= sum(m.lag_counts) * m.max_lag
    assert m.slow_callbacks == 1 and m.slow_callback_threshold == 0.1
    [report] = reports
    assert report.duration >= 0.2
    assert report.name == "the-blocker"
    assert isinstance(report.task, asyncio.Task) and report.task.get_name() == "the-blocker"
    # The coroutine stack where the step stopped: blocker -> inner -> asyncio.sleep.
    names = [frame.name for frame in report.stack]
    assert names[:2] == ["blocker", "inner"]
    assert report.stack[1].filename == __file__


def run_blocking_callback(loop: tideloop.Loop, seconds: float) -> Callable[[], None]:
    """Run one callback that blocks the loop for *seconds*; return it."""

    def block() -> None:
        time.sleep(seconds)

    loop.call_soon(block)
    loop.call_soon(loop.stop)
    loop.run_forever()
    return block


def test_slow_plain_callback_reports_the_handle(loop: tideloop.Loop) -> None:
    reports: list[SlowCallback] = []
    loop.set_slow_callback_hook(reports.append, threshold=0.05)
    block = run_blocking_callback(loop, 0.06)
    [report] = reports
    assert report.task is None and report.stack == ()
    assert "block" in report.name and report.handle._callback is block  # type: ignore[attr-defined]


def test_fast_callbacks_are_not_reported(loop: tideloop.Loop) -> None:
    reports: list[SlowCallback] = []
    loop.set_slow_callback_hook(reports.append, threshold=0.5)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert reports == [] and loop.metrics().slow_callbacks == 0


def test_idle_loop_accumulates_idle_time(loop: tideloop.Loop) -> None:
    loop.run_until_complete(asyncio.sleep(0.2))
    m = loop.metrics()
    assert m.idle_time >= 0.15
    assert m.busy_time < m.idle_time
    assert m.utilisation < 0.5
    assert m.run_time == pytest.approx(m.busy_time + m.idle_time)


def test_callbacks_and_iterations_count(loop: tideloop.Loop) -> None:
    ran = []
    for i in range(5):
        loop.call_soon(ran.append, i)
    cancelled = loop.call_soon(ran.append, "no")
    cancelled.cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()
    m = loop.metrics()
    assert ran == [0, 1, 2, 3, 4]
    assert m.callbacks == 6  # five appends and stop; the cancelled one is not counted
    assert m.iterations >= 1


def test_snapshot_fields_read_now(loop: tideloop.Loop) -> None:
    a, b = socket.socketpair()
    gate = threading.Event()

    async def main() -> None:
        base = loop.metrics()
        handles = [loop.call_later(10 + i, lambda: None) for i in range(3)]
        handles[0].cancel()
        loop.call_soon(lambda: None)
        loop.add_reader(a, lambda: None)
        loop.add_writer(b, lambda: None)
        job = loop.run_in_executor(None, gate.wait)
        m = loop.metrics()
        assert m.timers == base.timers + 2  # cancelled timers are not pending
        assert m.ready >= 1
        assert m.fds == base.fds + 2
        assert m.executor_pending == 1
        gate.set()
        await job
        loop.remove_reader(a)
        loop.remove_writer(b)
        for handle in handles:
            handle.cancel()
        m = loop.metrics()
        assert (m.fds, m.executor_pending, m.timers) == (base.fds, 0, base.timers)

    try:
        loop.run_until_complete(main())
    finally:
        a.close()
        b.close()


def test_counters_never_go_backwards(loop: tideloop.Loop) -> None:
    snapshots = [loop.metrics()]

    async def main() -> None:
        for i in range(30):
            await asyncio.sleep(0.001 * (i % 3))
            snapshots.append(loop.metrics())
            if i == 10:
                time.sleep(0.02)

    loop.run_until_complete(main())
    snapshots.append(loop.metrics())
    loop.run_until_complete(asyncio.sleep(0.01))
    snapshots.append(loop.metrics())
    for a, b in itertools.pairwise(snapshots):
        assert_not_backwards(a, b)
    assert snapshots[-1].iterations > snapshots[0].iterations


def test_snapshots_from_other_threads_are_consistent(loop: tideloop.Loop) -> None:
    """A reader thread never sees a half-updated window.

    Every iteration of the chain below runs exactly one callback, so within
    one snapshot ``iterations - callbacks`` stays within a small constant
    band; with torn reads it would jump around, and counters would step
    backwards between snapshots.
    """
    n = 3000
    seen: list[LoopMetrics] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(loop.metrics())

    def step(i: int) -> None:
        if i == n:
            loop.stop()
        else:
            loop.call_soon(step, i + 1)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        loop.call_soon(step, 0)
        loop.run_forever()
    finally:
        stop.set()
        thread.join()
    final = loop.metrics()
    assert final.callbacks == n + 1
    assert len(seen) > 10
    for a, b in itertools.pairwise(seen):
        assert_not_backwards(a, b)
    for m in seen:
        assert 0 <= m.iterations - m.callbacks <= 1
        assert m.busy_time >= 0.0 and m.idle_time >= 0.0


def test_busy_and_idle_never_go_backwards_across_blocking_polls(loop: tideloop.Loop) -> None:
    """Readers in other threads while the loop keeps entering and leaving polls."""
    seen: list[LoopMetrics] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(loop.metrics())

    async def main() -> None:
        for i in range(300):
            await asyncio.sleep(0.0002 if i % 2 else 0)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        loop.run_until_complete(main())
    finally:
        stop.set()
        thread.join()
    seen.append(loop.metrics())
    assert len(seen) > 10
    for a, b in itertools.pairwise(seen):
        assert_not_backwards(a, b)
    assert seen[-1].idle_time > 0.0


def test_detailed_metrics_count_each_slow_callback(loop: tideloop.Loop) -> None:
    loop.slow_callback_duration = 0.02

    def block() -> None:
        time.sleep(0.025)

    def one_phase_with_two_slow_callbacks() -> int:
        before = loop.metrics().slow_callbacks
        loop.call_soon(block)
        loop.call_soon(block)
        loop.call_soon(loop.stop)
        loop.run_forever()
        return loop.metrics().slow_callbacks - before

    # By default each run phase is timed once: a lower bound.
    assert one_phase_with_two_slow_callbacks() == 1
    loop.set_metrics(detailed=True)
    assert one_phase_with_two_slow_callbacks() == 2
    loop.set_metrics(detailed=False)
    assert one_phase_with_two_slow_callbacks() == 1


def test_debug_mode_counts_too(loop: tideloop.Loop) -> None:
    loop.set_debug(True)
    loop.slow_callback_duration = 10.0  # no warning noise
    reports: list[SlowCallback] = []
    loop.set_slow_callback_hook(reports.append, threshold=0.02)
    block = run_blocking_callback(loop, 0.03)
    m = loop.metrics()
    assert m.callbacks == 2 and m.slow_callbacks == 1
    assert [r.handle._callback for r in reports] == [block]  # type: ignore[attr-defined]


def test_hook_validation_and_removal(loop: tideloop.Loop) -> None:
    with pytest.raises(TypeError, match="callable or None"):
        loop.set_slow_callback_hook(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        loop.set_slow_callback_hook(print, threshold=-1)
    reports: list[SlowCallback] = []
    loop.set_slow_callback_hook(reports.append, threshold=0.0)
    loop.run_until_complete(asyncio.sleep(0))
    assert reports
    loop.set_slow_callback_hook(None)
    reports.clear()
    loop.run_until_complete(asyncio.sleep(0))
    assert reports == []
    assert loop.metrics().slow_callback_threshold == loop.slow_callback_duration


def test_failing_hook_goes_to_the_exception_handler(loop: tideloop.Loop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: contexts.append(context))

    def hook(_report: SlowCallback) -> None:
        raise RuntimeError("hook broke")

    loop.set_slow_callback_hook(hook, threshold=0.0)
    assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
    assert contexts
    assert contexts[0]["message"] == "slow callback hook failed"
    assert isinstance(contexts[0]["exception"], RuntimeError)


def test_lag_under_virtual_time_is_virtual_but_busy_time_is_real() -> None:
    from tideloop import testing

    loop = testing.new_event_loop(virtual_time=True)
    try:

        async def main() -> None:
            loop.call_later(1.0, lambda: None)
            await asyncio.sleep(3600)

        start = time.monotonic()
        loop.run_until_complete(main())
        elapsed = time.monotonic() - start
        m = loop.metrics()
        assert m.max_lag < 0.01  # autojump lands on deadlines exactly
        assert sum(m.lag_counts) == 2
        assert m.busy_time + m.idle_time <= elapsed + 0.01  # the machine's time, not 3600 s
    finally:
        loop.close()


def test_metrics_after_close(loop: tideloop.Loop) -> None:
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    m = loop.metrics()
    assert m.iterations >= 1 and m.fds == 0


def test_utilisation_between_two_snapshots(loop: tideloop.Loop) -> None:
    """The recipe from the docs: busy share of an interval from two snapshots."""
    loop.run_until_complete(asyncio.sleep(0.05))  # mostly idle
    a = loop.metrics()

    async def busy() -> None:
        for _ in range(5):
            time.sleep(0.02)
            await asyncio.sleep(0)

    loop.run_until_complete(busy())
    b = loop.metrics()
    interval = b.run_time - a.run_time
    assert (b.busy_time - a.busy_time) / interval > 0.8
    assert a.utilisation < 0.5


def test_lag_quantile_reads_buckets() -> None:
    counts = [0] * (len(LAG_BOUNDS) + 1)
    counts[0] = 90  # <= 0.1 ms
    counts[4] = 9  # <= 10 ms
    counts[-1] = 1  # > 5 s
    m = LoopMetrics(0, 0, 0.0, 0.0, 0, 0, 0, 0, 7.5, 7.6, tuple(counts), 0, 0.1)
    assert m.lag_quantile(0.5) == LAG_BOUNDS[0]
    assert m.lag_quantile(0.95) == LAG_BOUNDS[4]
    assert m.lag_quantile(1.0) == 7.5


class _SubmitWaits(concurrent.futures.ThreadPoolExecutor):
    """An executor whose submit() returns only once the job has finished."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        concurrent.futures.wait([future])
        return future


def test_an_executor_job_is_pending_from_before_it_can_run(loop: tideloop.Loop) -> None:
    """A job can run, and be observed by another thread, before submit() returns."""
    seen: list[int] = []
    with _SubmitWaits(max_workers=1) as executor:

        def job() -> None:
            seen.append(loop.metrics().executor_pending)

        async def main() -> None:
            await loop.run_in_executor(executor, job)

        loop.run_until_complete(main())
    assert seen == [1]
    assert loop.metrics().executor_pending == 0


def test_an_executor_that_refuses_a_job_leaves_nothing_pending(loop: tideloop.Loop) -> None:
    class Refuses(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
            raise RuntimeError("refused")

    with Refuses(max_workers=1) as executor, pytest.raises(RuntimeError, match="refused"):
        loop.run_in_executor(executor, print)
    assert loop.metrics().executor_pending == 0
