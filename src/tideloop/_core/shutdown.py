"""The core loop's coroutine methods: ``shutdown_asyncgens``, ``shutdown_default_executor``.

Layer: core. `CoreLoop` binds these functions as its methods (class
attributes, so ``inspect.iscoroutinefunction`` is true of them as of
asyncio's). They live here, outside ``run.py``, because ``run.py`` is
compiled in the mypyc build and this module is not (see ``setup.py``): a
coroutine compiled by mypyc is not a coroutine function to ``inspect``, and
it throws into the awaitable it waits on with the three-argument
``throw()``, which 3.12 deprecates (a ``DeprecationWarning`` when a timeout
cancels the wait).

Invariants: the state they touch (``_asyncgens``, ``_default_executor``,
the two ``*_called`` flags) is CoreLoop's, declared there; nothing here
keeps state of its own.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import CoreLoop


async def shutdown_asyncgens(self: CoreLoop) -> None:
    """Close every asynchronous generator still alive (``asyncio.run`` calls this at exit)."""
    self._asyncgens_shutdown_called = True
    if not len(self._asyncgens):
        return
    closing = list(self._asyncgens)
    self._asyncgens.clear()
    results = await asyncio.gather(*[ag.aclose() for ag in closing], return_exceptions=True)
    for result, agen in zip(results, closing, strict=True):
        if isinstance(result, Exception):
            self.call_exception_handler(
                {
                    "message": f"an error occurred during closing of "
                    f"asynchronous generator {agen!r}",
                    "exception": result,
                    "asyncgen": agen,
                }
            )


async def shutdown_default_executor(self: CoreLoop, timeout: float | None = None) -> None:
    """Join the default executor's threads, waiting at most *timeout* seconds."""
    self._executor_shutdown_called = True
    executor = self._default_executor
    if executor is None:
        return
    future = self.create_future()
    self._executor_jobs += 1
    future.add_done_callback(self._executor_job_done)
    # Joining the pool's threads blocks, so a helper thread does it.
    thread = threading.Thread(target=self._join_executor, args=(executor, future))
    thread.start()
    try:
        async with asyncio.timeout(timeout):
            await future
    except TimeoutError:
        warnings.warn(
            f"The executor did not finishing joining its threads within {timeout} seconds.",
            RuntimeWarning,
            stacklevel=2,
        )
        executor.shutdown(wait=False)
    else:
        thread.join()
