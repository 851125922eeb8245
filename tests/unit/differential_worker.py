"""A worker for the differential tests: runs scheduling programs, prints their traces.

Started by ``test_differential.py`` twice, with and without
``TIDELOOP_PURE=1``: one process per core, so that each imports tideloop
the way a user's process does. It reads one program per line (JSON) on
stdin and writes its trace (JSON) on stdout, until stdin closes.

A program is a list of operations that a coroutine performs on a
virtual-time tideloop loop (so the trace does not depend on the machine);
the trace lists every callback run (with its arguments, the context
variable it saw, and the loop time), every exception-handler call (its
message and exception), every handle's state at the end, and the result or
error of each API call the program made.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from typing import Any

from differential_support import TRACE, call, serve

import tideloop
from tideloop import testing

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="-")
HANDLES: list[asyncio.Handle] = []
SOCKETS: list[socket.socket] = []


def cb(ident: int, *args: object) -> None:
    loop = asyncio.get_running_loop()
    TRACE.append(["cb", ident, list(args), VAR.get(), loop.time()])


def cb_raises(ident: int) -> None:
    TRACE.append(["raises", ident])
    raise ValueError(f"boom {ident}")


def cb_sets_var(ident: int) -> None:
    VAR.set(f"set by {ident}")
    TRACE.append(["set", ident, VAR.get()])


def cb_nested(ident: int, n: int) -> None:
    loop = asyncio.get_running_loop()
    TRACE.append(["nested", ident, n])
    for i in range(n):
        loop.call_soon(cb, ident * 100 + i)


def cb_cancels(ident: int, k: int) -> None:
    # The handles by index (a module global): a list of handles among a
    # handle's arguments makes its debug-mode repr recurse exponentially.
    TRACE.append(["cancels", ident, k])
    if HANDLES:
        HANDLES[k % len(HANDLES)].cancel()


def cb_stops(ident: int) -> None:
    TRACE.append(["stops", ident])
    asyncio.get_running_loop().stop()


def on_readable(ident: int, sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    data = sock.recv(1)
    TRACE.append(["readable", ident, data.decode(), loop.time()])
    if data in (b"", b"."):
        loop.remove_reader(sock.fileno())


def readers(ident: int, text: str, cancelled: bool) -> None:
    """A socket pair whose reader reads *text* a byte at a time (and "." ends it)."""
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    SOCKETS.extend([a, b])
    a.setblocking(False)
    loop.add_reader(a.fileno(), on_readable, ident, a)
    if cancelled:
        # A registered reader whose handle was cancelled: dispatch drops it.
        loop._fds.readers[a.fileno()].cancel()  # type: ignore[attr-defined]
    b.send((text + ".").encode())


async def task_body(ident: int, delays: list[float]) -> int:
    for d in delays:
        await asyncio.sleep(d)
        TRACE.append(["task", ident, asyncio.get_running_loop().time()])
    return ident


async def main(program: list[list[Any]]) -> None:
    loop = asyncio.get_running_loop()
    handles = HANDLES
    handles.clear()
    tasks: list[asyncio.Task[int]] = []
    longest = 0.0
    for op in program:
        kind, ident = op[0], op[1]
        h: Any = None
        if kind == "soon":
            nargs, var, kw_context = op[2], op[3], op[4]
            context = None
            if var is not None:
                context = contextvars.copy_context()
                context.run(VAR.set, var)
            if kw_context:
                h = call(kind, loop.call_soon, cb, ident, *range(nargs), context=context)
            else:
                h = call(kind, loop.call_soon, cb, ident, *range(nargs))
        elif kind == "raise":
            h = call(kind, loop.call_soon, cb_raises, ident)
        elif kind == "setvar":
            h = call(kind, loop.call_soon, cb_sets_var, ident)
        elif kind == "nested":
            h = call(kind, loop.call_soon, cb_nested, ident, op[2])
        elif kind == "cancel_later":
            h = call(kind, loop.call_soon, cb_cancels, ident, op[2])
        elif kind == "later":
            longest = max(longest, op[2])
            h = call(kind, loop.call_later, op[2], cb, ident)
        elif kind == "later_int":
            longest = max(longest, op[2])
            h = call(kind, loop.call_later, op[2], cb, ident, context=None)
        elif kind == "later_kw":
            longest = max(longest, op[2])
            h = call(kind, loop.call_later, delay=op[2], callback=cb)
        elif kind == "at_int":
            longest = max(longest, op[2])
            h = call(kind, loop.call_at, int(loop.time()) + op[2], cb, ident)
        elif kind == "at":
            longest = max(longest, op[2])
            h = call(kind, loop.call_at, loop.time() + op[2], cb, ident)
        elif kind == "threadsafe":
            h = call(kind, loop.call_soon_threadsafe, cb, ident)
        elif kind == "cancel":
            if handles:
                handles[op[2] % len(handles)].cancel()
        elif kind == "task":
            longest = max(longest, sum(op[2]))
            tasks.append(loop.create_task(task_body(ident, op[2])))
        elif kind == "future":
            fut = loop.create_future()
            call(kind, loop.call_soon, fut.set_result, ident)
            TRACE.append(["future", ident, await fut])
        elif kind == "bad":
            # Wrong calls: the same TypeError, message and all, on both cores.
            call("bad-none", loop.call_soon, None)
            call("bad-kw", loop.call_soon, cb, ident, nope=1)
            call("bad-delay", loop.call_later, None, cb, ident)
            call("bad-delay-type", loop.call_later, "soon", cb, ident)
            call("bad-when", loop.call_at, None, cb, ident)
            call("bad-when-type", loop.call_at, "x", cb, ident)
            call("bad-later-args", loop.call_later)
            call("bad-later-kw", loop.call_later, 1, cb, ident, nope=1)
            call("bad-at-twice", loop.call_at, 1.0, cb, callback=cb)
        elif kind == "reader":
            readers(ident, op[2], op[3])
            if op[3]:
                TRACE.append(["registered", loop._fds.readers.get(SOCKETS[-2].fileno()) is None])  # type: ignore[attr-defined]
        elif kind == "stop":
            h = call(kind, loop.call_soon, cb_stops, ident)
        elif kind == "yield":
            await asyncio.sleep(0)
        if h is not None:
            handles.append(h)
    await asyncio.sleep(longest + 1.0)
    TRACE.extend([["result", await t] for t in tasks])
    TRACE.append(["handles", [[type(h).__name__, h.cancelled()] for h in handles]])


def run(program: list[list[Any]], debug: bool) -> list[Any]:
    TRACE.clear()
    loop = testing.new_event_loop(virtual_time=True)
    loop.set_debug(debug)
    loop.slow_callback_duration = 1e9  # no slow-callback warnings in the trace

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        TRACE.append(["handler", context["message"], type(exc).__name__, str(exc)])

    loop.set_exception_handler(handler)
    try:
        task = loop.create_task(main(program))
        for _ in range(100):
            try:
                loop.run_until_complete(task)
                break
            except RuntimeError as exc:  # a callback stopped the loop early
                TRACE.append(["stopped", str(exc)])
                # Run on, to the end: what was queued still runs, in order.
        TRACE.append(["metrics", loop.metrics().callbacks > 0, loop.time()])
    finally:
        for sock in SOCKETS:
            if sock.fileno() >= 0:
                loop.remove_reader(sock.fileno())
            sock.close()
        SOCKETS.clear()
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    return list(TRACE)


if __name__ == "__main__":
    serve(tideloop.NATIVE, lambda request: run(request["program"], request["debug"]))
