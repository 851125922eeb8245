"""Each registered divergence still describes a real difference, on this Python.

If the stdlib changes to match tideloop, the check for that entry fails and
the entry (and its special-casing) should go.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import tideloop

from divergences import DIVERGENCES, STDLIB_BOUNDED_EXECUTOR_SHUTDOWN


def stdlib_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop()


def check_wakeup_fd_restored() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    loop = stdlib_loop()
    try:
        previous = signal.set_wakeup_fd(a.fileno())
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        loop.remove_signal_handler(signal.SIGUSR1)
        assert signal.set_wakeup_fd(previous) == -1  # asyncio resets, tideloop restores
    finally:
        loop.close()
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        a.close()
        b.close()


def check_equal_deadline_fifo() -> None:
    loop = stdlib_loop()
    try:
        order: list[int] = []
        when = loop.time() + 0.005
        for i in range(20):
            loop.call_at(when, order.append, i)
        loop.call_at(when + 0.005, loop.stop)
        loop.run_forever()
        assert order != list(range(20))
    finally:
        loop.close()


def check_handle_get_context() -> None:
    loop = stdlib_loop()
    try:
        handle = loop.call_soon(lambda: None)
        has = hasattr(handle, "get_context")
        assert has is (sys.version_info >= (3, 12))
        if has:
            pytest.skip("no divergence on this Python: asyncio has Handle.get_context")
    finally:
        loop.close()


def check_factory_task_name() -> None:
    if sys.version_info[:3] != (3, 13, 0):
        pytest.skip("only Python 3.13.0 renames factory tasks to 'None'")

    async def main() -> str:
        lp = asyncio.get_running_loop()
        lp.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
        task = lp.create_task(asyncio.sleep(0))
        await task
        return task.get_name()

    loop = stdlib_loop()
    try:
        assert loop.run_until_complete(main()) == "None"
    finally:
        loop.close()
    assert tideloop.run(main()) != "None"


def check_executor_timeout() -> None:
    if STDLIB_BOUNDED_EXECUTOR_SHUTDOWN:
        pytest.skip("no divergence on this Python: asyncio bounds the wait too")
    loop = stdlib_loop()
    try:
        if sys.version_info < (3, 12):
            with pytest.raises(TypeError):
                loop.shutdown_default_executor(timeout=1)  # type: ignore[call-arg]
            return
        # Early 3.12: the wait outlives the timeout; released after 0.3 s, the
        # call returns only then, and without the warning.
        release = threading.Event()
        fut = loop.run_in_executor(None, release.wait)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loop.run_until_complete(loop.shutdown_default_executor(timeout=0.05))
        assert time.monotonic() - start >= 0.25
        timer.join()
        loop.run_until_complete(fut)
    finally:
        loop.close()


def check_call_at_non_numbers() -> None:
    loop = stdlib_loop()
    try:
        handle = loop.call_at("soon", lambda: None)  # type: ignore[arg-type]
        handle.cancel()
    finally:
        loop.close()


CHECKS: dict[str, Callable[[], None]] = {
    "wakeup-fd-restored": check_wakeup_fd_restored,
    "equal-deadline-fifo": check_equal_deadline_fifo,
    "handle-get-context-3.11": check_handle_get_context,
    "factory-task-name-3.13.0": check_factory_task_name,
    "executor-shutdown-timeout": check_executor_timeout,
    "call-at-rejects-non-numbers": check_call_at_non_numbers,
}


def test_every_divergence_has_a_check() -> None:
    assert set(CHECKS) == set(DIVERGENCES)


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_stdlib_still_differs(key: str) -> None:
    CHECKS[key]()


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_divergence_is_documented_in_tests(key: str) -> None:
    """Every entry is named by at least one test outside this file."""
    tests_dir = Path(__file__).parent.parent
    sources = [p.read_text() for p in tests_dir.rglob("test_*.py") if p.name != Path(__file__).name]
    assert any(key in text for text in sources), f"no test mentions divergence {key!r}"
