"""Async generator hooks: finalisation and shutdown_asyncgens."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncGenerator
from typing import Any

import pytest


def test_abandoned_async_generator_is_closed_by_the_loop(
    loop: asyncio.AbstractEventLoop,
) -> None:
    finalized: list[str] = []

    async def agen() -> AsyncGenerator[int, None]:
        try:
            yield 1
            yield 2
        finally:
            await asyncio.sleep(0)
            finalized.append("closed")

    async def main() -> None:
        gen = agen()
        assert await gen.__anext__() == 1
        del gen
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert finalized == ["closed"]


def test_shutdown_asyncgens_closes_live_generators(loop: asyncio.AbstractEventLoop) -> None:
    finalized: list[str] = []

    async def agen() -> AsyncGenerator[int, None]:
        try:
            yield 1
        finally:
            finalized.append("closed")

    gen = agen()

    async def start() -> None:
        await gen.__anext__()

    loop.run_until_complete(start())
    assert finalized == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert finalized == ["closed"]


def test_shutdown_asyncgens_reports_errors(loop: asyncio.AbstractEventLoop) -> None:
    contexts: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def agen() -> AsyncGenerator[int, None]:
        try:
            yield 1
        finally:
            raise ValueError("close failed")

    gen = agen()

    async def start() -> None:
        # First iterated while the loop runs, so the loop's hook tracks it.
        await gen.__anext__()

    loop.run_until_complete(start())
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert len(contexts) == 1
    assert contexts[0]["message"].startswith(
        "an error occurred during closing of asynchronous generator"
    )
    assert isinstance(contexts[0]["exception"], ValueError)
    assert contexts[0]["asyncgen"] is gen


def test_asyncgen_first_iterated_after_shutdown_warns(loop: asyncio.AbstractEventLoop) -> None:
    async def agen() -> AsyncGenerator[int, None]:
        yield 1

    loop.run_until_complete(loop.shutdown_asyncgens())
    gen = agen()

    async def start() -> None:
        await gen.__anext__()

    with pytest.warns(ResourceWarning, match="was scheduled after loop.shutdown_asyncgens"):
        loop.run_until_complete(start())
    loop.run_until_complete(gen.aclose())


def test_hooks_are_restored_after_run(loop: asyncio.AbstractEventLoop) -> None:
    before = sys.get_asyncgen_hooks()
    seen: list[Any] = []

    async def main() -> None:
        seen.append(sys.get_asyncgen_hooks())

    loop.run_until_complete(main())
    assert sys.get_asyncgen_hooks() == before
    assert seen[0].firstiter is not None
    assert seen[0] != before
