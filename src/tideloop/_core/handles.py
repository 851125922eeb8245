"""Callback handles: asyncio's own Handle and TimerHandle classes.

Layer: core. The loop returns instances of `asyncio.Handle` /
`asyncio.TimerHandle` (users and libraries check with isinstance and rely on
their repr, cancel() and when()). The subclasses here add no behaviour except
on Python 3.11, where `get_context()` did not exist yet; they exist so mypy
knows the private attributes the loop reads (typeshed declares only a few).

Invariants:
- A TimerHandle's ``_scheduled`` is True exactly while it sits in a
  `TimerQueue`; asyncio's ``TimerHandle.cancel()`` reads it to call
  ``loop._timer_handle_cancelled()``, which keeps the cancelled count exact.
- ``_source_traceback`` is set by asyncio's __init__ in debug mode, from the
  frame that constructed the handle; every loop method that creates a handle
  trims its own frames off so the traceback ends at the user's call.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextvars
import sys
import traceback
from collections.abc import Callable
from typing import Any, Final

__all__ = ["THREADSAFE_TRIM", "Handle", "ThreadSafeHandle", "TimerHandle"]


class Handle(asyncio.Handle):
    __slots__ = ()
    _callback: Callable[..., object] | None
    _context: contextvars.Context
    _source_traceback: traceback.StackSummary | None
    _repr: str | None

    if sys.version_info < (3, 12):

        def get_context(self) -> contextvars.Context:
            return self._context


class TimerHandle(asyncio.TimerHandle):
    __slots__ = ()
    _callback: Callable[..., object] | None
    _context: contextvars.Context
    _source_traceback: traceback.StackSummary | None
    _scheduled: bool
    _when: float

    if sys.version_info < (3, 12):

        def get_context(self) -> contextvars.Context:
            return self._context


# Newer Pythons (3.12.8+, 3.13.1+) give call_soon_threadsafe() a handle whose
# cancel() takes a lock, so a cancel from another thread cannot race the run.
_stdlib_threadsafe: Any = getattr(asyncio.events, "_ThreadSafeHandle", None)

if _stdlib_threadsafe is not None:

    class ThreadSafeHandle(_stdlib_threadsafe):  # type: ignore[misc]
        __slots__ = ()

else:
    ThreadSafeHandle = Handle  # type: ignore[assignment,misc]

#: Frames to trim off a ThreadSafeHandle's source traceback: the creating
#: method's, plus _ThreadSafeHandle.__init__'s where that class exists.
THREADSAFE_TRIM: Final = 1 if _stdlib_threadsafe is None else 2
