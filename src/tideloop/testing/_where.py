"""Where things are in the program: frames, tasks, timers, jobs, connections, in its own terms.

Layer: top (``tideloop.testing``). A report that says "readiness #0 of fd 15"
or "executor job #0" speaks the loop's language; the program's author
thinks in tasks, awaits, lines and hosts. The functions here turn what the
loop sees (a frame stack, a task, a handle, a transport) into that:

- a `Site`: a line of the program (file, line, function, the source text),
  found by walking frames out of tideloop, the standard library and test
  runners (`kind_of_file`);
- a task: its name, its coroutine, and the line of the program where it is
  suspended (the innermost frame of its await chain that is the
  program's), plus what it is suspended in (``Event.wait``);
- a connection: local and peer addresses (and, on a `SimNetwork`, the
  hosts' names) and the task that reads it;
- a callback: its function's name, and the tasks waiting on what it acts on.

Everything is returned as plain JSON-ready dicts (``_report`` words them,
``_timeline`` draws them), so a tape carries them to another machine.

Invariants: these functions only read (frames, tasks' coroutines,
transports' public ``get_extra_info``); they run none of the program's code
(no ``repr`` of its objects) and never block (no file system access but
``linecache``, which the traceback module uses too, for source lines). They
are called only on loops built with a schedule (testing loops), and there
only for what a report or a timeline shows.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import linecache
import os
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType
from typing import Any, Final

import tideloop
from tideloop._core.interfaces import LoopView
from tideloop._versions import FUTURE_AWAIT_CODE

#: What a file of a frame is: the program's own, an installed library's,
#: the standard library's, tideloop's, or a test runner's.
USER: Final = "user"
SITE: Final = "site"
STDLIB: Final = "stdlib"
TIDELOOP: Final = "tideloop"
RUNNER: Final = "runner"

#: Frames of these kinds are "the loop's", not the program's.
LIBRARY: Final = frozenset({STDLIB, TIDELOOP, RUNNER})

_TIDELOOP_DIR: Final = os.path.dirname(os.path.abspath(tideloop.__file__)) + os.sep
_STDLIB_DIR: Final = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
#: The working directory when tideloop.testing was imported (a test suite's
#: root, normally), which reports' paths are relative to.
_CWD: Final = os.path.join(os.getcwd(), "")
_RUNNERS: Final = ("_pytest", "pytest", "pluggy", "_hypothesis_pytestplugin", "xdist")
_SITE_PARTS: Final = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)

#: Frames walked at most, up a stack or down an await chain.
MAX_FRAMES: Final = 64

_kinds: dict[str, str] = {}


def kind_of_file(filename: str) -> str:
    """`USER`, `SITE`, `STDLIB`, `TIDELOOP` or `RUNNER` for a code object's file name."""
    kind = _kinds.get(filename)
    if kind is not None:
        return kind
    if filename.startswith("<frozen") or filename.startswith("<built-in"):
        kind = STDLIB
    elif filename.startswith(_TIDELOOP_DIR):
        kind = TIDELOOP
    else:
        site = next((filename.index(p) + len(p) for p in _SITE_PARTS if p in filename), -1)
        if site >= 0:
            top = filename[site:].split(os.sep, 1)[0]
            kind = RUNNER if top in _RUNNERS or top.startswith("_pytest") else SITE
        elif filename.startswith(_STDLIB_DIR):
            kind = STDLIB
        else:
            kind = USER
    _kinds[filename] = kind
    return kind


def short_path(filename: str) -> str:
    """A file name as a person reads it: relative to the current directory
    when under it, from the package on for an installed library's."""
    for part in _SITE_PARTS:
        i = filename.rfind(part)
        if i >= 0:
            return filename[i + len(part) :]
    if filename.startswith(_STDLIB_DIR):
        return filename[len(_STDLIB_DIR) :]
    # Lexically, against the directory at import: this runs on the loop's
    # thread, where os.path.relpath's getcwd() is a call blockbuster fails.
    if filename.startswith(_CWD):
        return filename[len(_CWD) :]
    return filename


def absolute(path: str) -> str:
    """*path* made absolute and normalized, lexically: a relative one against
    the directory at import (``os.path.abspath`` calls getcwd(), which
    blockbuster fails on a loop's thread, where this runs)."""
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(_CWD, path))


def source_line(filename: str, lineno: int) -> str:
    """The stripped text of a line of source ("" when it cannot be read)."""
    return linecache.getline(filename, lineno).strip()


def _qualname(code: CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)


