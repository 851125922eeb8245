"""The recorder: one record of what tideloop loops did, shown three ways.

Layer: top. There is one way to record what a loop did, and three readers
of it:

- Perfetto traces (``tideloop.trace``, ``python -m tideloop --trace``,
  ``_trace``) subscribe to a recorder and write each event as it comes;
- the live console (``python -m tideloop console``, ``_console``) attaches
  one with ``events=False`` while a client looks, and reads its task
  statistics, slow callbacks and errors;
- ``tideloop.testing``'s timeline (``testing/_recording.py``) attaches one
  to every loop of a failing schedule's recorded replay (when the loop
  first waits, before it runs a callback), and adds what only testing
  knows with `Recorder.note` (the schedule's deviations, deferred
  readiness, held thread results, a simulated network's messages and
  faults, the failure) and `Recorder.queued` (a held result's delivery
  names its arrival as its cause).

It records in the program's terms: tasks by name and coroutine, the line
each one was suspended at and the call it waits in, the line that armed a
timer or submitted a job and the library call it made there, the peer of a
connection that turned readable.

The API (stable: other modules build on it)
-------------------------------------------

::

    rec = Recorder(events=True, limit=None, slow=0.1)
    rec.attach(loop)                  # a tideloop Loop; any number of loops
    ...                               # run the loop (from any thread)
    rec.detach(loop)                  # or rec.detach() for every loop
    with rec.recording(loop): ...     # attach, then detach
    with rec.recording(): ...         # every loop tideloop.new_event_loop makes meanwhile
                                      # (tideloop.testing builds its loops with Loop(...):
                                      # attach those, e.g. from their main coroutine:
                                      # rec.attach(asyncio.get_running_loop()))

    rec.events       # list[Event], in the order they completed (see Event)
    rec.tasks        # dict[int, TaskInfo]: every task seen, by its number
    rec.task_info(n) # the TaskInfo of task number n (None: never seen)
    rec.slow         # deque[Event]: the latest steps/callbacks that took >= slow s
    rec.dropped      # events not kept (limit; limit=0 keeps none: subscribers only)
    rec.subscribe(fn)  # fn(event) for each event as it is recorded (any thread)

    # The extension point: what records things of its own into the same stream.
    rec.note(loop, kind, name, cause=None, **args)  # an event of one's own: a
                          # simulated message, a fault, a deviation... (cause: the
                          # seq of the event that made it happen; default: the
                          # callback running now)
    rec.queued(loop, handle, cause, source)  # for what queues handles itself (a
                          # schedule holding a thread's result): the event of the
                          # handle's callback names *cause* and *source*

``events=False`` records the cheap part only: task statistics
(`TaskInfo`: steps, busy time, wake-ups), slow steps and callbacks, and
errors; nothing per timer, fd, job or scheduling call (the console uses
it). A `Recorder` may be attached to several loops, and several recorders
to one loop: they share one tap per loop, which instruments the loop for
the most any of them needs.

Events
------

An `Event` is a named tuple: ``seq`` (its number, unique per loop: other
events point at it through ``cause``), ``kind``, ``loop`` (the loop's number
in this process), ``real`` (``time.monotonic()`` when it began: real time,
whatever the loop's clock), ``time`` (the loop's time then: virtual under a
virtual clock), ``dur`` (real seconds; 0.0 for an instant), ``thread``
(the native id of the thread it ran in), ``task`` (a task's number, 0 for
none), ``name`` (what to call it), ``cause`` (the ``seq`` of the event that
made it happen, 0 if none is known) and ``args`` (a dict, by kind):

=============  ========================================================
kind           args
=============  ========================================================
``iteration``  ``n`` (the loop's iteration count), ``blocked`` (seconds
               in polls), ``events`` (fds reported ready), ``ran``
               (callbacks). It spans from the end of the previous run
               phase to the end of this one: iterations tile the run.
``poll``       a poll that could block (``timeout`` > 0 or None: no
               limit), or that found fds ready; ``events``.
``step``       a task's step. ``coro`` (the coroutine's qualified name),
               ``resumed`` and ``suspended`` (a `Site`: where the task's
               own code was suspended before and after the step; None
               when unknown or finished), ``waits_in`` (the library call
               the program's frame waits in, as the program names it:
               ``asyncio.sleep``, ``StreamReader.readline``, or None),
               ``outcome`` (``await``, ``yield`` (a bare yield: it woke
               itself), ``done``, ``error``, ``cancelled``), ``source``,
               ``slow`` (bool: it ran at least the lowest ``slow``
               threshold of the recorders attached). ``task`` is set.
``callback``   any other callback. ``callback`` (its description),
               ``source``, ``slow``; for I/O ``fd`` and ``mode``; for a
               timer ``timer`` (number) and ``lag`` (seconds late); for a
               transport's own callback ``transport`` (its peer).
``io``         an fd the poll reported ready: ``fd``, ``mode`` (``read``
               or ``write``), ``target`` (the transport's peer, or the
               callback, as text). The callback it queued has it as cause.
``timer``      a timer armed (``call_later``/``call_at``): ``timer``,
               ``delay``, ``when`` (loop time), ``site`` (a `Site`: the
               program's line that armed it; None when a callback with no
               line of the program's in it did), ``api`` (the call the
               program made there: ``asyncio.sleep``, ``asyncio.timeout``,
               ``StreamWriter.write``, ``loop.call_later``), ``callback``.
``job``        an executor job submitted: ``job``, ``func``, ``site``,
               ``api`` (``asyncio.to_thread``, ``loop.run_in_executor``).
``job-run``    the job ran (in its worker thread): ``job``, ``ok``,
               ``thread_name``.
``spawn``      a subprocess started: ``pid``, ``program``, ``site``;
               ``dur`` is how long starting it took.
``exit``       a subprocess exited: ``pid``, ``returncode``.
``error``      the loop's exception handler was called: ``message``,
               ``exception`` (repr or None).
(other)        from `Recorder.note`: whatever its caller passed.
=============  ========================================================

``source`` says how a callback got into the ready queue: ``soon``
(``call_soon``), ``timer``, ``io``, ``thread`` (``call_soon_threadsafe``)
or ``?`` (recorded without scheduling calls: ``events=False``, or it was
queued before the recorder attached). A step's ``cause`` is what woke the
task: the callback or step that resolved the future it awaited, the timer
of its sleep, the job whose result arrived, its own previous step (a bare
yield).

Events are appended when they are complete: a callback's after it
returned, with the ``seq`` it got when it began, so the events it caused
come first in the list. Sort by ``(real, seq)`` for the order they began.
Worker threads' events (``job-run``) interleave with the loop's.

How it hooks in, and what it costs
----------------------------------

Nothing, when no recorder is attached: the loop's hot paths never look for
one. Attached, a tap:

- sets itself as the core's run-phase recorder (``metrics.RunRecorder``):
  the core then runs callbacks on its timed path (as with a slow-callback
  hook), telling the tap before and after each one;
- with ``events=True``, wraps the loop's poll and fd dispatch (the native
  core then dispatches through Python), and puts recording versions of
  ``call_soon``, ``call_soon_threadsafe``, ``call_later``, ``call_at``,
  ``run_in_executor``, ``subprocess_exec`` and ``subprocess_shell`` in the
  loop *instance's* dict, where every caller (asyncio's C tasks and
  futures included) finds them before the class's; each calls what was
  there before it and returns its result unchanged;
- always wraps ``call_exception_handler`` the same way (one check per
  error).

Detaching puts everything back (an attribute someone else replaced since
is left to them; the tap's version then passes calls through). A job of
the default executor or a ``ThreadPoolExecutor`` runs inside a small
callable that records its start and end, a `RecordedJob` (its traceback
has one more frame; ``__wrapped__`` is the program's function); other
executors' jobs (a process pool must pickle the function) are not
recorded. Another thread's ``call_soon_threadsafe`` holds a lock of the
tap's from queuing its handle to noting it, and the loop waits for it only
when it runs a handle it finds no note for while one is being made (the
waker's write lets the loop run the handle first). Nothing else the
program sees changes.

Invariants: a tap touches its loop only from the loop's thread, except the
events of worker threads, which are appended whole (a list append and an
``itertools.count``, atomic under the GIL; `Recorder` guards its own
state with a lock for free-threaded builds). The tap holds its loop
weakly: a recorder never keeps a closed loop alive.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import inspect
import itertools
import os
import socket
import sys
import threading
import weakref
from asyncio.futures import _set_result_unless_cancelled as _sleep_callback  # type: ignore[attr-defined]
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from time import monotonic as _real_time
from types import CodeType, FrameType
from typing import Any, Final, NamedTuple

from ._core.handles import LockedRun
from ._loop import NEW_LOOP_OBSERVERS, Loop
from ._pollers import READER_BITS, WRITER_BITS
from ._transports.subprocess import SubprocessTransport
from ._versions import FUTURE_AWAIT_CODE

__all__ = ["Event", "RecordedJob", "Recorder", "Site", "TaskInfo", "site_text"]

_native_id = threading.get_native_id

#: Frames in these directories are the loop's and asyncio's, not the program's.
_LIBRARY_DIRS: Final = (
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(__file__) + os.sep,
    os.path.dirname(contextlib.__file__) + os.sep + "contextlib.py",
)
#: The deepest await chain walked (a cycle guard as much as a cost bound).
_MAX_DEPTH: Final = 64

_PROCESS_EXITED: Final = getattr(SubprocessTransport, "_process_exited", None)
#: asyncio's Task (the C one where built): the common case of an exact type check.
_Task: Final = asyncio.Task


class Site(NamedTuple):
    """A line of the program: where a task waited, a timer was armed, a job submitted."""

    file: str
    line: int
    func: str


def site_text(site: Site | None) -> str:
    """``file:line in func`` (the file's base name), or ``?``."""
    if site is None:
        return "?"
    text = _site_texts.get(site)
    if text is None:
        if len(_site_texts) > 4096:
            _site_texts.clear()
        text = _site_texts[site] = f"{os.path.basename(site.file)}:{site.line} in {site.func}"
    return text


#: site_text's answers (a program has few distinct await sites).
_site_texts: dict[Site, str] = {}


class Event(NamedTuple):
    """One thing a loop did (see the module docstring for the kinds)."""

    seq: int
    kind: str
    loop: int
    real: float
    time: float
    dur: float
    thread: int
    task: int
    name: str
    cause: int
    args: dict[str, Any]


class TaskInfo:
    """What the recorder knows of one task; updated in place as it runs."""

    __slots__ = (
        "busy",
        "coro",
        "first_seen",
        "loop",
        "max_step",
        "name",
        "number",
        "outcome",
        "ref",
        "self_wakes",
        "started_seen",
        "steps",
        "suspended",
        "waits_in",
    )

    def __init__(self, number: int, loop: int, task: asyncio.Task[Any], first_seen: float) -> None:
        self.number = number
        self.loop = loop
        self.name = task.get_name()
        self.coro = _coro_name(task.get_coro())
        #: Real time the recorder first saw it (its first step, if `started_seen`).
        self.first_seen = first_seen
        self.started_seen = False
        self.steps = 0
        #: Real seconds its steps ran.
        self.busy = 0.0
        self.max_step = 0.0
        #: Steps it caused itself (a bare yield: ``await asyncio.sleep(0)``).
        self.self_wakes = 0
        self.suspended: Site | None = None
        self.waits_in: str | None = None
        #: None while it runs; else ``done``, ``error`` or ``cancelled``.
        self.outcome: str | None = None
        self.ref: weakref.ref[asyncio.Task[Any]] = weakref.ref(task)

    @property
    def wakeups(self) -> int:
        """Times it was resumed (its steps after the first, when that was seen)."""
        return self.steps - 1 if self.started_seen and self.steps else self.steps

    def task(self) -> asyncio.Task[Any] | None:
        return self.ref()

    def __repr__(self) -> str:
        return (
            f"<TaskInfo #{self.number} {self.name} {self.coro} steps={self.steps} "
            f"busy={self.busy:.6f} outcome={self.outcome}>"
        )


def _coro_name(coro: object) -> str:
    name = getattr(coro, "__qualname__", None)
    if name is None:
        return type(coro).__name__
    return str(name)


def _is_library(filename: str) -> bool:
    return filename.startswith(_LIBRARY_DIRS)


def _code_site(code: CodeType, line: int | None) -> Site:
    return Site(code.co_filename, line or code.co_firstlineno, code.co_qualname)


def suspension(coro: Any) -> tuple[Site | None, str | None]:
    """Where a suspended coroutine chain waits: the innermost frame of the
    program's own code, and the library function below it (or None).

    Follows ``cr_await`` / ``gi_yieldfrom`` down the chain; a chain that
    ends in a future (a plain ``await fut``) ends at the frame awaiting it.
    """
    site: Site | None = None
    leaf: str | None = None
    depth = 0
    while coro is not None and depth < _MAX_DEPTH:
        depth += 1
        frame: FrameType | None = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None or frame.f_code is FUTURE_AWAIT_CODE:
            break
        code = frame.f_code
        if _is_library(code.co_filename):
            # The call the program made (``StreamReader.readline``), not the
            # helper it ended in (``StreamReader._wait_for_data``).
            if leaf is None:
                leaf = _api_name(code)
        else:
            site = _code_site(code, frame.f_lineno)
            leaf = None
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return site, leaf


def await_chain(task: asyncio.Task[Any]) -> tuple[Site, ...]:
    """Every frame of a suspended task's coroutine chain, outermost first."""
    frames: list[Site] = []
    coro: Any = task.get_coro()
    while coro is not None and len(frames) < _MAX_DEPTH:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None or frame.f_code is FUTURE_AWAIT_CODE:
            break
        frames.append(_code_site(frame.f_code, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return tuple(frames)


def caller(depth: int = 2, entry: str = "") -> tuple[Site | None, str]:
    """The innermost frame of the program's own code above *depth* frames
    up (counted as `caller_site` counts them), and the library call the
    program made there: ``asyncio.sleep``, ``StreamWriter.write``,
    ``loop.create_connection`` (the outermost library frame below the
    program's), or *entry* when it called the recorded entry point itself.

    Inside a callback, the walk ends at the callback's own frames: a line
    outside them (the one that started the loop) did not arm a timer its
    callback armed. The site is then None: the loop's own doing (a
    transport's, a library's callback).
    """
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:
        return None, entry
    first: FrameType | None = frame
    api = entry
    n = 0
    while frame is not None and n < _MAX_DEPTH:
        code = frame.f_code
        if code in _RUN_PHASE:
            return None, api
        if not _is_library(code.co_filename):
            return _code_site(code, frame.f_lineno), api
        api = _api_name(code)
        frame = frame.f_back
        n += 1
    return (None if first is None else _code_site(first.f_code, first.f_lineno)), api


def caller_site(depth: int = 2) -> Site | None:
    """The innermost frame of the program's own code above *depth* frames up."""
    return caller(depth + 1)[0]


#: The loop's classes: a library frame of one of their methods is a call of
#: the loop's (``loop.create_connection``), whichever class defines it.
_LOOP_CLASSES: Final = frozenset(
    {c.__name__ for c in Loop.__mro__ if c is not object} | {"BaseEventLoop"}
)
_ASYNCIO_DIR: Final = _LIBRARY_DIRS[0]
#: The pure-Python Task's step (PyPy's only Task; CPython's C Task shows no
#: frame): a task's coroutine runs inside it, so it belongs to the run
#: phase, not to the library call the program made.
_PY_TASK_STEPS: Final = frozenset(
    member.__code__
    for name, member in vars(getattr(asyncio.tasks, "_PyTask", asyncio.Task)).items()
    if name.startswith(("_Task__step", "_Task__wakeup")) and hasattr(member, "__code__")
)
#: The frames a callback runs in (its handle's ``_run``, the loop's timed
#: run phase, where a recorder makes every callback run): a walk out of a
#: callback stops there.
_RUN_PHASE: Final = (
    frozenset(
        cls.__dict__["_run"].__code__
        for cls in (asyncio.Handle, getattr(asyncio.events, "_ThreadSafeHandle", asyncio.Handle))
        if "_run" in cls.__dict__
    )
    | {Loop._run_ready_timed.__code__, Loop._run_handle_debug.__code__}
    | _PY_TASK_STEPS
)


def _api_name(code: CodeType) -> str:
    """A library function as the program names it when it calls it."""
    name = code.co_qualname
    head, dot, _ = name.partition(".")
    if dot:
        if head in _LOOP_CLASSES:
            return "loop." + name.rsplit(".", 1)[-1]
        if head == "Timeout" and code.co_filename.startswith(_ASYNCIO_DIR):
            return "asyncio.timeout"  # async with asyncio.timeout(...)
        return name
    if code.co_filename.startswith(_ASYNCIO_DIR):
        return "asyncio." + name
    return name


def describe_callback(callback: object) -> str:
    """A callback by what it calls: ``Class.method``, a function's qualified name."""
    func: Any = getattr(callback, "func", None)  # functools.partial
    if func is not None and callable(func):
        args = getattr(callback, "args", ())
        if isinstance(getattr(func, "__self__", None), contextvars.Context) and args:
            return describe_callback(args[0])  # to_thread: partial(context.run, func)
        return describe_callback(func)
    owner = getattr(callback, "__self__", None)
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        inner = getattr(callback, "__func__", None)
        method = getattr(inner, "__name__", None) or getattr(callback, "__name__", "?")
        return f"{type(owner).__qualname__}.{method}"
    if name is not None:
        return str(name)
    return type(callback).__qualname__


def describe_transport(transport: asyncio.BaseTransport) -> str:
    """A transport by its peer (or its own address, or its class)."""
    try:
        peer = transport.get_extra_info("peername")
        if peer:
            return _address(peer)
        own = transport.get_extra_info("sockname")
        if own:
            return _address(own)
    except Exception:  # a closing transport may fail: fall back to its class
        pass
    return type(transport).__name__


def _address(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    if isinstance(addr, bytes):
        return addr.decode(errors="replace") or "unnamed"
    return str(addr) or "unnamed"


#: A loop's number in this process (the first loop any recorder sees is 1).
_loop_numbers = itertools.count(1)
#: A task's number in this process (the first task any recorder sees is 1).
_task_numbers = itertools.count(1)


class _Shadow:
    """One recording entry point in a loop instance's dict, and what was there."""

    __slots__ = ("before", "had", "installed", "name")

    def __init__(self, name: str, before: object, had: bool, installed: object) -> None:
        self.name = name
        self.before = before
        self.had = had
        self.installed = installed


_MISSING: Final = object()


class _Tap:
    """The one instrumentation of one loop, shared by the recorders attached to it.

    It is the core's `RunRecorder` for the loop, and owns what the module
    docstring lists. ``full`` is whether the expensive part (scheduling
    calls, timers, I/O, jobs) is installed: while any recorder attached to
    the loop has ``events=True``.
    """

    def __init__(self, loop: Loop) -> None:
        self.loop_ref: weakref.ref[Loop] = weakref.ref(loop)
        self.number = next(_loop_numbers)
        self.recorders: tuple[Recorder, ...] = ()
        self.full = False
        self._seq = itertools.count(1)
        self._jobs = itertools.count(1)
        self._timer_numbers = itertools.count(1)
        self._shadows: list[_Shadow] = []
        self._io_saved: tuple[Any, Any] | None = None
        # Per-task knowledge, by id(task) (a task's weak reference drops it).
        self.tasks: dict[int, TaskInfo] = {}
        # Handles queued by call_soon/call_soon_threadsafe/the fd dispatch
        # (or told of, `Recorder.queued`), by id: (handle, cause seq, source,
        # fd, mode, the fd's target). The handle is kept so that its id
        # cannot be reused while the entry exists.
        self._queued: dict[int, tuple[object, int, str, int, str, str]] = {}
        # Timers armed while recording, by id: (handle, timer number, seq).
        self._timers: dict[int, tuple[object, int, int]] = {}
        # The callback running now: its seq and, for a step, its task's number.
        self.current = 0
        self.current_task = 0
        self._cur: tuple[Any, Any, int, int, str, float, int, str, int, str] | None = None
        self._ident = threading.get_ident()
        self._thread = _native_id()
        #: The lowest slow threshold of the recorders attached.
        self.slow_threshold = float("inf")
        self._time: Callable[[], float] = loop.time
        self._phase_start_real = 0.0
        self._iter_start = _real_time()
        self._iter_time = loop.time()
        self._iter_events = 0
        self._iter_blocked_at = loop._counters.idle_time
        self._job_threads = threading.local()
        # Another thread's call_soon_threadsafe queues its handle and wakes
        # the loop before the wrapper can note what caused it: the loop may
        # run the handle first. The wrapper holds this lock from the call to
        # the note (and counts itself in `_storing`), and `before` waits for
        # it when it finds no note while one is being made.
        self._storing_lock = threading.Lock()
        self._storing = 0

    # ------------------------------------------------------------------
    # Attaching

    def loop(self) -> Loop | None:
        return self.loop_ref()

    def add(self, recorder: Recorder) -> None:
        self.recorders = (*self.recorders, recorder)
        self._reconfigure()

    def remove(self, recorder: Recorder) -> None:
        self.recorders = tuple(r for r in self.recorders if r is not recorder)
        self._reconfigure()

    def _reconfigure(self) -> None:
        loop = self.loop()
        want_full = any(r.wants_events for r in self.recorders)
        self.slow_threshold = min((r.slow_threshold for r in self.recorders), default=float("inf"))
        if loop is None:
            self.full = want_full
            return
        if not self.recorders:
            self._uninstall(loop)
            return
        if loop._instruments.recorder is not self:
            loop._instruments.set_recorder(self)
            self._shadow(loop, "call_exception_handler", self._call_exception_handler)
        if want_full and not self.full:
            self._install_full(loop)
        elif not want_full and self.full:
            self._uninstall_full(loop)
        self.full = want_full

    def _shadow(self, loop: Loop, name: str, make: Callable[[Any], Any]) -> None:
        had = name in loop.__dict__
        before = loop.__dict__[name] if had else getattr(loop, name)
        installed = make(before)
        loop.__dict__[name] = installed
        self._shadows.append(_Shadow(name, before, had, installed))

    def _unshadow(self, loop: Loop, names: set[str] | None = None) -> None:
        keep = []
        for shadow in reversed(self._shadows):
            if names is not None and shadow.name not in names:
                keep.append(shadow)
                continue
            if loop.__dict__.get(shadow.name, _MISSING) is shadow.installed:
                if shadow.had:
                    loop.__dict__[shadow.name] = shadow.before
                else:
                    del loop.__dict__[shadow.name]
            # Else someone replaced it since: theirs stays, and calls ours,
            # which passes them through (self.full / the tap's removal).
        self._shadows = list(reversed(keep))

    _FULL_NAMES: Final = frozenset(
        {
            "call_soon",
            "call_soon_threadsafe",
            "call_later",
            "call_at",
            "run_in_executor",
            "subprocess_exec",
            "subprocess_shell",
        }
    )

    def _install_full(self, loop: Loop) -> None:
        self._io_saved = (loop._poll, loop._dispatch)
        loop._poll = self._make_poll(loop._poll)
        loop._dispatch = self._make_dispatch(loop._dispatch, loop)
        self._shadow(loop, "call_soon", self._call_soon)
        self._shadow(loop, "call_soon_threadsafe", self._call_soon_threadsafe)
        self._shadow(loop, "call_later", self._call_later)
        self._shadow(loop, "call_at", self._call_at)
        self._shadow(loop, "run_in_executor", self._run_in_executor)
        self._shadow(loop, "subprocess_exec", self._subprocess_exec)
        self._shadow(loop, "subprocess_shell", self._subprocess_shell)

    def _uninstall_full(self, loop: Loop) -> None:
        saved = self._io_saved
        if saved is not None:
            poll, dispatch = saved
            if getattr(loop._poll, "_tideloop_tap", None) is self:
                loop._poll = poll
            if getattr(loop._dispatch, "_tideloop_tap", None) is self:
                loop._dispatch = dispatch
            self._io_saved = None
        self._unshadow(loop, set(self._FULL_NAMES))
        self._queued.clear()
        self._timers.clear()

    def _uninstall(self, loop: Loop) -> None:
        if self.full:
            self._uninstall_full(loop)
            self.full = False
        self._unshadow(loop)
        if loop._instruments.recorder is self:
            loop._instruments.set_recorder(None)

    # ------------------------------------------------------------------
    # Events

    def next_seq(self) -> int:
        return next(self._seq)

    def emit(self, event: Event) -> None:
        for recorder in self.recorders:
            recorder._take(event)

    def _now(self) -> float:
        loop = self.loop()
        return loop.time() if loop is not None else _real_time()

    def note(self, kind: str, name: str, args: dict[str, Any], cause: int | None) -> Event:
        real = _real_time()
        event = Event(
            self.next_seq(),
            kind,
            self.number,
            real,
            self._now(),
            0.0,
            _native_id(),
            self.current_task,
            name,
            self.current if cause is None else cause,
            args,
        )
        self.emit(event)
        return event

    def queued(self, handle: asyncio.Handle, cause: int, source: str) -> None:
        if not self.full:
            return
        key: Any = handle
        if type(handle) is LockedRun:
            # As `before` sees it: the handle behind its locking runner.
            inner = getattr(handle._callback, "__self__", None)
            if inner is not None:
                key = inner
        self._queued[id(key)] = (key, cause, source, -1, "", "")

    # ------------------------------------------------------------------
    # The run phase (RunRecorder)

    def phase_start(self) -> None:
        ident = threading.get_ident()
        if ident != self._ident:  # the loop runs in another thread than before
            self._ident = ident
            self._thread = _native_id()
        if self.full:
            loop = self.loop()
            if loop is not None:
                self._time = loop.time  # what the program's loop.time is now

    def before(self, handle: asyncio.Handle) -> None:
        cb: Any = handle._callback  # type: ignore[attr-defined]
        owner = getattr(cb, "__self__", None)
        if not self.full:
            # Light: only a task's first step matters (is it its start?).
            if type(owner) is not _Task and not isinstance(owner, asyncio.Task):
                self._cur = None
                return
            # Loop time unknown (-1.0): not read per step when light.
            self._cur = (cb, None, 0, 0, "?", -1.0, -1, "", 0, "")
            self.current_task = self._first_step(owner)
            return
        args: Any = handle._args
        key: object = handle
        if type(handle) is LockedRun and owner is not None:
            # call_soon_threadsafe's handle, queued behind its locking runner.
            inner: Any = owner
            key = inner
            cb = inner._callback
            args = inner._args
            owner = getattr(cb, "__self__", None)
        cause = 0
        source = "?"
        fd = -1
        mode = ""
        target = ""
        timer = 0
        queued = self._queued.pop(id(key), None) if self._queued else None
        if queued is None and self._storing:
            with self._storing_lock:
                queued = self._queued.pop(id(key), None)
        if queued is not None:
            _, cause, source, fd, mode, target = queued
        elif isinstance(handle, asyncio.TimerHandle):
            source = "timer"
            armed = self._timers.pop(id(handle), None) if self._timers else None
            if armed is not None:
                timer = armed[1]
                cause = armed[2]
        seq = next(self._seq)
        task = 0
        if type(owner) is _Task or isinstance(owner, asyncio.Task):
            task = self._first_step(owner)
        self._cur = (cb, args, seq, cause, source, self._time(), fd, mode, timer, target)
        self.current = seq
        self.current_task = task

    def _first_step(self, task: asyncio.Task[Any]) -> int:
        """The task's number; notes whether this step is its first."""
        info = self._info(task)
        if not info.steps and not info.started_seen:
            coro: Any = task.get_coro()
            # Created, not yet started: a frame, neither running nor
            # suspended (inspect.getcoroutinestate's test).
            if getattr(coro, "cr_frame", None) is not None and not (
                getattr(coro, "cr_suspended", True) or coro.cr_running
            ):
                info.started_seen = True  # its first step: seen from the start
        return info.number

    def _info(self, task: asyncio.Task[Any]) -> TaskInfo:
        info = self.tasks.get(id(task))
        if info is None or info.ref() is not task:
            info = TaskInfo(next(_task_numbers), self.number, task, _real_time())
            key = id(task)
            tasks = self.tasks

            def forget(_ref: object, key: int = key, info: TaskInfo = info) -> None:
                if tasks.get(key) is info:
                    del tasks[key]

            info.ref = weakref.ref(task, forget)
            tasks[key] = info
            for recorder in self.recorders:
                recorder._seen(info)
        return info

    def after(self, handle: asyncio.Handle, start: float, took: float) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        self.current = 0
        self.current_task = 0
        cb, args, seq, cause, source, time, fd, mode, timer, target = cur
        owner = getattr(cb, "__self__", None)
        slow = took >= self.slow_threshold
        full = self.full
        if type(owner) is _Task or isinstance(owner, asyncio.Task):
            self._step(owner, cur, start, took, slow)
            return
        if not (full or slow):
            return
        if cb is not None and getattr(cb, "__func__", None) is _PROCESS_EXITED and args:
            self._exit(owner, args[0], start, time)
        described = describe_callback(cb)
        details: dict[str, Any] = {"callback": described, "source": source, "slow": slow}
        if fd >= 0:
            details["fd"] = fd
            details["mode"] = mode
        if source == "timer" and isinstance(handle, asyncio.TimerHandle):
            details["timer"] = timer
            details["lag"] = max(0.0, time - handle.when())
        if isinstance(owner, asyncio.BaseTransport):
            details["transport"] = target or describe_transport(owner)
        self.emit(
            Event(
                seq,
                "callback",
                self.number,
                start,
                time,
                took,
                self._thread,
                0,
                described,
                cause,
                details,
            )
        )

    def _step(
        self, task: asyncio.Task[Any], cur: tuple[Any, ...], start: float, took: float, slow: bool
    ) -> None:
        seq: int = cur[2]
        cause: int = cur[3]
        source: str = cur[4]
        time: float = cur[5]
        info = self._info(task)
        info.steps += 1
        info.busy += took
        info.max_step = max(info.max_step, took)
        full = self.full
        site: Site | None = None
        leaf: str | None = None
        if task.done():
            # Not task.exception(): that would mark a failure retrieved,
            # and asyncio would no longer report it if nobody looks.
            if task.cancelled():
                outcome = "cancelled"
            elif getattr(task, "_exception", None) is not None:
                outcome = "error"
            else:
                outcome = "done"
            info.outcome = outcome
        else:
            if getattr(task, "_fut_waiter", None) is None:
                outcome = "yield"
                info.self_wakes += 1
            else:
                outcome = "await"
            if not (full or slow):
                return
            site, leaf = suspension(task.get_coro())
        if not (full or slow):
            return
        resumed = info.suspended
        info.suspended = site
        info.waits_in = leaf
        name = task.get_name()
        info.name = name
        if not seq:  # light: a slow step, numbered now
            seq = next(self._seq)
        self.emit(
            Event(
                seq,
                "step",
                self.number,
                start,
                time if time >= 0.0 else self._now(),
                took,
                self._thread,
                info.number,
                f"{name} {info.coro}",
                cause,
                {
                    "coro": info.coro,
                    "resumed": resumed,
                    "suspended": site,
                    "waits_in": leaf,
                    "outcome": outcome,
                    "source": source,
                    "slow": slow,
                },
            )
        )

    def phase_end(self, ran: int) -> None:
        self._cur = None
        self.current = 0
        self.current_task = 0
        if not self.full:
            return
        loop = self.loop()
        if loop is None:
            return
        end = _real_time()
        counters = loop._counters
        idle = counters.idle_time
        blocked = idle - self._iter_blocked_at
        self._iter_blocked_at = idle
        start = self._iter_start
        self.emit(
            Event(
                next(self._seq),
                "iteration",
                self.number,
                start,
                self._iter_time,
                end - start,
                self._thread,
                0,
                "iteration",
                0,
                {
                    "n": counters.iterations,
                    "blocked": blocked,
                    "events": self._iter_events,
                    "ran": ran,
                },
            )
        )
        self._iter_start = end
        self._iter_time = self._time()
        self._iter_events = 0

    # ------------------------------------------------------------------
    # Poll and dispatch (full)

    def _make_poll(self, poll: Callable[[float | None], list[tuple[int, int]]]) -> Any:
        tap = self

        def recording_poll(timeout: float | None) -> list[tuple[int, int]]:
            if timeout == 0:
                # A look that cannot block: recorded only if it found something.
                real = _real_time()
                events = poll(timeout)
                if not events or not tap.full:
                    return events
            else:
                real = _real_time()
                events = poll(timeout)
                if not tap.full:
                    return events
            took = _real_time() - real
            tap.emit(
                Event(
                    next(tap._seq),
                    "poll",
                    tap.number,
                    real,
                    tap._time(),
                    took,
                    tap._thread,
                    0,
                    "poll",
                    0,
                    {"timeout": timeout, "events": len(events)},
                )
            )
            return events

        recording_poll._tideloop_tap = self  # type: ignore[attr-defined]
        return recording_poll

    def _make_dispatch(self, dispatch: Callable[[list[tuple[int, int]]], None], loop: Loop) -> Any:
        tap = self
        fds = loop._fds

        def recording_dispatch(events: list[tuple[int, int]]) -> None:
            if tap.full:
                real = _real_time()
                time = tap._now()
                thread = _native_id()
                queued = tap._queued
                tap._iter_events += len(events)
                for fd, bits in events:
                    for mask, mode, table in (
                        (READER_BITS, "read", fds.readers),
                        (WRITER_BITS, "write", fds.writers),
                    ):
                        if not bits & mask:
                            continue
                        handle = table.get(fd)
                        if handle is None or handle._cancelled:
                            continue
                        target = _fd_target(handle)
                        seq = tap.next_seq()
                        tap.emit(
                            Event(
                                seq,
                                "io",
                                tap.number,
                                real,
                                time,
                                0.0,
                                thread,
                                0,
                                f"fd {fd} {mode} ({target})",
                                0,
                                {"fd": fd, "mode": mode, "target": target},
                            )
                        )
                        queued[id(handle)] = (handle, seq, "io", fd, mode, target)
            dispatch(events)

        recording_dispatch._tideloop_tap = self  # type: ignore[attr-defined]
        return recording_dispatch

    # ------------------------------------------------------------------
    # Recording entry points (full)

    # Each wrapper takes what the original takes (*args, **kwargs) and calls
    # it first: a bad call fails in the original, with its message, at the
    # same moment; only a call that succeeded is recorded.

    def _call_soon(self, before: Callable[..., asyncio.Handle]) -> Callable[..., asyncio.Handle]:
        tap = self

        @functools.wraps(before)
        def call_soon(*args: Any, **kwargs: Any) -> asyncio.Handle:
            handle = before(*args, **kwargs)
            if tap.full:
                tap._queued[id(handle)] = (handle, tap.current, "soon", -1, "", "")
            return handle

        return call_soon

    def _call_soon_threadsafe(
        self, before: Callable[..., asyncio.Handle]
    ) -> Callable[..., asyncio.Handle]:
        tap = self

        @functools.wraps(before)
        def call_soon_threadsafe(*args: Any, **kwargs: Any) -> asyncio.Handle:
            if not tap.full:
                return before(*args, **kwargs)
            if threading.get_ident() == getattr(tap.loop(), "_thread_id", None):
                handle = before(*args, **kwargs)
                tap._queued[id(handle)] = (handle, tap.current, "thread", -1, "", "")
                return handle
            # From another thread: caused by the job that thread ran last, if any.
            cause = getattr(tap._job_threads, "seq", 0)
            with tap._storing_lock:
                tap._storing += 1
                try:
                    handle = before(*args, **kwargs)
                    # setdefault: what queued it may have told the recorder
                    # already (`Recorder.queued`, from the loop's thread),
                    # and knows better than this thread.
                    tap._queued.setdefault(id(handle), (handle, cause, "thread", -1, "", ""))
                finally:
                    tap._storing -= 1
            return handle

        return call_soon_threadsafe

    def _arm(self, timer: asyncio.TimerHandle, delay: float, callback: Any, entry: str) -> None:
        number = next(self._timer_numbers)
        seq = self.next_seq()
        site, api = caller(3, entry)
        described = describe_callback(callback)
        self._prune_timers()
        self._timers[id(timer)] = (timer, number, seq)
        if callback is _sleep_callback:
            name = f"sleep {delay:g} s"
        else:
            name = f"timer {delay:g} s: {described}"
        self.emit(
            Event(
                seq,
                "timer",
                self.number,
                _real_time(),
                self._now(),
                0.0,
                _native_id(),
                self.current_task,
                name,
                self.current,
                {
                    "timer": number,
                    "delay": delay,
                    "when": timer.when(),
                    "site": site,
                    "api": api,
                    "callback": described,
                },
            )
        )

    def _prune_timers(self) -> None:
        timers = self._timers
        if len(timers) > 4096 and len(timers) & 1023 == 0:
            for key, (timer, _, _) in list(timers.items()):
                if timer._cancelled:  # type: ignore[attr-defined]
                    del timers[key]

    def _call_later(
        self, before: Callable[..., asyncio.TimerHandle]
    ) -> Callable[..., asyncio.TimerHandle]:
        tap = self

        @functools.wraps(before)
        def call_later(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            timer = before(*args, **kwargs)
            if tap.full:
                delay = args[0] if args else kwargs.get("delay", 0.0)
                callback = args[1] if len(args) > 1 else kwargs.get("callback")
                tap._arm(timer, float(delay), callback, "loop.call_later")
            return timer

        return call_later

    def _call_at(
        self, before: Callable[..., asyncio.TimerHandle]
    ) -> Callable[..., asyncio.TimerHandle]:
        tap = self

        @functools.wraps(before)
        def call_at(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            timer = before(*args, **kwargs)
            if tap.full:
                callback = args[1] if len(args) > 1 else kwargs.get("callback")
                tap._arm(timer, float(timer.when()) - tap._now(), callback, "loop.call_at")
            return timer

        return call_at

    def _run_in_executor(self, before: Callable[..., Any]) -> Callable[..., Any]:
        tap = self

        @functools.wraps(before)
        def run_in_executor(*args: Any, **kwargs: Any) -> Any:
            executor = args[0] if args else None
            func = args[1] if len(args) > 1 else None
            if (
                not tap.full
                or kwargs
                or not callable(func)
                # (inspect's: asyncio's warns from 3.14; the old marker too)
                or inspect.iscoroutinefunction(func)
                or hasattr(func, "_is_coroutine")
                or asyncio.iscoroutine(func)
                # Only a thread runs the job inside our callable: another
                # executor may need to pickle the function (a process pool).
                or not (executor is None or isinstance(executor, ThreadPoolExecutor))
            ):
                return before(*args, **kwargs)  # unrecorded: its own checks and errors
            number = next(tap._jobs)
            seq = tap.next_seq()
            real = _real_time()
            time = tap._now()
            described = describe_callback(func)
            site, api = caller(2, "loop.run_in_executor")
            job = RecordedJob(tap, number, seq, func, described)
            future = before(args[0], job, *args[2:])
            tap.emit(
                Event(
                    seq,
                    "job",
                    tap.number,
                    real,
                    time,
                    0.0,
                    _native_id(),
                    tap.current_task,
                    f"job {number}: {described}",
                    tap.current,
                    {"job": number, "func": described, "site": site, "api": api},
                )
            )
            return future

        return run_in_executor

    def _spawner(self, before: Callable[..., Any], what: str) -> Callable[..., Any]:
        tap = self

        @functools.wraps(before)
        def spawn(*args: Any, **kwargs: Any) -> Any:
            # The original's coroutine now (a bad call fails here, as it
            # would), awaited inside one that records what it started.
            started = before(*args, **kwargs)
            if not tap.full or len(args) < 2:
                return started
            return tap._spawned(started, what, args[1], caller_site(2))

        return spawn

    async def _spawned(self, started: Any, what: str, program: Any, site: Site | None) -> Any:
        task = self.current_task
        cause = self.current
        real = _real_time()
        time = self._now()
        result = await started
        pid = result[0].get_pid()
        try:
            shown = program if isinstance(program, str) else os.fsdecode(program)
        except TypeError:
            shown = repr(program)
        self.emit(
            Event(
                self.next_seq(),
                "spawn",
                self.number,
                real,
                time,
                _real_time() - real,
                _native_id(),
                task,
                f"{what} {shown} (pid {pid})",
                cause,
                {"pid": pid, "program": shown, "site": site},
            )
        )
        return result

    def _subprocess_exec(self, before: Callable[..., Any]) -> Callable[..., Any]:
        return self._spawner(before, "exec")

    def _subprocess_shell(self, before: Callable[..., Any]) -> Callable[..., Any]:
        return self._spawner(before, "shell")

    def _exit(self, transport: Any, returncode: object, start: float, time: float) -> None:
        if not self.full:
            return
        try:
            pid = transport.get_pid()
        except Exception:
            pid = None
        self.emit(
            Event(
                self.next_seq(),
                "exit",
                self.number,
                start,
                time,
                0.0,
                self._thread,
                0,
                f"exit pid {pid}: {returncode}",
                0,
                {"pid": pid, "returncode": returncode},
            )
        )

    def _call_exception_handler(self, before: Callable[..., None]) -> Any:
        tap = self

        @functools.wraps(before)
        def call_exception_handler(*args: Any, **kwargs: Any) -> None:
            context = args[0] if len(args) == 1 and not kwargs else None
            if tap.recorders and isinstance(context, dict):
                exc = context.get("exception")
                message = str(context.get("message", ""))
                future = context.get("future") or context.get("task")
                details: dict[str, Any] = {
                    "message": message,
                    "exception": None if exc is None else repr(exc),
                }
                if isinstance(future, asyncio.Task):
                    details["task_name"] = future.get_name()
                    details["coro"] = _coro_name(future.get_coro())
                tap.note("error", message or "error", details, None)
            before(*args, **kwargs)

        return call_exception_handler


def _fd_target(handle: Any) -> str:
    """What an fd's reader or writer serves: its transport's peer, or its callback.

    From the handle itself: the registry's fd-to-transport map may still
    name a closed transport whose fd number was reused.
    """
    callback = handle._callback
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.BaseTransport):
        return describe_transport(owner)
    described = describe_callback(callback)
    for arg in handle._args or ():
        if isinstance(arg, socket.socket):
            try:
                return f"{described} on {_address(arg.getsockname())}"
            except OSError:
                break
    return described


class RecordedJob:
    """An executor job's function, run inside what records its start and end.

    It is what the executor is handed instead of the program's function
    (a job of the default executor or of a ``ThreadPoolExecutor``, while a
    recorder with ``events=True`` is attached): ``__wrapped__`` is the
    program's function (as `functools.wraps` names it), ``event`` the
    ``seq`` of the job's ``job`` event and ``loop`` its loop's number.
    """

    __slots__ = ("__wrapped__", "described", "event", "loop", "number", "tap")

    def __init__(self, tap: _Tap, number: int, seq: int, func: Any, described: str) -> None:
        self.tap = tap
        self.number = number
        self.event = seq
        self.loop = tap.number
        self.__wrapped__ = func
        self.described = described

    def __call__(self, *args: Any) -> Any:
        tap = self.tap
        start = _real_time()
        time = tap._now()
        ok = False
        try:
            result = self.__wrapped__(*args)
            ok = True
            return result
        finally:
            end = _real_time()
            tap._job_threads.seq = self.event
            tap.emit(
                Event(
                    tap.next_seq(),
                    "job-run",
                    tap.number,
                    start,
                    time,
                    end - start,
                    _native_id(),
                    0,
                    f"job {self.number}: {self.described}",
                    self.event,
                    {"job": self.number, "ok": ok, "thread_name": threading.current_thread().name},
                )
            )

    def __repr__(self) -> str:
        return repr(self.__wrapped__)


class Recorder:
    """Records what the loops it is attached to do (see the module docstring)."""

    def __init__(
        self,
        *,
        events: bool = True,
        limit: int | None = None,
        slow: float = 0.1,
        keep_slow: int = 100,
    ) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit!r}")
        if slow < 0:
            raise ValueError(f"slow must be >= 0, got {slow!r}")
        self.wants_events = bool(events)
        self.limit = limit
        self.slow_threshold = float(slow)
        self._lock = threading.Lock()
        self._events: collections.deque[Event] | list[Event]
        self._events = [] if limit is None else collections.deque(maxlen=limit)
        self.dropped = 0
        self.slow: collections.deque[Event] = collections.deque(maxlen=keep_slow)
        self.errors: collections.deque[Event] = collections.deque(maxlen=keep_slow)
        self._taps: list[_Tap] = []
        # Tasks seen while attached (events=True: their events name them).
        self._tasks: dict[int, TaskInfo] = {}
        self._subscribers: tuple[Callable[[Event], object], ...] = ()
        self._watching = False

    # ------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start recording *loop* (a tideloop loop). Call it from the loop's
        thread, or while the loop is not running."""
        if not isinstance(loop, Loop):
            raise TypeError(f"a tideloop loop is expected, got {loop!r}")
        if loop.is_closed():
            raise RuntimeError("Event loop is closed")
        tap = _tap_of(loop)
        if tap is None:
            tap = _Tap(loop)
        if self in tap.recorders:
            return
        with self._lock:
            self._taps.append(tap)
        tap.add(self)

    def detach(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Stop recording *loop* (None: every loop). Events and task infos stay."""
        with self._lock:
            taps = [t for t in self._taps if loop is None or t.loop() is loop]
            self._taps = [t for t in self._taps if t not in taps]
        for tap in taps:
            tap.remove(self)

    @property
    def loops(self) -> list[Loop]:
        """The loops being recorded (alive ones)."""
        with self._lock:
            taps = list(self._taps)
        return [loop for loop in (t.loop() for t in taps) if loop is not None]

    def loop_number(self, loop: asyncio.AbstractEventLoop) -> int:
        """The number events give *loop* (0 if this recorder never attached to it)."""
        with self._lock:
            for tap in self._taps:
                if tap.loop() is loop:
                    return tap.number
        return 0

    @contextlib.contextmanager
    def recording(self, loop: asyncio.AbstractEventLoop | None = None) -> Iterator[Recorder]:
        """Record *loop* (None: every loop ``tideloop.new_event_loop`` makes
        meanwhile) until the block ends."""
        if loop is not None:
            self.attach(loop)
            try:
                yield self
            finally:
                self.detach(loop)
            return
        NEW_LOOP_OBSERVERS.append(self.attach)
        try:
            yield self
        finally:
            NEW_LOOP_OBSERVERS.remove(self.attach)
            self.detach()

    def subscribe(self, subscriber: Callable[[Event], object]) -> None:
        """Call ``subscriber(event)`` for every event from now on, in the
        thread that recorded it (the loop's, or a worker's); it must be quick."""
        self._subscribers = (*self._subscribers, subscriber)

    def unsubscribe(self, subscriber: Callable[[Event], object]) -> None:
        self._subscribers = tuple(s for s in self._subscribers if s is not subscriber)

    def note(
        self,
        loop: asyncio.AbstractEventLoop,
        kind: str,
        name: str,
        *,
        cause: int | None = None,
        **args: Any,
    ) -> Event | None:
        """Record an event of the caller's own (None if *loop* is not recorded).

        Its ``task`` and times are the loop's now, and so is its ``cause``
        unless given (the ``seq`` of the event that made it happen): called
        from a callback, the event points at that callback. *args* become
        its ``args``; keep them plain data (a viewer may print them).
        """
        tap = self._tap(loop)
        if tap is None:
            return None
        return tap.note(kind, name, args, cause)

    def queued(
        self,
        loop: asyncio.AbstractEventLoop,
        handle: asyncio.Handle,
        cause: int,
        source: str = "?",
    ) -> None:
        """Say what queued *handle* on *loop*, where the recorder could not
        see it queued: the event of its callback (or its task's step) then
        has *cause* (an event's ``seq``) as its ``cause`` and *source* as its
        ``source``. For whoever queues handles itself: a `Schedule`
        (``tideloop.testing``'s Perturber) holding another thread's result
        and queuing it later. Call it from the loop's thread, before the
        handle runs; with ``events=False`` it does nothing.
        """
        tap = self._tap(loop)
        if tap is not None:
            tap.queued(handle, cause, source)

    def _tap(self, loop: asyncio.AbstractEventLoop) -> _Tap | None:
        with self._lock:
            return next((t for t in self._taps if t.loop() is loop), None)

    # ------------------------------------------------------------------

    @property
    def events(self) -> list[Event]:
        """The events kept, in the order they completed."""
        with self._lock:
            return list(self._events)

    @property
    def tasks(self) -> dict[int, TaskInfo]:
        """The tasks seen, by number: with ``events=True`` every one since
        attaching (also after detaching); else the ones alive."""
        with self._lock:
            found = dict(self._tasks)
        for info in self.task_infos():
            found.setdefault(info.number, info)
        return found

    def task_infos(self, loop: asyncio.AbstractEventLoop | None = None) -> list[TaskInfo]:
        """The infos of the tasks alive on *loop* (None: every loop recorded now)."""
        with self._lock:
            taps = [t for t in self._taps if loop is None or t.loop() is loop]
        return [info for tap in taps for info in list(tap.tasks.values())]

    def task_info(self, number: int) -> TaskInfo | None:
        """The task events call *number* (with ``events=True``: any task seen
        since attaching), or None."""
        with self._lock:
            info = self._tasks.get(number)
        if info is None:
            info = next((i for i in self.task_infos() if i.number == number), None)
        return info

    def _seen(self, info: TaskInfo) -> None:
        if self.wants_events:
            with self._lock:
                self._tasks[info.number] = info

    def info_of(self, task: asyncio.Task[Any]) -> TaskInfo | None:
        """What was recorded of *task* (None if it never ran while recorded)."""
        with self._lock:
            taps = list(self._taps)
        for tap in taps:
            info = tap.tasks.get(id(task))
            if info is not None and info.ref() is task:
                return info
        return None

    def _take(self, event: Event) -> None:
        kind = event.kind
        if kind in ("step", "callback"):
            if event.dur >= self.slow_threshold:
                self.slow.append(event)
        elif kind == "error":
            self.errors.append(event)
        if self.wants_events and self.limit != 0:
            with self._lock:
                events = self._events
                if self.limit is not None and len(events) == self.limit:
                    self.dropped += 1  # the deque drops its oldest
                events.append(event)
        for subscriber in self._subscribers:
            subscriber(event)


def _tap_of(loop: Loop) -> _Tap | None:
    recorder = loop._instruments.recorder
    return recorder if isinstance(recorder, _Tap) else None
