"""The loops under test, and `LoopWatch`: what the test base checks on each loop.

Imported by ``conftest.py`` (see its docstring for the rules) and by the
test base's own tests.

``TIDELOOP_TEST_SEED=S`` in the environment makes the tideloop loops
perturbed ones (``tideloop.testing.new_event_loop(seed=S)``): how a whole
run of tideloop's own tests is explored under a seed (docs/findings.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import tideloop
from tideloop._pollers import available

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

#: The seed of every tideloop loop under test, or None: unperturbed.
SEED = int(os.environ["TIDELOOP_TEST_SEED"]) if os.environ.get("TIDELOOP_TEST_SEED") else None


def _tideloop_factory(poller: str) -> LoopFactory:
    if SEED is None:
        return lambda: tideloop.new_event_loop(poller=poller)
    from tideloop import testing

    return lambda: testing.new_event_loop(poller=poller, seed=SEED)


FACTORIES: dict[str, LoopFactory] = {"asyncio": asyncio.SelectorEventLoop}
for _name in available():
    FACTORIES[f"tideloop-{_name}"] = _tideloop_factory(_name)
TIDELOOP_FACTORIES = [name for name in FACTORIES if name.startswith("tideloop")]


def registered_fds(loop: asyncio.AbstractEventLoop) -> set[int]:
    """fds with a reader or writer registered on *loop*, minus the loop's own."""
    fds = getattr(loop, "_fds", None)
    if fds is not None:  # tideloop
        return set(fds.user_fds())
    readers = getattr(loop, "_readers", None)
    if readers is not None:  # tideloop before the fd registry was a component
        own = {loop._waker.fileno(), loop._sig_rfd}  # type: ignore[attr-defined]
        return (set(readers) | set(loop._writers)) - own  # type: ignore[attr-defined]
    selector = getattr(loop, "_selector", None)
    if selector is None:
        return set()
    # The self-pipe is the stdlib loop's only internal registration (its
    # signal wakeup fd is the self-pipe's other end).
    ssock = getattr(loop, "_ssock", None)
    internal = {ssock.fileno()} if ssock is not None else set()
    return {key.fd for key in selector.get_map().values()} - internal


class LoopWatch:
    """What the loops of one test reported and left behind (see the module docstring)."""

    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []
        self.leftovers: list[str] = []
        self.errors_expected = False

    def watch(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        original_call = loop.call_exception_handler
        original_close = loop.close

        def call_exception_handler(context: dict[str, Any]) -> None:
            if loop.get_exception_handler() is None:
                self.errors.append(context)
            original_call(context)

        def close() -> None:
            if not loop.is_closed() and not loop.is_running():
                left = registered_fds(loop)
                if left:
                    self.leftovers.append(f"{loop!r}: fds {sorted(left)} still registered")
            original_close()

        loop.call_exception_handler = call_exception_handler  # type: ignore[method-assign]
        loop.close = close  # type: ignore[method-assign]
        return loop


def finish(loop: asyncio.AbstractEventLoop) -> None:
    """Close a test's *loop* as asyncio.run does, failing if it had tasks pending.

    The pending tasks are cancelled and awaited first, so that a failing
    test leaves nothing running behind it.
    """
    if loop.is_closed():
        return
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
    assert not pending, f"test left tasks pending: {pending}"
