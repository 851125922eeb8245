"""Exception handling: callbacks that fail, handlers, and the default handler's log."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys
from typing import Any

import pytest

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def failing_callback() -> None:
    raise ZeroDivisionError("in callback")


@pytest.mark.loop_errors
def test_exception_in_callback_is_logged_and_loop_continues(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    loop.call_soon(failing_callback)
    loop.call_soon(calls.append, 1)
    loop.call_soon(loop.stop)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.run_forever()
    assert calls == [1]
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("Exception in callback failing_callback()")
    assert "handle: <Handle failing_callback()" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ZeroDivisionError)


def test_custom_handler_receives_context(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    handle = loop.call_soon(failing_callback)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert len(contexts) == 1
    ctx = contexts[0]
    assert ctx["message"].startswith("Exception in callback failing_callback()")
    assert isinstance(ctx["exception"], ZeroDivisionError)
    assert ctx["handle"] is handle


def test_get_set_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    assert loop.get_exception_handler() is None

    def handler(lp: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        pass

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None
    with pytest.raises(TypeError, match="A callable object or None is expected, got 'nope'"):
        loop.set_exception_handler("nope")  # type: ignore[arg-type]


def test_failing_custom_handler_falls_back_to_default(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_handler(lp: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        raise RuntimeError("handler broke")

    loop.set_exception_handler(bad_handler)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "original"})
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert len(messages) == 1
    assert messages[0].startswith("Unhandled error in exception handler")
    assert "context: {'message': 'original'}" in messages[0]


@pytest.mark.loop_errors
def test_default_handler_format(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "Something", "zeta": 1, "alpha": "a"})
        loop.call_exception_handler({})
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert messages == [
        "Something\nalpha: 'a'\nzeta: 1",
        "Unhandled exception in event loop",
    ]


def test_default_exception_handler_can_be_called_by_custom_handler(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(lp: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        lp.default_exception_handler({**ctx, "extra": "yes"})

    loop.set_exception_handler(handler)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "via custom"})
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert messages == ["via custom\nextra: 'yes'"]


def test_keyboard_interrupt_in_handler_propagates(loop: asyncio.AbstractEventLoop) -> None:
    def handler(lp: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    loop.set_exception_handler(handler)
    with pytest.raises(KeyboardInterrupt):
        loop.call_exception_handler({"message": "x"})


def test_unretrieved_task_exception_is_reported(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def fails() -> None:
        raise ValueError("never retrieved")

    async def main() -> None:
        task = loop.create_task(fails())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert task.done()
        del task

    loop.run_until_complete(main())
    gc.collect()
    assert any(
        ctx.get("message") == "Task exception was never retrieved"
        and isinstance(ctx.get("exception"), ValueError)
        for ctx in contexts
    )


@pytest.mark.parametrize("debug", [False, True], ids=["normal", "debug"])
def test_unreferenced_failed_task_is_reported_without_gc(
    loop: asyncio.AbstractEventLoop, debug: bool
) -> None:
    # The task's only reference is its callback handle: the report comes by
    # reference counting, in the same iteration, with no cycle through the
    # loop's frames (CPython's test_futures2 test_task_exc_handler_correct_context).
    # PyPy frees nothing by reference counting: there the task must be free
    # for the first collection after it ran, which this one runs.
    loop.set_debug(debug)
    seen: list[str] = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(str(ctx.get("message"))))

    async def fails() -> None:
        raise ValueError("never retrieved")

    async def main() -> None:
        loop.create_task(fails())
        await asyncio.sleep(0)
        if sys.implementation.name == "pypy":
            gc.collect()
        loop.set_exception_handler(None)

    gc.disable()
    try:
        loop.run_until_complete(main())
    finally:
        gc.enable()
    assert seen == ["Task exception was never retrieved"]


def _var_seen_by_custom_handler(loop: asyncio.AbstractEventLoop) -> list[str]:
    """VAR as a custom exception handler sees it, for a callback that fails in a
    context where VAR is "handle-context"."""
    seen: list[str] = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(VAR.get()))
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "handle-context")
    loop.call_soon(failing_callback, context=ctx)
    loop.call_soon(loop.stop)
    loop.run_forever()
    return seen


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio 3.11 runs handlers bare")
def test_custom_handler_runs_in_handle_context(loop: asyncio.AbstractEventLoop) -> None:
    assert _var_seen_by_custom_handler(loop) == ["handle-context"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="from 3.12 handlers run in context")
def test_custom_handler_runs_bare_on_311(loop: asyncio.AbstractEventLoop) -> None:
    assert _var_seen_by_custom_handler(loop) == ["unset"]


def _messages_for(loop: asyncio.AbstractEventLoop) -> list[str]:
    import functools

    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def with_args(a: int, b: str) -> None:
        raise ValueError(a, b)

    loop.call_soon(with_args, 1, "two")
    loop.call_soon(functools.partial(with_args, 3), "four")
    loop.call_later(0, with_args, 5, "six")
    loop.call_soon(failing_callback)
    loop.call_later(0.001, loop.stop)
    loop.run_forever()
    assert all(isinstance(ctx["exception"], (ValueError, ZeroDivisionError)) for ctx in contexts)
    return [ctx["message"] for ctx in contexts]


def test_callback_error_messages_match_stdlib(loop_factory: Any) -> None:
    """The inlined callback runner reports exactly what asyncio's Handle._run does."""
    results = []
    for factory in (asyncio.SelectorEventLoop, loop_factory):
        lp = factory()
        try:
            results.append(_messages_for(lp))
        finally:
            lp.close()
    assert results[0] == results[1]
    assert results[0][0].startswith("Exception in callback _messages_for.<locals>.with_args(")