def site_of(frame: FrameType, lineno: int | None = None) -> dict[str, Any]:
    """A frame's line as a `Site`: ``{"file", "line", "function", "code", "where"}``."""
    code = frame.f_code
    line = frame.f_lineno if lineno is None else lineno
    return {
        "file": short_path(code.co_filename),
        "line": line,
        "function": _qualname(code),
        "code": source_line(code.co_filename, line),
        "where": f"{short_path(code.co_filename)}:{line}",
    }


def caller_site(frame: FrameType | None) -> tuple[dict[str, Any] | None, str]:
    """Walking out from *frame*: the first frame of the program's (its `Site`),
    and the library function it called there (``asyncio.sleep``), or ""."""
    api = ""
    fallback: FrameType | None = None
    for _ in range(MAX_FRAMES):
        if frame is None:
            break
        kind = kind_of_file(frame.f_code.co_filename)
        if kind == USER:
            return site_of(frame), api
        if kind == SITE and fallback is None:
            fallback = frame
        if kind in (STDLIB, RUNNER):
            # The library function the program called (tideloop's own frames
            # are the loop's plumbing, and the native core has none).
            api = _api_name(frame.f_code)
        frame = frame.f_back
    if fallback is not None:
        return site_of(fallback), ""
    return None, ""


def here(skip: int = 1) -> tuple[dict[str, Any] | None, str]:
    """`caller_site` of the caller's caller (*skip* frames out of this one)."""
    return caller_site(sys._getframe(skip + 1))


def _api_name(code: CodeType) -> str:
    """A library function as the program names it when it calls it:
    ``asyncio.sleep``, ``asyncio.timeout``, ``StreamReader.readline``."""
    filename = code.co_filename
    name = short_name(_qualname(code))
    if "." in name:
        if name.startswith("Timeout.") and os.sep + "asyncio" + os.sep in filename:
            return "asyncio.timeout"
        if name.startswith(("BaseEventLoop.", "AbstractEventLoop.", "Scheduler.", "CoreLoop.")):
            return "loop." + name.rsplit(".", 1)[-1]
        return name  # a method: its class says what it is
    if os.sep + "asyncio" + os.sep in filename:
        return "asyncio." + name
    module = os.path.splitext(os.path.basename(filename))[0]
    return f"{module}.{name}"


def _frame_api(frame: FrameType) -> str:
    """`_api_name` of a frame, a method named by the class of its ``self``
    (``Lock.__aenter__``, not the mixin that defines it)."""
    code = frame.f_code
    if code.co_argcount and code.co_varnames[:1] == ("self",):
        owner = frame.f_locals.get("self")
        if owner is not None:
            return f"{short_name(type(owner).__qualname__)}.{code.co_name}"
    return _api_name(code)


def short_name(qualname: str) -> str:
    """A qualified name without the functions it is local to (``f.<locals>.g`` -> ``g``)."""
    return qualname.rsplit("<locals>.", 1)[-1]


# ----------------------------------------------------------------------
# Tasks


def await_chain(task: asyncio.Future[Any]) -> tuple[list[FrameType], object]:
    """A task's suspended frames, outermost first, and what the innermost awaits.

    ``Task.get_stack`` shows a suspended coroutine's own frame only; the
    chain is followed through ``cr_await`` (``gi_yieldfrom`` for
    generator-based awaitables), as 3.14's call graph does.
    """
    frames: list[FrameType] = []
    if not isinstance(task, asyncio.Task):
        return frames, None
    awaited: Any = task.get_coro()
    while awaited is not None and len(frames) < MAX_FRAMES:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None or frame.f_code is FUTURE_AWAIT_CODE:
            break
        frames.append(frame)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames, awaited


def _coro_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    return str(getattr(coro, "__qualname__", None) or type(coro).__name__)


