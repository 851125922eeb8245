"""AsyncGenerators: the loop's async generator hooks and their shutdown.

Layer: core. A component the core loop builds and keeps as ``_asyncgens``.
While ``run_forever`` runs, the interpreter's async generator hooks
(``sys.set_asyncgen_hooks``) are this component's: every async generator
first iterated in the loop's thread is recorded (weakly), and one that is
garbage-collected unfinished is closed by a task on the loop (asyncio's
``BaseEventLoop`` semantics). ``loop.shutdown_asyncgens()``, which
``asyncio.run`` calls at the end, closes the ones still alive and reports
each failure to the loop's exception handler.

Invariants:
- the hooks are installed exactly while the loop runs (`install` at the
  start of ``run_forever``, `uninstall` at its end, which restores the
  hooks that were there before);
- the finalizer may run in any thread (whichever drops the last
  reference), so it only calls the loop's thread-safe methods.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
import weakref
from collections.abc import AsyncGenerator, Coroutine
from typing import Any, Protocol

from .interfaces import ThreadPoster

__all__ = ["AsyncGenerators"]


class AgenOwner(ThreadPoster, Protocol):
    """What `AsyncGenerators` needs of its loop."""

    def create_task(self, coro: Coroutine[Any, Any, Any], **kwargs: Any) -> asyncio.Task[Any]: ...

    def call_exception_handler(self, context: dict[str, Any]) -> None: ...


class AsyncGenerators:
    """The async generators a loop has started, and the hooks that record them."""

    __slots__ = ("_alive", "_loop", "_saved", "shutdown_called")

    def __init__(self, loop: AgenOwner) -> None:
        # Weak: a generator's finalizer (this component's) outlives the run,
        # and a closed loop must be freed by reference counting alone.
        self._loop = weakref.ref(loop)
        self._alive: weakref.WeakSet[AsyncGenerator[Any, Any]] = weakref.WeakSet()
        self.shutdown_called = False
        self._saved: Any = None

    def install(self) -> None:
        """Make this loop's hooks the interpreter's (``run_forever`` starts)."""
        self._saved = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=self._firstiter, finalizer=self._finalizer)

    def uninstall(self) -> None:
        """Put back the hooks `install` found (``run_forever`` ends)."""
        if self._saved is not None:
            sys.set_asyncgen_hooks(*self._saved)
            self._saved = None

    def _firstiter(self, agen: AsyncGenerator[Any, Any]) -> None:
        if self.shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning,
                source=self._loop(),
            )
        self._alive.add(agen)

    def _finalizer(self, agen: AsyncGenerator[Any, Any]) -> None:
        # May run in any thread (whichever drops the last reference).
        self._alive.discard(agen)
        loop = self._loop()
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.create_task, agen.aclose())

    async def shutdown(self) -> None:
        """Close every asynchronous generator still alive."""
        self.shutdown_called = True
        if not len(self._alive):
            return
        closing = list(self._alive)
        self._alive.clear()
        results = await asyncio.gather(*[ag.aclose() for ag in closing], return_exceptions=True)
        for result, agen in zip(results, closing, strict=True):
            loop = self._loop()
            if isinstance(result, Exception) and loop is not None:
                loop.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of "
                        f"asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )
