"""Virtual time never hangs on a thread: a job blocked waiting is idle, one at work holds the clock.

Each program runs on the stdlib loop (real time) and under virtual time,
and must give the same answer: an executor job or thread blocked waiting
for the program (an ``Event``, a ``Condition``, a ``Queue``, a lock, a
``select`` with nothing ready) lets virtual time move on; one that
computes, or sleeps, holds it; one that tideloop cannot tell is let go of
after a bounded real time, with a `VirtualTimeWarning` naming its frame.
The `ThreadWatch` tests at the end use short graces to show the rules
themselves.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import contextlib
import os
import queue
import selectors
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any

import pytest

from tideloop import testing
from tideloop.testing import VirtualTimeWarning
from tideloop.testing._threads import (
    Baseline,
    ThreadWatch,
    _blocked,
    _call_of,
    _where,
    runner_threads,
    waits,
)

Main = Callable[[], Coroutine[Any, Any, object]]


def both(main: Main) -> tuple[object, object]:
    """*main*'s result on the stdlib loop and under virtual time."""
    return asyncio.run(main()), testing.run(main(), virtual_time=True)


def test_the_issues_example_returns_as_on_the_stdlib_loop() -> None:
    """An executor job waits for an Event the program sets after a sleep."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        ev = threading.Event()
        fut = loop.run_in_executor(None, ev.wait)
        await asyncio.sleep(0.1)
        ev.set()
        return await asyncio.wait_for(fut, 1), round(loop.time() - start[0], 1)

    start = [0.0]

    async def timed() -> object:
        start[0] = asyncio.get_running_loop().time()
        return await main()

    real, virtual = both(timed)
    assert real == (True, 0.1)
    assert virtual == (True, 0.1)


def waiting_job(kind: str) -> Main:
    """A program whose executor job waits, in *kind*, for what the program
    does after 5 s of sleep; it returns what the job saw and the loop's time."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        lock = threading.Lock()
        rlock = threading.RLock()
        cond = threading.Condition()
        q: queue.Queue[int] = queue.Queue()
        sq: queue.SimpleQueue[int] = queue.SimpleQueue()
        box: list[int] = []
        r, w = socket.socketpair()

        def with_lock() -> int:
            with lock:
                return 1

        def acquire() -> int:
            lock.acquire()
            lock.release()
            return 2

        def condition() -> int:
            with cond:
                cond.wait_for(lambda: box)
            return box[0]

        def in_select() -> bytes:
            with selectors.DefaultSelector() as sel:
                sel.register(r, selectors.EVENT_READ)
                sel.select()
            return r.recv(10)

        def receive() -> bytes:
            return r.recv(10)

        def rlock_held() -> int:
            with rlock:
                return 7

        event = threading.Event()
        jobs: dict[str, Callable[[], object]] = {
            "event": event.wait,
            "with lock": with_lock,
            "acquire": acquire,
            "lock.acquire itself": lock.acquire,
            "rlock": rlock_held,
            "condition": condition,
            "queue": q.get,
            "simple queue": sq.get,
            "select": in_select,
            "recv": receive,
        }
        holder: concurrent.futures.Future[None] = concurrent.futures.Future()

        def hold_rlock() -> None:
            with rlock:
                holder.set_result(None)
                event.wait()

        helper = threading.Thread(target=hold_rlock)
        if kind == "rlock":
            helper.start()
            holder.result()
        lock.acquire()
        try:
            fut = loop.run_in_executor(None, jobs[kind])
            await asyncio.sleep(5)
            # What the job waits for, from the program.
            event.set()
            lock.release()
            with cond:
                box.append(3)
                cond.notify_all()
            q.put(4)
            sq.put(5)
            w.send(b"6")
            result = await asyncio.wait_for(fut, 1)
            if kind == "lock.acquire itself":
                lock.release()
            return result, round(loop.time() - t0, 3)
        finally:
            event.set()
            if lock.locked() and kind != "lock.acquire itself":
                lock.release()
            if kind == "rlock":
                helper.join()
            r.close()
            w.close()

    return main


