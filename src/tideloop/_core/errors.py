"""Exception reporting: the default exception handler's log format.

Layer: core. asyncio reports errors that have no caller to raise to (a
failing callback, a task destroyed while pending, a transport error) by
calling ``loop.call_exception_handler(context)``. The default handler logs
to the ``asyncio`` logger, so that applications' logging configuration, test
suites that capture it and log scrapers see the same lines as with the stdlib
loop. This module produces exactly that text:

    <message>
    <key>: <repr(value)>      one line per other key, sorted by key

where ``source_traceback`` / ``handle_traceback`` values are rendered as
"Object created at" / "Handle created at" stack listings, and the exception
travels as ``exc_info`` (so logging prints its traceback).
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from asyncio import format_helpers
from asyncio.log import logger
from collections.abc import Mapping
from typing import Any

__all__ = ["callback_error_context", "format_context", "log_context", "logger"]


def callback_error_context(
    handle: asyncio.Handle, exc: BaseException, debug: bool
) -> dict[str, Any]:
    """The context asyncio's ``Handle._run`` reports for a failing callback.

    The loop runs callbacks inline (saving a Python call per callback), so it
    builds the same report itself: same message, keys and callback format
    (asyncio's own formatter, whose signature changed in 3.13).
    """
    callback = getattr(handle, "_callback", None)
    args = handle._args
    try:
        if sys.version_info >= (3, 13):
            cb = format_helpers._format_callback_source(callback, args, debug=debug)
        else:
            cb = format_helpers._format_callback_source(callback, args)
    except Exception:  # a private helper: never let it break error reporting
        cb = repr(callback)
    context: dict[str, Any] = {
        "message": f"Exception in callback {cb}",
        "exception": exc,
        "handle": handle,
    }
    source_traceback = getattr(handle, "_source_traceback", None)
    if source_traceback:
        context["source_traceback"] = source_traceback
    return context


def format_context(context: Mapping[str, Any]) -> str:
    message = context.get("message") or "Unhandled exception in event loop"
    lines = [message]
    for key in sorted(context):
        if key in ("message", "exception"):
            continue
        value = context[key]
        if key == "source_traceback":
            text = "Object created at (most recent call last):\n"
            text += "".join(traceback.format_list(value)).rstrip()
        elif key == "handle_traceback":
            text = "Handle created at (most recent call last):\n"
            text += "".join(traceback.format_list(value)).rstrip()
        else:
            text = repr(value)
        lines.append(f"{key}: {text}")
    return "\n".join(lines)


def log_context(context: Mapping[str, Any]) -> None:
    exception = context.get("exception")
    if exception is not None:
        logger.error(
            format_context(context),
            exc_info=(type(exception), exception, exception.__traceback__),
        )
    else:
        logger.error(format_context(context))
