"""TimerQueue: heap order, lazy cancellation, compaction, bookkeeping invariants."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tideloop
from tideloop._core.handles import ReadyQueue, TimerHandle
from tideloop._core.timers import FAR_DELAY, SLOT_WIDTH, TimerQueue


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
    t1 = loop.call_later(1.5, print)
    t2 = loop.call_later(1.0, print)
    assert loop._timers.next_deadline() == t2.when()
    t2.cancel()
    assert loop._timers.next_deadline() == t1.when()
    t1.cancel()


def test_loop_puts_timers_due_far_ahead_in_slots(loop: asyncio.AbstractEventLoop) -> None:
    assert isinstance(loop, tideloop.Loop)
    queue = loop._timers
    near = loop.call_later(FAR_DELAY / 2, print)
    far = [loop.call_later(100, print), loop.call_at(loop.time() + 50, print)]
    assert sorted(h for slot in queue._far.values() for h in slot) == sorted(far)
    assert queue.handles()[0] is near and len(queue) == 3
    # The near timer comes first; then the marker of the first far slot,
    # which a loop about to block passes: it migrates that slot instead.
    assert queue.next_deadline() == near.when()
    near.cancel()
    deadline = queue.next_deadline()
    assert deadline is not None and far[1].when() - SLOT_WIDTH < deadline <= far[1].when()
    assert queue.pass_markers() == far[1].when()
    assert queue.handles() == [far[1], far[0]] and len(queue._far) == 1
    for handle in far:
        handle.cancel()


def schedule(queue: TimerQueue, now: float, when: float, tag: object = None) -> TimerHandle:
    """A timer armed at *now*, as the loop arms it: in a slot if due FAR_DELAY or later."""
    handle = TimerHandle(when, print, (tag,), Recorder(queue))  # type: ignore[arg-type]
    if when - now < FAR_DELAY:
        queue.push(handle, when)
    else:
        queue.push_far(handle, when)
    return handle


def run_due(queue: TimerQueue, now: float) -> list[TimerHandle]:
    """What the loop's iteration at *now* runs (resolution 0)."""
    out: ReadyQueue = collections.deque()
    if queue.heap and queue.heap[0] < now:
        queue.pop_due(now, now, out)
    return list(out)


