"""Callback handles: asyncio's own Handle and TimerHandle classes.

Layer: core. The loop returns instances of `asyncio.Handle` /
`asyncio.TimerHandle` (users and libraries check with isinstance and rely on
their repr, cancel() and when()). The subclasses here change no behaviour; they
add `get_context()` on Python 3.11 (where asyncio lacks it), tell mypy the
private attributes the loop reads, and construct faster: asyncio's __init__
calls ``loop.get_debug()`` (a method call) for every handle, ours reads the
loop's ``_debug`` flag. That is a sixth of ``call_soon``'s cost, and
``call_soon`` is what every task step and future callback goes through.
For the same reason the loop's ``call_soon`` and ``call_later`` build their
handles without ``__init__`` (`new_handle_fields` lists what they must set),
and ``cancel()`` is one frame instead of asyncio's two (five for a timer:
``cancel``, ``_timer_handle_cancelled``, the queue's count,
``Handle.cancel``, ``get_debug``), with asyncio's effects.

Invariants:
- A TimerHandle's ``_scheduled`` is True exactly while it sits in a
  `TimerQueue`; asyncio's ``TimerHandle.cancel()`` reads it to call
  ``loop._timer_handle_cancelled()``, which keeps the cancelled count exact.
- Every slot asyncio's Handle declares is set before a handle is returned,
  by ``__init__`` or by the loop's inlined construction (a unit test compares
  the two).
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
from asyncio.format_helpers import extract_stack
from collections.abc import Callable
from contextvars import copy_context
from typing import Any, Final

from tideloop._versions import STDLIB_THREADSAFE_HANDLE

from .interfaces import HandleOwner, ReadyQueue

__all__ = [
    "THREADSAFE_LOCKS",
    "THREADSAFE_TRIM",
    "Handle",
    "LockedRun",
    "ReadyQueue",
    "ThreadSafeHandle",
    "TimerHandle",
    "new_handle_fields",
]


class Handle(asyncio.Handle):
    __slots__ = ()
    _loop: HandleOwner
    _callback: Callable[..., object] | None
    _context: contextvars.Context
    _source_traceback: traceback.StackSummary | None
    _repr: str | None

    def __init__(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: HandleOwner,
        context: contextvars.Context | None = None,
    ) -> None:
        # asyncio's fields and defaults.
        self._context = copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = extract_stack(sys._getframe(1)) if loop._debug else None

    def get_context(self) -> contextvars.Context:
        # asyncio has it from 3.12 on (same body); this one serves 3.11.
        return self._context

    def cancel(self) -> None:
        # asyncio's Handle.cancel, reading the loop's flag instead of calling
        # get_debug().
        if not self._cancelled:
            self._cancelled = True
            if self._loop._debug:
                # asyncio keeps the repr, to name the callback in later logs.
                self._repr = repr(self)
            self._callback = None
            self._args = None  # type: ignore[assignment]  # asyncio clears it


class TimerHandle(asyncio.TimerHandle):
    __slots__ = ()
    _loop: HandleOwner
    _callback: Callable[..., object] | None
    _context: contextvars.Context
    _source_traceback: traceback.StackSummary | None
    _repr: str | None
    _scheduled: bool
    _when: float

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: HandleOwner,
        context: contextvars.Context | None = None,
    ) -> None:
        self._context = copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = extract_stack(sys._getframe(1)) if loop._debug else None
        self._when = when
        self._scheduled = False

    def get_context(self) -> contextvars.Context:
        # asyncio has it from 3.12 on (same body); this one serves 3.11.
        return self._context

    def cancel(self) -> None:
        # asyncio's TimerHandle.cancel and Handle.cancel in one frame. The
        # loop is told only while the timer is in its queue: that is the
        # only case its count changes (asyncio.sleep cancels its timer after
        # it fired, every time).
        if not self._cancelled:
            loop = self._loop
            if self._scheduled:
                loop._timer_handle_cancelled(self)
            self._cancelled = True
            if loop._debug:
                self._repr = repr(self)
            self._callback = None
            self._args = None  # type: ignore[assignment]  # asyncio clears it


#: The fields the loop sets when it builds a Handle without ``__init__``
#: (``object.__new__`` and one store per field, in the core loop's ``call_soon``),
#: and a TimerHandle adds ``_when`` and ``_scheduled``. Checked by a unit test
#: against what ``__init__`` sets.
new_handle_fields: Final = (
    "_context",
    "_loop",
    "_callback",
    "_args",
    "_cancelled",
    "_repr",
    "_source_traceback",
)


# Newer Pythons (3.12.8+, 3.13.1+) give call_soon_threadsafe() a handle whose
# cancel() takes a lock, so a cancel from another thread cannot race the run.
_stdlib_threadsafe: Any = STDLIB_THREADSAFE_HANDLE

#: What call_soon_threadsafe() constructs: that class where it exists, else
#: our Handle.
ThreadSafeHandle: Final[type[Handle]] = Handle if _stdlib_threadsafe is None else _stdlib_threadsafe
#: Whether those handles lock around their run (see `LockedRun`).
THREADSAFE_LOCKS: Final = _stdlib_threadsafe is not None

#: Frames to trim off a ThreadSafeHandle's source traceback: the creating
#: method's, plus _ThreadSafeHandle.__init__'s where that class exists.
THREADSAFE_TRIM: Final = 1 if _stdlib_threadsafe is None else 2


class LockedRun(Handle):
    """The ready-queue entry of a ``_ThreadSafeHandle``: runs it through its ``_run()``.

    asyncio's ``_ThreadSafeHandle`` holds its lock while its callback runs,
    so that a ``cancel()`` or ``cancelled()`` from another thread waits for
    the callback to finish (3.14's tests check this). The run phase calls
    callbacks inline, without ``Handle._run``; rather than test every
    handle's class there, a thread-safe handle is queued behind this entry,
    whose callback is the handle's own ``_run`` (lock, cancelled check,
    exception report naming the user's handle). It runs in the loop's bare
    context: the handle's ``_run`` enters the handle's own. One more object
    per ``call_soon_threadsafe``, none on the hot path.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        # Debug logs name the user's callback, not this entry.
        inner = getattr(self._callback, "__self__", None)
        return repr(inner) if inner is not None else super().__repr__()
