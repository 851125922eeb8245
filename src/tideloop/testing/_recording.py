"""A recorded run: what the loop did, as lanes and events in the program's terms.

Layer: top (``tideloop.testing``). A tape holds decisions, not the run's
events. To draw a failing schedule (``_timeline``) or print it as text, it
is replayed once more with a `Recording` on its strategy
(``ReplayStrategy(..., recording=...)``): every loop of that run gets a
`LoopRecorder`, which its `Perturber` (``_schedule``) feeds with what it
sees (iterations, timers armed, jobs submitted, fds dispatched and
deferred, thread results held, decisions) and which observes every
callback the loop runs (``loop.add_callback_observer``): task steps and
where each task then waits, timers firing, and, on a `SimNetwork`, the
network's log as it grows (messages between hosts, faults).

This is the timeline's own event source. The loop's recorder of issue 38
(the console's and Perfetto's) did not exist when it was written; the
`Recording` is the adapter between whatever records and what draws
(`Recording.to_json`: ``{"lanes", "events", "dropped"}``), so it can take
its events from there later without changing ``_timeline``.

Events are dicts: ``seq`` (their order), ``loop``, ``it`` (the loop's
iteration), ``t`` (loop time), ``kind``, ``lane``, ``text`` (one line) and
``detail`` (what hovering shows); a message also has ``from``/``to`` lanes
and ``sent``, the ``seq`` it left at. Kinds: ``task`` (first seen),
``step``, ``callback``, ``armed``, ``timer`` (fired), ``io``,
``deferred``, ``job``, ``arrived``, ``delivered``, ``deviation``,
``message``, ``fault``, ``failure``.

Invariants: recording never changes what the program does (it reads
tasks' coroutines and a finished task's exception without retrieving it);
it runs only on a replay made for a report; at most `EVENT_LIMIT` events
are kept (the rest are counted in ``dropped``).
"""

from __future__ import annotations

import asyncio
import traceback
import weakref
from typing import Any, Final

from tideloop._core.interfaces import LoopView
from tideloop._loop import Loop

from . import _where
from ._strategy import Decision

#: At most this many events are kept in a recording.
EVENT_LIMIT: Final = 50_000

#: Network log events that are messages from one host to another (arrows).
MESSAGES: Final = frozenset(
    {"connect", "accept", "connected", "refused", "data", "dgram", "fin", "rst", "unreachable"}
)


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


class Recording:
    """The lanes and events of one recorded run (its loops', in order)."""

    def __init__(self) -> None:
        self.lanes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self._lane_ids: set[str] = set()
        self._loops: dict[int, LoopRecorder] = {}
        self._current: LoopRecorder | None = None
        self._deviations: list[tuple[int, Decision]] = []
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
        from ._report import deviation_words  # the words of reports

        lane = rec.lane_of_detail(decision.detail)
        seq = rec.event(
            "deviation",
            lane,
            deviation_words(decision),
            {"point": list(decision.point), "value": decision.value, "decision": decision.index},
        )
        if seq >= 0:
            self._deviations.append((seq, decision))

    def finish(self, exc: BaseException | None) -> None:
        """The run ended, raising *exc* (None: it passed)."""
        for rec in self._loops.values():
            rec.stop()
        from ._report import deviation_words

        # A held result's detail gains the timers it came after only once
        # it is admitted: its words are final now.
        for seq, decision in self._deviations:
            event = self.events[seq]
            event["text"] = deviation_words(decision)
            if decision.detail:
                event["detail"] = {**event.get("detail", {}), "about": decision.detail}
        if exc is None or self.failure is not None:
            return
        # Not raised by a task we saw finish (raised out of the loop: a
        # deadlock, a property, a run that timed out): at the end.
        last = self._current or next(iter(self._loops.values()), None)
        if last is not None:
            last.failed(None, exc)

    # -- what the loops' recorders share ------------------------------------

    def lane(self, lane: dict[str, Any]) -> str:
        if lane["id"] not in self._lane_ids:
            self._lane_ids.add(lane["id"])
            self.lanes.append(lane)
        return str(lane["id"])

    def rename(self, lane_id: str, task: asyncio.Task[Any]) -> None:
        """A task's lane takes the name of the program's coroutine once its
        await chain shows one (a runner's wrapper starts it)."""
        for lane in self.lanes:
            if lane["id"] == lane_id and not lane.get("named"):
                words = _where.task_words(task)
                if words.get("at"):
                    lane["coro"] = words["coro"]
                    lane["named"] = True
                return

    def add(self, event: dict[str, Any], source: LoopRecorder) -> None:
        self._current = source
        if len(self.events) >= EVENT_LIMIT:
            self.dropped += 1
            return
        event["seq"] = len(self.events)
        self.events.append(event)

    def to_json(self) -> dict[str, Any]:
        return {"lanes": self.lanes, "events": self.events, "dropped": self.dropped}


