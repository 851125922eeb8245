"""run_forever / run_until_complete / stop / close / is_running: lifecycle rules."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import threading
import weakref
from collections.abc import Callable

import pytest

from loopwatch import FACTORIES

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def test_run_until_complete_coroutine(loop: asyncio.AbstractEventLoop) -> None:
    async def coro() -> str:
        await asyncio.sleep(0)
        return "result"

    assert loop.run_until_complete(coro()) == "result"
    assert not loop.is_running()


def test_run_until_complete_future(loop: asyncio.AbstractEventLoop) -> None:
    fut = loop.create_future()
    loop.call_later(0.001, fut.set_result, 7)
    assert loop.run_until_complete(fut) == 7


def test_run_until_complete_raises_the_exception(loop: asyncio.AbstractEventLoop) -> None:
    async def coro() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        loop.run_until_complete(coro())


def test_run_until_complete_stopped_early(loop: asyncio.AbstractEventLoop) -> None:
    fut = loop.create_future()
    loop.call_soon(loop.stop)
    with pytest.raises(RuntimeError, match=r"Event loop stopped before Future completed\."):
        loop.run_until_complete(fut)
    fut.cancel()


def test_run_until_complete_other_loop_future(
    loop: asyncio.AbstractEventLoop, loop_factory: LoopFactory
) -> None:
    other = loop_factory()
    try:
        fut = other.create_future()
        with pytest.raises(ValueError, match="different loop"):
            loop.run_until_complete(fut)
    finally:
        other.close()


def test_run_until_complete_nested_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    async def outer() -> None:
        inner = asyncio.sleep(0)
        try:
            with pytest.raises(RuntimeError, match="This event loop is already running"):
                loop.run_until_complete(inner)
        finally:
            inner.close()

    loop.run_until_complete(outer())


def test_run_forever_nested_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    async def outer() -> None:
        with pytest.raises(RuntimeError, match="This event loop is already running"):
            loop.run_forever()

    loop.run_until_complete(outer())


def test_running_another_loop_inside_is_refused(
    loop: asyncio.AbstractEventLoop, loop_factory: LoopFactory
) -> None:
    other = loop_factory()

    async def outer() -> None:
        with pytest.raises(
            RuntimeError, match="Cannot run the event loop while another loop is running"
        ):
            other.run_forever()

    try:
        loop.run_until_complete(outer())
    finally:
        other.close()


def test_stop_before_run_forever_runs_one_iteration(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_soon(calls.append, 1)
    loop.stop()
    loop.run_forever()
    assert calls == [1]
    # The stop request was consumed.
    loop.call_soon(calls.append, 2)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1, 2]


def test_stop_runs_already_scheduled_callbacks(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_soon(loop.stop)
    loop.call_soon(calls.append, 1)
    loop.run_forever()
    assert calls == [1]


def test_is_running_and_running_loop(loop: asyncio.AbstractEventLoop) -> None:
    seen: list[object] = []

    def probe() -> None:
        seen.append(loop.is_running())
        seen.append(asyncio.get_running_loop())
        loop.stop()

    assert not loop.is_running()
    loop.call_soon(probe)
    loop.run_forever()
    assert seen == [True, loop]
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_close_refused_while_running(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="Cannot close a running event loop"):
            loop.close()

    loop.run_until_complete(main())


def test_close_is_idempotent_and_final(loop: asyncio.AbstractEventLoop) -> None:
    assert not loop.is_closed()
    loop.close()
    assert loop.is_closed()
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_forever()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_until_complete(coro)
    coro.close()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.create_task(coro)
    coro.close()


def test_close_drops_pending_callbacks(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[int] = []
    loop.call_soon(calls.append, 1)
    loop.call_later(0.001, calls.append, 2)
    loop.close()
    assert calls == []


def test_keyboard_interrupt_propagates_and_loop_survives(
    loop: asyncio.AbstractEventLoop,
) -> None:
    calls: list[int] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    loop.call_soon(calls.append, 1)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    assert not loop.is_running()
    assert calls == []
    # The callback after the interrupt is still queued and runs next time.
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1]


def test_system_exit_from_task_propagates(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        loop.run_until_complete(main())


def test_run_in_thread(loop_factory: LoopFactory) -> None:
    result: list[object] = []

    def target() -> None:
        lp = loop_factory()
        try:
            result.append(lp.run_until_complete(asyncio.sleep(0.001, "ok")))
        finally:
            lp.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert result == ["ok"]


def test_unclosed_loop_warns(loop_factory: LoopFactory) -> None:
    lp = loop_factory()
    with pytest.warns(ResourceWarning, match="unclosed event loop"):
        del lp
        gc.collect()


@pytest.mark.skipif(
    sys.implementation.name != "cpython",
    reason="no reference counting: PyPy frees a loop in a collection, either loop's alike",
)
def test_a_closed_loop_is_freed_without_the_cyclic_collector(loop_name: str) -> None:
    """Once its last user lets go, a closed loop is freed by reference counting
    alone, as asyncio's is: code that drops its last reference late (anyio's
    worker thread, after the run) and then collects, or checks a weakref
    without collecting, sees it gone."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, int)
        await loop.getaddrinfo("127.0.0.1", 80)
        if threading.current_thread() is threading.main_thread():
            loop.add_signal_handler(signal.SIGUSR1, int)
            loop.remove_signal_handler(signal.SIGUSR1)

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read())
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(b"ping")
        writer.write_eof()
        assert await reader.read() == b"ping"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(asyncio.sleep(0.001), 1)

    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        loop = FACTORIES[loop_name]()
        try:
            loop.run_until_complete(main())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
        ref = weakref.ref(loop)
        del loop
        assert ref() is None
    finally:
        if enabled:
            gc.enable()


def test_repr(loop: asyncio.AbstractEventLoop) -> None:
    text = repr(loop)
    assert "running=False" in text
    assert "closed=False" in text
    assert f"debug={loop.get_debug()}" in text


def test_asyncio_run_with_loop_factory(loop_factory: LoopFactory) -> None:
    async def main() -> type:
        return type(asyncio.get_running_loop())

    probe = loop_factory()
    expected = type(probe)
    probe.close()
    if sys.version_info >= (3, 12):
        assert asyncio.run(main(), loop_factory=loop_factory) is expected
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(main()) is expected
