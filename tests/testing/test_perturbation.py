"""Perturber: what it varies, what it never breaks, replay, and the planted races."""

from __future__ import annotations

import asyncio
import collections
import queue
import socket
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

import tideloop
from scenarios.races import RACES, REAL_THREAD_TIMING, Planted, fails, seeds_to_find
from tideloop import testing
from tideloop._core.clock import MonotonicClock
from tideloop._pollers import READ
from tideloop.testing import DecisionLog, Perturber, RandomStrategy

SEEDS = range(40)


@pytest.fixture
def socketpairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    pairs = [socket.socketpair() for _ in range(6)]
    yield pairs
    for a, b in pairs:
        a.close()
        b.close()


def io_and_timer_trace(
    seed: int | None, pairs: list[tuple[socket.socket, socket.socket]]
) -> list[str]:
    """Callbacks of fds ready in the same polls and of timers due at the same instant."""
    loop = testing.new_event_loop(virtual_time=True, seed=seed)
    trace: list[str] = []
    try:

        def on_readable(i: int, sock: socket.socket) -> None:
            sock.recv(100)
            trace.append(f"fd{i}")

        async def main() -> None:
            for round_ in range(5):
                for i, (a, b) in enumerate(pairs):
                    loop.add_reader(b, on_readable, i, b)
                    a.send(b"x")
                for i in range(6):
                    loop.call_later(1, trace.append, f"t{i}")
                while len(trace) < 12 * (round_ + 1):
                    await asyncio.sleep(0.5)
                for _, b in pairs:
                    loop.remove_reader(b)

        loop.run_until_complete(main())
    finally:
        loop.close()
    return trace


def test_the_default_loop_runs_no_schedule_code() -> None:
    loop = tideloop.new_event_loop()
    try:
        # Exactly the pre-schedule path: the poller itself, the deque's append.
        assert loop._clock_wait is None
        assert loop._admit_threadsafe == loop._ready.append
        assert isinstance(loop._clock, MonotonicClock)
    finally:
        loop.close()


def test_same_seed_same_decisions(socketpairs: list[tuple[socket.socket, socket.socket]]) -> None:
    fixed = io_and_timer_trace(None, socketpairs)
    assert fixed == io_and_timer_trace(None, socketpairs)
    traces = {}
    for seed in range(8):
        first = io_and_timer_trace(seed, socketpairs)
        assert first == io_and_timer_trace(seed, socketpairs), f"seed {seed} did not replay"
        assert sorted(first) == sorted(fixed)  # the same callbacks, in another order
        traces[seed] = first
    assert len({tuple(t) for t in traces.values()}) == len(traces)  # seeds differ
    assert all(t != fixed for t in traces.values())


@pytest.mark.parametrize("seed", SEEDS)
def test_guarantees_hold(seed: int) -> None:
    """call_soon FIFO, deadline order, never early, loop-thread threadsafe FIFO."""
    loop = testing.new_event_loop(seed=seed)
    soon: list[int] = []
    timers: list[tuple[float, float]] = []
    from_thread: list[int] = []
    try:

        def on_timer(when: float) -> None:
            timers.append((when, loop.time()))

        async def main() -> None:
            base = loop.time()
            for i in range(50):
                when = base + (i % 7) * 0.001
                loop.call_at(when, on_timer, when)
                if i % 2:
                    loop.call_soon(soon.append, i)
                else:
                    loop.call_soon_threadsafe(soon.append, i)  # from the loop's thread
            worker = threading.Thread(
                target=lambda: [
                    loop.call_soon_threadsafe(from_thread.append, i) for i in range(200)
                ]
            )
            worker.start()
            await asyncio.sleep(0.02)
            worker.join()
            while len(from_thread) < 200:
                await asyncio.sleep(0.001)

        loop.run_until_complete(main())
    finally:
        loop.close()
    assert soon == list(range(50))
    assert from_thread == list(range(200))  # one thread's handles keep their order
    whens = [when for when, _ in timers]
    assert whens == sorted(whens)
    assert all(ran >= when for when, ran in timers)


def dispatch_gaps(seed: int, a: socket.socket, b: socket.socket) -> list[int]:
    """Iterations between dispatches of an fd that stays readable."""
    loop = testing.new_event_loop(seed=seed)
    iterations = 0
    last = 0
    gaps: list[int] = []

    def tick() -> None:
        nonlocal iterations
        iterations += 1
        if len(gaps) < 50:
            loop.call_soon(tick)
        else:
            loop.stop()

    def readable() -> None:
        nonlocal last
        gaps.append(iterations - last)
        last = iterations

    a.send(b"x")  # b stays readable: nobody reads it
    try:
        loop.add_reader(b, readable)
        loop.call_soon(tick)
        loop.run_forever()
        loop.remove_reader(b)
    finally:
        loop.close()
        b.recv(10)
    return gaps


def test_deferral_is_bounded() -> None:
    """An fd that stays ready is dispatched within max_defer + 1 iterations."""
    max_defer = Perturber.__init__.__kwdefaults__["max_defer"]
    a, b = socket.socketpair()
    try:
        gaps = [gap for seed in range(30) for gap in dispatch_gaps(seed, a, b)]
    finally:
        a.close()
        b.close()
    assert max(gaps) == max_defer + 1  # deferred, but never longer
    assert min(gaps) == 1


def test_held_results_never_let_virtual_time_pass() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.001), 1)
        return loop.time()

    for seed in range(10):
        assert testing.run(main(), virtual_time=True, seed=seed) == 0.0


