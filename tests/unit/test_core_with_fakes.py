"""The core's decisions, observed through a fake poller and a manual clock."""

from __future__ import annotations

import _thread
import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import tideloop
from tideloop._core.coreloop import MAX_POLL_TIMEOUT
from tideloop._pollers import READ, WRITE

from fakes import FakePoller, ManualClock, fake_loop

#: The tideloop under test: a child process imports it, not an installed copy.
TIDELOOP_SRC = os.path.dirname(os.path.dirname(tideloop.__file__))


def add_reader(loop: tideloop.Loop, fd: int, callback: Any, *args: Any) -> asyncio.Handle:
    """loop.add_reader, returning the handle the fd registry now holds."""
    loop.add_reader(fd, callback, *args)
    return loop._fds.readers[fd]


def add_writer(loop: tideloop.Loop, fd: int, callback: Any, *args: Any) -> asyncio.Handle:
    loop.add_writer(fd, callback, *args)
    return loop._fds.writers[fd]


EPOLLERR = 8
EPOLLHUP = 16

#: The `env` fixture: a loop on a fake poller and a manual clock.
Env = tuple[tideloop.Loop, FakePoller, ManualClock]


@pytest.fixture
def env() -> Iterator[Env]:
    loop, poller, clock = fake_loop()
    try:
        yield loop, poller, clock
    finally:
        loop.close()


def test_constructor_registers_only_the_waker(env: Env) -> None:
    loop, poller, _ = env
    assert poller.calls == [("register", loop._waker.fileno(), READ)]


def test_close_closes_the_poller() -> None:
    loop, poller, _ = fake_loop()
    loop.add_reader(30, print)
    loop.close()
    assert poller.closed
    assert loop._fds.readers == {} and loop._fds.user_fds() == []
    assert loop.remove_reader(30) is False


def test_time_comes_from_the_clock(env: Env) -> None:
    loop, _, clock = env
    assert loop.time() == 1000.0
    clock.t = 1234.5
    assert loop.time() == 1234.5


def test_poll_timeout_until_next_timer(env: Env) -> None:
    loop, poller, clock = env
    fired: list[float] = []
    loop.call_later(5, lambda: (fired.append(clock.t), loop.stop()))
    loop.run_forever()
    assert poller.timeouts == [5.0]
    assert fired == [1005.0]


def test_poll_timeout_zero_when_ready_or_stopping(env: Env) -> None:
    loop, poller, _ = env
    add_reader(loop, 50, print)  # an fd to poll for: zero-timeout polls are not skipped
    loop.call_later(100, lambda: None)
    loop.call_soon(lambda: None)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert poller.timeouts == [0.0]
    poller.timeouts.clear()
    loop.stop()
    loop.run_forever()
    assert poller.timeouts == [0.0]
    loop.remove_reader(50)


def test_poll_timeout_capped_at_one_day(env: Env) -> None:
    loop, poller, clock = env
    loop.call_later(3 * 86400, loop.stop)
    loop.run_forever()
    assert poller.timeouts == [MAX_POLL_TIMEOUT, MAX_POLL_TIMEOUT, MAX_POLL_TIMEOUT]
    assert clock.t == 1000.0 + 3 * 86400


def test_poll_timeout_none_without_timers(env: Env) -> None:
    loop, poller, _ = env
    fd = 50
    add_reader(loop, fd, loop.stop)
    poller.scripted.append([(fd, READ)])
    loop.run_forever()
    assert poller.timeouts == [None]
    loop.remove_reader(fd)


def test_past_deadline_gives_zero_timeout(env: Env) -> None:
    loop, poller, _ = env
    add_reader(loop, 50, print)  # an fd to poll for: zero-timeout polls are not skipped
    loop.call_at(loop.time() - 10, loop.stop)
    loop.run_forever()
    assert poller.timeouts == [0.0]
    loop.remove_reader(50)


