"""One snapshot of a loop for the console: tasks, the loop, I/O, warnings (plain data).

Layer: top (the console). `take` runs in the loop's thread (the server
asks for it with ``call_soon_threadsafe``), so it reads the loop's state
between two callbacks, never while one runs; it is bounded: at most
`MAX_TASKS` tasks (the busiest first), `MAX_IO` transports, servers and
subprocesses. Its result is JSON-ready (dicts, lists, strings, numbers),
the same data ``--once --json`` prints.

Byte counts (`transport_bytes`): for a TCP connection the kernel's own
counts, read with ``getsockopt(TCP_INFO)`` when the snapshot is taken
(nothing is counted per message, so an unwatched program pays nothing);
a transport that keeps ``_bytes_in``/``_bytes_out`` counters reports
those; anything else (Unix sockets, UDP, pipes) None: the console shows
``-``.

Facts / what this means for us: Linux's ``struct tcp_info`` has had
``tcpi_bytes_received`` (RFC 4898's HCThruOctetsReceived: payload bytes
received in order) at offset 128 since Linux 4.1, and ``tcpi_bytes_sent``
and ``tcpi_bytes_retrans`` (payload bytes transmitted, and retransmitted)
at 200 and 208 since 4.19. Bytes in are the first; bytes out are the
second less the third: each byte the kernel put on the wire, once. (Its
``tcpi_bytes_acked`` would count the SYN of a connection this end opened
as one byte, and not that of one it accepted.) Bytes the kernel holds and
has not sent yet are in neither; the buffered count says how many the
transport still holds. An older kernel's shorter struct gives None.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
import time
import warnings
from collections import deque
from typing import Any, Final

from tideloop._core.metrics import LAG_BOUNDS, LoopMetrics
from tideloop._loop import Loop
from tideloop._net.server import Server
from tideloop._recorder import Recorder, Site, TaskInfo, await_chain, describe_transport, site_text
from tideloop._transports.subprocess import SubprocessTransport

__all__ = [
    "MAX_IO",
    "MAX_TASKS",
    "SELF_WAKE_MIN",
    "SELF_WAKE_SHARE",
    "Previous",
    "UnawaitedWarnings",
    "counts",
    "take",
    "transport_bytes",
]

#: The most tasks a snapshot lists (the busiest first; the count is exact).
MAX_TASKS: Final = 200
#: The most transports, servers or subprocesses a snapshot lists, each.
MAX_IO: Final = 200
#: A task "keeps waking itself" once it did so this many times...
SELF_WAKE_MIN: Final = 100
#: ...in at least this share of its steps.
SELF_WAKE_SHARE: Final = 0.9

_ASYNCIO: Final = os.path.dirname(asyncio.__file__) + os.sep


#: getsockopt(IPPROTO_TCP, TCP_INFO): where Linux's struct tcp_info keeps its byte counts.
_TCP_INFO: Final = getattr(socket, "TCP_INFO", None) if sys.platform == "linux" else None
_TCP_RECEIVED_AT: Final = 128  # tcpi_bytes_received (u64)
_TCP_SENT_AT: Final = 200  # tcpi_bytes_sent, then tcpi_bytes_retrans (two u64)


def transport_bytes(transport: object) -> tuple[int | None, int | None]:
    """Bytes a transport received and sent, where they are known (else None)."""
    received = getattr(transport, "_bytes_in", None)
    sent = getattr(transport, "_bytes_out", None)
    if isinstance(received, int) and isinstance(sent, int):
        return received, sent
    sock = getattr(transport, "_sock", None)
    if (
        _TCP_INFO is not None
        and type(sock) is socket.socket
        and sock.type == socket.SOCK_STREAM
        and sock.family in (socket.AF_INET, socket.AF_INET6)
    ):
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
        except OSError:  # closed meanwhile
            return None, None
        got = out = None
        if len(info) >= _TCP_RECEIVED_AT + 8:
            (got,) = struct.unpack_from("=Q", info, _TCP_RECEIVED_AT)
        if len(info) >= _TCP_SENT_AT + 16:
            sent, again = struct.unpack_from("=QQ", info, _TCP_SENT_AT)
            out = sent - again
        return got, out
    return None, None


def _writing_paused(transport: object) -> bool | None:
    """Whether the transport told its protocol to pause writing (None: unknown)."""
    paused = getattr(transport, "_protocol_paused", None)
    return paused if isinstance(paused, bool) else None


class Previous:
    """What the last snapshot of a loop saw: the next one reports rates since."""

    __slots__ = ("at", "metrics")

    def __init__(self) -> None:
        self.at = 0.0
        self.metrics: LoopMetrics | None = None


class UnawaitedWarnings:
    """Keeps the last "coroutine ... was never awaited" warnings the program got.

    Installed with the console server (``warnings.showwarning`` wrapped: it
    records, then calls the one it replaced, so the program sees the same
    output); costs nothing until a warning is shown.
    """

    def __init__(self, keep: int = 20) -> None:
        self.seen: deque[dict[str, Any]] = deque(maxlen=keep)
        self._previous: Any = None

    def install(self) -> None:
        if self._previous is not None:
            return
        self._previous = previous = warnings.showwarning

        def showwarning(*args: Any, **kwargs: Any) -> None:
            # warnings.showwarning(message, category, filename, lineno, file, line)
            if len(args) >= 4:
                message, category, filename, lineno = args[:4]
                text = str(message)
                if (
                    isinstance(category, type)
                    and issubclass(category, RuntimeWarning)
                    and "was never awaited" in text
                ):
                    where = f"{os.path.basename(str(filename))}:{lineno}"
                    self.seen.append({"message": text, "where": where})
            previous(*args, **kwargs)

        self._installed = showwarning
        warnings.showwarning = showwarning

    def uninstall(self) -> None:
        if self._previous is not None and warnings.showwarning is self._installed:
            warnings.showwarning = self._previous
        self._previous = None


def _lag(before: LoopMetrics | None, now: LoopMetrics) -> dict[str, Any]:
    """Timer lag since the previous snapshot: count, quantile bounds, max (ever)."""
    counts = list(now.lag_counts)
    if before is not None:
        counts = [a - b for a, b in zip(counts, before.lag_counts, strict=True)]
    total = sum(counts)

    def quantile(q: float) -> float | None:
        if not total:
            return None
        seen = 0
        for i, n in enumerate(counts):
            seen += n
            if seen >= q * total and n:
                return min(LAG_BOUNDS[i], now.max_lag) if i < len(LAG_BOUNDS) else now.max_lag
        return now.max_lag

    return {"timers": total, "p50": quantile(0.5), "p99": quantile(0.99), "max": now.max_lag}


def _site(site: Site) -> str:
    return site_text(site)


def _chain(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: its coroutines' frames, outermost first, asyncio's last one kept."""
    frames = await_chain(task)
    shown = [f for f in frames if not f.file.startswith(_ASYNCIO)]
    if frames and frames[-1].file.startswith(_ASYNCIO):
        shown.append(frames[-1])  # what it waits in: sleep, wait_for, Queue.get...
    return [_site(f) for f in shown]


