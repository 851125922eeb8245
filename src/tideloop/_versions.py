"""What the running Python's asyncio does where releases differ: one place for every such fact.

Layer: facts, below every other (it imports nothing of tideloop, and every
layer may import it). asyncio changes between releases, patch releases
included, and tideloop follows the interpreter it runs on (principle 1).
Each fact is read once, at import:

- off the stdlib's own code where a patch release changed it, or could
  backport it, or PyPy's stdlib differs from CPython's of the same number
  (a constant in a function's code, a parameter's name, a class that
  exists or not): the code is the spec;
- off the version number only for what is new in a release and cannot be
  seen in code (a parameter that a lower release lacks is refused with our
  own error, say).

Invariants: nothing here changes after import; a module that needs to
know how this Python behaves imports the fact from here instead of testing
``sys.version_info`` or the stdlib itself.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import sys
from asyncio import selector_events
from typing import Any, Final

__all__ = [
    "ANY_NON_STREAM_SOCK",
    "BIND_MESSAGE_STRERROR",
    "BIND_SKIPS_EADDRNOTAVAIL",
    "CANT_OPEN_QUOTES_PATH",
    "CREATE_TASK_MODE",
    "CT_KWARGS",
    "CT_LEGACY",
    "CT_NAMED_KWARGS",
    "FORMAT_CALLBACK_DEBUG",
    "FUTURE_AWAIT_CODE",
    "HANDLER_IN_CONTEXT",
    "PY312",
    "PY313",
    "REMOTE_EXEC",
    "STDLIB_THREADSAFE_HANDLE",
    "TRANSPORT_CONTEXT",
    "UDP_HEADER_SIZE",
    "WRITELINES_NAME",
    "WRITE_TYPE_ERROR",
]

# ----------------------------------------------------------------------
# By version number: what a release added

#: 3.12: ``all_errors`` for create_connection, bind errors worded by
#: ``str(exc)``, servers that track waiters while closed.
PY312: Final = sys.version_info >= (3, 12)
#: 3.13: servers' ``close_clients``/``abort_clients``, ``keep_alive``,
#: ``cleanup_socket``, servers tracking their connections.
PY313: Final = sys.version_info >= (3, 13)

#: 3.12 runs a custom exception handler in the context of the handle or
#: task it reports on.
HANDLER_IN_CONTEXT: Final = PY312
#: 3.13 gave ``format_helpers._format_callback_source`` a ``debug`` argument.
FORMAT_CALLBACK_DEBUG: Final = sys.version_info >= (3, 13)
#: 3.13 counts 8 bytes of header per queued datagram in
#: ``get_write_buffer_size()`` (asyncio's ``_HEADER_SIZE``).
UDP_HEADER_SIZE: Final = 8 if sys.version_info >= (3, 13) else 0

# ----------------------------------------------------------------------
# Read off the stdlib's code


# How create_task() hands its keywords to a task factory:
# - LEGACY (3.11 .. early 3.13): create_task(coro, *, name=None, context=None);
#   a factory gets (loop, coro) or (loop, coro, context=...), then the task
#   is renamed.
# - NAMED_KWARGS (later 3.13 releases): the same plus **kwargs, which go to
#   the factory with context; name still does not, the task is renamed.
# - KWARGS (3.14+): create_task(coro, **kwargs); every keyword, name
#   included, goes to the factory (or to Task) and nothing is renamed.
CT_LEGACY: Final = 0
CT_NAMED_KWARGS: Final = 1
CT_KWARGS: Final = 2


def _create_task_mode() -> int:
    code = asyncio.BaseEventLoop.create_task.__code__
    if not code.co_flags & 0x08:  # CO_VARKEYWORDS
        return CT_LEGACY
    kwonly = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    return CT_NAMED_KWARGS if "name" in kwonly else CT_KWARGS


CREATE_TASK_MODE: Final = _create_task_mode()

#: Newer Pythons (3.12.8+, 3.13.1+) give call_soon_threadsafe() a handle
#: whose cancel() takes a lock, so a cancel from another thread cannot race
#: the run: that class, or None.
STDLIB_THREADSAFE_HANDLE: Final[Any] = getattr(asyncio.events, "_ThreadSafeHandle", None)

#: Python 3.15 (gh-140947): a socket transport is made with a context (a copy
#: of its creator's, or of its server's) and runs every callback of its
#: protocol in it; before, each reader or writer registration and each
#: call_soon copied its caller's context.
TRANSPORT_CONTEXT: Final = (
    "context" in selector_events._SelectorTransport.__init__.__code__.co_varnames  # type: ignore[attr-defined]
)


def _stdlib_write_type_error() -> str:
    write = selector_events._SelectorSocketTransport.write  # type: ignore[attr-defined]
    for const in write.__code__.co_consts:
        if isinstance(const, str) and const.startswith("data argument must be"):
            return const
    return "data argument must be a bytes-like object, not "


#: The start of the stdlib's TypeError message for write(non-bytes). A patch
#: release changed it (3.13.x: "a bytes-like object" became "a bytes,
#: bytearray, or memoryview object"); users and tests match on it.
WRITE_TYPE_ERROR: Final = _stdlib_write_type_error()

#: How writelines() names itself when it refuses: 3.12 gave asyncio's socket
#: transport a writelines() of its own; before, it is WriteTransport's, which
#: joins the data and calls write(), so the messages name write().
WRITELINES_NAME: Final = (
    "writelines"
    if "writelines" in vars(selector_events._SelectorSocketTransport)  # type: ignore[attr-defined]
    else "write"
)


def _stdlib_refuses_only_stream_socks() -> bool:
    consts = asyncio.BaseEventLoop.create_datagram_endpoint.__code__.co_consts
    return any(isinstance(c, str) and c.startswith("A datagram socket was") for c in consts)


#: Does create_datagram_endpoint(sock=) refuse only a SOCK_STREAM socket ("A
#: datagram socket was expected")? 3.13 made the change and PyPy's 3.11
#: stdlib has it too (3.11 and 3.12 refuse every type but SOCK_DGRAM, "A
#: UDP Socket was expected").
ANY_NON_STREAM_SOCK: Final = _stdlib_refuses_only_stream_socks()

# How create_server() reports a failed bind changed in patch releases (and
# PyPy's 3.11 stdlib has one change but not the other):
_CREATE_SERVER_NAMES: Final = asyncio.BaseEventLoop.create_server.__code__.co_names
#: Does it skip an address whose bind fails with EADDRNOTAVAIL (the family
#: is probably not enabled, bpo-30945), raising "could not bind on any
#: address" only when none is left? (3.13+, PyPy's 3.11; not 3.11.7, 3.12.1)
BIND_SKIPS_EADDRNOTAVAIL: Final = "EADDRNOTAVAIL" in _CREATE_SERVER_NAMES
#: Does its message end with err.strerror (3.11, 3.12.1, PyPy) rather than
#: str(err), which starts with "[errno N]" (3.13+)?
BIND_MESSAGE_STRERROR: Final = "strerror" in _CREATE_SERVER_NAMES


# ----------------------------------------------------------------------
# The interpreter, not asyncio

#: PEP 768 (3.14+): ``sys.remote_exec(pid, script)`` runs a script in
#: another Python process at its next safe point (where that process allows
#: it: ``sys.is_remote_debug_enabled()``, off with ``-X disable_remote_debug``
#: or ``PYTHON_DISABLE_REMOTE_DEBUG``). The console attaches through it.
REMOTE_EXEC: Final[Any] = getattr(sys, "remote_exec", None)

#: The code of ``asyncio.Future.__await__`` where it is Python (PyPy's
#: asyncio has no C futures): a generator in every await chain that ends in
#: a future, which CPython's C future does not show. Walkers of a task's
#: await chain stop there, so a chain reads the same on both. None on CPython.
FUTURE_AWAIT_CODE: Final[Any] = getattr(asyncio.Future.__await__, "__code__", None)

#: python's one line for a script it cannot open names the path as its repr
#: on CPython ("can't open file '/x.py'"), bare on PyPy.
CANT_OPEN_QUOTES_PATH: Final = sys.implementation.name != "pypy"
