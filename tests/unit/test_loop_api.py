"""The loop's public methods have the shape asyncio's have (what ``inspect`` sees of them)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import tideloop

#: The coroutine methods of the running Python's ``asyncio.AbstractEventLoop``.
COROUTINE_METHODS = sorted(
    name
    for name, value in vars(asyncio.AbstractEventLoop).items()
    if inspect.iscoroutinefunction(value)
)


def test_the_list_is_not_empty() -> None:
    # A guard against the parametrised test below silently running nothing.
    assert {"shutdown_asyncgens", "connect_read_pipe", "sock_recv"} <= set(COROUTINE_METHODS)


@pytest.mark.parametrize("name", COROUTINE_METHODS)
def test_coroutine_methods_are_coroutine_functions(name: str) -> None:
    # Code checks this before awaiting a method (and
    # asyncio.iscoroutinefunction, deprecated in 3.14, says the same).
    assert inspect.iscoroutinefunction(getattr(tideloop.Loop, name))
    loop = tideloop.new_event_loop()
    try:
        assert inspect.iscoroutinefunction(getattr(loop, name))
    finally:
        loop.close()
