"""create_future / create_task / task factories."""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any

import pytest

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def answer() -> int:
    await asyncio.sleep(0)
    return 42


def test_create_future_is_asyncio_future(loop: asyncio.AbstractEventLoop) -> None:
    fut = loop.create_future()
    assert type(fut) is asyncio.Future
    assert fut.get_loop() is loop
    fut.cancel()


def test_create_task_is_asyncio_task(loop: asyncio.AbstractEventLoop) -> None:
    task = loop.create_task(answer())
    assert isinstance(task, asyncio.Task)
    assert task.get_loop() is loop
    assert loop.run_until_complete(task) == 42


def test_create_task_name(loop: asyncio.AbstractEventLoop) -> None:
    task = loop.create_task(answer(), name="named")
    assert task.get_name() == "named"
    unnamed = loop.create_task(answer())
    assert unnamed.get_name().startswith("Task-")
    loop.run_until_complete(asyncio.gather(task, unnamed))


def test_create_task_context(loop: asyncio.AbstractEventLoop) -> None:
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "task-context")

    async def read() -> str:
        return VAR.get()

    assert loop.run_until_complete(loop.create_task(read(), context=ctx)) == "task-context"
    assert loop.run_until_complete(loop.create_task(read())) == "unset"


def test_create_task_rejects_non_coroutines(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError):
        loop.create_task(42)  # type: ignore[arg-type]


def test_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    created: list[asyncio.Task[Any]] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=lp, **kwargs)
        created.append(task)
        return task

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory
    task = loop.create_task(answer(), name="via-factory")
    assert created == [task]
    assert task.get_name() == "via-factory"
    assert loop.run_until_complete(task) == 42
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None


def test_task_factory_receives_context(loop: asyncio.AbstractEventLoop) -> None:
    received: list[Any] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        received.append(kwargs.get("context"))
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()
    loop.run_until_complete(loop.create_task(answer(), context=ctx))
    assert received == [ctx]


#: Does create_task() pass name= to a task factory (3.14+), or set the name
#: on the task the factory returns (3.11-3.13)? Read off the stdlib's code.
_STDLIB_FACTORY_GETS_NAME = "name" not in asyncio.BaseEventLoop.create_task.__code__.co_varnames


def test_legacy_two_argument_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    def factory(lp: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=lp)

    loop.set_task_factory(factory)
    # Without keywords a (loop, coro) factory works on every Python.
    assert loop.run_until_complete(loop.create_task(answer())) == 42
    coro = answer()
    if _STDLIB_FACTORY_GETS_NAME:
        # 3.14 hands every keyword to the factory, which must accept it.
        with pytest.raises(TypeError, match="unexpected keyword argument 'name'"):
            loop.create_task(coro, name="legacy")
        coro.close()
        return
    task = loop.create_task(coro, name="legacy")
    assert task.get_name() == "legacy"
    assert loop.run_until_complete(task) == 42


def test_factory_receives_keywords(loop: asyncio.AbstractEventLoop) -> None:
    """What a (loop, coro, **kwargs) factory is given, as asyncio gives it."""
    received: list[dict[str, Any]] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        received.append(dict(kwargs))
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()
    task = loop.create_task(answer(), name="named", context=ctx)
    assert loop.run_until_complete(task) == 42
    assert task.get_name() == "named"
    if _STDLIB_FACTORY_GETS_NAME:
        assert received == [{"name": "named", "context": ctx}]
    else:
        assert received == [{"context": ctx}]


def test_set_task_factory_rejects_non_callables(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="task factory must be a callable or None"):
        loop.set_task_factory(1)  # type: ignore[arg-type]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
def test_eager_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_task_factory(asyncio.eager_task_factory)
    steps: list[str] = []

    async def eager() -> str:
        steps.append("started")
        await asyncio.sleep(0)
        return "done"

    async def main() -> str:
        task = loop.create_task(eager(), name="eager")
        # An eager task runs its first step inside create_task().
        assert steps == ["started"]
        assert task.get_name() == "eager"
        return await task

    assert loop.run_until_complete(main()) == "done"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
def test_eager_task_completing_synchronously(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_task_factory(asyncio.eager_task_factory)

    async def immediate() -> int:
        return 5

    async def main() -> tuple[bool, int]:
        task = loop.create_task(immediate())
        return task.done(), await task

    assert loop.run_until_complete(main()) == (True, 5)


def test_create_task_unknown_keyword(loop: asyncio.AbstractEventLoop) -> None:
    coro = answer()
    kwargs_supported = bool(asyncio.BaseEventLoop.create_task.__code__.co_flags & 0x08)
    if kwargs_supported:
        with pytest.raises(TypeError):
            loop.create_task(coro, bogus=1)  # type: ignore[call-arg]
    else:
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            loop.create_task(coro, bogus=1)  # type: ignore[call-arg]
    coro.close()


def test_current_task_and_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        me = asyncio.current_task()
        assert me is not None
        assert me in asyncio.all_tasks()
        other = asyncio.ensure_future(asyncio.sleep(0.01))
        assert other in asyncio.all_tasks()
        await other

    loop.run_until_complete(main())


@pytest.mark.divergence("factory-task-name-3.13")
def test_factory_task_keeps_its_name_without_name_argument(
    loop: asyncio.AbstractEventLoop,
) -> None:
    loop.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
    task = loop.create_task(answer())
    assert task.get_name().startswith("Task-")
    loop.run_until_complete(task)
