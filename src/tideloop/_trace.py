"""Traces: what the loops did, as Chrome/Perfetto trace-event JSON.

Layer: top. ``tideloop.trace(FILE)`` (a context manager, or a function whose
result is closed later) and ``python -m tideloop --trace FILE script.py``
record the loops with a `Recorder` and write what it records, as it records
it, to FILE in the trace-event format (the JSON array form), which
ui.perfetto.dev and chrome://tracing open:

- the loop's thread is a track; on it every **loop iteration** is a slice,
  with its **polls** and its **callbacks** nested inside. A task's step is
  a slice named by the task and its coroutine (``Task-3 fetch``), with the
  lines it resumed from and was suspended at in its arguments;
- every **task** is a track of its own (an async track, id ``task N``):
  its life, and inside it, one slice per step (``run``) and one per wait
  between steps, named by the line it waited at (``await app.py:12
  (sleep)``);
- **I/O readiness** (``fd 7 read (10.0.0.1:5432)``), **timers** armed (with
  the line that armed them) and errors are instant events;
- **executor jobs** are async slices from submission to the end of their
  run, and their run is a slice on the worker thread's track;
  **subprocesses** are async slices from spawn to exit;
- a flow arrow goes from the step or callback that woke a task (resolved
  the future it awaited) to the step it woke.

Events the program records with `Recorder.note` become instant events of
their kind. Times are real (``time.monotonic``, in microseconds), also
under a virtual clock: a trace shows what the machine did.

Writing: the loop's thread only turns each event into dicts and appends
them to a list; a thread of the writer's own encodes and writes them
every `FLUSH_INTERVAL` seconds, so the loop never blocks on the file. The
file is valid JSON once the trace is closed (the array is closed, and the
slices still open then, a task still waiting or a job still running, are
ended at that moment with ``"unfinished": true``); a program that dies
first leaves an array without its end, which the trace viewers accept.

Cost: the recorder's (see ``tideloop._recorder``): every callback timed
and described, the scheduling calls wrapped; the bench's ``tideloop+trace``
loop measures it against ``tideloop``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import IO, Any, Final

from ._recorder import Event, Recorder, Site, site_text

__all__ = ["FLUSH_INTERVAL", "Trace", "trace"]

#: Seconds between the writer thread's writes.
FLUSH_INTERVAL: Final = 0.25

_US: Final = 1e6
#: How many slice events are remembered, to draw a flow arrow from one
#: (the cause of a later step) after it ended.
_RECENT: Final = 4096


def _ts(seconds: float) -> float:
    return round(seconds * _US, 3)


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Site):
        return site_text(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _args(event: Event, *drop: str) -> dict[str, object]:
    return {k: _jsonable(v) for k, v in event.args.items() if k not in drop}


class _Converter:
    """Turns recorder events into trace events (dicts); keeps what is open.

    Called from the loop's thread and from worker threads, under `Trace`'s
    lock.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.named_threads: set[int] = set()
        # task number -> (track name, open wait name or None)
        self.tasks: dict[int, tuple[str, str | None]] = {}
        # Async slices begun and not yet ended, by (cat, id): a stack of
        # (name, tid); and those ended first (a job's run may be recorded
        # before its submission is).
        self.begun: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self.ended: set[tuple[tuple[str, str], str]] = set()
        # (loop, seq) -> (ts in us, tid) of recent slices, for flow arrows.
        self.recent: dict[tuple[int, int], tuple[float, int]] = {}
        self.last_ts = 0.0
        self.flows = 0
        # Subprocesses spawned and not exited: their slice's name.
        self.processes: dict[tuple[str, str], str] = {}

    def _thread(self, out: list[dict[str, Any]], tid: int, name: str) -> None:
        if tid not in self.named_threads:
            self.named_threads.add(tid)
            out.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": self.pid,
                    "tid": tid,
                    "args": {"name": name},
                }
            )

    def _slice(
        self, out: list[dict[str, Any]], event: Event, cat: str, name: str, args: dict[str, Any]
    ) -> None:
        ts = _ts(event.real)
        # The duration from the rounded ends: slices that touch still touch.
        out.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "ts": ts,
                "dur": round(_ts(event.real + event.dur) - ts, 3),
                "pid": self.pid,
                "tid": event.thread,
                "args": args,
            }
        )
        recent = self.recent
        recent[(event.loop, event.seq)] = (ts, event.thread)
        if len(recent) > _RECENT:
            del recent[next(iter(recent))]

    def _async(
        self,
        out: list[dict[str, Any]],
        ph: str,
        key: tuple[str, str],
        name: str,
        *,
        at: float,
        tid: int,
        args: dict[str, Any] | None = None,
    ) -> None:
        record: dict[str, Any] = {
            "ph": ph,
            "name": name,
            "cat": key[0],
            "id": key[1],
            "ts": _ts(at),
            "pid": self.pid,
            "tid": tid,
        }
        if args:
            record["args"] = args
        out.append(record)

    def _begin(
        self,
        out: list[dict[str, Any]],
        key: tuple[str, str],
        name: str,
        *,
        at: float,
        tid: int,
        args: dict[str, Any] | None = None,
    ) -> None:
        self._async(out, "b", key, name, at=at, tid=tid, args=args)
        if (key, name) in self.ended:
            self.ended.discard((key, name))
        else:
            self.begun.setdefault(key, []).append((name, tid))

    def _end(
        self,
        out: list[dict[str, Any]],
        key: tuple[str, str],
        name: str,
        *,
        at: float,
        tid: int,
        args: dict[str, Any] | None = None,
    ) -> None:
        self._async(out, "e", key, name, at=at, tid=tid, args=args)
        stack = self.begun.get(key)
        if not stack:
            self.ended.add((key, name))
            return
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == name:
                del stack[i]
                break
        if not stack:
            del self.begun[key]

    def _flow(self, out: list[dict[str, Any]], event: Event) -> None:
        source = self.recent.get((event.loop, event.cause))
        if source is None:
            return
        self.flows += 1
        ident = self.flows
        ts, tid = source
        common = {"cat": "wake", "name": "wakes", "id": ident, "pid": self.pid}
        out.append({"ph": "s", "ts": ts, "tid": tid, **common})
        out.append({"ph": "f", "bp": "e", "ts": _ts(event.real), "tid": event.thread, **common})

    def convert(self, event: Event) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        end = event.real + event.dur
        self.last_ts = max(self.last_ts, end)
        kind = event.kind
        if kind in ("iteration", "poll", "step", "callback"):
            self._thread(out, event.thread, f"tideloop loop {event.loop}")
        if kind == "iteration":
            self._slice(out, event, "loop", "iteration", _args(event))
        elif kind == "poll":
            self._slice(out, event, "loop,poll", "poll", _args(event))
        elif kind == "step":
            self._step(out, event, end)
        elif kind == "callback":
            source = event.args.get("source", "?")
            self._slice(out, event, f"callback,{source}", event.name, _args(event))
            self._flow(out, event)
        elif kind == "job":
            key = ("executor", f"job {event.loop}.{event.args['job']}")
            self._begin(out, key, event.name, at=event.real, tid=event.thread, args=_args(event))
        elif kind == "job-run":
            self._thread(out, event.thread, str(event.args.get("thread_name") or "worker"))
            self._slice(out, event, "executor", event.name, _args(event))
            key = ("executor", f"job {event.loop}.{event.args['job']}")
            self._end(out, key, event.name, at=end, tid=event.thread)
        elif kind == "spawn":
            key = ("subprocess", f"pid {event.loop}.{event.args['pid']}")
            self._begin(out, key, event.name, at=event.real, tid=event.thread, args=_args(event))
            self._async(out, "b", key, "starting", at=event.real, tid=event.thread)
            self._async(out, "e", key, "starting", at=end, tid=event.thread)
            self.processes[key] = event.name
        elif kind == "exit":
            key = ("subprocess", f"pid {event.loop}.{event.args['pid']}")
            name = self.processes.pop(key, None)
            if name is not None:
                self._end(out, key, name, at=event.real, tid=event.thread, args=_args(event))
            else:  # spawned before the trace began: an instant
                out.append(self._instant(event, "subprocess", "t"))
        elif kind in ("io", "timer"):
            out.append(self._instant(event, kind, "t"))
        else:  # errors, and the program's own notes
            out.append(self._instant(event, kind, "p" if kind == "error" else "t"))
        return out

    def _instant(self, event: Event, cat: str, scope: str) -> dict[str, Any]:
        return {
            "ph": "i",
            "s": scope,
            "name": event.name,
            "cat": cat,
            "ts": _ts(event.real),
            "pid": self.pid,
            "tid": event.thread,
            "args": _args(event),
        }

    def _step(self, out: list[dict[str, Any]], event: Event, end: float) -> None:
        args = _args(event)
        self._slice(out, event, "task", event.name, args)
        self._flow(out, event)
        number = event.task
        key = ("task", f"task {number}")
        tid = event.thread
        state = self.tasks.get(number)
        if state is None:
            track = event.name
            self._begin(out, key, track, at=event.real, tid=tid, args={"coro": args.get("coro")})
        else:
            track, waiting = state
            if waiting is not None:
                self._end(out, key, waiting, at=event.real, tid=tid)
        self._async(out, "b", key, "run", at=event.real, tid=tid)
        self._async(out, "e", key, "run", at=end, tid=tid)
        outcome = event.args.get("outcome")
        if outcome in ("done", "error", "cancelled"):
            self._end(out, key, track, at=end, tid=tid, args={"outcome": outcome})
            self.tasks.pop(number, None)
            return
        site = event.args.get("suspended")
        leaf = event.args.get("waits_in")
        where = site_text(site) if isinstance(site, Site) else "?"
        wait = f"await {where}" + (f" ({leaf})" if leaf else "")
        if outcome == "yield":
            wait = f"yield {where}"
        self._begin(out, key, wait, at=end, tid=tid)
        self.tasks[number] = (track, wait)

    def close(self) -> list[dict[str, Any]]:
        """End what is still open (a task waiting, a job running), at the last time seen."""
        out: list[dict[str, Any]] = []
        at = self.last_ts
        for key, stack in list(self.begun.items()):
            for name, tid in reversed(stack):
                self._async(out, "e", key, name, at=at, tid=tid, args={"unfinished": True})
        self.begun.clear()
        self.tasks.clear()
        self.processes.clear()
        return out