class LoopRecorder:
    """One loop's recorder (see the module docstring): fed by its Perturber,
    and observing every callback the loop runs once it has started."""

    def __init__(self, recording: Recording, loop_no: int, view: LoopView) -> None:
        self._recording = recording
        self.loop_no = loop_no
        self._view = view
        self._loop: weakref.ReferenceType[Loop] | None = None
        self._it = 0
        #: task -> its lane id; its last await site (the step's start).
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = weakref.WeakKeyDictionary()
        self._waiting: weakref.WeakKeyDictionary[asyncio.Task[Any], dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._task_count = 0
        #: timer -> (its id, the seq it was armed at, its words).
        self._timers: weakref.WeakKeyDictionary[asyncio.TimerHandle, tuple[int, int, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._timer_count = 0
        self._sent_at: weakref.WeakKeyDictionary[asyncio.TimerHandle, int] = (
            weakref.WeakKeyDictionary()
        )
        #: Thread results arrived, by handle: (point, its lane, held by).
        self._arrivals: dict[int, tuple[tuple[str | int, ...], str, int]] = {}
        self._job_lanes: dict[int, str] = {}
        self._net_seen = 0
        self._observing = False

    # -- lanes -------------------------------------------------------------

    def _host_of(self, task: asyncio.Task[Any] | None) -> str:
        loop = self._loop() if self._loop is not None else None
        network = getattr(loop, "network", None)
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

    def task_lane(self, task: asyncio.Task[Any]) -> str:
        lane = self._tasks.get(task)
        if lane is not None:
            return lane
        self._task_count += 1
        host = self._host_of(task)
        self._host_lane(host)
        words = _where.task_words(task)
        lane = self._recording.lane(
            {
                "id": f"task:{self.loop_no}:{self._task_count}",
                "kind": "task",
                "name": words["task"],
                "coro": words["coro"],
                "host": host,
            }
        )
        self._tasks[task] = lane
        self.event("task", lane, f"task {words['task']!r} ({words['coro']}) starts", words)
        if "at" in words:
            self._waiting[task] = words
        return lane

    def lane_of_detail(self, detail: dict[str, Any] | None) -> str:
        """The lane a deviation concerns: the task it names, else the loop's."""
        if detail:
            for key in ("readers", "wakes"):
                for words in detail.get(key) or ():
                    lane = self._lane_named(words.get("task"))
                    if lane is not None:
                        return lane
            for key in ("task",):
                words = detail.get(key)
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
        for task, lane in self._tasks.items():
            if task.get_name() == name:
                return lane
        loop = self._loop() if self._loop is not None else None
        if loop is not None:
            for task in asyncio.all_tasks(loop):
                if task.get_name() == name:
                    return self.task_lane(task)
        return None

    # -- events ------------------------------------------------------------

    def event(self, kind: str, lane: str, text: str, detail: Any = None, **extra: Any) -> int:
        event: dict[str, Any] = {
            "loop": self.loop_no,
            "it": self._it,
            "t": self._view.time(),
            "kind": kind,
            "lane": lane,
            "text": text,
        }
        if detail:
            event["detail"] = detail
        event.update(extra)
        self._recording.add(event, self)
        return int(event.get("seq", -1))

    # -- fed by the Perturber ----------------------------------------------

    def iteration(self) -> None:
        """The loop is about to poll: a new iteration."""
        if not self._observing:
            loop = asyncio.events._get_running_loop()
            if isinstance(loop, Loop):
                self._loop = weakref.ref(loop)
                loop.add_callback_observer(self._after)
                self._observing = True
                self._net_seen = len(self._net_log())
        self._it += 1

    def stop(self) -> None:
        loop = self._loop() if self._loop is not None else None
        if self._observing and loop is not None and not loop.is_closed():
            try:
                loop.remove_callback_observer(self._after)
            except ValueError:
                pass
        self._observing = False

    def timer_armed(self, handle: asyncio.TimerHandle, info: dict[str, Any]) -> None:
        self._timer_count += 1
        tid = self._timer_count
        if "site" not in info:
            # Armed by no line of the program's (the simulation's deliveries,
            # a runner's time limit): not drawn, but what it does when it
            # fires is (a message arrives: it was sent here).
            self._timers[handle] = (tid, -1, "")
            self._sent_at[handle] = len(self._recording.events)
            return
        task = asyncio.current_task()
        lane = self.task_lane(task) if task is not None else self.loop_lane()
        site = info.get("site")
        what = info.get("api") or info.get("callback") or "a timer"
        text = f"arms {what} for {_seconds(info.get('delay', 0.0))}"
        if site:
            text += f" at {site['where']}"
        seq = self.event("armed", lane, text, info, timer=tid)
        self._timers[handle] = (tid, seq, text)

    def job_submitted(self, info: dict[str, Any]) -> None:
        task = asyncio.current_task()
        lane = self.task_lane(task) if task is not None else self.loop_lane()
        self._job_lanes[int(info["job"])] = lane
        what = info.get("expr") or info.get("func")
        site = info.get("site")
        text = f"submits {what} to the executor" + (f" at {site['where']}" if site else "")
        self.event("job", lane, text, info, job=info["job"])

    def arrived(
        self,
        point: tuple[str | int, ...],
        handle: asyncio.Handle,
        thread: str,
        site: dict[str, Any] | None,
        held: int,
    ) -> None:
        if point[0] == "job":
            lane = self._job_lanes.get(int(point[2]), self.loop_lane())
            text = f"the result of executor job #{point[2]} arrives"
        else:
            lane = self.loop_lane()
            text = f"thread {thread!r} calls call_soon_threadsafe"
            if site:
                text += f" at {site['where']}"
        if held:
            text += f"; held until {held} more timer firing(s)"
        detail = {"thread": thread, "held": held}
        if site:
            detail["site"] = site
        self.event("arrived", lane, text, detail, held=held)
        self._arrivals[id(handle)] = (point, lane, held)

    def ready(self, events: list[tuple[int, int]], deferred: dict[int, int]) -> None:
        """The fds this iteration dispatches (in order), and those deferred."""
        from ._schedule import fd_words

        for fd, mask in events:
            words = fd_words(self._view, fd)
            self.event(
                "io", self._io_lane(words), "ready: " + _fd_text(words), words, fd=fd, mask=mask
            )
        for fd, left in deferred.items():
            words = fd_words(self._view, fd)
            self.event(
                "deferred",
                self._io_lane(words),
                f"ready but deferred ({left + 1} more poll(s)): " + _fd_text(words),
                words,
                fd=fd,
            )

    def _io_lane(self, words: dict[str, Any]) -> str:
        for reader in words.get("readers") or ():
            lane = self._lane_named(reader.get("task"))
            if lane is not None:
                return lane
        return self.loop_lane()

    # -- the loop's callbacks ------------------------------------------------

    def _net_log(self) -> list[tuple[float, str, str, str, str]]:
        loop = self._loop() if self._loop is not None else None
        log = getattr(getattr(loop, "network", None), "log", None)
        return log if isinstance(log, list) else []

    def _after(self, handle: asyncio.Handle) -> None:
        callback = handle._callback  # type: ignore[attr-defined]
        owner = getattr(callback, "__self__", None)
        sent: int | None = None
        if isinstance(owner, asyncio.Task):
            self._step(owner)
        elif isinstance(handle, asyncio.TimerHandle):
            timer = self._timers.get(handle)
            what = _where.callback_words(callback)
            if timer is None:
                self.event("timer", self.loop_lane(), f"timer fires: {what}")
            elif timer[1] >= 0:
                tid, sent, armed = timer
                lane = self._recording.events[sent]["lane"]
                self.event("timer", lane, f"timer fires ({armed})", {"callback": what}, timer=tid)
            else:
                # Not the program's timer: the messages it delivers were sent
                # by the event recorded next when it was armed (the step that
                # wrote them).
                sent = self._sent_at.get(handle)
        else:
            arrival = self._arrivals.pop(id(handle), None)
            if arrival is not None:
                point, lane, held = arrival
                self.event(
                    "delivered",
                    lane,
                    f"{'job result' if point[0] == 'job' else 'thread callback'} "
                    f"{_where.callback_words(callback)} runs",
                    {"held": held},
                    held=held,
                )
            elif not isinstance(owner, asyncio.BaseTransport):
                self.event("callback", self.loop_lane(), _where.callback_words(callback))
        self._network_events(sent)

    def _step(self, task: asyncio.Task[Any]) -> None:
        lane = self.task_lane(task)
        before = self._waiting.get(task)
        self._recording.rename(lane, task)
        start = ""
        if before is not None and "at" in before:
            start = f"resumes at {before['at']['where']}"
        if task.done():
            if task.cancelled():
                end = "is cancelled"
            else:
                exc = task._exception  # not retrieved
                end = "finishes" if exc is None else f"raises {type(exc).__name__}"
                if exc is not None and not isinstance(exc, asyncio.CancelledError):
                    self.event("step", lane, _join(start, end), {"from": before})
                    self.failed(task, exc)
                    return
            self.event("step", lane, _join(start, end), {"from": before})
            return
        now = _where.task_words(task)
        self._waiting[task] = now
        site = now.get("at")
        end = "then waits"
        if site is not None:
            end += f" at {site['where']}"
            if site.get("code"):
                end += f" ({site['code']})"
        if now.get("in"):
            end += f" in {now['in']}"
        self.event("step", lane, _join(start, end), {"from": before, "to": now})

    def failed(self, task: asyncio.Task[Any] | None, exc: BaseException) -> None:
        """*task* (None: the run itself) raised *exc*: the failure, at its time."""
        recording = self._recording
        lane = self.task_lane(task) if task is not None else self.loop_lane()
        site = failure_site(exc)
        words = exception_words(exc)
        detail: dict[str, Any] = {"exception": words}
        if site is not None:
            detail["site"] = site
        first = recording.failure is None
        # The exception line (a message may run over lines: pytest's own do).
        text = ("fails: " if first else "raises: ") + (words.splitlines() or [""])[0]
        if site is not None:
            text += f" at {site['where']}"
        seq = self.event("failure", lane, text, detail, first=first)
        if first:
            recording.failure = {"seq": seq, "lane": lane, **detail}

    def _network_events(self, sent: int | None) -> None:
        log = self._net_log()
        if len(log) <= self._net_seen:
            return
        new = log[self._net_seen :]
        self._net_seen = len(log)
        for at, what, src_host, dst_host, detail in new:
            # "*": every host (a heal of all partitions): the loop's lane.
            a = "" if src_host == "*" else src_host
            b = "" if dst_host == "*" else dst_host
            src = self._host_lane(a) if a else self.loop_lane()
            if what in MESSAGES:
                dst = self._host_lane(b) if b else src
                extra: dict[str, Any] = {"from": src, "to": dst}
                if sent is not None and what not in ("connect",):
                    extra["sent"] = sent
                self.event(
                    "message",
                    dst,
                    f"{what} {a} -> {b}: {detail}",
                    {"event": what, "from": a, "to": b, "detail": detail, "at": at},
                    **extra,
                )
            else:
                extra = {}
                text = f"{what} {a}"
                if b and b != a:
                    extra["to"] = self._host_lane(b)
                    text += f" -> {b}"
                if detail:
                    text += f": {detail}"
                self.event(
                    "fault",
                    src,
                    text,
                    {"event": what, "from": a, "to": b, "detail": detail, "at": at},
                    **extra,
                )


def _join(start: str, end: str) -> str:
    return f"{start}, {end}" if start else end


def _seconds(value: float) -> str:
    if value >= 1.0 or value == 0.0:
        return f"{value:g} s"
    ms = value * 1000.0
    return f"{ms:.3g} ms" if ms >= 0.001 else f"{value:.3g} s"


def _fd_text(words: dict[str, Any]) -> str:
    from ._report import fd_words_text

    return fd_words_text(words)
