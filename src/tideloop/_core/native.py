"""Which core runs: the native twin of the hot paths, or the pure-Python reference.

Layer: core. Decided once, at import: `core` is the compiled module
``tideloop._core._native`` (``_native.c``), or None, and then `REASON` says
why the pure core runs. `tideloop.NATIVE` and ``python -m tideloop
--version`` report it.

The pure-Python core is complete and is the reference; the native one runs
only where it can:

- ``TIDELOOP_PURE=1`` (any value but empty or ``0``) forces the pure core;
- not CPython (PyPy): the pure core (PyPy's JIT runs it, and the C API
  emulation would only slow it down);
- a free-threaded CPython: the pure core. The native module relies on the
  GIL (``docs/performance.md`` lists where) and declares so (``Py_mod_gil``);
  loading it there would turn the GIL back on for the whole process;
- the module was not built (no compiler at install): the pure core.

Invariant: whichever runs, the loop's observable behaviour is the same;
every test runs on both builds.
"""

from __future__ import annotations

import asyncio
import os
import sys
from asyncio.futures import _set_result_unless_cancelled as _sleep_callback  # type: ignore[attr-defined]
from types import ModuleType

from . import errors, handles, metrics, timers

__all__ = ["NATIVE", "REASON", "core", "core_description"]


def _load() -> tuple[ModuleType | None, str | None]:
    if os.environ.get("TIDELOOP_PURE", "") not in ("", "0"):
        return None, "TIDELOOP_PURE is set"
    if sys.implementation.name != "cpython":
        return None, f"{sys.implementation.name} runs the pure-Python core"
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return None, "free-threaded CPython: the native core relies on the GIL"
    try:
        from . import _native  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"the native core is not built here ({exc})"
    _native.configure(
        handle=handles.Handle,
        asyncio_handle=asyncio.Handle,
        timer_handle=handles.TimerHandle,
        asyncio_timer=asyncio.TimerHandle,
        lag_buckets=len(metrics.LAG_BOUNDS) + 1,
        error_context=errors.callback_error_context,
        sleep_callback=_sleep_callback,
        far_delay=timers.FAR_DELAY,
    )
    # The loop's counters are the native core's (C numbers the iteration
    # writes without a float or an int per write).
    metrics.counters_factory = _native.Counters
    return _native, None


core, REASON = _load()
#: True when the native core runs.
NATIVE = core is not None


def core_description() -> str:
    """Which core runs, in words (``python -m tideloop --version``)."""
    return "native core" if NATIVE else f"pure-Python core: {REASON}"
