"""The test base's own checks can fail: they see what they claim to see.

`conftest.LoopWatch` is applied to every loop a conformance test builds; here
it watches loops built outside the fixtures, so that what it records can be
inspected instead of failing this test.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from loopwatch import FACTORIES, LoopWatch


@pytest.fixture(params=list(FACTORIES))
def watched(request: pytest.FixtureRequest) -> tuple[LoopWatch, asyncio.AbstractEventLoop]:
    watch = LoopWatch()
    return watch, watch.watch(FACTORIES[request.param]())


def test_an_unexpected_exception_handler_call_is_recorded(
    watched: tuple[LoopWatch, asyncio.AbstractEventLoop], caplog: pytest.LogCaptureFixture
) -> None:
    watch, loop = watched
    try:

        def fails() -> None:
            raise ZeroDivisionError

        loop.call_soon(fails)
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert [type(ctx["exception"]) for ctx in watch.errors] == [ZeroDivisionError]
    assert "Exception in callback" in caplog.text  # still reaches the default handler


def test_a_test_with_its_own_handler_expects_its_errors(
    watched: tuple[LoopWatch, asyncio.AbstractEventLoop],
) -> None:
    watch, loop = watched
    seen: list[dict[str, object]] = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx))
    try:
        loop.call_soon(lambda: 1 / 0)
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert len(seen) == 1
    assert watch.errors == []


def test_a_registration_left_at_close_is_recorded(
    watched: tuple[LoopWatch, asyncio.AbstractEventLoop],
) -> None:
    watch, loop = watched
    a, b = socket.socketpair()
    fd = b.fileno()
    try:
        loop.add_writer(b, lambda: None)
        loop.close()
    finally:
        a.close()
        b.close()
    assert len(watch.leftovers) == 1
    assert watch.leftovers[0].endswith(f"fds [{fd}] still registered")


def test_a_clean_loop_records_nothing(
    watched: tuple[LoopWatch, asyncio.AbstractEventLoop],
) -> None:
    watch, loop = watched
    a, b = socket.socketpair()
    try:
        loop.add_reader(a, lambda: None)
        loop.remove_reader(a)
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    finally:
        a.close()
        b.close()
    assert watch.errors == [] and watch.leftovers == []
