"""VirtualClock: advance, autojump, the executor gate, real I/O, library timeouts."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
import selectors
import socket
import sys
import threading
import time

import pytest

import tideloop
from tideloop import testing
from tideloop._pollers import available
from tideloop.testing import VirtualClock
from tideloop.testing._threads import _idle, _woken


def _until_idle(thread: threading.Thread) -> None:
    """Wait until *thread* looks idle, as a loop made now will see it."""
    deadline = time.monotonic() + 5.0
    while not _idle(sys._current_frames()[thread.ident or 0]):
        assert time.monotonic() < deadline, "the thread never looked idle"
        time.sleep(0.001)


@pytest.fixture(params=available())
def poller(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(coro: object, **kwargs: object) -> object:
    return testing.run(coro, virtual_time=kwargs.pop("clock", True), **kwargs)  # type: ignore[arg-type]


def test_an_hour_of_sleep_takes_no_real_time(poller: str) -> None:
    clock = VirtualClock()

    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    loop = testing.new_event_loop(virtual_time=clock, poller=poller)
    start = time.perf_counter()
    try:
        assert loop.run_until_complete(main()) == 3600.0
    finally:
        loop.close()
    elapsed = time.perf_counter() - start
    print(f"one-hour sleep: {elapsed * 1000:.2f} ms real time")
    # Not a performance claim: an hour of real waiting would be a bug.
    assert elapsed < 5.0
    assert clock.now() == 3600.0 and clock.jumps == 1


def test_tideloop_new_event_loop_takes_the_clock() -> None:
    clock = VirtualClock(start=100.0)
    loop = tideloop.new_event_loop(clock=clock)
    try:
        assert loop.time() == 100.0
        assert loop.run_until_complete(asyncio.sleep(5, "done")) == "done"
        assert loop.time() == 105.0
    finally:
        loop.close()


def test_asyncio_timeouts_follow_the_clock() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(100), 30)
        seen.append(("wait_for", loop.time()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(15):
                await asyncio.Event().wait()
        seen.append(("timeout", loop.time()))
        fired = loop.create_future()
        loop.call_later(7.5, fired.set_result, None)
        await fired
        seen.append(("call_later", loop.time()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(60), asyncio.TaskGroup() as tg:
                tg.create_task(asyncio.sleep(3600))
                tg.create_task(asyncio.sleep(10))
        seen.append(("taskgroup", loop.time()))
        return seen

    assert run(main()) == [
        ("wait_for", 30.0),
        ("timeout", 45.0),
        ("call_later", 52.5),
        ("taskgroup", 112.5),
    ]


def test_advance_moves_time_and_due_timers_run_in_order() -> None:
    clock = VirtualClock(autojump_threshold=math.inf)

    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []
        loop.call_later(3, lambda: fired.append(("3s", loop.time())))
        loop.call_later(1, lambda: fired.append(("1s", loop.time())))
        loop.call_later(10, lambda: fired.append(("10s", loop.time())))
        await asyncio.sleep(0)
        clock.advance(5)
        assert fired == []  # callbacks run in the loop's next iteration
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return fired

    assert run(main(), clock=clock) == [("1s", 5.0), ("3s", 5.0)]
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_without_autojump_only_advance_moves_time() -> None:
    clock = VirtualClock(autojump_threshold=math.inf)

    async def advancer() -> None:
        for _ in range(10):
            await asyncio.sleep(0)
            clock.advance(1)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(advancer())
        await asyncio.sleep(7)
        await task
        return loop.time()

    assert run(main(), clock=clock) == 10.0
    assert clock.jumps == 0


def test_advance_from_another_thread_wakes_the_loop() -> None:
    clock = VirtualClock(autojump_threshold=math.inf)

    async def main() -> float:
        thread = threading.Timer(0.05, clock.advance, (60,))
        thread.start()
        await asyncio.sleep(60)
        thread.join()
        return asyncio.get_running_loop().time()

    assert run(main(), clock=clock) == 60.0


def test_threshold_is_real_idle_time() -> None:
    clock = VirtualClock(autojump_threshold=0.05)

    async def main() -> None:
        await asyncio.sleep(1000)

    start = time.perf_counter()
    run(main(), clock=clock)
    assert time.perf_counter() - start >= 0.05
    assert clock.now() == 1000.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        VirtualClock(autojump_threshold=-1)
    with pytest.raises(ValueError):
        VirtualClock(autojump_threshold=math.nan)
    with pytest.raises(ValueError):
        VirtualClock(start=math.inf)
    assert "time=2.0" in repr(VirtualClock(start=2))


# ----------------------------------------------------------------------
# Real work that time must wait for


def test_no_jump_while_an_executor_job_runs() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        # A 5 s virtual deadline around 0.2 s of real work: with a zero
        # threshold the clock would reach the deadline at once if it jumped.
        await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.2), 5)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            await asyncio.wait_for(loop.run_in_executor(pool, time.sleep, 0.1), 5)
        return loop.time()

    assert run(main()) == 0.0


def test_time_jumps_again_after_the_job() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        sleeper = asyncio.create_task(asyncio.sleep(50))
        await loop.run_in_executor(None, time.sleep, 0.05)
        assert loop.time() == 0.0
        await sleeper
        return loop.time()

    assert run(main()) == 50.0


def test_a_cancelled_job_no_longer_holds_time() -> None:
    release = threading.Event()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(None, release.wait)
        job.cancel()  # the thread still runs, but nobody waits for it
        await asyncio.sleep(30)
        release.set()
        return loop.time()

    assert run(main()) == 30.0


def test_other_threads_work_holds_the_clock() -> None:
    """A thread the loop did not start, busy (a Timer's timed wait): the clock
    waits for it instead of jumping past (ThreadWatch), with any threshold."""

    async def main() -> str:
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        thread = threading.Timer(0.05, loop.call_soon_threadsafe, (answer.set_result, "thread"))
        thread.start()
        try:
            async with asyncio.timeout(5):
                return await answer
        except TimeoutError:
            return "timeout"
        finally:
            thread.join()

    assert run(main(), clock=VirtualClock(autojump_threshold=0.0)) == "thread"
    assert run(main(), clock=VirtualClock(autojump_threshold=0.5)) == "thread"


def test_a_thread_idle_before_the_loop_holds_the_clock_when_woken() -> None:
    """A thread started before the loop, idle then (on a queue, as a fixture's
    server thread waits in select), that the program wakes: its 1 ms of
    work is not jumped past by a timeout, as on the stdlib loop (whose
    real second is kept long: a loaded machine may delay a thread)."""
    jobs: queue.Queue[tuple[asyncio.AbstractEventLoop, asyncio.Event] | None] = queue.Queue()

    def worker() -> None:
        while (job := jobs.get()) is not None:
            loop, event = job
            time.sleep(0.001)
            loop.call_soon_threadsafe(event.set)

    thread = threading.Thread(target=worker)
    thread.start()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        for _ in range(5):
            event = asyncio.Event()
            jobs.put((loop, event))
            try:
                await asyncio.wait_for(event.wait(), 1.0)
            except TimeoutError:
                return "timeout"
        return "events"

    try:
        assert asyncio.run(main()) == "events"
        _until_idle(thread)  # as a fixture's worker waits before a test
        assert run(main()) == "events"
    finally:
        jobs.put(None)
        thread.join()


def test_a_busy_thread_from_before_the_loop_is_watched_once_it_calls_in() -> None:
    """A thread busy when the loop was made looks like a test runner's and is
    not watched, until it calls ``call_soon_threadsafe`` on the loop: from
    then on its work holds the clock, as a producer of the loop's work."""
    loops: list[asyncio.AbstractEventLoop] = []
    requests: queue.Queue[asyncio.Event | None] = queue.Queue()
    first = threading.Event()

    def producer() -> None:
        while not loops:  # busy (a sleeping poll) while the loop is made
            time.sleep(0.001)
        loop = loops[0]
        loop.call_soon_threadsafe(first.set)
        while (event := requests.get()) is not None:
            time.sleep(0.001)
            loop.call_soon_threadsafe(event.set)

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loops.append(loop)
        # The first call arrives while an executor job holds the clock.
        await loop.run_in_executor(None, first.wait, 5.0)
        for _ in range(5):
            event = asyncio.Event()
            requests.put(event)
            try:
                await asyncio.wait_for(event.wait(), 1.0)
            except TimeoutError:
                return "timeout"
        return "events"

    for runner in (asyncio.run, run):
        loops.clear()
        first.clear()
        thread = threading.Thread(target=producer)
        thread.start()
        try:
            assert runner(main()) == "events"
        finally:
            requests.put(None)
            thread.join()


def _echo_server_thread(listener: socket.socket) -> None:
    """A fixture's server thread: a selector over the listener and its clients."""
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    conn, _ = listener.accept()
                    selector.register(conn, selectors.EVENT_READ)
                    continue
                data = sock.recv(65536)
                if not data:
                    selector.unregister(sock)
                    sock.close()
                elif data == b"stop\n":
                    for other in list(selector.get_map().values()):
                        if other.fileobj is not listener:
                            selector.unregister(other.fileobj)
                            other.fileobj.close()  # type: ignore[union-attr]
                    return
                else:
                    sock.sendall(data)


def _greeter_thread(listener: socket.socket, stop: threading.Event) -> None:
    """A fixture's server thread blocked in accept(): greets each client."""
    while True:
        conn, _ = listener.accept()
        with conn:
            if stop.is_set():
                return
            conn.sendall(b"hello\n")


def test_a_server_thread_in_select_is_not_jumped_past() -> None:
    """A thread started before the loop, waiting in ``select`` (a fixture's
    server): a request wakes it in the kernel while the loop's thread holds
    the GIL, so its frame still shows the wait; virtual time must not jump
    past its reply (the wait's fds are ready: it is about to act)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    thread = threading.Thread(target=_echo_server_thread, args=(listener,))
    thread.start()

    async def main() -> tuple[int, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        replies = 0
        for i in range(100):
            writer.write(b"%d\n" % i)
            try:
                if await asyncio.wait_for(reader.readline(), 1.0) == b"%d\n" % i:
                    replies += 1
            except TimeoutError:
                break
        writer.close()
        await writer.wait_closed()
        return replies, asyncio.get_running_loop().time()

    try:
        assert asyncio.run(main())[0] == 100
        _until_idle(thread)
        assert run(main()) == (100, 0.0)  # every reply, and time never moved
    finally:
        with socket.create_connection(("127.0.0.1", port)) as stop:
            stop.sendall(b"stop\n")
            thread.join()
        listener.close()


def test_a_wait_in_select_is_woken_while_its_fds_are_ready() -> None:
    """The watch's look at a selector a thread waits in: ready fds mean it is
    about to act; none, or a selector closed under it, mean it is idle."""
    selector = selectors.DefaultSelector()
    a, b = socket.socketpair()
    selector.register(a, selectors.EVENT_READ)

    def wait() -> None:
        selector.select(5.0)

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        _until_idle(thread)
        frame = sys._current_frames()[thread.ident or 0]
        assert not _woken(frame)
        b.send(b"x")
        assert _woken(frame)  # the frame's selector has a readable fd
        thread.join()
        selector.close()
        assert not _woken(frame)  # no map any more: idle, not an error
    finally:
        b.send(b"x")
        thread.join()
        a.close()
        b.close()
        selector.close()


def test_a_server_thread_in_accept_is_not_jumped_past() -> None:
    """A thread blocked in ``accept()``: the kernel hands it the connection
    (nothing is left to poll) and it waits for the GIL, frame unchanged; the
    watch leaves the GIL free for a moment before a jump, so its greeting
    arrives before a timeout, as on the stdlib loop."""
    rounds = 100
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()
    thread = threading.Thread(target=_greeter_thread, args=(listener, stop))
    thread.start()

    async def main() -> tuple[int, float]:
        greeted = 0
        for _ in range(rounds):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                greeted += await asyncio.wait_for(reader.readline(), 1.0) == b"hello\n"
            except TimeoutError:
                pass
            writer.close()
            await writer.wait_closed()
        return greeted, asyncio.get_running_loop().time()

    try:
        assert asyncio.run(main())[0] == rounds
        _until_idle(thread)
        assert run(main()) == (rounds, 0.0)
    finally:
        stop.set()
        socket.create_connection(("127.0.0.1", port)).close()
        thread.join()
        listener.close()


def test_real_loopback_io_under_virtual_time(poller: str) -> None:
    async def main() -> tuple[list[bytes], float]:
        loop = asyncio.get_running_loop()

        handled = asyncio.Event()

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while line := await reader.readline():
                writer.write(line)
            writer.close()
            await writer.wait_closed()
            handled.set()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = []
        for i in range(200):
            writer.write(b"%d\n" % i)
            # Every read under a 5 s virtual timeout: the clock must not jump.
            got.append(await asyncio.wait_for(reader.readline(), 5))
        writer.close()
        await writer.wait_closed()
        await handled.wait()
        server.close()
        await server.wait_closed()
        return got, loop.time()

    loop = testing.new_event_loop(virtual_time=True, poller=poller)
    try:
        got, now = loop.run_until_complete(main())
    finally:
        loop.close()
    assert got == [b"%d\n" % i for i in range(200)]
    assert now == 0.0


def test_a_30s_idle_timeout_of_a_real_server() -> None:
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()

        async def idle_timeout_server(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            try:
                await asyncio.wait_for(reader.readline(), 30)
            except TimeoutError:
                writer.write(b"idle timeout\n")
            writer.close()
            await writer.wait_closed()
            handled.set()

        handled = asyncio.Event()
        server = await asyncio.start_server(idle_timeout_server, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        await handled.wait()
        server.close()
        await server.wait_closed()
        return line, loop.time()

    start = time.perf_counter()
    line, now = run(main())  # type: ignore[misc]
    assert line == b"idle timeout\n"
    assert now == 30.0
    assert time.perf_counter() - start < 5.0


def test_aiohttp_timeout_follows_the_clock() -> None:
    aiohttp = pytest.importorskip("aiohttp")
    from aiohttp import web

    async def main() -> float:
        loop = asyncio.get_running_loop()

        async def slow(request: web.Request) -> web.Response:
            await asyncio.sleep(3600)
            return web.Response(text="late")

        app = web.Application()
        app.router.add_get("/", slow)
        runner = web.AppRunner(app, shutdown_timeout=0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        timeout = aiohttp.ClientTimeout(total=30)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                with pytest.raises(TimeoutError):
                    await session.get(f"http://127.0.0.1:{port}/")
            return loop.time()
        finally:
            await runner.cleanup()

    now = run(main())
    assert isinstance(now, float) and 30.0 <= now < 3600.0


def test_anyio_follows_the_clock() -> None:
    anyio = pytest.importorskip("anyio")

    async def main() -> float:
        with anyio.move_on_after(45):
            await anyio.sleep(3600)
        with pytest.raises(TimeoutError), anyio.fail_after(10):
            await anyio.Event().wait()
        return anyio.current_time()

    clock = VirtualClock()
    now = anyio.run(
        main,
        backend="asyncio",
        backend_options={"loop_factory": lambda: testing.new_event_loop(virtual_time=clock)},
    )
    assert now == 55.0


def test_current_clock() -> None:
    clock = VirtualClock()

    async def main() -> VirtualClock:
        return testing.current_clock()

    assert run(main(), clock=clock) is clock
    with pytest.raises(RuntimeError):
        tideloop.run(main())  # type: ignore[arg-type]


def test_shutdown_of_the_default_executor_is_waited_for() -> None:
    # asyncio.Runner joins the default executor with a 300 s timeout (3.12+):
    # under autojump that timeout must not fire while the join runs.
    async def main() -> None:
        await asyncio.to_thread(time.sleep, 0.01)

    run(main())  # filterwarnings=error turns the executor-join warning into a failure