def test_a_perturber_schedules_one_loop() -> None:
    perturber = Perturber(1)
    loop = tideloop.new_event_loop(schedule=perturber)
    try:
        with pytest.raises(RuntimeError, match="one loop"):
            tideloop.new_event_loop(schedule=perturber)
    finally:
        loop.close()
    with pytest.raises(TypeError):
        Perturber("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Perturber(1, hold_probability=2)


def test_failing_run_names_its_seed() -> None:
    async def main() -> None:
        raise AssertionError("boom")

    with pytest.raises(AssertionError) as info:
        testing.run(main(), seed=1234)
    assert "schedule seed 1234" in "".join(info.value.__notes__)


def test_a_thread_handle_in_the_inbox_is_not_slept_past() -> None:
    """A handle another thread queued is taken at the next wait, without blocking.

    Its wake-up can be lost: the waker skips writing while its previous
    wake is being drained, because the core finds such handles in ready;
    a Perturber keeps them in its inbox, so it must look there before the
    loop blocks (seen as: a 1 ms to_thread under a 1 s wait_for timing out
    on virtual time, 2 runs in 200 on 3.14).
    """
    perturber = Perturber(0)
    ready: collections.deque[asyncio.Handle] = collections.deque()
    wait = perturber.attach(ready, None, lambda: 0.0, lambda: None, lambda: None)
    timeouts: list[float | None] = []

    def poll(timeout: float | None) -> list[tuple[int, int]]:
        timeouts.append(timeout)
        return []

    wait(poll, 0.0)  # this thread is the loop's
    loop: Any = types.SimpleNamespace(get_debug=lambda: False)
    handle = asyncio.Handle(lambda: None, (), loop)
    thread = threading.Thread(target=perturber.admit_threadsafe, args=(handle,))
    thread.start()
    thread.join()
    wait(poll, 1.0)  # no byte on the waker: only the inbox says it came
    assert timeouts[-1] == 0.0
    assert handle in ready or [h.handle for h in perturber._held] == [handle]


def test_poll_events_are_permuted_not_lost() -> None:
    perturber = Perturber(3)
    events = [(fd, READ) for fd in range(10, 20)]
    wait = perturber.attach(collections.deque(), None, lambda: 0.0, lambda: None, lambda: None)
    seen: list[int] = []
    for _ in range(10):
        seen += [fd for fd, _ in wait(lambda timeout: list(events), 0.0)]
    # Every fd comes out, none more often than polled, and not always in order.
    assert set(seen) == set(range(10, 20))
    assert seen[:10] != list(range(10, 20)) or seen[10:20] != list(range(10, 20))


# ----------------------------------------------------------------------
# The planted races


# (That each passes unperturbed: test_races_planted.py.)


@pytest.mark.parametrize("planted", RACES, ids=lambda p: p.name)
def test_planted_race_is_found_and_replays(planted: Planted) -> None:
    for base in (0, 5000, 90000):
        if planted.name in REAL_THREAD_TIMING:
            assert replaying_seed(planted, base, limit=100) is not None, (
                f"no seed from {base} within 100 failed and replayed"
            )
            continue
        n = seeds_to_find(planted, base, limit=100)
        assert n is not None, f"not found within 100 seeds from {base}"
        seed = base + n - 1
        assert fails(planted, seed) and fails(planted, seed), f"seed {seed} did not replay"


def replaying_seed(planted: Planted, base: int, limit: int) -> int | None:
    """The first seed from *base* whose failure replays (at least once in 3 tries).

    On a race with a real thread's timing, a loaded machine (CI runs two
    suites on two cores) now and then delays the thread past the timer with
    no perturbation: that seed fails once and does not replay, which says
    nothing about the schedule. Such a seed is passed over, at most three
    times, so a Perturber that never reorders still fails this test.
    """
    spurious = 0
    for seed in range(base, base + limit):
        if not fails(planted, seed):
            continue
        if any(fails(planted, seed) for _ in range(3)):
            return seed
        spurious += 1
        assert spurious <= 3, f"seeds up to {seed}: {spurious} failures that did not replay"
    return None


# ----------------------------------------------------------------------
# A held thread handle never comes after what its thread did next


def _join_then_look() -> Any:
    """A worker queues a handle, then ``task_done()``; the loop's thread
    blocks in ``queue.join()`` (as anyio's worker-reuse test does). By the
    time ``join`` returns the handle is queued, so it has run one
    iteration later: on asyncio, always."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        jobs: queue.Queue[int] = queue.Queue()
        seen: list[int] = []

        def worker() -> None:
            item = jobs.get()
            loop.call_soon_threadsafe(seen.append, item)
            jobs.task_done()

        thread = threading.Thread(target=worker)
        thread.start()
        jobs.put(1)
        await asyncio.sleep(0.001)  # a timer the handle could be held behind
        jobs.join()  # blocks the loop's thread until task_done
        await asyncio.sleep(0)
        thread.join()
        return list(seen)

    return main


def _flag_then_look() -> Any:
    """A thread queues a handle, then sets a flag; the loop sees the flag,
    takes one more iteration, and the handle has run: on asyncio, always
    (it was queued before the flag was set)."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        seen: list[int] = []
        flag = threading.Event()

        def worker() -> None:
            loop.call_soon_threadsafe(seen.append, 1)
            flag.set()

        thread = threading.Thread(target=worker)
        thread.start()
        while not flag.is_set():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)
        thread.join()
        return list(seen)

    return main


@pytest.mark.parametrize("program", [_join_then_look, _flag_then_look], ids=["join", "flag"])
def test_a_threads_handle_is_not_held_past_what_the_thread_did_next(
    program: Any,
) -> None:
    assert asyncio.run(program()()) == [1]
    held = 0
    for seed in range(40):
        log = DecisionLog(RandomStrategy(seed))
        assert testing.run(program()(), strategy=log) == [1], seed
        held += sum(1 for point in log.deviations if point[0] == "thread")
    if program is _flag_then_look:
        assert held  # handles were held: their thread waited for them