def task_words(task: asyncio.Task[Any]) -> dict[str, Any]:
    """A task as its author knows it: ``{"task": name, "coro": qualname, "state",
    "at": the program's `Site` it is suspended at, "in": the library call it waits in}``.
    """
    out: dict[str, Any] = {"task": task.get_name(), "coro": short_name(_coro_name(task))}
    if task.done():
        out["state"] = "cancelled" if task.cancelled() else "done"
        return out
    frames, awaited = await_chain(task)
    # The task's coroutine as the program wrote it (a runner's wrapper, such
    # as explore's time limit, is not the program's).
    top = next((f for f in frames if kind_of_file(f.f_code.co_filename) not in LIBRARY), None)
    if top is not None:
        out["coro"] = short_name(_qualname(top.f_code))
    user = next((f for f in reversed(frames) if kind_of_file(f.f_code.co_filename) == USER), None)
    if user is None:
        user = next(
            (f for f in reversed(frames) if kind_of_file(f.f_code.co_filename) not in LIBRARY),
            None,
        )
    coro = task.get_coro()
    if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        out["state"] = "not started"
    else:
        out["state"] = "suspended" if frames else "running"
    if user is not None:
        out["at"] = site_of(user)
        # What it called there: the next frame in, a library's.
        index = frames.index(user)
        if index + 1 < len(frames):
            out["in"] = _frame_api(frames[index + 1])
        elif isinstance(awaited, asyncio.Task):
            out["in"] = f"task {awaited.get_name()!r}"
    return out