def _task_row(task: asyncio.Task[Any], info: TaskInfo | None, now: float) -> dict[str, Any]:
    coro: Any = task.get_coro()
    if task.done():
        state = "cancelled" if task.cancelled() else "done"
    elif getattr(coro, "cr_running", False) or getattr(coro, "gi_running", False):
        state = "running"
    elif info is not None and not info.steps and not info.started_seen:
        state = "waiting"
    else:
        state = "waiting" if getattr(task, "_fut_waiter", None) is not None else "ready"
    row: dict[str, Any] = {
        "name": task.get_name(),
        "coro": getattr(coro, "__qualname__", type(coro).__name__),
        "state": state,
        "awaiting": _chain(task) if not task.done() else [],
    }
    if info is not None:
        row.update(
            busy=info.busy,
            steps=info.steps,
            wakeups=info.wakeups,
            self_wakes=info.self_wakes,
            age=now - info.first_seen,
            age_exact=info.started_seen,
        )
    else:
        row.update(busy=0.0, steps=0, wakeups=0, self_wakes=0, age=None, age_exact=False)
    return row


def _io(loop: Loop) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    transports: list[dict[str, Any]] = []
    seen: set[int] = set()
    for fd, transport in list(loop._fds.transports.items()):
        if id(transport) in seen or len(transports) >= MAX_IO:
            continue
        seen.add(id(transport))
        received, sent = transport_bytes(transport)
        try:
            buffered = transport.get_write_buffer_size()  # type: ignore[attr-defined]
        except Exception:  # a read-only transport
            buffered = None
        reading = getattr(transport, "is_reading", None)
        transports.append(
            {
                "kind": type(transport).__name__,
                "fd": fd,
                "peer": describe_transport(transport),
                "bytes_in": received,
                "bytes_out": sent,
                "buffered": buffered,
                "reading_paused": None if reading is None else not reading(),
                "writing_paused": _writing_paused(transport),
                "closing": transport.is_closing(),
            }
        )
    servers: list[dict[str, Any]] = []
    children: list[dict[str, Any]] = []
    servers_seen: set[int] = set()
    for handle in list(loop._fds.readers.values()):
        args = getattr(handle, "_args", None) or ()
        for arg in args:
            if isinstance(arg, Server) and id(arg) not in servers_seen:
                servers_seen.add(id(arg))
                if len(servers) < MAX_IO:
                    servers.append(
                        {
                            "addresses": [
                                _address(s.getsockname()) for s in arg.sockets if s.fileno() >= 0
                            ],
                            "serving": arg.is_serving(),
                            "connections": _connections(arg),
                        }
                    )
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, SubprocessTransport) and len(children) < MAX_IO:
                children.append(_child(owner))
    return transports, servers, children


