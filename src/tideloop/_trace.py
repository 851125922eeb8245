"""Traces: what the loops did, as Chrome/Perfetto trace-event JSON.

Layer: top. ``tideloop.trace(FILE)`` (a context manager, or a function whose
result is closed later) and ``python -m tideloop --trace FILE script.py``
record the loops with a `Recorder` and write what it records, as it records
it, to FILE in the trace-event format (the JSON array form), which
ui.perfetto.dev and chrome://tracing open:

- the loop's thread is a track; on it every **loop iteration** is a slice,
  with its **polls** (those that could block, or found fds ready) and its
  **callbacks** nested inside. A task's step is a slice named by the task
  and its coroutine (``Task-3 fetch``), with the lines it resumed from and
  was suspended at in its arguments;
- every **task** is a track of its own (an async track, id ``task N``):
  its life, and inside it one slice per wait between its steps, named by
  the line it waited at (``await app.py:12 (sleep)``, ``yield app.py:30``
  for a bare yield); the gaps are its steps;
- **I/O readiness** (``fd 7 read (10.0.0.1:5432)``), **timers** armed (with
  the line that armed them) and errors are instant events;
- **executor jobs** are async slices from submission to the end of their
  run, and their run is a slice on the worker thread's track;
  **subprocesses** are async slices from spawn to exit;
- a flow arrow goes from the step or callback that woke a task (resolved
  the future it awaited) to the step it woke, when that was another task
  or a callback.

Events the program records with `Recorder.note` become instant events of
their kind. Times are real (``time.monotonic``), in microseconds since the
trace began, also under a virtual clock: a trace shows what the machine
did.

Writing: the loop's thread turns each event into JSON text as it is
recorded (string building, with the C escaping of the json module; no
per-event dict), and a thread of the writer's own writes the text every
`FLUSH_INTERVAL` seconds, so the loop never blocks on the file, and no
thread holds the GIL for long. The
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
from json.encoder import encode_basestring_ascii as _quote
from time import monotonic as _real_time
from typing import IO, Any, Final

from ._recorder import Event, Recorder, Site, site_text

__all__ = ["FLUSH_INTERVAL", "Trace", "trace"]

#: Seconds between the writer thread's writes.
FLUSH_INTERVAL: Final = 0.25

_US: Final = 1e6
#: How many slice events are remembered, to draw a flow arrow from one
#: (the cause of a later step) after it ended.
_RECENT: Final = 4096

_encode: Final = json.JSONEncoder(separators=(",", ":"), default=repr).encode


def _args_text(args: dict[str, Any]) -> str:
    """An event's args as JSON: sites as ``file:line in func``, the rest as they are."""
    if any(type(v) is Site for v in args.values()):
        args = {k: site_text(v) if type(v) is Site else v for k, v in args.items()}
    return _encode(args)


