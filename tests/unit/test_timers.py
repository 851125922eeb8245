"""TimerQueue: heap order, lazy cancellation, compaction, bookkeeping invariants."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tideloop
from tideloop._core.handles import ReadyQueue, TimerHandle
from tideloop._core.timers import TimerQueue


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = tideloop.new_event_loop()
    yield lp
    lp.close()


class Recorder:
    """A loop stand-in for TimerHandle: it forwards cancellations to the queue."""

    _debug = False

    def __init__(self, queue: TimerQueue) -> None:
        self.queue = queue

    def get_debug(self) -> bool:
        return False

    def _timer_handle_cancelled(self, handle: TimerHandle) -> None:
        self.queue.note_cancelled(handle)


def make(queue: TimerQueue, when: float, tag: object = None) -> TimerHandle:
    handle = TimerHandle(when, print, (tag,), Recorder(queue))  # type: ignore[arg-type]
    queue.push(handle, handle.when())
    return handle


def test_pop_due_in_deadline_order() -> None:
    q = TimerQueue()
    for when in (5.0, 1.0, 3.0, 2.0, 4.0):
        make(q, when, when)
    out: ReadyQueue = collections.deque()
    q.pop_due(3.5, 3.5, out)
    assert [h.when() for h in out] == [1.0, 2.0, 3.0]
    assert all(not h._scheduled for h in out)
    assert q.next_deadline() == 4.0
    assert len(q) == 2


def test_due_means_strictly_before_end_time() -> None:
    q = TimerQueue()
    make(q, 2.0)
    out: ReadyQueue = collections.deque()
    q.pop_due(2.0, 2.0, out)
    assert not out
    q.pop_due(2.0 + 1e-9, 2.0 + 1e-9, out)
    assert len(out) == 1


def test_cancel_counts_only_scheduled_handles() -> None:
    q = TimerQueue()
    h = make(q, 1.0)
    h.cancel()
    assert q.cancelled == 1
    h.cancel()  # second cancel is a no-op
    assert q.cancelled == 1
    assert q.next_deadline() is None  # dropped from the head
    assert q.cancelled == 0
    assert not h._scheduled


def test_cancelled_due_timers_are_not_delivered() -> None:
    q = TimerQueue()
    live = make(q, 1.0)
    dead = make(q, 1.5)
    dead.cancel()
    out: ReadyQueue = collections.deque()
    q.pop_due(2.0, 2.0, out)
    assert list(out) == [live]
    assert q.cancelled == 0


def test_equal_deadlines_keep_insertion_order() -> None:
    q = TimerQueue()
    handles = [make(q, 7.0, i) for i in range(50)]
    out: ReadyQueue = collections.deque()
    q.pop_due(8.0, 8.0, out)
    assert list(out) == handles


def test_clear_unschedules_everything() -> None:
    q = TimerQueue()
    handles = [make(q, float(i)) for i in range(10)]
    handles[3].cancel()
    q.clear()
    assert len(q) == 0 and q.cancelled == 0
    assert all(not h._scheduled for h in handles)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["push", "cancel", "deadline", "pop"]),
            st.floats(min_value=0, max_value=100, allow_nan=False),
            st.integers(min_value=0, max_value=10_000),
        ),
        max_size=400,
    )
)
def test_invariants_under_random_operations(ops: list[tuple[str, float, int]]) -> None:
    """Model check against a plain list: same due timers, same order, exact counts."""
    q = TimerQueue()
    model: list[TimerHandle] = []  # live, not yet delivered, in push order
    pushed = 0
    for op, value, index in ops:
        if op == "push":
            model.append(make(q, value, pushed))
            pushed += 1
        elif op == "cancel" and model:
            model.pop(index % len(model)).cancel()
        elif op == "deadline":
            expected = min((h.when() for h in model), default=None)
            assert q.next_deadline() == expected
        elif op == "pop":
            out: ReadyQueue = collections.deque()
            q.pop_due(value, value, out)
            due = sorted(
                (h for h in model if h.when() < value), key=lambda h: (h.when(), h._args[0])
            )
            assert list(out) == due
            model = [h for h in model if h.when() >= value]
        # Invariants after every operation.
        in_heap = q.handles()
        assert len(q) == len(in_heap)
        assert sorted(q.heap) == sorted(q.buckets)
        assert all(h._scheduled for h in in_heap)
        assert q.cancelled == sum(1 for h in in_heap if h.cancelled())
        assert {id(h) for h in model} <= {id(h) for h in in_heap}


def test_loop_timers_use_the_queue(loop: asyncio.AbstractEventLoop) -> None:
    assert isinstance(loop, tideloop.Loop)
    t1 = loop.call_later(100, print)
    t2 = loop.call_later(50, print)
    assert loop._timers.next_deadline() == t2.when()
    t2.cancel()
    assert loop._timers.next_deadline() == t1.when()
    t1.cancel()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["push", "push", "cancel", "deadline", "pop"]),
            # Few distinct deadlines: most pushes share a bucket.
            st.sampled_from([1.0, 2.0, 3.0, 5.0]),
            st.integers(min_value=0, max_value=10_000),
        ),
        max_size=300,
    ),
    st.integers(min_value=0, max_value=2**32),
)
def test_keyed_queue_orders_equal_deadlines_by_key(
    ops: list[tuple[str, float, int]], seed: int
) -> None:
    """With a Schedule's keys, equal deadlines fire in key order: the order a
    ``(when, key)`` heap gives, so seeded replays do not depend on the layout."""
    rng = random.Random(seed)
    drawn: list[int] = []

    def keys() -> Iterator[int]:
        while True:
            key = rng.getrandbits(62)
            drawn.append(key)
            yield key

    q = TimerQueue(keys())
    model: list[tuple[float, int, TimerHandle]] = []
    for op, value, index in ops:
        if op == "push":
            handle = make(q, value)
            model.append((value, drawn[-1], handle))
        elif op == "cancel" and model:
            model.pop(index % len(model))[2].cancel()
        elif op == "deadline":
            assert q.next_deadline() == min((m[0] for m in model), default=None)
        elif op == "pop":
            out: ReadyQueue = collections.deque()
            q.pop_due(value, value, out)
            due = sorted((m for m in model if m[0] < value), key=lambda m: (m[0], m[1]))
            assert list(out) == [m[2] for m in due]
            model = [m for m in model if m[0] >= value]
        assert len(q) == len(q.handles())
        assert sorted(q.heap) == sorted(q.buckets) == sorted(q._tiekeys)
        for when, entry in q.buckets.items():
            bucket = entry if isinstance(entry, list) else [entry]
            assert len(q._tiekeys[when]) == len(bucket)
            assert q._tiekeys[when] == sorted(q._tiekeys[when])


def test_compaction_keeps_live_timers_of_shared_deadlines() -> None:
    q = TimerQueue()
    shared = [make(q, 7.0, i) for i in range(150)]
    for handle in shared[:120]:
        handle.cancel()
    assert q.next_deadline() == 7.0  # compacts: 120 of 150 cancelled
    assert q.cancelled == 0 and len(q) == 30
    assert all(not h._scheduled for h in shared[:120])
    out: ReadyQueue = collections.deque()
    q.pop_due(8.0, 8.0, out)
    assert list(out) == shared[120:]  # scheduling order survives compaction
