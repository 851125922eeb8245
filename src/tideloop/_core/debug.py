"""Debug mode: its switches and the checks it enables.

Layer: core. asyncio's debug mode (``loop.set_debug(True)``, the
``PYTHONASYNCIODEBUG`` environment variable, or ``python -X dev``) turns on
checks that cost too much for production: callbacks must be callables and not
coroutines, non-threadsafe methods must be called from the loop's thread,
handles remember where they were created, and callbacks slower than
``loop.slow_callback_duration`` are logged. The checks live here; the loop
calls them only behind ``if self._debug``.
"""

from __future__ import annotations

import asyncio
import asyncio.coroutines
import inspect
import os
import sys
from typing import Any, Final

#: How many frames of coroutine origin asyncio records in debug mode.
DEBUG_STACK_DEPTH: Final = 10

# asyncio's marker for "coroutine function" objects that are not real ones
# (unittest.mock.AsyncMock sets it). Absent on Pythons that dropped it.
_COROUTINE_MARKER: Final = getattr(asyncio.coroutines, "_is_coroutine", None)


#: Environment variable: show the loop's own frames in the tracebacks of
#: ``tideloop.testing``'s reports too (see `hide_from_reports`).
FULL_FRAMES_ENV: Final = "TIDELOOP_FULL_FRAMES"


def full_frames() -> bool:
    """Whether `FULL_FRAMES_ENV` asks for the loop's own frames."""
    return os.environ.get(FULL_FRAMES_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hide_from_reports(excinfo: Any = None) -> bool:
    """pytest's ``__tracebackhide__`` for the core's frames (a module global of
    the modules a report passes through): hidden only from the traceback of a
    report ``tideloop.testing`` raises (a deadlock, a broken property: its
    class says ``tideloop_report``), whose text already says where the
    program waits, and shown when `FULL_FRAMES_ENV` asks. Every other
    exception's traceback keeps them."""
    value = getattr(excinfo, "value", None)
    return bool(getattr(value, "tideloop_report", False)) and not full_frames()


def debug_from_environment() -> bool:
    """asyncio's default for ``get_debug()`` on a new loop."""
    return sys.flags.dev_mode or (
        not sys.flags.ignore_environment and bool(os.environ.get("PYTHONASYNCIODEBUG"))
    )


def is_coroutine_function(func: object) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    return _COROUTINE_MARKER is not None and getattr(func, "_is_coroutine", None) is (
        _COROUTINE_MARKER
    )


def check_callback(callback: object, method: str) -> None:
    """Reject what asyncio's debug mode rejects, with asyncio's messages."""
    if asyncio.iscoroutine(callback) or is_coroutine_function(callback):
        raise TypeError(f"coroutines cannot be used with {method}()")
    if not callable(callback):
        raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")


def format_handle(handle: asyncio.Handle) -> str:
    """How a slow callback is named in the warning: the task, if it is a task step."""
    owner: Any = getattr(getattr(handle, "_callback", None), "__self__", None)
    if isinstance(owner, asyncio.Task):
        return repr(owner)
    return str(handle)
