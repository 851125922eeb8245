"""The names asyncio prints for a loop's coroutines, which tools filter on, on each loop.

asyncio's warnings and logs name a loop's coroutine by its ``__qualname__``
("coroutine 'BaseEventLoop.shutdown_asyncgens' was never awaited", "Task
was destroyed but it is pending! task: <Task pending
coro=<BaseEventLoop.create_server() ...>>"), and tools filter on them:
pytest-asyncio ignores ``.*BaseEventLoop.shutdown_asyncgens.*`` when its
runner closes a loop the test closed. Each loop must print the same names.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import warnings

import pytest

from loopwatch import LoopFactory

#: pytest-asyncio 1.x's filter, in its runner's teardown (plugin.py).
PYTEST_ASYNCIO_FILTER = r".*BaseEventLoop.shutdown_asyncgens.*"


def public_coroutine_methods(loop: asyncio.AbstractEventLoop) -> dict[str, str]:
    return {
        name: getattr(loop, name).__qualname__
        for name in dir(loop)
        if not name.startswith("_") and inspect.iscoroutinefunction(getattr(loop, name))
    }


def test_coroutine_methods_have_the_stdlib_loops_names(loop_factory: LoopFactory) -> None:
    loop = loop_factory()
    reference = asyncio.SelectorEventLoop()
    try:
        expected = public_coroutine_methods(reference)
        assert "shutdown_asyncgens" in expected
        ours = public_coroutine_methods(loop)
        assert {name: ours.get(name) for name in expected} == expected
    finally:
        loop.close()
        reference.close()


def test_a_closed_runners_warning_matches_pytest_asyncios_filter(
    loop_factory: LoopFactory,
) -> None:
    """``asyncio.Runner.close`` on a loop the program closed: the
    ``shutdown_asyncgens()`` coroutine it made is never awaited, and the
    warning names it as pytest-asyncio's filter expects."""
    runner = asyncio.Runner(loop_factory=loop_factory)
    runner.get_loop().close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="closed"):
            runner.close()
        gc.collect()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages == ["coroutine 'BaseEventLoop.shutdown_asyncgens' was never awaited"]
    assert re.match(PYTEST_ASYNCIO_FILTER, messages[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.filterwarnings("ignore", PYTEST_ASYNCIO_FILTER, RuntimeWarning)
        runner = asyncio.Runner(loop_factory=loop_factory)
        runner.get_loop().close()
        with pytest.raises(RuntimeError, match="closed"):
            runner.close()
        gc.collect()  # filtered: nothing raised


def test_a_pending_tasks_report_names_the_coroutine_as_asyncio_does(
    loop_factory: LoopFactory,
) -> None:
    loop = loop_factory()
    try:
        coro = loop.shutdown_default_executor()
        task = loop.create_task(coro)
        assert "coro=<BaseEventLoop.shutdown_default_executor()" in repr(task)
        loop.run_until_complete(task)
    finally:
        loop.close()