class _Converter:
    """Turns recorder events into trace events (JSON text); keeps what is open.

    Called from the loop's thread and from worker threads, under `Trace`'s
    lock.
    """

    def __init__(self, pid: int, origin: float) -> None:
        self.pid = pid
        #: Real time 0 of the trace (its timestamps are microseconds since).
        self.origin = origin
        self.named_threads: set[int] = set()
        # task number -> (track name, open wait name or None)
        self.tasks: dict[int, tuple[str, str | None]] = {}
        # Async slices begun and not yet ended, by (cat, id): a stack of
        # (name, tid); and those ended first (a job's run may be recorded
        # before its submission is).
        self.begun: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self.ended: set[tuple[tuple[str, str], str]] = set()
        # (loop, seq) -> (ts in us, tid, task) of recent slices, for flow arrows.
        self.recent: dict[tuple[int, int], tuple[float, int, int]] = {}
        self.last_ts = 0.0
        self.flows = 0
        # Subprocesses spawned and not exited: their slice's name.
        self.processes: dict[tuple[str, str], str] = {}

    def metadata(self, name: str, tid: int, value: str) -> str:
        return (
            f'{{"ph":"M","name":"{name}","pid":{self.pid},"tid":{tid},'
            f'"args":{{"name":{_quote(value)}}}}}'
        )

    def _thread(self, out: list[str], tid: int, name: str) -> None:
        if tid not in self.named_threads:
            self.named_threads.add(tid)
            out.append(self.metadata("thread_name", tid, name))

    def _ts(self, seconds: float) -> float:
        return round((seconds - self.origin) * _US, 3)

    def _slice(
        self, out: list[str], event: Event, cat: str, name: str, args: str | None = None
    ) -> None:
        start = (event.real - self.origin) * _US
        ts = round(start, 3)
        # The duration from the rounded ends: slices that touch still touch.
        dur = round(round(start + event.dur * _US, 3) - ts, 3)
        if args is None:
            args = _args_text(event.args)
        out.append(
            f'{{"ph":"X","name":{_quote(name)},"cat":"{cat}","ts":{ts},"dur":{dur},'
            f'"pid":{self.pid},"tid":{event.thread},"args":{args}}}'
        )
        recent = self.recent
        recent[(event.loop, event.seq)] = (ts, event.thread, event.task)
        if len(recent) > _RECENT:
            del recent[next(iter(recent))]

    def _async(
        self,
        out: list[str],
        ph: str,
        key: tuple[str, str],
        name: str,
        *,
        at: float,
        tid: int,
        args: dict[str, Any] | None = None,
    ) -> None:
        extra = f',"args":{_args_text(args)}' if args else ""
        out.append(
            f'{{"ph":"{ph}","name":{_quote(name)},"cat":"{key[0]}","id":{_quote(key[1])},'
            f'"ts":{self._ts(at)},"pid":{self.pid},"tid":{tid}{extra}}}'
        )

    def _begin(
        self,
        out: list[str],
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
        out: list[str],
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

    def _flow(self, out: list[str], event: Event) -> None:
        source = self.recent.get((event.loop, event.cause))
        if source is None:
            return
        ts, tid, task = source
        if task and task == event.task:
            return  # its own previous step: the track shows it
        self.flows += 1
        common = f'"cat":"wake","name":"wakes","id":{self.flows},"pid":{self.pid}'
        out.append(f'{{"ph":"s","ts":{ts},"tid":{tid},{common}}}')
        out.append(
            f'{{"ph":"f","bp":"e","ts":{self._ts(event.real)},"tid":{event.thread},{common}}}'
        )

    def convert(self, event: Event) -> list[str]:
        out: list[str] = []
        end = event.real + event.dur
        self.last_ts = max(self.last_ts, end)
        kind = event.kind
        if kind == "step":
            self._thread(out, event.thread, f"tideloop loop {event.loop}")
            self._step(out, event, end)
        elif kind == "callback":
            self._thread(out, event.thread, f"tideloop loop {event.loop}")
            a = event.args
            source = a["source"]
            if len(a) == 3:  # the common case, by hand: callback, source, slow
                args = (
                    f'{{"callback":{_quote(a["callback"])},"source":"{source}",'
                    f'"slow":{"true" if a["slow"] else "false"}}}'
                )
                self._slice(out, event, "callback," + source, event.name, args)
            else:
                self._slice(out, event, "callback," + source, event.name)
        elif kind == "iteration":
            self._thread(out, event.thread, f"tideloop loop {event.loop}")
            a = event.args
            args = (
                f'{{"n":{a["n"]},"blocked":{a["blocked"]},"events":{a["events"]},"ran":{a["ran"]}}}'
            )
            self._slice(out, event, "loop", "iteration", args)
        elif kind == "poll":
            if event.args.get("timeout") != 0 or event.args.get("events"):
                self._thread(out, event.thread, f"tideloop loop {event.loop}")
                self._slice(out, event, "loop,poll", "poll")
        elif kind == "job":
            key = ("executor", f"job {event.loop}.{event.args['job']}")
            self._begin(out, key, event.name, at=event.real, tid=event.thread, args=event.args)
        elif kind == "job-run":
            self._thread(out, event.thread, str(event.args.get("thread_name") or "worker"))
            self._slice(out, event, "executor", event.name)
            key = ("executor", f"job {event.loop}.{event.args['job']}")
            self._end(out, key, event.name, at=end, tid=event.thread)
        elif kind == "spawn":
            key = ("subprocess", f"pid {event.loop}.{event.args['pid']}")
            self._begin(out, key, event.name, at=event.real, tid=event.thread, args=event.args)
            self._async(out, "b", key, "starting", at=event.real, tid=event.thread)
            self._async(out, "e", key, "starting", at=end, tid=event.thread)
            self.processes[key] = event.name
        elif kind == "exit":
            key = ("subprocess", f"pid {event.loop}.{event.args['pid']}")
            name = self.processes.pop(key, None)
            if name is not None:
                self._end(out, key, name, at=event.real, tid=event.thread, args=event.args)
            else:  # spawned before the trace began: an instant
                out.append(self._instant(event, "subprocess", "t"))
        elif kind in ("io", "timer"):
            out.append(self._instant(event, kind, "t"))
        else:  # errors, and the program's own notes
            out.append(self._instant(event, kind, "p" if kind == "error" else "t"))
        return out

    def _instant(self, event: Event, cat: str, scope: str) -> str:
        return (
            f'{{"ph":"i","s":"{scope}","name":{_quote(event.name)},"cat":{_quote(cat)},'
            f'"ts":{self._ts(event.real)},"pid":{self.pid},"tid":{event.thread},'
            f'"args":{_args_text(event.args)}}}'
        )

    def _step(self, out: list[str], event: Event, end: float) -> None:
        args = event.args
        if len(args) == 7:  # by hand: what the recorder gives every step
            leaf = args["waits_in"]
            text = (
                f'{{"coro":{_quote(args["coro"])},'
                f'"resumed":{_quote(site_text(args["resumed"]))},'
                f'"suspended":{_quote(site_text(args["suspended"]))},'
                f'"waits_in":{"null" if leaf is None else _quote(leaf)},'
                f'"outcome":"{args["outcome"]}","source":"{args["source"]}",'
                f'"slow":{"true" if args["slow"] else "false"}}}'
            )
            self._slice(out, event, "task", event.name, text)
        else:
            self._slice(out, event, "task", event.name)
        self._flow(out, event)
        number = event.task
        key = ("task", f"task {number}")
        tid = event.thread
        state = self.tasks.get(number)
        if state is None:
            track = event.name
            self._begin(out, key, track, at=event.real, tid=tid, args={"coro": args["coro"]})
        else:
            track, waiting = state
            if waiting is not None:
                self._end(out, key, waiting, at=event.real, tid=tid)
        outcome = args["outcome"]
        if outcome in ("done", "error", "cancelled"):
            self._end(out, key, track, at=end, tid=tid, args={"outcome": outcome})
            self.tasks.pop(number, None)
            return
        where = site_text(args["suspended"])
        if outcome == "yield":
            wait = f"yield {where}"
        else:
            leaf = args["waits_in"]
            wait = f"await {where} ({leaf})" if leaf else f"await {where}"
        self._begin(out, key, wait, at=end, tid=tid)
        self.tasks[number] = (track, wait)

    def close(self) -> list[str]:
        """End what is still open (a task waiting, a job running), at the last time seen."""
        out: list[str] = []
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
        self._converter = _Converter(os.getpid(), _real_time())
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self._first = True
        self._wake = threading.Event()
        self._closed = False
        self.events_written = 0
        self._file.write("[\n")
        argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        self._pending.append(self._converter.metadata("process_name", 0, f"{argv0} (tideloop)"))
        self._writer = threading.Thread(target=self._write_loop, name="tideloop-trace", daemon=True)
        self._writer.start()
        self.recorder.subscribe(self._on_event)
        self._watching = loop is None
        if loop is not None:
            self.recorder.attach(loop)
        else:
            from ._loop import NEW_LOOP_OBSERVERS

            NEW_LOOP_OBSERVERS.append(self.recorder.attach)

    def _on_event(self, event: Event) -> None:
        with self._lock:
            self._pending.extend(self._converter.convert(event))

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
        text = ",\n".join(pending)
        self._file.write(text if self._first else ",\n" + text)
        self._first = False
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

    Use it as a context manager, or call ``close()`` on what it returns. A
    *loop* given must not be running in another thread.
    """
    return Trace(path, loop=loop)