def tasks_of(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """The loop's tasks that are not done, in creation order where known."""
    return [t for t in asyncio.all_tasks(loop) if not t.done()]


def tasks_waiting_on(
    objects: Iterable[object], tasks: Iterable[asyncio.Task[Any]]
) -> Iterator[asyncio.Task[Any]]:
    """The *tasks* whose await chain waits on one of *objects*: the innermost
    future is one, or a frame of the chain is a method of one (``self``)."""
    wanted = {id(o) for o in objects if o is not None}
    if not wanted:
        return
    for task in tasks:
        frames, _ = await_chain(task)
        # What a task is suspended on (its await chain ends in the future's
        # iterator, which does not say whose it is).
        if id(task._fut_waiter) in wanted:  # type: ignore[attr-defined]
            yield task
            continue
        for frame in frames:
            owner = frame.f_locals.get("self") if "self" in frame.f_code.co_varnames else None
            if owner is not None and id(owner) in wanted:
                yield task
                break


# ----------------------------------------------------------------------
# Callbacks and functions


def unwrap(func: object) -> object:
    """Through ``functools.partial`` and ``Context.run`` (``to_thread``) to the function."""
    for _ in range(8):
        if not isinstance(func, functools.partial):
            break
        inner = func.func
        if isinstance(getattr(inner, "__self__", None), contextvars.Context) and func.args:
            func = func.args[0]  # to_thread: partial(ctx.run, partial(func, *args))
        else:
            func = inner
    return func


def function_name(func: object) -> str:
    """A callable's name as the program spells it: ``Class.method``, ``function``."""
    func = unwrap(func)
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if owner is not None and not isinstance(owner, type) and name is not None:
        # A bound method: named by the class it was looked up on.
        short = str(name).rsplit(".", 1)[-1]
        return f"{short_name(type(owner).__qualname__)}.{short}"
    if name is None:
        return short_name(type(func).__qualname__)
    return short_name(str(name))


def function_site(func: object) -> dict[str, Any] | None:
    """Where a Python function is defined (None for a builtin)."""
    code = getattr(unwrap(func), "__code__", None) or getattr(
        getattr(unwrap(func), "__func__", None), "__code__", None
    )
    if not isinstance(code, CodeType):
        return None
    return {
        "file": short_path(code.co_filename),
        "line": code.co_firstlineno,
        "function": _qualname(code),
        "code": source_line(code.co_filename, code.co_firstlineno),
        "where": f"{short_path(code.co_filename)}:{code.co_firstlineno}",
    }


def argument_text(site: dict[str, Any] | None, callee: str, index: int) -> str:
    """The source text of the *index*-th argument of the call to *callee* on a
    `Site`'s line (``q.sync_q.join`` of ``run_in_executor(None, q.sync_q.join)``),
    or "" when the line does not show it (a call over several lines)."""
    if not site or not site.get("code"):
        return ""
    import ast

    text = str(site["code"])
    for attempt in (text, text.rstrip(":") + ": pass", "(" + text.rstrip(":") + ")"):
        try:
            tree = ast.parse(attempt.removeprefix("await ").removeprefix("return "))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == callee and len(node.args) > index:
                return ast.unparse(node.args[index])
        return ""
    return ""


def callback_words(callback: Callable[..., object] | object) -> str:
    """A handle's callback in the program's terms (a task's step says which task)."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return f"a step of task {owner.get_name()!r} ({short_name(_coro_name(owner))})"
    return function_name(callback)


# ----------------------------------------------------------------------
# Connections


def address_words(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    if isinstance(addr, (str, bytes)) and addr:
        return repr(addr)
    return "unnamed"


def host_name(loop: object, addr: object) -> str | None:
    """The simulated host at *addr*'s address, on a loop with a `SimNetwork`."""
    network = getattr(loop, "network", None)
    name_at = getattr(network, "host_at", None)
    if name_at is None or not isinstance(addr, tuple) or not addr:
        return None
    name = name_at(str(addr[0]))
    return str(name) if name is not None else None


def transport_words(loop: object, transport: asyncio.BaseTransport) -> dict[str, Any]:
    """A connection by its ends: ``{"local", "peer", "local_host", "peer_host", "protocol"}``."""
    local = transport.get_extra_info("sockname")
    peer = transport.get_extra_info("peername")
    out: dict[str, Any] = {"local": address_words(local)}
    if peer is not None:
        out["peer"] = address_words(peer)
    for key, addr in (("local_host", local), ("peer_host", peer)):
        name = host_name(loop, addr)
        if name is not None:
            out[key] = name
    protocol = transport.get_protocol()
    if protocol is not None:
        out["protocol"] = type(protocol).__qualname__
    return out


def readers_of(
    transport: asyncio.BaseTransport, tasks: Iterable[asyncio.Task[Any]]
) -> list[asyncio.Task[Any]]:
    """The tasks that read *transport*'s connection: suspended in a method of
    its `StreamReader` (``readline``, ``read``...) or of its protocol."""
    protocol = transport.get_protocol()
    found: list[asyncio.Task[Any]] = []
    for task in tasks:
        frames, _ = await_chain(task)
        for frame in frames:
            if "self" not in frame.f_code.co_varnames:
                continue
            owner = frame.f_locals.get("self")
            if owner is protocol or (
                isinstance(owner, asyncio.StreamReader) and _reader_transport(owner) is transport
            ):
                found.append(task)
                break
    return found


def _reader_transport(reader: asyncio.StreamReader) -> object:
    # A StreamReader has no public accessor for its transport.
    return reader._transport  # type: ignore[attr-defined]


# ----------------------------------------------------------------------
# fds, in the program's terms (the schedule's words and the recording's)


def address_text(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return repr(addr) if addr else "unnamed"


def describe_fd(fd: int) -> str:
    """Words for an fd: its socket's addresses, else its number."""
    # PyPy's socket() on an fd makes the fd blocking: put its mode back.
    try:
        blocking = os.get_blocking(fd)
        sock = socket.socket(fileno=fd)
    except OSError:
        return f"fd {fd}"
    try:
        try:
            local = sock.getsockname()
        except OSError:
            local = "?"
        try:
            peer = sock.getpeername()
        except OSError:
            return f"fd {fd} ({address_text(local)})"
        return f"fd {fd} ({address_text(local)} <- {address_text(peer)})"
    finally:
        sock.detach()
        os.set_blocking(fd, blocking)


def fd_words(view: LoopView | None, fd: int) -> dict[str, Any]:
    """An fd by what reads it: ``{"conn": its ends, "readers": the tasks reading
    it}``, ``{"listening": address}`` for a server's socket, else its callback."""
    loop = asyncio.events._get_running_loop()
    reader, writer = view.fd_handles(fd) if view is not None else (None, None)
    handle = reader or writer
    if handle is None or loop is None:
        return {"conn": {"local": describe_fd(fd)}}
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.BaseTransport):
        readers = readers_of(owner, tasks_of(loop))
        return {
            "conn": transport_words(loop, owner),
            "readers": [task_words(t) for t in readers],
        }
    name = function_name(callback)
    args = handle._args
    sock = next((a for a in args if isinstance(a, socket.socket)), None)
    if name.endswith("_accept_connection") and sock is not None:
        local = sock.getsockname()
        out: dict[str, Any] = {"listening": address_words(local)}
        host = host_name(loop, local)
        if host is not None:
            out["listening_host"] = host
        return out
    # The loop's own method (a connect's callback) says nothing of whose it
    # is: its arguments (the future) do.
    mine = [a for a in (owner, *args) if not isinstance(a, asyncio.AbstractEventLoop)]
    waiting = tasks_waiting_on(mine, tasks_of(loop))
    conn: dict[str, Any] = {"local": describe_fd(fd)}
    if sock is not None:
        conn = {"local": address_words(sock.getsockname())}
        host = host_name(loop, sock.getsockname())
        if host is not None:
            conn["local_host"] = host
    out = {"conn": conn, "callback": name, "readers": [task_words(t) for t in waiting]}
    if reader is None:
        out["writing"] = True  # ready to write: a connect completing, a send
    return out
