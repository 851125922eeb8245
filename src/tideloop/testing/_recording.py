"""A recorded run: the loop's recorder, and testing's own events, as lanes and events.

Layer: top (``tideloop.testing``). A tape holds decisions, not the run's
events. To draw a failing schedule (``_timeline``) or print it as text, it
is replayed once more with a `Recording` on its strategy
(``ReplayStrategy(..., recording=...)``). There is one recorder of what a
loop did, ``tideloop.Recorder`` (``tideloop._recorder``: the console and
Perfetto traces read it too), and the timeline is one more way to show it:

- the `Recording` owns a `Recorder` (``events=True``; it keeps no events
  itself: the Recording takes each one as it is recorded, `subscribe`).
  Every loop of the run gets a `LoopRecorder` when its `Perturber`
  (``_schedule``) is bound, which attaches the recorder to its loop when
  the loop first waits (``Perturber._wait``: before it runs any callback).
  From the recorder come the loop's events: task steps and where each
  task waits, callbacks, timers armed and fired, I/O readiness, executor
  jobs (submitted, run in their thread), subprocesses, the loop's errors;
- what only testing knows goes into the same recorder with
  `Recorder.note`: the schedule's decisions that deviate (``deviation``),
  fds it defers (``deferred``), thread results it holds (``arrived``,
  with `Recorder.queued` so that the callback that finally delivers one
  names the arrival as its cause), the `SimNetwork`'s log (``message``
  between hosts, ``fault``), and the failure (``failure``; one raised out
  of the loop, a deadlock's, is added when the run is over and the loops
  are closed: the timeline's last event);
- the `LoopRecorder` words each event in the program's terms (``_where``:
  the tasks reading a connection, the hosts of a simulated network, the
  coroutine a runner's wrapper starts) while the loop's state is live, and
  places it in a lane: one per host, per task, and one for the loop's own
  callbacks.

`Recording.to_json` is what ``_timeline`` draws: ``{"lanes", "events",
"dropped"}``. Events are dicts: ``seq`` (their order), ``loop``, ``it``
(the loop's iteration, counted from the recorder's ``iteration`` events),
``t`` (loop time), ``kind``, ``lane``, ``text`` (one line) and ``detail``
(what hovering shows); a message also has ``from``/``to`` lanes and
``sent``, the ``seq`` it left at; a timer's, a job's and a held result's
marks carry ``timer``/``job`` (spans are drawn between them). Kinds:
``task`` (first seen), ``step``, ``callback``, ``armed``, ``timer``
(fired), ``io``, ``deferred``, ``job``, ``ran`` (the job in its thread),
``arrived``, ``delivered``, ``spawn``, ``exit``, ``error``,
``deviation``, ``message``, ``fault``, ``failure``.

Invariants: recording never changes what the program does or which
decisions the schedule makes (the recorder passes every call through; its
notes and the wording only read: tasks' coroutines, a finished task's
exception without retrieving it); it runs only on a replay made for a
report; at most `EVENT_LIMIT` events are kept (the rest are counted in
``dropped``). Events recorded in other threads (a job's run) are taken on
the loop's thread, at its next event.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import traceback
import weakref
from typing import Any, Final

from tideloop._core.interfaces import LoopView
from tideloop._loop import Loop
from tideloop._recorder import Event, RecordedJob, Recorder, Site

from . import _where
from ._report import deviation_words, fd_words_text
from ._strategy import Decision

#: At most this many events are kept in a recording.
EVENT_LIMIT: Final = 50_000

#: Network log events that are messages from one host to another (arrows).
MESSAGES: Final = frozenset(
    {"connect", "accept", "connected", "refused", "data", "dgram", "fin", "rst", "unreachable"}
)

#: Timers remembered (armed, not fired yet) per loop before the oldest are
#: forgotten (cancelled timers never fire).
_TIMERS_KEPT: Final = 100_000


def _text(value: object, limit: int = 300) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_site(exc: BaseException) -> dict[str, Any] | None:
    """The program's innermost line in *exc*'s traceback (where it was raised)."""
    site = None
    tb = exc.__traceback__
    while tb is not None:
        if _where.kind_of_file(tb.tb_frame.f_code.co_filename) == _where.USER:
            site = _where.site_of(tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return site


def exception_words(exc: BaseException) -> str:
    return _text("".join(traceback.format_exception_only(type(exc), exc)).strip(), 500)


#: The recorder's sites as ``_where`` words them (a run has few).
_sites: dict[Site, dict[str, Any]] = {}


def site_words(site: Site | None) -> dict[str, Any] | None:
    """A recorder's `Site` as ``_where`` words a line: ``{"file", "line",
    "function", "code", "where"}`` (None for None)."""
    if site is None:
        return None
    words = _sites.get(site)
    if words is None:
        if len(_sites) > 4096:
            _sites.clear()
        path = _where.short_path(site.file)
        words = _sites[site] = {
            "file": path,
            "line": site.line,
            "function": site.func,
            "code": _where.source_line(site.file, site.line),
            "where": f"{path}:{site.line}",
        }
    return words


def _private(name: str) -> bool:
    """Whether a call named *name* is nothing a program calls (``_within``)."""
    return not name or name.rsplit(".", 1)[-1].startswith("_")


def _programs(site: Site | None) -> bool:
    """Whether *site* is a line of the program's (or an installed library's),
    not of tideloop, the standard library or a test runner."""
    return site is not None and _where.kind_of_file(site.file) not in _where.LIBRARY


class Recording:
    """The lanes and events of one recorded run (its loops', in order)."""

    def __init__(self) -> None:
        self.lanes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self._lanes_by_id: dict[str, dict[str, Any]] = {}
        #: The one recorder of the run's loops: it keeps no events itself.
        self.recorder = Recorder(events=True, limit=0)
        self.recorder.subscribe(self._take)
        self._loops: dict[int, LoopRecorder] = {}
        #: The run's loops by the number the recorder gives them.
        self._taps: dict[int, LoopRecorder] = {}
        self._current: LoopRecorder | None = None
        #: Deviations: decision index -> (the decision, its event's seq).
        self._deviations: dict[int, tuple[Decision, int]] = {}
        #: Events recorded in other threads, taken on the loop's.
        self._later: collections.deque[Event] = collections.deque()
        self.failure: dict[str, Any] | None = None

    # -- what the Perturber and the DecisionLog call ------------------------

    def loop(self, loop_no: int, view: LoopView) -> LoopRecorder:
        """The recorder of the run's *loop_no*-th loop."""
        rec = LoopRecorder(self, loop_no, view)
        self._loops[loop_no] = rec
        return rec

    def decided(self, decision: Decision) -> None:
        """A decision was taken: a deviation is an event of its own."""
        if not decision.value:
            return
        loop_no = decision.point[1] if len(decision.point) > 1 else 0
        rec = self._loops.get(int(loop_no))
        if rec is None:
            return
        self._deviations[decision.index] = (decision, -1)
        rec.note(
            "deviation",
            deviation_words(decision),
            point=list(decision.point),
            value=decision.value,
            decision=decision.index,
            detail=decision.detail,
        )

    def finish(self, exc: BaseException | None) -> None:
        """The run ended, raising *exc* (None: it passed)."""
        self._drain(everything=True)
        self.recorder.detach()
        # A held result's detail gains the timers it came after only once
        # it is admitted: its words are final now.
        for decision, seq in self._deviations.values():
            if seq < 0:
                continue
            event = self.events[seq]
            event["text"] = deviation_words(decision)
            if decision.detail:
                event["detail"] = {**event.get("detail", {}), "about": decision.detail}
        if exc is None or self.failure is not None:
            return
        # Not raised by a task we saw finish (raised out of the loop: a
        # deadlock, a property, a run that timed out): at the end. The
        # loops are closed by now: nothing is left to note it into.
        last = self._current or next(iter(self._loops.values()), None)
        if last is not None:
            last.failed(0, exc, None)

    # -- the recorder's events -----------------------------------------------

    def attached(self, rec: LoopRecorder, tap: int) -> None:
        self._taps[tap] = rec

    def _take(self, event: Event) -> None:
        """The recorder's subscriber: any thread (a job's run is its thread's)."""
        rec = self._taps.get(event.loop)
        if rec is None:
            return
        if threading.get_ident() != rec.thread:
            self._later.append(event)
            return
        rec.take(event)
        if self._later:
            # After: a job's run (recorded in its thread) may come before its
            # submission, which is recorded once the executor has it.
            self._drain()

    def _drain(self, *, everything: bool = False) -> None:
        """Take the other threads' events of the loops this thread runs
        (*everything*: of every loop; the run is over)."""
        later = self._later
        me = threading.get_ident()
        for _ in range(len(later)):
            event = later.popleft()
            rec = self._taps.get(event.loop)
            if rec is None:
                continue
            if everything or rec.thread == me:
                rec.take(event)
            else:
                later.append(event)  # its loop's thread takes it

    # -- what the loops' recorders share ------------------------------------

    def lane(self, lane: dict[str, Any]) -> str:
        lane_id = str(lane["id"])
        if lane_id not in self._lanes_by_id:
            self._lanes_by_id[lane_id] = lane
            self.lanes.append(lane)
        return lane_id

    def lane_info(self, lane_id: str) -> dict[str, Any] | None:
        return self._lanes_by_id.get(lane_id)

    def add(self, event: dict[str, Any], source: LoopRecorder) -> int:
        """Keep *event* (its ``seq`` is its place), or count it dropped: -1."""
        self._current = source
        if len(self.events) >= EVENT_LIMIT:
            self.dropped += 1
            return -1
        seq = event["seq"] = len(self.events)
        self.events.append(event)
        return seq

    def deviation_at(self, decision: int, seq: int) -> None:
        found = self._deviations.get(decision)
        if found is not None:
            self._deviations[decision] = (found[0], seq)

    def failed(self, failure: dict[str, Any]) -> None:
        if self.failure is None:
            self.failure = failure

    def to_json(self) -> dict[str, Any]:
        return {"lanes": self.lanes, "events": self.events, "dropped": self.dropped}


class LoopRecorder:
    """One loop of a recorded run (see the module docstring): attaches the
    run's recorder to the loop, notes what the schedule tells it, and turns
    each of the loop's events into the timeline's."""

    def __init__(self, recording: Recording, loop_no: int, view: LoopView) -> None:
        self._recording = recording
        self._recorder = recording.recorder
        self.loop_no = loop_no
        self._view = view
        self._loop: weakref.ReferenceType[Loop] | None = None
        #: The loop's thread (events from others wait for it).
        self.thread: int | None = None
        self._it = 1
        #: Notes made before the recorder was attached (a timer tie before
        #: the loop first waits): noted then.
        self._pending: list[tuple[str, str, dict[str, Any]]] = []
        #: A task's lane by the recorder's number for it; by its name.
        self._task_lanes: dict[int, str] = {}
        self._named: dict[str, str] = {}
        self._task_count = 0
        #: Recorder seq of each event drawn -> its seq in the timeline; of
        #: the callbacks not drawn (a transport's), their cause.
        self._drawn: dict[int, int] = {}
        self._causes: dict[int, int] = {}
        #: Timers armed, by their event's seq: (their mark's seq or -1, the
        #: words, the lane, the seq of what armed them).
        self._timers: dict[int, tuple[int, str, str, int]] = {}
        #: Jobs submitted, by their event's seq: (lane, job number, function).
        self._jobs: dict[int, tuple[str, int, str]] = {}
        #: The schedule's words for a job (by its event's seq), and its
        #: number for the job (``("job", loop, n)``) -> the event's seq.
        self._job_words: dict[int, dict[str, Any]] = {}
        self._job_events: dict[int, int] = {}
        #: Thread results arrived, by their note's seq: (point, lane, held, job).
        self._arrivals: dict[int, tuple[list[Any], str, int, int | None]] = {}
        #: Subprocesses' lanes by pid.
        self._pids: dict[int, str] = {}
        #: A delivery callback's seq -> where the messages it delivers left.
        self._sent: dict[int, int] = {}
        self._net_seen = 0

    # -- attaching -------------------------------------------------------------

    def _live_loop(self) -> Loop | None:
        return self._loop() if self._loop is not None else None

    def waiting(self) -> None:
        """The loop is about to poll (the Perturber's wait): the first time,
        the recorder is attached, before the loop runs any callback."""
        if self._loop is not None:
            return
        loop = asyncio.events._get_running_loop()
        if not isinstance(loop, Loop) or loop.is_closed():
            return
        self._loop = weakref.ref(loop)
        self.thread = threading.get_ident()
        self._net_seen = len(self._net_log())
        self._recorder.attach(loop)
        self._recording.attached(self, self._recorder.loop_number(loop))
        pending, self._pending = self._pending, []
        for kind, name, args in pending:
            self.note(kind, name, **args)

    def note(self, kind: str, name: str, *, cause: int | None = None, **args: Any) -> Event | None:
        """An event of testing's own, into the run's recorder."""
        loop = self._live_loop()
        if loop is None:
            if self._loop is None:
                self._pending.append((kind, name, args))
            return None
        return self._recorder.note(loop, kind, name, cause=cause, **args)

    # -- lanes -------------------------------------------------------------

    def _host_of(self, task: asyncio.Task[Any] | None) -> str:
        network = getattr(self._live_loop(), "network", None)
        host_of = getattr(network, "host_of", None)
        if host_of is None:
            return "this process"
        name = host_of(task) if task is not None else None
        return str(name) if name is not None else "client"

    def _host_lane(self, host: str) -> str:
        return self._recording.lane({"id": f"host:{host}", "kind": "host", "name": host})

    def loop_lane(self) -> str:
        host = self._host_of(None)
        self._host_lane(host)
        return self._recording.lane(
            {
                "id": f"loop:{self.loop_no}",
                "kind": "loop",
                "name": f"loop {self.loop_no}: callbacks",
                "host": host,
            }
        )

    def task_lane(self, number: int, event: Event | None = None) -> str:
        """The lane of the recorder's task *number* (0: the loop's lane)."""
        if not number:
            return self.loop_lane()
        lane = self._task_lanes.get(number)
        if lane is not None:
            return lane
        info = self._recorder.task_info(number)
        task = info.task() if info is not None else None
        if task is not None:
            words = _where.task_words(task)
        elif info is not None:
            words = {"task": info.name, "coro": _where.short_name(info.coro)}
        else:
            words = {"task": f"task #{number}", "coro": "?"}
        self._task_count += 1
        host = self._host_of(task)
        self._host_lane(host)
        lane = self._recording.lane(
            {
                "id": f"task:{self.loop_no}:{self._task_count}",
                "kind": "task",
                "name": words["task"],
                "coro": words["coro"],
                "host": host,
            }
        )
        self._task_lanes[number] = lane
        self._named[str(words["task"])] = lane
        self._add(event, "task", lane, f"task {words['task']!r} ({words['coro']}) starts", words)
        if "at" in words:
            self._named_lane(lane)
        return lane

    def _named_lane(self, lane_id: str, task: asyncio.Task[Any] | None = None) -> None:
        """A task's lane takes the name of the program's coroutine once its
        await chain shows one (a runner's wrapper starts it)."""
        lane = self._recording.lane_info(lane_id)
        if lane is None or lane.get("named"):
            return
        if task is None:
            lane["named"] = True
            return
        words = _where.task_words(task)
        if words.get("at"):
            lane["coro"] = words["coro"]
            lane["named"] = True

    def lane_of_detail(self, detail: dict[str, Any] | None) -> str:
        """The lane a deviation concerns: the task it names, else the loop's."""
        if detail:
            for key in ("readers", "wakes"):
                for words in detail.get(key) or ():
                    lane = self._lane_named(words.get("task"))
                    if lane is not None:
                        return lane
            words = detail.get("task")
            if isinstance(words, dict):
                lane = self._lane_named(words.get("task"))
                if lane is not None:
                    return lane
            timer = detail.get("timer")
            if isinstance(timer, dict) and isinstance(timer.get("task"), dict):
                lane = self._lane_named(timer["task"].get("task"))
                if lane is not None:
                    return lane
        return self.loop_lane()

    def _lane_named(self, name: object) -> str | None:
        if name is None:
            return None
        lane = self._named.get(str(name))
        if lane is not None:
            return lane
        loop = self._live_loop()
        if loop is not None:
            for task in asyncio.all_tasks(loop):
                if task.get_name() == name:
                    info = self._recorder.info_of(task)
                    if info is not None:
                        return self.task_lane(info.number)
        return None

    # -- timeline events ---------------------------------------------------------

    def _add(
        self,
        source: Event | None,
        kind: str,
        lane: str,
        text: str,
        detail: Any = None,
        **extra: Any,
    ) -> int:
        event: dict[str, Any] = {
            "loop": self.loop_no,
            "it": self._it,
            "t": source.time if source is not None else self._view_time(),
            "kind": kind,
            "lane": lane,
            "text": text,
        }
        if detail:
            event["detail"] = detail
        event.update(extra)
        seq = self._recording.add(event, self)
        if source is not None and seq >= 0:
            self._drawn[source.seq] = seq
        return seq

    def _view_time(self) -> float:
        try:
            return self._view.time()
        except RuntimeError:  # the loop is gone
            return 0.0

    # -- fed by the Perturber ----------------------------------------------

    def job_submitted(self, number: int, func: object, info: dict[str, Any]) -> None:
        """The schedule's job *number* (its decision point's) is *func*, which
        the recorder wrapped: its words are the job event's detail."""
        if isinstance(func, RecordedJob):
            self._job_words[func.event] = info
            self._job_events[number] = func.event

    def arrived(
        self,
        point: tuple[str | int, ...],
        handle: asyncio.Handle,
        thread: str,
        site: dict[str, Any] | None,
        held: int,
    ) -> None:
        """A thread's result reached the schedule, admitted at once or held
        behind *held* timer firings."""
        job: int | None = int(point[2]) if point[0] == "job" else None
        if job is not None:
            text = f"the result of executor job #{point[2]} arrives"
        else:
            text = f"thread {thread!r} calls call_soon_threadsafe"
            if site:
                text += f" at {site['where']}"
        if held:
            text += f"; held until {held} more timer firing(s)"
        args: dict[str, Any] = {"point": list(point), "thread": thread, "held": held, "job": job}
        if site:
            args["site"] = site
        event = self.note("arrived", text, **args)
        loop = self._live_loop()
        if event is not None and loop is not None:
            # Its callback's event (or its task's step) names the arrival.
            self._recorder.queued(loop, handle, event.seq, "thread")

    def deferred(self, deferred: dict[int, int]) -> None:
        """The fds the schedule defers this iteration (fd -> polls still to skip)."""
        for fd, left in deferred.items():
            words = _where.fd_words(self._view, fd)
            self.note(
                "deferred",
                f"fd {fd} ready but deferred ({left + 1} more poll(s))",
                fd=fd,
                left=left,
                words=words,
            )

    def failed(self, task: int, exc: BaseException, cause: int | None) -> None:
        """The recorder's *task* (0: the run itself) raised *exc*: the failure."""
        site = failure_site(exc)
        words = exception_words(exc)
        args: dict[str, Any] = {"exception": words, "of_task": task}
        if site is not None:
            args["site"] = site
        text = (words.splitlines() or [""])[0]
        if self.note("failure", text, cause=cause, **args) is None:
            # The run is over (raised out of the loop): the last event.
            self._failure(None, task, args)

    # -- the recorder's events, in the program's terms -------------------------

    def take(self, event: Event) -> None:
        """One of the loop's events (on the loop's thread)."""
        kind = event.kind
        if kind == "step":
            self._step(event)
            self._network(event.seq)
        elif kind == "callback":
            self._callback(event)
        elif kind == "iteration":
            self._it += 1
            self._network(0)
        elif kind == "poll":
            pass
        elif kind == "timer":
            self._armed(event)
        elif kind == "io":
            self._io(event)
        elif kind == "job":
            self._job(event)
        elif kind == "job-run":
            self._ran(event)
        elif kind in ("spawn", "exit"):
            self._process(event)
        elif kind == "error":
            self._error(event)
        elif kind == "deviation":
            self._deviation(event)
        elif kind == "deferred":
            a = event.args
            words = a["words"]
            self._add(
                event,
                "deferred",
                self._io_lane(words),
                f"ready but deferred ({a['left'] + 1} more poll(s)): " + fd_words_text(words),
                words,
                fd=a["fd"],
            )
        elif kind == "arrived":
            self._arrived(event)
        elif kind in ("message", "fault"):
            self._message(event)
        elif kind == "failure":
            self._failure(event, event.args["of_task"], event.args)
        else:  # a note of someone else's
            self._add(event, kind, self.loop_lane(), event.name, dict(event.args))

    def _step(self, event: Event) -> None:
        lane = self.task_lane(event.task, event)
        info = self._recorder.task_info(event.task)
        task = info.task() if info is not None else None
        if info is not None:
            self._named[info.name] = lane
        self._named_lane(lane, task)
        a = event.args
        resumed = site_words(a["resumed"])
        start = f"resumes at {resumed['where']}" if resumed else ""
        outcome = a["outcome"]
        detail: dict[str, Any] = {"outcome": outcome, "took": _seconds(event.dur)}
        if resumed:
            detail["resumed"] = resumed
        exc: BaseException | None = None
        if outcome == "done":
            end = "finishes"
        elif outcome == "cancelled":
            end = "is cancelled"
        elif outcome == "error":
            # Read, not retrieved: asyncio still reports it if nobody looks.
            exc = task._exception if task is not None else None
            end = "raises" if exc is None else f"raises {type(exc).__name__}"
        else:
            suspended = site_words(a["suspended"])
            end = "then waits"
            if suspended is not None:
                detail["waits"] = suspended
                end += f" at {suspended['where']}"
                if suspended["code"]:
                    end += f" ({suspended['code']})"
            if a["waits_in"]:
                detail["in"] = a["waits_in"]
                end += f" in {a['waits_in']}"
        self._add(event, "step", lane, f"{start}, {end}" if start else end, detail)
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            self.failed(event.task, exc, event.seq)

    def _callback(self, event: Event) -> None:
        a = event.args
        what = _where.short_name(a["callback"])
        if a["source"] == "timer":
            armed = self._timers.pop(event.cause, None)
            if armed is None:
                self._add(event, "timer", self.loop_lane(), f"timer fires: {what}")
            else:
                seq, words, lane, by = armed
                if seq >= 0:
                    self._add(
                        event,
                        "timer",
                        lane,
                        f"timer fires ({words})",
                        {"callback": what, "late": _seconds(a.get("lag", 0.0))},
                        timer=a.get("timer"),
                    )
                # What it delivers (a simulated network's timers) left where
                # it was armed, or from what armed it.
                sent = seq if seq >= 0 else self._origin(by)
                if sent >= 0:
                    self._sent[event.seq] = sent
            self._network(event.seq)
            self._sent.pop(event.seq, None)
            return
        arrival = self._arrivals.pop(event.cause, None) if event.cause else None
        if arrival is not None:
            point, lane, held, job = arrival
            self._add(
                event,
                "delivered",
                lane,
                f"{'job result' if point[0] == 'job' else 'thread callback'} {what} runs",
                {"held": held},
                held=held,
                job=job,
            )
        elif "transport" not in a:
            self._add(event, "callback", self.loop_lane(), what)
        else:
            # A transport's own callbacks are its I/O, drawn as such; what
            # they do is drawn as done by what queued them.
            causes = self._causes
            if len(causes) >= _TIMERS_KEPT:
                for key in list(causes)[: _TIMERS_KEPT // 2]:
                    del causes[key]
            causes[event.seq] = event.cause
        self._network(event.seq)

    def _origin(self, seq: int) -> int:
        """The timeline's mark of recorder event *seq*, or of the nearest
        event drawn that caused it (-1: none)."""
        for _ in range(8):
            drawn = self._drawn.get(seq)
            if drawn is not None:
                return drawn
            seq = self._causes.get(seq, 0)
            if not seq:
                break
        return -1

    def _armed(self, event: Event) -> None:
        a = event.args
        site: Site | None = a["site"]
        called: str = a.get("api") or ""
        api = "" if called in ("loop.call_later", "loop.call_at") else called
        # Called directly, what it calls says more.
        what = api or _where.short_name(a["callback"])
        delay: float = a["delay"]
        if delay < 0:  # loop.call_at with a time already past: due at once
            words = f"arms {what}, due {_seconds(-delay)} before it was armed"
        else:
            words = f"arms {what} for {_seconds(delay)}"
        seq = -1
        mine = _programs(site)
        # A task's timer with no line of the program's on the stack (a task
        # whose coroutine is asyncio.sleep itself, gather's) is still the
        # program's, if what armed it is a public call of a library's; a
        # callback's, a private helper's (a runner's time limit) or the
        # loop's own method's (loop.shutdown_default_executor's, which a
        # runner calls) is the loop's.
        if mine or (event.task and not _private(called) and not called.startswith("loop.")):
            lane = self.task_lane(event.task, event)
            detail: dict[str, Any] = {
                "when": a["when"],
                "delay": a["delay"],
                "callback": _where.short_name(a["callback"]),
                "api": called or None,
            }
            if mine:
                where = site_words(site)
                assert where is not None
                words += f" at {where['where']}"
                detail["site"] = where
            seq = self._add(event, "armed", lane, words, detail, timer=a["timer"])
        else:
            # Not drawn, but what it does when it fires is (a message it
            # delivers), as done where it was armed.
            lane = self.task_lane(event.task, event) if event.task else self.loop_lane()
        timers = self._timers
        if len(timers) >= _TIMERS_KEPT:
            for key in list(timers)[: _TIMERS_KEPT // 2]:
                del timers[key]
        timers[event.seq] = (seq, words, lane, event.cause)

    def _io(self, event: Event) -> None:
        fd = event.args["fd"]
        words = _where.fd_words(self._view, fd)
        self._add(
            event,
            "io",
            self._io_lane(words),
            "ready: " + fd_words_text(words),
            words,
            fd=fd,
            mode=event.args["mode"],
        )

    def _io_lane(self, words: dict[str, Any]) -> str:
        for reader in words.get("readers") or ():
            lane = self._lane_named(reader.get("task"))
            if lane is not None:
                return lane
        return self.loop_lane()

    def _job(self, event: Event) -> None:
        a = event.args
        lane = self.task_lane(event.task)
        words = self._job_words.pop(event.seq, None)
        site = site_words(a["site"]) if _programs(a["site"]) else None
        if words is not None:
            what = words.get("expr") or words.get("func")
            site = words.get("site", site)
            detail: dict[str, Any] = words
        else:
            what = _where.short_name(a["func"])
            detail = {"func": what, "api": a.get("api"), "site": site}
        text = f"submits {what} to the executor" + (f" at {site['where']}" if site else "")
        self._add(event, "job", lane, text, detail, job=a["job"])
        self._jobs[event.seq] = (lane, a["job"], str(what))

    def _ran(self, event: Event) -> None:
        a = event.args
        lane, number, what = self._jobs.get(
            event.cause, (self.loop_lane(), a["job"], event.name.split(": ", 1)[-1])
        )
        how = "returns" if a["ok"] else "raises"
        self._add(
            event,
            "ran",
            lane,
            f"job {what} runs in thread {a['thread_name']!r}, {how} after {_seconds(event.dur)}",
            {"thread": a["thread_name"], "ok": a["ok"], "took": _seconds(event.dur)},
            job=number,
        )

    def _arrived(self, event: Event) -> None:
        a = event.args
        job: int | None = a["job"]
        lane = self.loop_lane()
        number: int | None = None
        if job is not None:
            submitted = self._job_events.get(job)
            if submitted is not None and submitted in self._jobs:
                lane, number, _ = self._jobs[submitted]
        detail: dict[str, Any] = {"thread": a["thread"], "held": a["held"]}
        if a.get("site"):
            detail["site"] = a["site"]
        self._add(event, "arrived", lane, event.name, detail, held=a["held"], job=number)
        self._arrivals[event.seq] = (a["point"], lane, a["held"], number)

    def _process(self, event: Event) -> None:
        a = event.args
        pid = a.get("pid")
        if event.kind == "spawn":
            lane = self.task_lane(event.task)
            if isinstance(pid, int):
                self._pids[pid] = lane
            text = f"starts {a['program']} (pid {pid})"
            site = a.get("site")
            if _programs(site):
                where = site_words(site)
                assert where is not None
                text += f" at {where['where']}"
            self._add(event, "spawn", lane, text, {"pid": pid, "program": a["program"]})
        else:
            spawned = self._pids.pop(pid, None) if isinstance(pid, int) else None
            self._add(
                event,
                "exit",
                spawned or self.loop_lane(),
                f"pid {pid} exits with {a['returncode']}",
                {"pid": pid, "returncode": a["returncode"]},
            )

    def _error(self, event: Event) -> None:
        a = event.args
        lane = self._lane_named(a.get("task_name")) or self.loop_lane()
        text = f"error: {a['message'] or 'the loop reports an error'}"
        if a.get("exception"):
            text += f": {a['exception']}"
        self._add(event, "error", lane, _text(text), {k: v for k, v in a.items() if v})

    def _deviation(self, event: Event) -> None:
        a = event.args
        lane = self.lane_of_detail(a["detail"])
        seq = self._add(
            event,
            "deviation",
            lane,
            event.name,
            {"point": a["point"], "value": a["value"], "decision": a["decision"]},
        )
        if seq >= 0:
            self._recording.deviation_at(a["decision"], seq)

    def _failure(self, event: Event | None, task: int, args: dict[str, Any]) -> None:
        recording = self._recording
        lane = self.task_lane(task) if task else self.loop_lane()
        detail: dict[str, Any] = {"exception": args["exception"]}
        site = args.get("site")
        if site is not None:
            detail["site"] = site
        first = recording.failure is None
        # The exception line (a message may run over lines: pytest's own do).
        lines = str(args["exception"]).splitlines() or [""]
        text = ("fails: " if first else "raises: ") + lines[0]
        if site is not None:
            text += f" at {site['where']}"
        seq = self._add(event, "failure", lane, text, detail, first=first)
        if first:
            recording.failed({"seq": seq, "lane": lane, **detail})

    # -- the simulated network's log -----------------------------------------------

    def _net_log(self) -> list[tuple[float, str, str, str, str]]:
        log = getattr(getattr(self._live_loop(), "network", None), "log", None)
        return log if isinstance(log, list) else []

    def _network(self, cause: int) -> None:
        """Note what the simulated network logged since the last look (during
        the event *cause*, 0 for none: between callbacks)."""
        log = self._net_log()
        if len(log) <= self._net_seen:
            return
        new = log[self._net_seen :]
        self._net_seen = len(log)
        for at, what, src, dst, detail in new:
            # "*": every host (a heal of all partitions).
            a = "" if src == "*" else src
            b = "" if dst == "*" else dst
            if what in MESSAGES:
                kind = "message"
                text = f"{what} {a} -> {b}: {detail}"
            else:
                kind = "fault"
                text = f"{what} {a}" + (f" -> {b}" if b and b != a else "")
                if detail:
                    text += f": {detail}"
            self.note(kind, text, cause=cause, event=what, src=a, dst=b, detail=detail, at=at)

    def _message(self, event: Event) -> None:
        a = event.args
        what, src_name, dst_name = a["event"], a["src"], a["dst"]
        # No host (every host's: a heal of all partitions): the loop's lane.
        src = self._host_lane(src_name) if src_name else self.loop_lane()
        detail = {
            "event": what,
            "from": src_name,
            "to": dst_name,
            "detail": a["detail"],
            "at": a["at"],
        }
        if event.kind == "message":
            dst = self._host_lane(dst_name) if dst_name else src
            extra: dict[str, Any] = {"from": src, "to": dst}
            sent = self._sent.get(event.cause, -1)
            if sent >= 0 and what != "connect":
                extra["sent"] = sent
            self._add(event, "message", dst, event.name, detail, **extra)
        else:
            extra = {}
            if dst_name and dst_name != src_name:
                extra["to"] = self._host_lane(dst_name)
            self._add(event, "fault", src, event.name, detail, **extra)


def _seconds(value: float) -> str:
    if value >= 1.0 or value == 0.0:
        return f"{value:g} s"
    ms = value * 1000.0
    return f"{ms:.3g} ms" if ms >= 0.001 else f"{value:.3g} s"


__all__ = [
    "EVENT_LIMIT",
    "LoopRecorder",
    "Recording",
    "exception_words",
    "failure_site",
    "site_words",
]