def check_invariants(queue: TimerQueue) -> None:
    handles = queue.handles()
    assert len(queue) == len(handles) == len({id(h) for h in handles})
    assert all(h._scheduled for h in handles)
    assert queue.cancelled == sum(1 for h in handles if h.cancelled())
    assert sorted(queue.heap) == sorted(queue.buckets)
    assert sorted(queue._slots) == sorted(queue._far)
    assert all(queue._far.values())
    for slot, timers in queue._far.items():
        assert slot * SLOT_WIDTH >= queue._near_until
        assert all(h.when() // SLOT_WIDTH == slot for h in timers)
    if queue._far:
        assert queue.buckets[queue._mark_at] is queue.marker
        assert queue._mark_at <= min(queue._far) * SLOT_WIDTH
    else:
        assert queue._mark_at == float("inf")


def test_far_timers_wait_in_slots_and_leave_unseen_when_cancelled() -> None:
    q = TimerQueue()
    timers = [schedule(q, 0.0, 100.0 + i / 400, i) for i in range(1000)]  # 3 slots
    assert len(q) == 1000 and len(q._far) == 3
    assert q.heap == [100.0]  # one marker, at the start of the first slot
    check_invariants(q)
    for handle in timers:
        handle.cancel()
    assert q.next_deadline() is None  # compaction: the slots go, and the marker
    assert len(q) == 0 and not q.heap and not q._far
    assert all(not h._scheduled for h in timers)
    check_invariants(q)


def test_a_stall_past_far_timers_still_delivers_in_deadline_order() -> None:
    q = TimerQueue()
    late = [schedule(q, 0.0, when, when) for when in (7.25, 5.0, 9.5, 5.2)]
    near = schedule(q, 4.0, 5.5)
    assert sorted(q._far) == [5.0, 7.0, 9.0]
    assert run_due(q, 20.0) == [late[1], late[3], near, late[0], late[2]]
    assert len(q) == 0 and not q._far
    check_invariants(q)


def test_equal_deadlines_across_a_slot_and_the_heap_keep_scheduling_order() -> None:
    q = TimerQueue()
    first = schedule(q, 0.0, 10.0, "first")  # far: slot 10, migrated at 10.0
    second = schedule(q, 8.5, 10.0, "second")  # near: the heap, before the migration
    third = schedule(q, 0.5, 10.0, "third")  # far again (armed earlier than second)
    assert run_due(q, 9.5) == []
    fourth = schedule(q, 9.5, 10.0, "fourth")
    assert run_due(q, 10.5) == [first, third, second, fourth]
    check_invariants(q)


def test_a_deadline_on_the_marker_takes_its_bucket() -> None:
    q = TimerQueue()
    far = schedule(q, 0.0, 10.25)  # slot 10: marker at 10.0
    assert q._mark_at == 10.0
    on_marker = schedule(q, 8.5, 10.0)
    assert q.buckets[10.0] is on_marker and q._mark_at < 10.0
    check_invariants(q)
    assert run_due(q, 10.0) == []  # the marker, an ulp earlier, migrated slot 10
    assert not q._far
    assert run_due(q, 11.0) == [on_marker, far]
    check_invariants(q)


def test_pass_markers_migrates_the_first_slot_and_skips_cancelled_ones() -> None:
    q = TimerQueue()
    gone = [schedule(q, 0.0, 5.5), schedule(q, 0.0, 6.5)]  # slots 5 and 6
    kept = schedule(q, 0.0, 7.5)  # slot 7
    later = schedule(q, 0.0, 9.5)  # slot 9
    for handle in gone:
        handle.cancel()
    assert q.pass_markers() == 7.5  # slots 5 and 6 dropped, 7 migrated, 9 waits
    assert sorted(q._far) == [9.0] and q.heap[0] == 7.5 and q._mark_at == 9.0
    assert not any(h._scheduled for h in gone) and q.cancelled == 0
    check_invariants(q)
    assert run_due(q, 10.0) == [kept, later]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["later", "later", "at", "cancel", "advance", "run", "deadline", "block"]
            ),
            st.floats(min_value=0, max_value=12, allow_nan=False),
            st.integers(min_value=0, max_value=10_000),
        ),
        max_size=300,
    )
)
def test_far_timers_under_random_operations(ops: list[tuple[str, float, int]]) -> None:
    """Model check with a clock that only advances, slots and heap together:
    timers come out in (deadline, scheduling order), stalls included."""
    q = TimerQueue()
    now = 0.0
    model: list[tuple[float, int, TimerHandle]] = []  # live, undelivered
    seq = 0
    for op, value, index in ops:
        if op in ("later", "at"):
            # "at": a few absolute deadlines, some on marker times (slot
            # starts), so that equal deadlines meet in slots and heap.
            when = now + value if op == "later" else (3.0, 4.0, 5.5, 7.0, 9.25)[index % 5]
            model.append((when, seq, schedule(q, now, when, seq)))
            seq += 1
        elif op == "cancel" and model:
            model.pop(index % len(model))[2].cancel()
        elif op == "advance":
            now += value
        elif op == "run":
            due = sorted(m for m in model if m[0] < now)
            assert run_due(q, now) == [m[2] for m in due]
            model = [m for m in model if m[0] >= now]
        elif op == "deadline":
            deadline = q.next_deadline()
            first = min((m[0] for m in model), default=None)
            assert first is None or (deadline is not None and deadline <= first)
        elif op == "block":  # the loop would block: no waking for a marker
            deadline = q.pass_markers()
            first = min((m[0] for m in model), default=None)
            assert deadline is None or q.buckets[deadline] is not q.marker
            assert first is None or (deadline is not None and deadline <= first)
        check_invariants(q)
        assert {id(m[2]) for m in model} <= {id(h) for h in q.handles()}


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
def test_tie_function_places_equal_deadlines(ops: list[tuple[str, float, int]], seed: int) -> None:
    """With a Schedule's tie function, a timer pushed onto a deadline that has
    n timers goes where the function says (0..n), the function hears of every
    timer (with the ones it ties, in their order), and equal deadlines fire in
    bucket order, deadlines in order."""
    rng = random.Random(seed)
    asked: list[tuple[int, int]] = []
    armed: list[TimerHandle] = []

    def tie(handle: TimerHandle, tied: Sequence[TimerHandle]) -> int:
        armed.append(handle)
        n = len(tied)
        if not n:
            return rng.randrange(5)  # not a tie: the answer is not used
        entry = q.buckets[handle.when()]
        assert list(tied) == (entry if isinstance(entry, list) else [entry])
        i = rng.randrange(n + 1)
        asked.append((n, i))
        return i

    q = TimerQueue(tie)
    model: list[tuple[float, TimerHandle]] = []
    for op, value, index in ops:
        if op == "push":
            entry = q.buckets.get(value)
            n = 0 if entry is None else len(entry) if isinstance(entry, list) else 1
            before = len(asked)
            handle = make(q, value)
            assert armed[-1] is handle
            if n == 0:
                assert len(asked) == before  # no tie, no question
            else:
                assert asked[-1][0] == n
                bucket = q.buckets[value]
                assert isinstance(bucket, list) and bucket[asked[-1][1]] is handle
            model.append((value, handle))
        elif op == "cancel" and model:
            model.pop(index % len(model))[1].cancel()
        elif op == "deadline":
            assert q.next_deadline() == min((m[0] for m in model), default=None)
        elif op == "pop":
            expected: list[TimerHandle] = []
            for when in sorted({m[0] for m in model if m[0] < value}):
                entry = q.buckets[when]
                bucket = entry if isinstance(entry, list) else [entry]
                expected.extend(h for h in bucket if not h._cancelled)
            out: ReadyQueue = collections.deque()
            q.pop_due(value, value, out)
            assert list(out) == expected
            assert {id(h) for h in expected} == {id(m[1]) for m in model if m[0] < value}
            model = [m for m in model if m[0] >= value]
        assert len(q) == len(q.handles())
        assert sorted(q.heap) == sorted(q.buckets)


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