_SKIP_CHECK = """
import threading, _thread
from fakes import fake_loop
from test_core_with_fakes import add_reader, add_writer
assert _thread._count() == 0, threading.enumerate()
loop, poller, _ = fake_loop()
BODY
# Another thread exists: every iteration polls (and so releases the GIL).
started, release = threading.Event(), threading.Event()
thread = threading.Thread(target=lambda: (started.set(), release.wait()))
thread.start()
started.wait()
poller.timeouts.clear()
loop.call_soon(loop.stop)
loop.run_forever()
assert poller.timeouts == [0.0], poller.timeouts
release.set()
thread.join()
loop.close()
print("ok")
"""


BODY_OF_SKIP_CHECK = """\
assert loop._fds.polled == 0
loop.call_soon(loop.stop)
loop.run_forever()
assert poller.timeouts == []
# Any fd of its own (a reader, a writer, the signal pipe) is polled for.
add_reader(loop, 50, print)
assert loop._fds.polled == 1
loop.call_soon(loop.stop)
loop.run_forever()
assert poller.timeouts == [0.0]
add_writer(loop, 50, print)
assert loop._fds.polled == 1  # one fd, both directions
loop.remove_reader(50)
loop.remove_writer(50)
assert loop._fds.polled == 0
poller.timeouts.clear()
loop.call_soon(loop.stop)
loop.run_forever()
assert poller.timeouts == []
# A poll that may block still happens (the loop must sleep somewhere).
loop.call_later(5, loop.stop)
loop.run_forever()
assert poller.timeouts == [5.0]
"""


def test_zero_timeout_poll_skipped_while_only_the_waker_is_registered() -> None:
    """A poll that may not block is a syscall that could only report the waker,
    skipped while no other thread exists (the syscall releases the GIL: a
    thread a callback woke runs at once, as on the stdlib loop). In a fresh
    interpreter: pytest's own threads (xdist's, a timeout's) must not count."""
    _fresh_interpreter(_SKIP_CHECK.replace("BODY", BODY_OF_SKIP_CHECK))


def _fresh_interpreter(script: str) -> None:
    """Run *script* in a new interpreter (no thread of pytest's); it prints "ok"."""
    here = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=here,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([here, TIDELOOP_SRC])},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


_QUIET_CHECK = """
import queue, threading, _thread
from fakes import fake_loop
from tideloop._core import quiet
assert _thread._count() == 0, threading.enumerate()
loop, poller, _ = fake_loop()

def polls():
    poller.timeouts.clear()
    loop.call_soon(loop.stop)
    loop.run_forever()
    return poller.timeouts == [0.0]

orders, done = queue.Queue(), queue.Queue()

def body():
    with quiet.quiet() as say:
        while (order := orders.get()) != "end":
            say.set(order == "quiet")
            done.put(order)
    done.put("end")

def tell(order):
    orders.put(order)
    assert done.get(timeout=10) == order

thread = threading.Thread(target=body)
assert not polls()
thread.start()
tell("loud")
assert polls() and quiet.count == 0
tell("quiet")
# A quiet thread does not count: the poll is skipped as with none.
assert not polls() and quiet.count == 1
tell("quiet")  # saying it twice counts once
assert not polls() and quiet.count == 1
tell("loud")
assert polls() and quiet.count == 0
tell("quiet")
assert quiet.count == 1
# Ending the block unsets it, however it ends.
tell("end")
thread.join()
assert quiet.count == 0 and not polls()
# A quiet thread counts for itself only: another one makes the loop poll.
thread = threading.Thread(target=body)
thread.start()
tell("quiet")
other_started, release = threading.Event(), threading.Event()
other = threading.Thread(target=lambda: (other_started.set(), release.wait()))
other.start()
other_started.wait()
assert polls() and quiet.count == 1
release.set()
other.join()
tell("end")
thread.join()
loop.close()
print("ok")
"""


def test_a_quiet_thread_does_not_stop_the_skip() -> None:
    """A thread that never needs the GIL handed over at once (the console's,
    asleep with nobody attached: quiet.py) does not make every iteration
    poll; any other thread still does. In a fresh interpreter, as above."""
    _fresh_interpreter(_QUIET_CHECK)


