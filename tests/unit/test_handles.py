"""Handles: the loop's inlined construction sets what __init__ sets; one-frame cancel()."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator

import pytest

import tideloop
from tideloop._core.handles import Handle, TimerHandle, new_handle_fields


def _noop(*args: object) -> None:
    pass


@pytest.fixture
def loop() -> Iterator[tideloop.Loop]:
    lp = tideloop.new_event_loop()
    yield lp
    lp.close()


def slot_names(cls: type) -> set[str]:
    """Every slot declared along *cls*'s MRO (asyncio's handles keep their state there)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    names.discard("__weakref__")  # not a field: the weak reference list
    return names


def slot_values(handle: object, names: set[str]) -> dict[str, object]:
    return {name: getattr(handle, name) for name in names}


def test_new_handle_fields_are_every_slot_of_asyncio_handle() -> None:
    assert set(new_handle_fields) == slot_names(asyncio.Handle)
    assert slot_names(asyncio.TimerHandle) - slot_names(asyncio.Handle) == {"_when", "_scheduled"}


def test_call_soon_sets_what_init_sets(loop: tideloop.Loop) -> None:
    ctx = contextvars.copy_context()
    fast = loop.call_soon(_noop, 1, 2, context=ctx)
    ref = Handle(_noop, (1, 2), loop, ctx)
    names = slot_names(asyncio.Handle)
    # Unset slots raise AttributeError in getattr: every one is set.
    assert slot_values(fast, names) == slot_values(ref, names)
    assert type(fast) is Handle
    fast.cancel()


def test_call_later_sets_what_init_sets(loop: tideloop.Loop) -> None:
    ctx = contextvars.copy_context()
    fast = loop.call_later(10.0, _noop, "x", context=ctx)
    ref = TimerHandle(fast.when(), _noop, ("x",), loop, ctx)
    names = slot_names(asyncio.TimerHandle) - {"_scheduled"}
    assert slot_values(fast, names) == slot_values(ref, names)
    assert fast._scheduled and not ref._scheduled  # queued / not queued
    assert type(fast) is TimerHandle
    fast.cancel()


def test_call_soon_copies_the_current_context_without_one(loop: tideloop.Loop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("outer")
    handle = loop.call_soon(_noop)
    var.set("changed")
    assert handle.get_context()[var] == "outer"
    handle.cancel()


def test_cancel_clears_callback_and_keeps_repr_in_debug_mode(loop: tideloop.Loop) -> None:
    handle = loop.call_soon(_noop, 1)
    handle.cancel()
    assert handle.cancelled() and handle._callback is None and handle._args is None
    assert "cancelled" in repr(handle)
    loop.set_debug(True)
    handle = loop.call_soon(_noop, 1)
    handle.cancel()
    # asyncio keeps the representation (with the callback) for later logs.
    assert "_noop" in repr(handle) and "cancelled" in repr(handle)


def test_timer_cancel_counts_once_and_only_while_queued(loop: tideloop.Loop) -> None:
    timers = loop._timers
    timer = loop.call_later(1.0, _noop)
    timer.cancel()
    timer.cancel()
    assert timers.cancelled == 1
    assert timers.next_deadline() is None and timers.cancelled == 0
    far = loop.call_later(10.0, _noop)  # in a slot (timers.py), counted the same
    far.cancel()
    far.cancel()
    assert timers.cancelled == 1
    assert timers.pass_markers() is None and timers.cancelled == 0

    fired = loop.call_later(0.0, _noop)
    loop.run_until_complete(asyncio.sleep(0.001))
    assert not fired._scheduled
    fired.cancel()  # what asyncio.sleep does after its timer fired
    assert fired.cancelled() and timers.cancelled == 0
