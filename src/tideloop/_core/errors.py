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

import traceback
from asyncio.log import logger
from collections.abc import Mapping
from typing import Any

__all__ = ["format_context", "log_context", "logger"]


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