class Trace:
    """A trace being written (`trace` returns one); `close` finishes the file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.recorder = Recorder(events=True, limit=0) if recorder is None else recorder
        self._converter = _Converter(os.getpid())
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self._first = True
        self._wake = threading.Event()
        self._closed = False
        self.events_written = 0
        self._write_raw("[\n")
        argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        self._pending.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": self._converter.pid,
                "tid": 0,
                "args": {"name": f"{argv0} (tideloop)"},
            }
        )
        self._writer = threading.Thread(target=self._write_loop, name="tideloop-trace", daemon=True)
        self._writer.start()
        self.recorder.subscribe(self._on_event)
        self._watching = loop is None
        self._loop = loop
        if loop is not None:
            self.recorder.attach(loop)
        else:
            from ._loop import NEW_LOOP_OBSERVERS

            NEW_LOOP_OBSERVERS.append(self.recorder.attach)

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self._pending.extend(self._converter.convert(event))

    def _write_raw(self, text: str) -> None:
        assert self._file is not None
        self._file.write(text)

    def _write_loop(self) -> None:
        while not self._closed:
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending or self._file is None:
            return
        parts = []
        for record in pending:
            parts.append(("" if self._first else ",\n") + json.dumps(record, separators=(",", ":")))
            self._first = False
        self._file.write("".join(parts))
        self._file.flush()
        self.events_written += len(pending)

    def close(self) -> None:
        """Stop recording, end what is still open and write the end of the file."""
        if self._closed:
            return
        if self._watching:
            from ._loop import NEW_LOOP_OBSERVERS

            if self.recorder.attach in NEW_LOOP_OBSERVERS:
                NEW_LOOP_OBSERVERS.remove(self.recorder.attach)
        self.recorder.detach()
        self.recorder.unsubscribe(self._on_event)
        self._closed = True
        self._wake.set()
        self._writer.join()
        with self._lock:
            self._pending.extend(self._converter.close())
        self._flush()
        if self._file is not None:
            self._file.write("\n]\n")
            self._file.close()
            self._file = None

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def trace(path: str | os.PathLike[str], *, loop: asyncio.AbstractEventLoop | None = None) -> Trace:
    """Write a Perfetto trace of *loop* (None: of every loop ``tideloop.new_event_loop``
    makes from now on) to *path*, until the returned `Trace` is closed.

    ::

        with tideloop.trace("run.json"):
            tideloop.run(main())

    Use it as a context manager, or call ``close()`` on what it returns.
    """
    return Trace(path, loop=loop)
