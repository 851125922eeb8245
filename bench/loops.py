"""The loops under comparison, by name: how to build one and what version it is.

``asyncio`` is the stdlib's default loop on this platform (on Linux the
selector loop on epoll), ``uvloop`` is uvloop (optional: the ``bench`` extra),
``tideloop`` is this project.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import platform
from collections.abc import Callable

__all__ = ["LOOPS", "factory", "unavailable_reason", "version"]

LOOPS: tuple[str, ...] = ("asyncio", "uvloop", "tideloop")


def factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop factory for *name* (imports the loop's package)."""
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "tideloop":
        import tideloop

        return tideloop.new_event_loop
    raise ValueError(f"unknown loop {name!r} (known: {', '.join(LOOPS)})")


def unavailable_reason(name: str) -> str | None:
    """None if loop *name* can be imported here, else why not."""
    if name == "asyncio":
        return None
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed (pip install -e '.[bench]')"
    return None


def version(name: str) -> str:
    if name == "asyncio":
        return f"Python {platform.python_version()}"
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"
