"""Exception reporting: the loop's exception handler and the default one's log format.

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

`ExceptionHandling` is a component of the core loop (``_errors``): it holds
the handler ``set_exception_handler`` installed and runs
``call_exception_handler``'s rules (the context a handler runs in, what
happens when a handler fails). The loop's public methods delegate to it and
pass themselves: the default handler is always reached through
``loop.default_exception_handler``, which a subclass may override.

Invariant: an error in a handler is reported, never raised, except
SystemExit and KeyboardInterrupt, which always propagate.
"""

from __future__ import annotations

import asyncio
import traceback
from asyncio import format_helpers
from asyncio.log import logger
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tideloop._versions import FORMAT_CALLBACK_DEBUG, HANDLER_IN_CONTEXT

__all__ = [
    "ExceptionHandling",
    "callback_error_context",
    "default_report",
    "format_context",
    "log_context",
    "logger",
]


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
        if FORMAT_CALLBACK_DEBUG:
            cb = format_helpers._format_callback_source(callback, args, debug=debug)  # type: ignore[call-arg]  # 3.13+
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


def default_report(context: dict[str, Any], current: asyncio.Handle | None) -> None:
    """``default_exception_handler``: log *context*; *current* is the handle
    running now (debug mode), whose creation traceback is added."""
    # asyncio's first touch of *context* is .get(): a context that is
    # not a dict fails with its AttributeError, here too.
    context.get("message")
    if (
        "source_traceback" not in context and current is not None and current._source_traceback  # type: ignore[attr-defined]
    ):
        context["handle_traceback"] = current._source_traceback  # type: ignore[attr-defined]
    log_context(context)


class ErrorSink(Protocol):
    """What `ExceptionHandling` needs of its loop: the (overridable) default handler."""

    def default_exception_handler(self, context: dict[str, Any]) -> None: ...


#: What ``set_exception_handler`` takes: ``handler(loop, context)``.
Handler = Callable[[Any, dict[str, Any]], object]


class ExceptionHandling:
    """The loop's exception handler, and asyncio's rules for calling it."""

    __slots__ = ("handler",)

    def __init__(self) -> None:
        self.handler: Handler | None = None

    def set(self, handler: Handler | None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self.handler = handler

    def call(self, loop: ErrorSink, context: dict[str, Any]) -> None:
        """``loop.call_exception_handler(context)``."""
        handler = self.handler
        if handler is None:
            try:
                loop.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                # The default handler may be overridden by a subclass.
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            ctx = None
            if HANDLER_IN_CONTEXT:
                owner = context.get("task")
                if owner is None:
                    owner = context.get("future")
                if owner is None:
                    owner = context.get("handle")
                if owner is not None and hasattr(owner, "get_context"):
                    ctx = owner.get_context()
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(handler, loop, context)
            else:
                handler(loop, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                loop.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an "
                    "unexpected error in custom exception handler",
                    exc_info=True,
                )