KINDS = [
    "event",
    "with lock",
    "acquire",
    "lock.acquire itself",
    "rlock",
    "condition",
    "queue",
    "simple queue",
    "select",
    "recv",
]
EXPECTED = {
    "event": True,
    "with lock": 1,
    "acquire": 2,
    "lock.acquire itself": True,
    "rlock": 7,
    "condition": 3,
    "queue": 4,
    "simple queue": 5,
    "select": b"6",
    "recv": b"6",
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_blocked_waiting_for_the_program_lets_time_move(kind: str) -> None:
    """On the stdlib loop each takes 5 s of real time; under virtual time,
    the job is idle, so the clock jumps the 5 s at once (no warning: the
    watch could tell). The stdlib run of two of them keeps the suite honest
    without spending 45 s."""
    with warnings_as_errors():
        virtual = testing.run(waiting_job(kind)(), virtual_time=True)
    assert virtual == (EXPECTED[kind], 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["with lock", "simple queue"])
def test_the_same_programs_on_the_stdlib_loop(kind: str) -> None:
    result, elapsed = asyncio.run(waiting_job(kind)())  # type: ignore[misc]
    assert result == EXPECTED[kind]
    assert elapsed == pytest.approx(5.0, abs=0.5)


class warnings_as_errors:
    """A VirtualTimeWarning raised as an error (the suite's filter does it
    too; this keeps the tests right under any -W)."""

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error", VirtualTimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)


def test_a_thread_of_the_programs_blocked_on_a_lock_lets_time_move() -> None:
    """Not a job: a thread the program started, blocked in ``with lock``."""
    lock = threading.Lock()

    async def main() -> object:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def worker() -> None:
            with lock:
                loop.call_soon_threadsafe(done.set_result, loop.time())

        lock.acquire()
        thread = threading.Thread(target=worker)
        thread.start()
        try:
            await asyncio.sleep(30)
            lock.release()
            return await asyncio.wait_for(done, 1)
        finally:
            thread.join()

    with warnings_as_errors():
        assert testing.run(main(), virtual_time=True) == 30.0


def test_a_job_that_computes_holds_the_clock() -> None:
    """A job at work (here 50 ms of sleep: busy) is not jumped past by a
    timeout, as on the stdlib loop."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, time.sleep, 0.05)
        try:
            await asyncio.wait_for(fut, 0.5)
        except TimeoutError:
            return "timeout"
        return "done"

    assert both(main) == ("done", "done")


def _until_dead(pid: int) -> None:
    """Return once process *pid* has died (a zombie, or reaped)."""
    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return
        except (FileNotFoundError, ProcessLookupError):
            # Reaped (by the job's waitpid) before the open, or between the
            # open and the read: procfs then answers ESRCH.
            return
        time.sleep(0.005)


def test_a_job_tideloop_cannot_tell_is_let_go_of_with_a_warning() -> None:
    """A job blocked in ``os.waitpid`` for a child the program kills after a
    sleep: a blocking call tideloop cannot see into. After a bounded real
    time (GRACE) it says so, naming the thread, the job and its frame, and
    the clock moves on; the job, once its call returns, holds the clock
    again, so the run ends as on the stdlib loop."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:

            def receive(pid: int = child.pid) -> int:
                return os.waitpid(pid, 0)[0]

            fut = loop.run_in_executor(None, receive)
            await asyncio.sleep(3)
            child.kill()
            # The job wakes when the child is dead, not when it is sent the
            # signal: a child (PyPy's, with its heap) may take longer to
            # die than the watch's look after this step.
            await asyncio.to_thread(_until_dead, child.pid)
            return await asyncio.wait_for(fut, 1) == child.pid
        finally:
            child.kill()
            child.returncode = 0  # reaped by the job (Popen must not wait for it)

    with pytest.warns(VirtualTimeWarning) as record:
        assert testing.run(main(), virtual_time=True) is True
    [warning] = record
    text = str(warning.message)
    assert "virtual time moves on without thread 'asyncio_0'" in text
    assert "running the executor job" in text and "receive" in text
    assert f"{__file__}:" in text  # the job's own frame, where it blocks
    assert "cannot tell whether it works or waits" in text


def test_a_job_reading_a_pipe_waits_for_the_program() -> None:
    """A job blocked in ``os.read`` of a pipe with nothing to read waits for
    a writer: the clock moves on at once (no warning), and the run ends as
    on the stdlib loop."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        r, w = os.pipe()
        try:

            def receive(fd: int = r) -> bytes:
                return os.read(fd, 10)

            fut = loop.run_in_executor(None, receive)
            await asyncio.sleep(3)
            os.write(w, b"late")
            return await asyncio.wait_for(fut, 1)
        finally:
            os.close(r)
            os.close(w)

    start = time.monotonic()
    with warnings_as_errors():
        assert testing.run(main(), virtual_time=True) == b"late"
    assert time.monotonic() - start < 2.5  # 3 s of loop time, in less real time


# ----------------------------------------------------------------------
# ThreadWatch's rules, with short graces


@pytest.fixture
def threads() -> Iterator[list[threading.Thread]]:
    started: list[threading.Thread] = []
    yield started
    for thread in started:
        thread.join(5)
        assert not thread.is_alive()


def start(threads: list[threading.Thread], target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, name="watched")
    thread.start()
    threads.append(thread)
    return thread


def watch_for(watch: ThreadWatch, seconds: float, jobs: tuple[object, ...] = ()) -> list[bool]:
    """What *watch* says every 10 ms for *seconds* of real time."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.append(watch(jobs))
        time.sleep(0.01)
    return seen


def test_a_computing_thread_holds_the_clock_past_the_grace(
    threads: list[threading.Thread],
) -> None:
    stop = threading.Event()

    def compute() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    watch = ThreadWatch(others(), grace=0.05, compute_grace=5.0)
    start(threads, compute)
    try:
        with warnings_as_errors():
            seen = watch_for(watch, 0.3)
    finally:
        stop.set()
    assert all(seen)


def test_a_sleeping_thread_holds_the_clock_for_its_sleep(
    threads: list[threading.Thread],
) -> None:
    watch = ThreadWatch(others(), grace=0.05, compute_grace=5.0)
    start(threads, lambda: time.sleep(0.4))
    with warnings_as_errors():
        assert all(watch_for(watch, 0.25))


@pytest.mark.parametrize(
    ("file", "function"), [("threading.py", "acquire"), ("queue.py", "get"), ("queue.py", "put")]
)
def test_a_frame_that_waits_below_itself_runs_code_when_innermost(
    threads: list[threading.Thread], file: str, function: str
) -> None:
    """``Semaphore.acquire`` and ``Queue.get`` wait in a frame below them
    (``Condition.wait``): seen as the innermost frame, the wait is over and
    they run Python code. PyPy's thread pool takes its job through a Python
    ``SimpleQueue`` (``get``, ``Semaphore.acquire``): a worker just handed
    a job was taken for idle there, and virtual time jumped past its result
    (CI, PyPy under blockbuster). A function of that name and file stands
    in for it, computing in its own frame."""
    namespace: dict[str, Any] = {}
    source = f"def {function}(stop):\n    n = 0\n    while not stop.is_set():\n        n += 1\n"
    exec(compile(source, f"/stand-in/{file}", "exec"), namespace)
    stop = threading.Event()
    watch = ThreadWatch(others(), grace=5.0, compute_grace=5.0)
    thread = start(threads, lambda: namespace[function](stop))
    try:
        # Seen in that frame, computing: busy on every look.
        for _ in range(100):
            frame = sys._current_frames().get(thread.ident or 0)
            if frame is not None and frame.f_code.co_name == function:
                break
            time.sleep(0.001)
        with warnings_as_errors():
            seen = watch_for(watch, 0.1)
    finally:
        stop.set()
    assert seen and all(seen), seen


def test_a_notified_condition_wait_waits_for_nobody(threads: list[threading.Thread]) -> None:
    """A thread notified in ``Condition.wait`` acts without another thread,
    though until it has the GIL it still shows the waiter's acquire, the
    waiter lock held (handed to it, from 3.13). Read as a wait, a producer
    gave up its held ``call_soon_threadsafe`` handle while the loop's thread
    only returned from ``Thread.start()`` (CI, Debian's 3.15 under load: a
    recorded tape did not fail again). Here the thread is taken out of the
    condition's list, as ``notify()`` does, with its waiter still held."""
    condition = threading.Condition()
    waiting = condition._waiters  # type: ignore[attr-defined]

    def body() -> None:
        with condition:
            condition.wait()

    def frame() -> FrameType:
        return sys._current_frames()[thread.ident or 0]

    thread = start(threads, body)
    try:
        # In the list, from when it appends its waiter: it waits to be
        # notified (once it has let the condition's lock go, it may still be
        # on its way to the waiter's acquire for a moment: PyPy).
        for _ in range(5000):
            with condition:
                if waiting and waits(frame()):
                    break
            time.sleep(0.001)
        assert waits(frame())
        with condition:
            (waiter,) = waiting
            waiting.remove(waiter)
            try:
                assert not waits(frame())
            finally:
                waiter.release()  # the rest of notify(): it runs once we let go
    finally:
        with condition:
            condition.notify_all()  # if it never got as far


def test_a_worker_of_a_pool_shutting_down_is_busy(threads: list[threading.Thread]) -> None:
    """A pool worker waiting on an empty queue is idle, unless its pool is
    shutting down: then it exits with the sentinel each exiting worker
    passes on, without the program, and may already have it (woken, but
    waiting for the GIL: no trace). Jumped past, asyncio's 300 s timeout on
    the executor's shutdown "expired" at once (CI, 3.14 under blockbuster).
    A function of the pool's name and file stands in for its worker."""
    if queue.SimpleQueue is getattr(queue, "_PySimpleQueue", None):
        pytest.skip(
            "PyPy's SimpleQueue is Python code: a worker waits in Condition.wait, "
            "whose notify() shows the wake (the Condition tests cover it)"
        )
    namespace: dict[str, Any] = {}
    source = (
        "def _worker(executor_reference, work_queue):\n    work_item = work_queue.get(block=True)\n"
    )
    exec(compile(source, "/stand-in/thread.py", "exec"), namespace)

    class Pool:
        _shutdown = False

    pool = Pool()
    work_queue: queue.SimpleQueue[object] = queue.SimpleQueue()
    watch = ThreadWatch(others(), grace=5.0, compute_grace=5.0)
    thread = start(threads, lambda: namespace["_worker"](weakref.ref(pool), work_queue))
    try:
        for _ in range(200):
            frame = sys._current_frames().get(thread.ident or 0)
            if frame is not None and frame.f_code.co_name == "_worker":
                break
            time.sleep(0.001)
        time.sleep(0.05)  # in the get
        assert not any(watch_for(watch, 0.1))  # idle: it waits for a job
        pool._shutdown = True
        with warnings_as_errors():
            seen = watch_for(watch, 0.1)
        assert seen and all(seen), seen
    finally:
        work_queue.put(None)


def test_a_thread_blocked_in_an_unknown_call_is_let_go_of_once(
    threads: list[threading.Thread],
) -> None:
    """Let go of after the grace, with one warning; held again once the
    call returns (its CPU time moves), until it is next seen idle."""
    # waitpid() for a child: a C call the watch does not know (a blocking
    # read of a pipe it does know: a wait).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    go_on = threading.Event()
    try:
        watch = ThreadWatch(others(), grace=0.05, compute_grace=5.0)
        pid = child.pid

        def reader() -> None:
            os.waitpid(pid, 0)
            n = 0
            while not go_on.is_set():  # works after the wait
                n += 1

        start(threads, reader)
        with pytest.warns(VirtualTimeWarning, match=r"thread 'watched'.*reader") as record:
            seen = watch_for(watch, 0.3)
        assert seen[0] and not seen[-1]
        assert len(record) == 1  # once
        child.kill()
        with warnings_as_errors():
            assert watch_for(watch, 0.03)[-1]  # it woke: it holds the clock again
    finally:
        go_on.set()
        child.kill()
        child.wait()


def test_a_job_out_of_sight_holds_the_clock_then_is_let_go_of() -> None:
    """A running job no thread here runs (a process pool's) holds the clock
    for COMPUTE_GRACE; a queued one does not."""
    running: concurrent.futures.Future[None] = concurrent.futures.Future()
    assert running.set_running_or_notify_cancel()
    queued: concurrent.futures.Future[None] = concurrent.futures.Future()
    watch = ThreadWatch(others(), grace=0.05, compute_grace=0.1)
    assert not watch((queued,))
    assert watch((running,))
    with pytest.warns(VirtualTimeWarning, match="no thread of this process"):
        seen = watch_for(watch, 0.3, (running,))
    assert seen[0] and not seen[-1]


#: The stack size of the threads that hand an ident on. glibc keeps an ended
#: thread's stack for the next thread, and the ident with it (the thread's
#: descriptor is in its stack); it gives a new thread the smallest cached
#: stack that fits. A size no other thread uses makes the runner's stack
#: the one the next thread of that size takes, whatever else ended since.
_HANDOVER_STACK = 2 * 1024 * 1024 + 64 * 1024


@contextlib.contextmanager
def _handover_stack() -> Iterator[None]:
    previous = threading.stack_size(_HANDOVER_STACK)
    try:
        yield
    finally:
        threading.stack_size(previous)


class _Runner:
    """A thread that looks busy (it polls with short sleeps), as a test
    runner's does: a loop made while it runs takes it into its baseline."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="runner")
        with _handover_stack():
            self.thread.start()
        self.ident = self.thread.ident

    def _poll(self) -> None:
        while not self.stop.is_set():
            time.sleep(0.002)

    def end(self) -> None:
        """Stop it, and return once its stack is free for the next thread:
        ``join`` returns a moment before the thread has exited (before 3.13
        Python's threads are detached; glibc caches the stack on the way
        out), so wait for the kernel's task to be gone."""
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive()
        task = f"/proc/self/task/{self.thread.native_id}"
        for _ in range(1000):
            if not os.path.exists(task):
                return
            time.sleep(0.005)
        raise AssertionError(f"{task} is still there")


def _compute(stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1


def test_a_thread_given_an_ended_runner_threads_ident_is_watched(
    threads: list[threading.Thread],
) -> None:
    """glibc hands an ended thread's ident to the next thread started: a
    runner thread of the baseline that ends must not hide the program's
    thread that takes its ident (virtual time would jump past its work)."""
    runner = _Runner()
    try:
        baseline = runner_threads()
        assert runner.ident in baseline
    finally:
        runner.end()
    stop = threading.Event()
    watch = ThreadWatch(baseline, grace=0.05, compute_grace=5.0)
    with _handover_stack():
        worker = start(threads, lambda: _compute(stop))
    try:
        assert worker.ident == runner.ident  # glibc reused it: what this test is about
        with warnings_as_errors():
            assert all(watch_for(watch, 0.1))
    finally:
        stop.set()
    assert worker.ident not in baseline


def test_a_thread_given_a_let_go_threads_ident_is_watched_afresh(
    threads: list[threading.Thread],
) -> None:
    """A thread let go of (it held the clock past the grace) is "free" for
    its life; the next thread, which glibc gives its ident once it ended,
    must not inherit that (CI, 3.14: the executor's worker, on a let-go
    spinner's ident, was jumped past by the 300 s shutdown timeout)."""
    watch = ThreadWatch(others(), grace=0.05, compute_grace=0.05)
    old = _Runner()  # polls with short sleeps: busy, then let go of
    try:
        with pytest.warns(VirtualTimeWarning):
            seen = watch_for(watch, 0.3)
        assert seen[0] and not seen[-1], seen  # held, then let go of
    finally:
        old.end()
    stop = threading.Event()
    with _handover_stack():
        worker = start(threads, lambda: _compute(stop))
    try:
        assert worker.ident == old.ident  # glibc reused it: what this test is about
        assert watch(), "the new thread computes: it holds the clock"
    finally:
        stop.set()


def test_a_baseline_forgets_ended_threads_and_keeps_live_ones() -> None:
    runner = _Runner()
    try:
        baseline = runner_threads()
        assert runner.ident in baseline
        baseline.refresh(sys._current_frames())
        assert runner.ident in baseline  # alive, the same thread
    finally:
        runner.end()
    baseline.refresh(sys._current_frames())
    assert runner.ident not in baseline
    assert threading.get_ident() not in Baseline()  # empty: nothing to refresh
    Baseline().refresh(sys._current_frames())


def test_a_baseline_knows_a_thread_threading_does_not_by_its_outermost_frame() -> None:
    """A thread started with ``_thread`` (execnet's, under pytest-xdist) is in
    no ``threading.enumerate()``: it stays while it runs, and is forgotten
    once ended, though a new thread takes its ident."""
    stop, ended = threading.Event(), threading.Event()
    started: list[int] = []

    def poll() -> None:
        started.append(threading.get_ident())
        while not stop.is_set():
            time.sleep(0.002)
        ended.set()

    _thread.start_new_thread(poll, ())
    while not started:
        time.sleep(0.002)
    [ident] = started
    try:
        baseline = runner_threads()
        assert ident in baseline
        baseline.refresh(sys._current_frames())
        assert ident in baseline
    finally:
        stop.set()
        assert ended.wait(5)
    time.sleep(0.05)  # past its last frame
    taker = threading.Thread(target=stop.wait)  # returns at once: stop is set
    taker.start()
    taker.join()
    baseline.refresh(sys._current_frames())
    assert ident not in baseline


async def _outlive_the_runner(runner: _Runner, reused: list[bool]) -> str:
    """End *runner*, then wait (30 s at most) for a thread that works 0.2 s
    of real time before it completes a future."""
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(runner.end)
    done: asyncio.Future[str] = loop.create_future()

    def work() -> None:
        deadline = time.perf_counter() + 0.2
        while time.perf_counter() < deadline:
            pass
        loop.call_soon_threadsafe(done.set_result, "done")

    worker = threading.Thread(target=work)
    with _handover_stack():
        worker.start()
    reused.append(worker.ident == runner.ident)
    try:
        return await asyncio.wait_for(done, 30)
    finally:
        await asyncio.to_thread(worker.join)


def test_virtual_time_waits_for_a_thread_that_took_a_runner_threads_ident() -> None:
    """Through a whole run: a runner thread (busy when the loop is made)
    ends during the program, whose next thread takes its ident (CI saw
    this as an executor's shutdown "timing out" at once)."""
    runner, reused = _Runner(), list[bool]()
    try:
        assert asyncio.run(_outlive_the_runner(runner, reused)) == "done"
    finally:
        runner.end()
    runner, reused = _Runner(), list[bool]()
    try:
        with warnings_as_errors():
            result = testing.run(_outlive_the_runner(runner, reused), virtual_time=True)
    finally:
        runner.end()
    assert reused == [True]  # glibc gave the worker the runner's ident
    assert result == "done"


def threading_idents() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def others() -> Baseline:
    """Every thread alive now: a watch of the test's own threads leaves them
    out (pytest-xdist's execnet thread reads its channel in a call the watch
    cannot read: computed arguments)."""
    return Baseline(sys._current_frames())


def test_the_call_a_blocked_thread_makes_is_read_off_its_frame(
    threads: list[threading.Thread],
) -> None:
    locks = [threading.Lock() for _ in range(3)]
    for lock in locks:
        lock.acquire()
    sq: queue.SimpleQueue[int] = queue.SimpleQueue()

    def blocked(target: Callable[[], object]) -> tuple[bool, float | None]:
        """(waits, sleeps) once the thread running *target* is in its call."""
        thread = start(threads, target)
        for _ in range(500):
            frame = sys._current_frames().get(thread.ident or 0)
            # (Through _where and _call_of: under --blockbuster the
            # innermost frame is its wrapper's.)
            call = None if frame is None else _call_of(frame, _where(frame)[0])
            name = getattr(call and call[0], "__name__", "")
            if call is not None and name in (
                "sleep",
                "acquire",
                "acquire_lock",
                "__enter__",
                "get",
            ):
                seen = _blocked(call)
                return seen.waits, seen.sleeps
            time.sleep(0.002)
        return (False, None)

    def sleeps() -> None:
        delay = 0.3
        time.sleep(delay)

    first, second, third = locks

    def acquire() -> None:
        first.acquire()

    def with_lock() -> None:
        with second:
            pass

    def timed_acquire() -> None:
        third.acquire(timeout=0.3)

    def get() -> None:  # (as Thread's target itself, the call is Thread.run's)
        sq.get()

    assert blocked(sleeps) == (False, 0.3)
    assert blocked(acquire) == (True, None)
    assert blocked(with_lock) == (True, None)
    assert blocked(get) == (True, None)
    assert blocked(timed_acquire) == (False, None)  # timed: it acts on its own
    for lock in locks:
        lock.release()
    sq.put(1)


# ----------------------------------------------------------------------
# Timers that wait for time to have passed (found on aioquic's suite)


def test_a_timer_due_within_the_resolution_runs_at_its_deadline() -> None:
    """asyncio runs a timer due within one clock resolution of now; a
    virtual clock first moves to the deadline, so the callback never sees
    ``loop.time()`` short of it (and a "not yet" re-arm cannot spin)."""

    async def main() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        deadline = loop.time() + 5e-10  # inside the 1 ns resolution
        seen: list[float] = []
        done = loop.create_future()

        def not_before() -> None:
            seen.append(loop.time())
            if loop.time() < deadline:  # "not yet": re-arm at the deadline
                loop.call_at(deadline, not_before)
            else:
                done.set_result(None)

        loop.call_at(deadline, not_before)
        # Callbacks ready: the loop does not wait (nor jump) before it runs
        # what is due, and the timer is due within the resolution.
        loop.call_soon(lambda: None)
        await asyncio.wait_for(done, 1)
        return seen[-1] >= deadline, len(seen)

    real, virtual = both(main)
    assert real[0] and virtual == (True, 1)


def test_a_timer_rearmed_at_the_instant_it_runs_lets_time_move_on() -> None:
    """aioquic's loss detection: a packet sent at ``sent`` is lost once
    ``sent <= now - delay``; the timer is armed at ``sent + delay``, and in
    floating point ``(sent + delay) - delay`` can be a rounding below
    ``sent``. At exactly the deadline it is not lost yet, so the timer is
    re-armed at the same instant. A real clock has moved on by then; a
    virtual one moves on after `SPIN_LIMIT` iterations at that instant."""
    sent, delay = 0.217, 0.0422
    assert (sent + delay) - delay < sent  # the rounding, as found

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(sent)
        now_sent = loop.time() - start
        lost = loop.create_future()

        def loss_detection() -> None:
            if now_sent <= (loop.time() - start) - delay:
                lost.set_result(loop.time() - start)
            else:  # not lost yet: again at its loss time
                loop.call_at(start + now_sent + delay, loss_detection)

        loop.call_at(start + now_sent + delay, loss_detection)
        when = await asyncio.wait_for(lost, 1)
        return when >= sent + delay, when - (sent + delay) < 0.01

    real, virtual = both(main)
    assert real == (True, True) and virtual == (True, True)


# A timed wait for the program (found on anyio's suite under virtual time)


def test_a_job_in_a_timed_wait_the_program_ends_lets_time_move() -> None:
    """anyio's ``test_thread_cancelled``: a worker waits ``Event.wait(3)``,
    which a task sets after ``sleep(0.1)``. On a real clock the sleep ends
    first; under virtual time the clock jumps the 0.1 s at once (it cannot
    pass anything the thread does by itself), without holding the clock a
    grace second and without a warning."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        event = threading.Event()
        t0 = loop.time()

        async def setter() -> None:
            await asyncio.sleep(0.1)
            event.set()

        task = asyncio.ensure_future(setter())
        woke = await asyncio.to_thread(event.wait, 3)
        await task
        return woke, round(loop.time() - t0, 1)

    with warnings_as_errors():
        stdlib, virtual = both(main)
    assert stdlib == virtual == (True, 0.1)


def test_a_thread_asleep_past_a_timeout_lets_the_timeout_fire_first() -> None:
    """anyio's ``test_receive_timeout``: a server thread sleeps 1 s before it
    answers, the client gives up after 0.1 s. On a real clock the timeout
    fires first; under virtual time too (the sleep cannot end within the
    jump), not the thread's answer first."""

    async def main() -> object:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()

        def later() -> None:
            time.sleep(0.5)
            loop.call_soon_threadsafe(lambda: answer.done() or answer.set_result("thread"))

        thread = threading.Thread(target=later)
        thread.start()
        try:
            return await asyncio.wait_for(asyncio.shield(answer), 0.05)
        except TimeoutError:
            return "timeout"
        finally:
            await asyncio.to_thread(thread.join)

    with warnings_as_errors():
        assert both(main) == ("timeout", "timeout")


def timed_waiter(timeout: float, stop: threading.Event) -> Callable[[], object]:
    return lambda: stop.wait(timeout)


def timed_sleeper(seconds: float, stop: threading.Event) -> Callable[[], object]:
    return lambda: time.sleep(seconds)


@pytest.mark.parametrize("make", [timed_waiter, timed_sleeper], ids=["event-wait", "sleep"])
def test_a_timed_wait_is_idle_for_a_jump_shorter_than_its_timeout_only(
    threads: list[threading.Thread], make: Callable[[float, threading.Event], Callable[[], object]]
) -> None:
    """The rule itself: a thread in ``Event.wait(2)`` (or ``time.sleep(2)``)
    begun after the watch's last look is idle for a jump of 0.5 s (twice:
    1 s let through), busy for one of 5 s (it acts first, as
    ``threading.Timer`` does), and busy for another 1.2 s once the jumps let
    through leave less than that."""
    stop = threading.Event()
    watch = ThreadWatch(others(), grace=5.0, compute_grace=5.0)
    thread = start(threads, make(2.0, stop))
    try:
        in_wait(thread)
        with warnings_as_errors():
            assert watch((), 5.0), "a 5 s jump would pass its timeout"
            assert not watch((), 0.5)
            assert not watch((), 0.5)
            assert watch((), 1.2), "1 s was let through: less than 1.2 s surely left"
    finally:
        stop.set()


def in_wait(thread: threading.Thread) -> None:
    """Until *thread* is in ``Condition.wait`` or ``time.sleep``."""
    deadline = time.monotonic() + 5
    while True:
        frame, where = _where(sys._current_frames()[thread.ident or 0])
        if where == ("threading.py", "wait") or frame.f_code.co_name == "<lambda>":
            break
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(0.02)  # past the frame's first lines, blocked in its lock


def test_a_timed_wait_under_way_at_the_first_look_is_busy(
    threads: list[threading.Thread],
) -> None:
    """When a wait already under way when the watch was made began is
    unknown: it may be about to time out, so it holds the clock."""
    stop = threading.Event()
    baseline = others()
    thread = start(threads, timed_waiter(30.0, stop))  # (a sleep: stop() cannot end it)
    try:
        in_wait(thread)
        watch = ThreadWatch(baseline, grace=5.0, compute_grace=5.0)
        with warnings_as_errors():
            assert watch((), 0.1)
    finally:
        stop.set()


# Child processes (found on anyio's suite under virtual time)


def test_a_timeout_around_a_working_child_does_not_fire_first() -> None:
    """anyio's ``test_wait_returns_on_process_exit_with_open_stdout``: a 5 s
    timeout around ``proc.wait()`` on a child that works a moment, then
    exits. On a real clock the child wins; under virtual time too: a child
    that runs holds the clock (it may be about to write or exit)."""

    async def main() -> object:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sum(range(3 * 10**6)); sys.exit(3)"
        )
        return await asyncio.wait_for(proc.wait(), 5)

    with warnings_as_errors():
        assert both(main) == (3, 3)


def test_a_sleeping_child_lets_time_move() -> None:
    """A child asleep (``time.sleep`` in it, or a read nobody answers) holds
    nothing: a 0.2 s timeout around its wait fires on virtual time at once,
    as on a real clock (after 0.2 s)."""

    async def main() -> object:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time; time.sleep(30)"
        )
        try:
            await asyncio.wait_for(proc.wait(), 0.2)
        except TimeoutError:
            return "timeout"
        finally:
            proc.kill()
            await proc.wait()
        return "exited"

    with warnings_as_errors():
        assert both(main) == ("timeout", "timeout")