def test_failed_registration_is_not_counted(env: Env) -> None:
    loop, poller, _ = env
    poller.fail_next = OSError(9, "Bad file descriptor")
    with pytest.raises(OSError):
        loop.add_reader(60, print)
    assert loop._fds.polled == 0
    add_reader(loop, 60, print)
    poller.fail_next = OSError(9, "Bad file descriptor")
    with pytest.raises(OSError):
        loop.add_writer(60, print)  # a refused modify drops the fd entirely
    assert loop._fds.polled == 0 and 60 not in loop._fds.readers


def test_clock_resolution_rule() -> None:
    """A timer due within one clock resolution of now is run, not polled for again."""
    loop, poller, _ = fake_loop(resolution=0.01)
    try:
        calls: list[str] = []
        loop.call_at(1001.0, calls.append, "due")
        loop.call_at(1001.5, loop.stop)
        # The poll 'returns' 0.995 s later: 5 ms before the deadline, which
        # the clock cannot tell apart from it.
        poller.elapse.extend([0.995, 10.0])
        loop.run_forever()
        assert calls == ["due"]
        assert poller.timeouts[0] == pytest.approx(1.0)
        # The due timer ran after the first poll, without a second one.
        assert len(poller.timeouts) == 2
    finally:
        loop.close()


def test_timer_not_due_outside_resolution() -> None:
    loop, poller, _ = fake_loop(resolution=0.001)
    try:
        calls: list[str] = []
        loop.call_at(1001.0, calls.append, "due")
        poller.elapse.extend([0.99])
        loop.call_soon(loop.stop)
        loop.run_forever()  # ready callback forces timeout 0 and one iteration
        assert calls == []
        loop.call_at(1001.0, loop.stop)
        loop.run_forever()
        assert calls == ["due"]
    finally:
        loop.close()


def test_compaction_thresholds(env: Env) -> None:
    loop, _, _ = env
    timers = [loop.call_later(10 + i, lambda: None) for i in range(101)]
    for t in timers[1:52]:  # 51 of 101 cancelled: more than half
        t.cancel()
    assert loop._timers.cancelled == 51
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert len(loop._timers) == 50
    assert loop._timers.cancelled == 0
    assert all(not t._scheduled for t in timers[1:52])
    for t in timers:
        t.cancel()


def test_no_compaction_below_thresholds(env: Env) -> None:
    loop, _, _ = env
    # Near timers (far ones wait in slots, where cancelled ones are dropped
    # when their slot moves to the heap: tests/unit/test_timers.py).
    timers = [loop.call_later(1 + i / 100, lambda: None) for i in range(100)]
    for t in timers[1:80]:  # many cancelled, but only 100 timers
        t.cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert len(loop._timers) == 100  # the head is live, nothing dropped
    timers[0].cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()
    # Cancelled timers at the head are dropped lazily, up to the first live one.
    assert len(loop._timers) == 20
    assert loop._timers.cancelled == 0
    for t in timers:
        t.cancel()


def test_error_bits_reach_reader_and_writer(env: Env) -> None:
    loop, poller, _ = env
    calls: list[str] = []
    add_reader(loop, 10, calls.append, "r10")
    add_writer(loop, 10, calls.append, "w10")
    add_reader(loop, 11, calls.append, "r11")
    add_writer(loop, 11, calls.append, "w11")
    add_reader(loop, 12, calls.append, "r12")
    add_writer(loop, 12, calls.append, "w12")
    poller.scripted.append(
        [(10, READ), (11, WRITE), (12, EPOLLERR | EPOLLHUP), (99, READ)]  # 99 is unknown
    )
    loop.call_later(0.5, loop.stop)
    loop.run_forever()
    assert calls == ["r10", "w11", "r12", "w12"]
    for fd in (10, 11, 12):
        loop.remove_reader(fd)
        loop.remove_writer(fd)


def test_io_callbacks_run_after_already_ready_ones(env: Env) -> None:
    """asyncio's order: ready callbacks, then I/O callbacks, then due timers."""
    loop, poller, _ = env
    order: list[str] = []
    add_reader(loop, 20, order.append, "io")
    loop.call_at(loop.time(), order.append, "timer")
    loop.call_soon(order.append, "soon")
    poller.scripted.append([(20, READ)])
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert order == ["soon", "io", "timer"]
    loop.remove_reader(20)


