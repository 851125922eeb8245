"""call_soon / call_later / call_at / time(): asyncio's scheduling model."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import time
from typing import Any
from unittest import mock

import pytest

import tideloop

from divergence_support import equal_deadline_order

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="default")


def test_call_soon_is_fifo_and_passes_args(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[tuple[int, str]] = []
    for i in range(50):
        loop.call_soon(calls.append, (i, str(i)))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [(i, str(i)) for i in range(50)]


def test_call_soon_returns_a_handle(loop: asyncio.AbstractEventLoop) -> None:
    handle = loop.call_soon(lambda: None)
    assert isinstance(handle, asyncio.Handle)
    assert not isinstance(handle, asyncio.TimerHandle)
    assert not handle.cancelled()
    handle.cancel()
    assert handle.cancelled()
    assert "cancelled" in repr(handle)


def test_cancelled_handle_does_not_run(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_soon(calls.append, 1)
    loop.call_soon(calls.append, 2).cancel()
    loop.call_soon(calls.append, 3)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1, 3]


def test_handle_cancelled_by_earlier_callback_in_same_phase(
    loop: asyncio.AbstractEventLoop,
) -> None:
    calls: list[str] = []
    victim: asyncio.Handle | None = None

    def killer() -> None:
        calls.append("killer")
        assert victim is not None
        victim.cancel()

    loop.call_soon(killer)
    victim = loop.call_soon(calls.append, "victim")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["killer"]


def test_only_callbacks_ready_at_phase_start_run_in_it(loop: asyncio.AbstractEventLoop) -> None:
    """Callbacks scheduled by a callback run in the next iteration."""
    order: list[str] = []

    def first() -> None:
        order.append("first")
        loop.call_soon(third)

    def second() -> None:
        order.append("second")
        loop.stop()  # stops after this iteration: `third` must not run yet

    def third() -> None:
        order.append("third")

    loop.call_soon(first)
    loop.call_soon(second)
    loop.run_forever()
    assert order == ["first", "second"]
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert order == ["first", "second", "third"]


def test_context_argument_is_honoured(loop: asyncio.AbstractEventLoop) -> None:
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "inside")
    seen: list[str] = []
    handle = loop.call_soon(lambda: seen.append(VAR.get()), context=ctx)
    timer = loop.call_later(0, lambda: seen.append(VAR.get()), context=ctx)
    loop.call_soon(lambda: seen.append(VAR.get()))
    loop.call_later(0.001, loop.stop)
    loop.run_forever()
    assert seen == ["inside", "default", "inside"]
    if hasattr(handle, "get_context"):
        assert handle.get_context() is ctx
        assert timer.get_context() is ctx


def test_callback_context_is_a_copy_when_not_given(loop: asyncio.AbstractEventLoop) -> None:
    token = VAR.set("at-schedule")
    try:
        seen: list[str] = []

        def cb() -> None:
            seen.append(VAR.get())
            VAR.set("changed-in-callback")

        loop.call_soon(cb)
        VAR.set("after-schedule")
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert seen == ["at-schedule"]
        assert VAR.get() == "after-schedule"
    finally:
        VAR.reset(token)


def test_call_later_order_and_timing(loop: asyncio.AbstractEventLoop) -> None:
    order: list[float] = []
    start = loop.time()
    for delay in (0.03, 0.01, 0.02, 0.0):
        loop.call_later(delay, order.append, delay)
    loop.call_later(0.04, loop.stop)
    loop.run_forever()
    assert order == [0.0, 0.01, 0.02, 0.03]
    assert loop.time() - start >= 0.04


def test_call_later_returns_timer_handle(loop: asyncio.AbstractEventLoop) -> None:
    before = loop.time()
    timer = loop.call_later(10, lambda: None)
    after = loop.time()
    assert isinstance(timer, asyncio.TimerHandle)
    assert before + 10 <= timer.when() <= after + 10
    timer.cancel()
    assert timer.cancelled()


def test_call_at_uses_loop_time(loop: asyncio.AbstractEventLoop) -> None:
    fired: list[float] = []
    when = loop.time() + 0.02
    timer = loop.call_at(when, lambda: fired.append(loop.time()))
    assert timer.when() == when
    loop.call_at(when + 0.01, loop.stop)
    loop.run_forever()
    assert len(fired) == 1
    assert fired[0] >= when


def test_call_at_in_the_past_runs_next_iteration(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_at(loop.time() - 100, calls.append, 1)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1]


def test_cancelled_timer_does_not_run(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_later(0.001, calls.append, 1).cancel()
    loop.call_later(0.002, calls.append, 2)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert calls == [2]


def test_many_cancelled_timers_do_not_delay_live_ones(loop: asyncio.AbstractEventLoop) -> None:
    """Exercises compaction (more than 100 timers, most cancelled)."""
    calls: list[int] = []
    timers = [loop.call_later(1000 + i, calls.append, -1) for i in range(500)]
    for t in timers[:-10]:
        t.cancel()
    loop.call_later(0.001, calls.append, 1)
    loop.call_later(0.005, loop.stop)
    loop.run_forever()
    assert calls == [1]
    for t in timers:
        t.cancel()


def test_timer_cancelled_while_due_in_same_phase(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[str] = []
    when = loop.time() + 0.01
    second: asyncio.TimerHandle | None = None

    def first() -> None:
        calls.append("first")
        assert second is not None
        second.cancel()

    loop.call_at(when, first)
    second = loop.call_at(when + 1e-6, calls.append, "second")
    loop.call_at(when + 0.01, loop.stop)
    loop.run_forever()
    assert calls == ["first"]


def test_time_is_monotonic_with_full_resolution(loop: asyncio.AbstractEventLoop) -> None:
    samples = [loop.time() for _ in range(1000)]
    assert samples == sorted(samples)
    # Not milliseconds: consecutive reads differ by far less than 1 ms.
    deltas = [b - a for a, b in itertools.pairwise(samples) if b > a]
    assert deltas
    assert min(deltas) < 1e-4
    # Same scale as time.monotonic.
    assert abs(loop.time() - time.monotonic()) < 1.0


def test_call_later_none_delay(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="delay must not be None"):
        loop.call_later(None, lambda: None)  # type: ignore[arg-type]


def test_call_at_none_when(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="when cannot be None"):
        loop.call_at(None, lambda: None)  # type: ignore[arg-type]


@pytest.mark.divergence("call-at-rejects-non-numbers")
def test_call_at_rejects_non_numbers(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="real number"):
        loop.call_at("soon", lambda: None)  # type: ignore[arg-type]
    # The loop still works afterwards.
    loop.call_soon(loop.stop)
    loop.run_forever()


@pytest.mark.divergence("equal-deadline-fifo")
def test_equal_deadlines_fire_in_scheduling_order(loop: asyncio.AbstractEventLoop) -> None:
    assert equal_deadline_order(loop) == list(range(20))


@pytest.mark.divergence("timer-deadline-as-float")
def test_deadlines_closer_than_a_float_fire_in_scheduling_order(
    loop: asyncio.AbstractEventLoop,
) -> None:
    from fractions import Fraction

    order: list[str] = []
    when = Fraction(loop.time()) + Fraction(1, 100)
    later = loop.call_at(when + Fraction(1, 10**30), order.append, "later")
    loop.call_at(when, order.append, "earlier")
    loop.call_at(float(when) + 0.01, loop.stop)
    loop.run_forever()
    assert order == ["later", "earlier"]  # one float: scheduling order
    assert later.when() == when + Fraction(1, 10**30)  # the object given, not the float


def test_exact_deadlines_keep_their_order_when_floats_differ(
    loop: asyncio.AbstractEventLoop,
) -> None:
    # Distinct floats: ints and Fractions are ordered exactly as asyncio orders them.
    from fractions import Fraction

    order: list[str] = []
    base = Fraction(loop.time()) + Fraction(1, 100)
    loop.call_at(base + Fraction(2, 1000), order.append, "third")
    loop.call_at(base, order.append, "first")
    loop.call_at(float(base) + 0.001, order.append, "second")
    loop.call_at(float(base) + 0.01, loop.stop)
    loop.run_forever()
    assert order == ["first", "second", "third"]


def test_call_soon_after_close_raises(loop: asyncio.AbstractEventLoop) -> None:
    loop.close()
    for call in (
        lambda: loop.call_soon(lambda: None),
        lambda: loop.call_later(1, lambda: None),
        lambda: loop.call_at(1, lambda: None),
        lambda: loop.call_soon_threadsafe(lambda: None),
    ):
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            call()


def test_timer_handle_repr_contains_when(loop: asyncio.AbstractEventLoop) -> None:
    timer = loop.call_at(12345.5, print)
    assert "when=12345.5" in repr(timer)
    timer.cancel()


@pytest.mark.divergence("handle-get-context-3.11")
def test_handles_have_get_context_on_every_python(loop: asyncio.AbstractEventLoop) -> None:
    ctx = contextvars.copy_context()
    handles = [
        loop.call_soon(print, context=ctx),
        loop.call_later(10, print, context=ctx),
        loop.call_at(10, print, context=ctx),
        loop.call_soon_threadsafe(print, context=ctx),
    ]
    for handle in handles:
        assert handle.get_context() is ctx
        handle.cancel()
    default = loop.call_soon(print)
    assert isinstance(default.get_context(), contextvars.Context)
    default.cancel()


# A loop that never runs out of ready callbacks polls with a zero timeout on
# every iteration; tideloop skips that poll while only its waker is
# registered. Whatever else is registered (an fd, the signal pipe) must still
# be seen while the loop is busy, and other threads' callbacks must run.


def _spin_until(loop: asyncio.AbstractEventLoop, done: list[object], limit: int = 100_000) -> int:
    """Keep the ready queue non-empty (a call_soon chain) until *done* fills up."""
    spins = 0

    def spin() -> None:
        nonlocal spins
        spins += 1
        if done or spins >= limit:
            loop.stop()
        else:
            loop.call_soon(spin)

    loop.call_soon(spin)
    loop.run_forever()
    return spins


def test_busy_loop_still_sees_fd_readiness(loop: asyncio.AbstractEventLoop) -> None:
    import socket

    a, b = socket.socketpair()
    with a, b:
        got: list[object] = []
        loop.add_reader(a, lambda: got.append(a.recv(10)))
        b.send(b"ping")
        spins = _spin_until(loop, got)
        loop.remove_reader(a)
    assert got == [b"ping"]
    assert spins < 10  # seen within an iteration or two, not after the chain gave up


def test_busy_loop_still_runs_threadsafe_callbacks(loop: asyncio.AbstractEventLoop) -> None:
    import threading

    got: list[object] = []
    thread = threading.Thread(target=lambda: loop.call_soon_threadsafe(got.append, "from thread"))
    loop.call_soon(thread.start)
    spins = _spin_until(loop, got, limit=10_000_000)
    thread.join()
    assert got == ["from thread"] and spins < 10_000_000


def test_busy_loop_still_handles_signals(loop: asyncio.AbstractEventLoop) -> None:
    import os
    import signal

    got: list[object] = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
    try:
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        spins = _spin_until(loop, got)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
    assert got == ["usr1"] and spins < 100_000


def test_busy_loop_then_idle_loop_wakes_for_a_thread(loop: asyncio.AbstractEventLoop) -> None:
    """Wakes coalesced while busy are not lost: the idle loop still wakes up."""
    import threading

    loop.call_soon_threadsafe(lambda: None)  # leaves the waker pending on tideloop
    _spin_until(loop, [], limit=50)
    fut: asyncio.Future[str] = loop.create_future()
    timer = threading.Timer(0.05, loop.call_soon_threadsafe, (fut.set_result, "woke"))
    timer.start()
    # Nothing else is scheduled: the loop blocks in its poller until the
    # thread's wake (a lost wake would time out here).
    assert loop.run_until_complete(asyncio.wait_for(fut, 5)) == "woke"
    timer.join()


@pytest.mark.divergence("sleep-timer-bare-context")
def test_sleep_timer_runs_in_the_loops_bare_context(loop: asyncio.AbstractEventLoop) -> None:
    from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]

    def arm() -> asyncio.TimerHandle:
        VAR.set("sleeper")
        return loop.call_later(1, _set_result_unless_cancelled, loop.create_future(), None)

    timer = contextvars.copy_context().run(arm)
    timer.cancel()
    assert timer.get_context().get(VAR) is None  # type: ignore[attr-defined]

    def arm_other() -> asyncio.TimerHandle:
        VAR.set("caller")
        return loop.call_later(1, print)

    # Any other callback still gets a copy of the caller's context.
    other = contextvars.copy_context().run(arm_other)
    other.cancel()
    assert other.get_context().get(VAR) == "caller"  # type: ignore[attr-defined]


def test_sleep_in_a_context_wakes_up_in_it(loop: asyncio.AbstractEventLoop) -> None:
    async def sleeper(name: str) -> tuple[str, str]:
        VAR.set(name)
        before = VAR.get()
        await asyncio.sleep(0.001)
        return before, VAR.get()

    async def main() -> list[tuple[str, str]]:
        return await asyncio.gather(sleeper("a"), sleeper("b"))

    assert loop.run_until_complete(main()) == [("a", "a"), ("b", "b")]


# ----------------------------------------------------------------------
# A replaced loop.time() moves the scheduler (asyncio's reads self.time())


def _spin(loop: asyncio.AbstractEventLoop, iterations: int = 5) -> None:
    for _ in range(iterations):
        loop.run_until_complete(asyncio.sleep(0))


def test_patched_time_makes_timers_due(loop: asyncio.AbstractEventLoop) -> None:
    """A timer an hour away fires once a patched loop.time() says the hour has passed
    (aiohttp's keep-alive tests patch loop.time this way)."""
    fired: list[str] = []
    loop.call_later(3600, fired.append, "hour")
    real = loop.time
    with mock.patch.object(loop, "time", lambda: real() + 7200):
        _spin(loop)
        assert fired == ["hour"]
    # The patch is gone: the clock is the loop's own again.
    assert abs(loop.time() - real()) < 60
    loop.call_later(3600, fired.append, "again")
    _spin(loop)
    assert fired == ["hour"]


def test_patched_time_is_what_call_later_adds_to(loop: asyncio.AbstractEventLoop) -> None:
    real = loop.time
    fired: list[int] = []
    with mock.patch.object(loop, "time", return_value=real() + 1000):
        handle = loop.call_later(1, fired.append, 1)
        assert handle.when() == loop.time() + 1
    _spin(loop)  # on the real clock it is 1000 s away
    assert fired == []
    handle.cancel()


def test_assigned_and_deleted_time(loop: asyncio.AbstractEventLoop) -> None:
    real = loop.time
    fired: list[int] = []
    loop.call_later(100, fired.append, 1)
    loop.time = lambda: real() + 200  # type: ignore[method-assign]
    _spin(loop)
    assert fired == [1]
    del loop.time
    assert loop.time() < real() + 100
    loop.call_later(100, fired.append, 2)
    _spin(loop)
    assert fired == [1]


@pytest.mark.divergence("loop-time-is-the-clock")
def test_loop_time_is_the_clocks_function(loop: asyncio.AbstractEventLoop) -> None:
    assert loop.time is time.monotonic
    before = time.monotonic()
    assert before <= loop.time() <= time.monotonic()


def _subclass_with_time(loop_name: str, offset: float) -> asyncio.AbstractEventLoop:
    base: Any = asyncio.SelectorEventLoop if loop_name == "asyncio" else tideloop.Loop

    class Shifted(base):  # type: ignore[misc, valid-type]
        def time(self) -> float:
            return float(super().time()) + offset

    if loop_name == "asyncio":
        return Shifted()  # type: ignore[no-any-return]
    return Shifted(poller=loop_name.removeprefix("tideloop-"))  # type: ignore[no-any-return]


def test_a_subclass_time_drives_the_scheduler(loop_name: str) -> None:
    """A loop subclass whose time() runs an hour ahead: call_at() with its time is
    honoured, and call_later() counts from it."""
    loop = _subclass_with_time(loop_name, 3600.0)
    try:
        fired: list[str] = []
        now = loop.time()
        loop.call_at(now - 1, fired.append, "past")
        loop.call_at(now + 3600, fired.append, "future")
        handle = loop.call_later(0.001, fired.append, "soon")
        assert abs(handle.when() - (now + 0.001)) < 1
        loop.run_until_complete(asyncio.sleep(0.05))
        assert fired == ["past", "soon"]
    finally:
        loop.close()