def test_a_child_watch_holds_for_a_running_child_then_lets_it_go() -> None:
    """The rule itself: idle while asleep, busy while it runs, let go of
    with a warning after the grace, busy again once seen idle between."""
    from tideloop.testing._processes import ChildWatch, process_state

    assert process_state(os.getpid()) == b"R"  # this process, reading it
    assert process_state(2**22 + 12345) is None  # no such process
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 10
        while process_state(sleeper.pid) != b"S":  # past its start-up
            assert time.monotonic() < deadline
            time.sleep(0.01)
        watch = ChildWatch(grace=0.2)
        assert not watch([sleeper.pid])
        assert watch([spinner.pid])
        time.sleep(0.3)
        with pytest.warns(VirtualTimeWarning, match=f"child process {spinner.pid}"):
            assert not watch([spinner.pid])
        assert not watch([spinner.pid])  # let go of: once only
    finally:
        for child in (sleeper, spinner):
            child.kill()
            child.wait()


def test_a_childs_working_descendant_holds_the_clock() -> None:
    """A child asleep while its own child works (``Popen`` waiting for its
    grandchild): busy, through the grandchild."""
    from tideloop.testing._processes import ChildWatch, descendants, process_state

    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while not descendants(child.pid) or process_state(child.pid) != b"S":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert ChildWatch(grace=5.0)([child.pid])
    finally:
        for pid in descendants(child.pid):
            os.kill(pid, 9)
        child.kill()
        child.wait()