def test_registration_calls(env: Env) -> None:
    loop, poller, _ = env
    poller.calls.clear()
    add_reader(loop, 30, print)
    add_writer(loop, 30, print)
    add_reader(loop, 30, repr)  # replacing: no kernel change
    assert loop.remove_reader(30)
    assert loop.remove_writer(30)
    assert not loop.remove_writer(30)
    assert poller.calls == [
        ("register", 30, READ),
        ("modify", 30, READ | WRITE),
        ("modify", 30, WRITE),
        ("unregister", 30, 0),
    ]


def test_cancelled_reader_is_unregistered_when_it_fires(env: Env) -> None:
    loop, poller, _ = env
    calls: list[int] = []
    handle = add_reader(loop, 40, calls.append, 1)
    handle.cancel()
    poller.scripted.append([(40, READ)])
    loop.call_later(0.1, loop.stop)
    loop.run_forever()
    assert calls == []
    assert 40 not in poller.registered
    assert loop.remove_reader(40) is False


def test_failed_register_leaves_nothing(env: Env) -> None:
    loop, poller, _ = env
    poller.fail_next = OSError(9, "Bad file descriptor")
    with pytest.raises(OSError, match="Bad file descriptor"):
        add_reader(loop, 50, print)
    assert 50 not in poller.registered
    assert loop.remove_reader(50) is False


def test_failed_modify_drops_the_fd(env: Env) -> None:
    loop, poller, _ = env
    old = add_reader(loop, 60, print)
    poller.fail_next = OSError(9, "Bad file descriptor")
    with pytest.raises(OSError):
        add_writer(loop, 60, print)
    # asyncio's selector drops the fd entirely and leaves the old handle alone.
    assert 60 not in poller.registered
    assert loop.remove_reader(60) is False
    assert loop.remove_writer(60) is False
    assert not old.cancelled()


def test_replaced_reader_handle_is_cancelled(env: Env) -> None:
    loop, _, _ = env
    first = add_reader(loop, 70, print)
    second = add_reader(loop, 70, print)
    assert first.cancelled() and not second.cancelled()
    loop.remove_reader(70)
    assert second.cancelled()


def test_call_soon_threadsafe_wakes_once_per_batch(env: Env) -> None:
    loop, poller, _ = env
    waker_fd = loop._waker.fileno()
    for _ in range(100):
        loop.call_soon_threadsafe(lambda: None)
    # Coalesced: the waker is pending once.
    assert loop._waker._pending
    loop.call_soon(loop.stop)
    loop.run_forever()
    # The busy iteration did not poll (only the waker is registered) unless
    # another thread exists (pytest's own, under xdist): the callbacks ran
    # from the ready queue and the waker is still pending, so no other
    # thread writes it again.
    assert poller.timeouts == ([0.0] if _thread._count() else []) and loop._waker._pending
    poller.timeouts.clear()
    # The next poll that may block reports it readable, and it is drained.
    poller.scripted.append([(waker_fd, READ)])
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert poller.timeouts[0] == 5.0
    assert not loop._waker._pending


def test_virtual_clock_wait_hook() -> None:
    """A clock with a wait() decides how the loop blocks: here, jump to the deadline."""

    class JumpClock:
        resolution = 1e-9

        def __init__(self) -> None:
            self.t = 0.0
            self.waits: list[float | None] = []

        def now(self) -> float:
            return self.t

        def wait(self, poll, timeout):  # type: ignore[no-untyped-def]
            self.waits.append(timeout)
            events = poll(0)  # never really block
            if not events and timeout:
                self.t += timeout
            return events

    clock = JumpClock()
    loop = tideloop.new_event_loop(poller="poll", clock=clock)  # type: ignore[arg-type]
    try:

        async def main() -> float:
            await asyncio.sleep(3600)
            await asyncio.sleep(86400 * 2)
            return loop.time()

        assert loop.run_until_complete(main()) == pytest.approx(3600 + 2 * 86400)
        assert clock.waits.count(MAX_POLL_TIMEOUT) == 2
    finally:
        loop.close()