def _connections(server: Server) -> int | None:
    """How many connections a server has open (its own count; None if it keeps none)."""
    active = getattr(server, "_active", None)
    return active() if callable(active) else None


def _child(transport: SubprocessTransport) -> dict[str, Any]:
    popen = transport.get_extra_info("subprocess")
    args: Any = getattr(popen, "args", None)
    if isinstance(args, (list, tuple)) and args:
        args = args[0]
    try:
        program = os.fsdecode(args) if args is not None else "?"
    except TypeError:
        program = repr(args)
    return {
        "pid": transport.get_pid(),
        "program": program,
        "returncode": transport.get_returncode(),
    }


def _address(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    if isinstance(addr, bytes):
        return addr.decode(errors="replace")
    return str(addr)


def counts(m: LoopMetrics) -> dict[str, Any]:
    """A loop's counters and gauges as the console's JSON names them."""
    return {
        "iterations": m.iterations,
        "callbacks": m.callbacks,
        "ready": m.ready,
        "timers": m.timers,
        "fds": m.fds,
        "executor_pending": m.executor_pending,
        "slow_callbacks": m.slow_callbacks,
    }


def take(
    loop: Loop,
    number: int,
    recorder: Recorder,
    previous: Previous,
    *,
    unawaited: UnawaitedWarnings,
    errors: list[dict[str, Any]],
    attached_at: float,
) -> dict[str, Any]:
    """The snapshot of *loop* (in its thread), with rates since *previous*."""
    now = time.monotonic()
    m = loop.metrics()
    before = previous.metrics
    interval = now - previous.at if before is not None else m.run_time
    if before is not None:
        run = m.run_time - before.run_time
        busy = m.busy_time - before.busy_time
        iterations = m.iterations - before.iterations
        callbacks = m.callbacks - before.callbacks
    else:
        run, busy, iterations, callbacks = m.run_time, m.busy_time, m.iterations, m.callbacks
    previous.metrics = m
    previous.at = now
    tasks = [t for t in asyncio.all_tasks(loop)]
    rows = [(t, recorder.info_of(t)) for t in tasks]
    rows.sort(key=lambda r: -(r[1].busy if r[1] is not None else 0.0))
    task_rows = [_task_row(t, info, now) for t, info in rows[:MAX_TASKS]]
    transports, servers, children = _io(loop)
    warnings_out: list[dict[str, Any]] = []
    slow_rows: list[dict[str, Any]] = []
    for event in list(recorder.slow):
        if event.loop != recorder.loop_number(loop):
            continue
        where = event.args.get("resumed") if event.kind == "step" else None
        slow_rows.append(
            {
                "duration": event.dur,
                "name": event.name,
                "where": site_text(where) if isinstance(where, Site) else "",
                "ago": now - event.real,
            }
        )
    warnings_out.extend(
        {
            "kind": "blocking",
            "text": f"{row['name']} blocked the loop for {1000 * row['duration']:.0f} ms"
            + (f" (resumed at {row['where']})" if row["where"] else ""),
        }
        for row in slow_rows[-5:]
    )
    for row in task_rows:
        wakes: int = row["self_wakes"]
        if wakes >= SELF_WAKE_MIN and row["steps"] and wakes >= SELF_WAKE_SHARE * row["steps"]:
            warnings_out.append(
                {
                    "kind": "self-waking",
                    "text": f"{row['name']} keeps waking itself: {wakes} of its "
                    f"{row['steps']} steps (a loop around sleep(0)?)",
                }
            )
    warnings_out.extend(
        {"kind": "never awaited", "text": f"{item['message']} ({item['where']})"}
        for item in list(unawaited.seen)
    )
    for error in errors:
        if error["message"] == "Task exception was never retrieved":
            warnings_out.append(
                {
                    "kind": "never retrieved",
                    "text": f"{error['task'] or 'a task'} failed and nobody retrieved it: "
                    f"{error['exception']}",
                }
            )
        else:
            text = error["message"] + (f": {error['exception']}" if error["exception"] else "")
            warnings_out.append({"kind": "error", "text": text})
    return {
        "loop": number,
        "thread": loop._thread_id,
        "running": loop.is_running(),
        "since_attach": now - attached_at,
        "interval": interval,
        "metrics": {
            "utilisation": busy / run if run > 0 else 0.0,
            "iterations_per_s": iterations / interval if interval > 0 else 0.0,
            "callbacks_per_s": callbacks / interval if interval > 0 else 0.0,
            **counts(m),
            "lag": _lag(before, m),
        },
        "task_count": len(tasks),
        "tasks": task_rows,
        "slow": slow_rows[-10:],
        "transports": transports,
        "servers": servers,
        "subprocesses": children,
        "warnings": warnings_out,
    }