def test_a_grandchild_that_outlives_its_parent_is_still_watched() -> None:
    """anyio's ``test_wait_returns_on_process_exit_with_open_stdout``: the
    child starts a grandchild that keeps the child's stdin and stdout. Both
    wait for stdin's end; then the child exits at once and the grandchild
    computes a moment first. The program waits for stdout's EOF under a 3 s
    timeout: the EOF comes first, as on a real clock, though the grandchild
    is no longer below any child of the loop's by then (the watch saw it
    while the program slept, and remembers it)."""
    wait_stdin = "import select, sys; select.select([sys.stdin], [], [], 10)"
    code = (
        "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
        f"'{wait_stdin}; sum(range(3 * 10**6))']); {wait_stdin}"
    )

    async def main() -> object:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        await asyncio.sleep(0.2)  # both started, both waiting on stdin
        proc.stdin.close()  # the child exits; the grandchild computes, then exits
        rest = await asyncio.wait_for(proc.stdout.read(), 3)  # EOF once it exits
        return await asyncio.wait_for(proc.wait(), 3), rest

    with warnings_as_errors():
        assert both(main) == ((0, b""), (0, b""))


def spin(seconds: float) -> None:
    """Compute for *seconds* of real time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_server_thread_busy_when_the_loop_is_made_is_still_watched() -> None:
    """httpx's suite: uvicorn serves on a loop of its own, in a thread a session
    fixture started. Caught busy when a test's loop was made, it was taken for
    a test runner's thread (the loop's baseline), and under virtual time the
    client's 5 s timeout fired before its answer. A thread that runs an event
    loop is never a runner's: the answer comes first, as on a real clock."""
    started = threading.Event()
    box: list[Any] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        spin(0.05)  # it works a moment before it answers
        writer.write(b"answer\n")
        await writer.drain()
        writer.close()

    def serve() -> None:
        server_loop = asyncio.new_event_loop()  # the stdlib's, as uvicorn's
        server = server_loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
        box.extend([server_loop, server.sockets[0].getsockname()[1]])
        started.set()
        server_loop.run_forever()
        server.close()
        server_loop.run_until_complete(server.wait_closed())
        server_loop.close()

    async def main() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", box[1])
        writer.write(b"hi\n")
        line = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        await writer.wait_closed()
        return line

    thread = threading.Thread(target=serve)
    thread.start()
    assert started.wait(5)
    computing = threading.Event()

    def compute() -> None:
        computing.set()
        spin(0.3)  # the previous test's leftovers, say

    results = []
    try:
        for run in (asyncio.run, lambda coro: testing.run(coro, virtual_time=True)):
            box[0].call_soon_threadsafe(compute)
            assert computing.wait(5)  # busy as the test's loop is made
            computing.clear()
            with warnings_as_errors():
                results.append(run(main()))
    finally:
        box[0].call_soon_threadsafe(box[0].stop)
        thread.join(5)
    assert results == [b"answer\n", b"answer\n"]
