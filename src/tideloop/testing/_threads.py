"""ThreadWatch: under virtual time, is another thread still working?

Layer: top (``tideloop.testing``). A virtual clock jumps to the next timer
as soon as the loop is idle. Another thread may be one millisecond away
from handing the loop work (``call_soon_threadsafe``, an executor job's
result): a jump past a 20 ms timeout would make it late on every run. So
before each jump the core asks the loop's `Supervisor` (``_supervisor.py``),
which asks a `ThreadWatch`; while it says a thread is busy, the loop polls
in real time and asks again. The threads watched are every thread but the
loop's and its *baseline*: those of the loop's executor jobs
(``run_in_executor``, ``to_thread``), a thread of the program's own,
anyio's workers, a library's pool.

The rule: a thread blocked waiting for someone else is *idle* and does not
hold the clock; only one at work does. The opposite mistake hangs: a job
blocked on an ``Event`` that a task sets after ``asyncio.sleep(0.1)``
waits for the clock, while the clock would wait for the job.

Facts / what this means for us:

- Python cannot tell a thread's state, but ``sys._current_frames()`` gives
  each thread's innermost Python frame. A thread blocked waiting for
  something (``Condition.wait`` without a timeout, under ``Event.wait``,
  ``Queue.get``, ``Future.result``; ``Thread.join``; an idle executor
  worker in ``_worker``; another loop's ``select``; ``accept``) shows one
  of a few known frames: that thread is *idle*.
- A wait made in C straight from the program's code (``lock.acquire()``,
  ``with lock:``, ``SimpleQueue.get()``) leaves the caller's frame at the
  call. The instruction at ``f_lasti`` says which call it is, and the
  object it is made on is a local, a global or an attribute of one (read
  without running code: `inspect.getattr_static`): a lock still held, a
  queue still empty, means the thread still waits (`_call_at`, `_blocked`).
- blockbuster wraps a lock's ``acquire`` (and other blocking calls) in a
  frame of its own, ``wrapper``: the wait is the frame below it.
- Only the innermost frame says a thread waits: a frame that waits in a
  frame below it (``Semaphore.acquire``, ``Queue.get``), seen innermost,
  runs Python code.
- A thread in ``Condition.wait`` with a timeout (``Event.wait(3)``) or in
  ``time.sleep`` acts by itself only when the timeout or the sleep ends:
  before that, only if another thread wakes it. So for a jump shorter
  than what is surely left of it the thread is idle (the jump passes
  nothing it does by itself: a real clock would reach the loop's timer
  first), and for a longer one busy (``threading.Timer``, a poll loop: it
  acts first). What is surely left is its length less the real time since
  the watch's last look before it began (it began after that look) and
  less the jumps already let through during it; one already under way at
  the watch's first look (its construction) is busy: when it began is
  unknown. anyio's suite under virtual time had both: a worker in
  ``Event.wait(3)`` that the program sets after a ``sleep(0.1)`` (held
  for a grace second, then warned about), and a server thread asleep for
  1 s whose answer came before the client's 0.1 s timeout.
- A thread notified in ``Condition.wait`` (its waiter taken out of the
  condition's list) is busy, though its frame is still the wait's: it is
  only waiting for the GIL, and a jump now would pass the work it was
  just handed (a job put on an idle worker's queue). Likewise a lock
  released under a thread in ``acquire``.
- The same holds for a thread in ``select`` or ``accept`` that the kernel
  has woken (a request the loop just sent to a fixture's server thread):
  its frame stays the wait's until the loop's thread lets go of the GIL.
  A ``select`` leaves its fds ready (level-triggered), so a zero-timeout
  poll(2) of them shows the wake (`_woken`); ``accept`` has already taken
  the connection off the queue, so before a jump past such a thread the
  watch leaves the GIL free for `SETTLE` real seconds and looks again.
- A thread that is starting or ending (in ``Thread._bootstrap_inner``,
  outside its target) counts as busy: a new thread has its whole target
  ahead of it, and an ending one is gone a moment later.
- Anything else (Python code running, a ``time.sleep`` or a wait with a
  timeout that may end within the jump, as ``threading.Timer``'s, a
  blocking ``recv`` or C call made from the thread's own code) is *busy*,
  and holds the clock for a while.
  Which while depends on whether it *computes*: the kernel keeps each
  thread's CPU time (``pthread_getcpuclockid``; on PyPy, which lacks it,
  procfs's ``schedstat``), so a thread that used at
  least `COMPUTING` of a CPU since it was first seen busy is at work, and
  holds the clock for up to `COMPUTE_GRACE` real seconds (a job hashing a
  file); one that did not (asleep, or blocked in a call tideloop cannot
  see into, maybe on the program) for `GRACE`. Then tideloop cannot tell
  and says so: a `VirtualTimeWarning` names the thread, the job it runs
  and its frames, and the clock moves on without that thread until it is
  next seen idle. So nothing hangs on a thread, and a blocked one costs
  one grace period of real time.
- An executor job whose thread is not in this process (a process pool's)
  holds the clock while it runs, for up to `COMPUTE_GRACE`, then the same
  warning; one still queued behind busy workers does not (its workers do).
- A test runner's threads (pytest-xdist's channel reader in ``read``,
  pytest-timeout's timed wait) look busy all the time and never act on the
  loop. The threads that look busy when the loop is made are its
  *baseline* and are not counted (`runner_threads`); a thread idle then (a
  server thread a fixture started, waiting in ``select`` or ``accept``; a
  worker waiting on a queue) is, and so is a baseline thread from the
  moment it calls ``call_soon_threadsafe`` on the loop (`track_producers`
  wraps the loop's admission of thread handles and takes it out of the
  baseline: it is a producer of this loop's work). A thread that runs an
  event loop or a socket server is never in the baseline: it is a
  fixture's server (uvicorn in a thread, in httpx's suite), whatever it was
  doing when the loop was made. A runner thread that
  ends leaves the baseline (`Baseline.refresh`): glibc hands its ident to
  the next thread started, which may be the program's.

Invariant: the watch only ever delays a jump; it never moves time.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import concurrent.futures.thread
import dis
import functools
import inspect
import io
import os
import queue
import select
import selectors
import socket
import stat
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter as _real_clock  # bound now: seeded_globals patches time.*
from types import CodeType, FrameType
from typing import Any, Final, NamedTuple

from ._blockbuster import is_checking_wrapper

#: A thread's CPU clock, and a clock's reading (bound now, as above); not on
#: every platform: without them no thread is known to compute.
_cpu_clock_of: Callable[[int], int] | None = getattr(time, "pthread_getcpuclockid", None)
_clock_gettime: Callable[[int], float] | None = getattr(time, "clock_gettime", None)

__all__ = [
    "COMPUTE_GRACE",
    "COMPUTING",
    "GRACE",
    "Baseline",
    "ThreadWatch",
    "VirtualTimeWarning",
    "runner_threads",
    "track_producers",
    "waits",
]


class VirtualTimeWarning(RuntimeWarning):
    """Virtual time moved on without a thread tideloop could not tell waiting from working."""


#: (file name ending, function name) of frames a thread waits in, as its
#: innermost frame. Not ``Semaphore.acquire`` nor ``queue.py``'s ``get`` and
#: ``put``: they wait in a frame below (``Condition.wait``, a lock's call),
#: so as the innermost frame they run Python code, the wait over (PyPy's
#: thread pool takes its job through a Python ``SimpleQueue``: its worker,
#: just handed a job, shows ``Semaphore.acquire`` or ``get``).
_IDLE_FRAMES: Final = frozenset(
    {
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("threading.py", "join"),
        ("thread.py", "_worker"),  # concurrent.futures' idle worker
        ("selectors.py", "select"),
        ("socket.py", "accept"),
        ("socketserver.py", "serve_forever"),
        ("_schedule.py", "_producer_pause"),
    }
)

#: Real seconds a busy thread that does not compute holds the clock.
GRACE: Final = 1.0
#: Real seconds a busy thread that computes holds the clock.
COMPUTE_GRACE: Final = 10.0
#: The share of one CPU a busy thread must have used to count as computing.
COMPUTING: Final = 0.1
#: Frames searched for the executor job a thread runs.
_STACK: Final = 64


def _where(frame: FrameType) -> tuple[FrameType, tuple[str, str]]:
    """The frame a thread waits in, and its (file name, function name)."""
    code = frame.f_code
    if is_checking_wrapper(code):
        # blockbuster (anyio's and aiohttp's suites run under it) wraps
        # blocking calls, a lock's acquire among them, in a Python frame:
        # the wait is the frame below.
        caller = frame.f_back
        if caller is not None:
            frame, code = caller, caller.f_code
    name = code.co_filename
    slash = name.rfind("/")
    return frame, (name[slash + 1 :], code.co_name)


def _call_of(innermost: FrameType, frame: FrameType) -> _Call | None:
    """The call a thread whose innermost frame is *innermost* makes now
    (*frame*: where `_where` says it waits). Through blockbuster's wrapper,
    the wrapped call is in the wrapper's locals (its arguments as given;
    a method patched on a type gets its instance as the first)."""
    if not is_checking_wrapper(innermost.f_code):
        return _call_at(frame)
    local = innermost.f_locals
    fn, args, kwargs = local.get("func"), local.get("args"), local.get("kwargs")
    if fn is None or not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return None
    # An unbound method of a C type (``lock.acquire`` patched on the lock's
    # type): bound to its instance, as the program called it.
    unbound = args and getattr(fn, "__self__", None) is None and hasattr(fn, "__get__")
    if unbound and isinstance(args[0], getattr(fn, "__objclass__", ())):
        fn, args = fn.__get__(args[0]), args[1:]
    return fn, args, kwargs


def _idle(frame: FrameType) -> bool:
    return _idle_at(*_where(frame))


def waits(innermost: FrameType) -> bool:
    """Whether the thread whose innermost frame is *innermost* is blocked
    waiting for another thread to act (a `ThreadWatch` idle wait, or a C wait
    on a lock still held or a queue still empty)."""
    frame, where = _where(innermost)
    if _idle_at(frame, where):
        return True
    if where == _CONDITION_WAIT:
        # Notified (its waiter out of the condition's list), or a timed
        # wait: it acts without another thread. It may still show the
        # waiter's acquire or the condition lock's, the lock held (handed to
        # it, from 3.13), until it has the GIL; under load that lasts. Read
        # as a wait, a producer gave its handle up while the loop's thread
        # was only returning from ``Thread.start()`` (CI, Debian's 3.15).
        return False
    call = _call_of(innermost, frame)
    return call is not None and _blocked(call).waits


def _idle_at(frame: FrameType, where: tuple[str, str]) -> bool:
    if where not in _IDLE_FRAMES:
        return False
    if where in _JOINS:
        # Joining a thread: idle while that thread runs Python code (its own
        # state decides); once it has no frame left it is ending, and the
        # join is about to return (3.13 joins in C, with no trace).
        joined = getattr(frame.f_locals.get("self"), "ident", None)
        return joined is None or joined in sys._current_frames()
    if where == ("threading.py", "wait"):
        # Condition.wait (under Event.wait, Queue.get, Future.result):
        # with a timeout, the thread acts when it expires (threading.Timer,
        # a poll loop), so it is busy; without one it waits for others,
        # until notified: notify() takes its waiter out of the condition's
        # list before the thread runs again (it may wait for the GIL a
        # while, still in this frame), and from then on it is busy.
        local = frame.f_locals
        if local.get("timeout") is not None:
            return False
        waiter, waiters = local.get("waiter"), _waiters_of(local)
        return waiter is None or waiters is None or waiter in waiters
    if where == _PRODUCER_PAUSE:
        # A thread waiting for its call_soon_threadsafe handle to be
        # admitted under a schedule (_schedule._pause): it waits for the
        # loop until it is.
        return not getattr(frame.f_locals.get("arrival"), "admitted", True)
    if where == _POOL_WORKER:
        if _pool_closing(frame):
            return False
        # A thread pool's worker waits on its queue (a SimpleQueue: a wait
        # in C, with no trace once woken): with a job in it, it is about to
        # take it.
        work_queue = frame.f_locals.get("work_queue")
        empty = getattr(work_queue, "empty", None)
        return not isinstance(work_queue, (queue.SimpleQueue, queue.Queue)) or bool(
            empty and empty()
        )
    return True


def _pool_closing(frame: FrameType) -> bool:
    """Is the pool of the worker in *frame* (``_worker``) shutting down?

    Such a worker exits once it has the sentinel each exiting worker passes
    on: it acts without the program, and a join of it (the executor's
    shutdown, under asyncio's 300 s timeout) must not be jumped past while
    it may already be woken, waiting only for the GIL (no trace): busy.
    """
    ref = frame.f_locals.get("executor_reference")
    if not isinstance(ref, weakref.ref):
        return False
    executor = ref()
    return executor is None or getattr(executor, "_shutdown", False) is True


#: A thread waiting for the loop to admit its handle (``_schedule._pause``).
_PRODUCER_PAUSE: Final = ("_schedule.py", "_producer_pause")

#: Frames of a thread joining another.
_JOINS: Final = frozenset({("threading.py", "join"), ("threading.py", "_wait_for_tstate_lock")})

#: A ``concurrent.futures`` thread pool's worker between jobs.
_POOL_WORKER: Final = ("thread.py", "_worker")
_CONDITION_WAIT: Final = ("threading.py", "wait")


#: Instructions that only set up a call: skipped when reading one.
_CALL_NOISE: Final = frozenset({"PRECALL", "CACHE", "PUSH_NULL", "NOP", "EXTENDED_ARG"})
#: Calls (PyPy's bytecode is 3.10's: CALL_METHOD, CALL_FUNCTION), and calls
#: with keyword names, which the instruction before loads as a constant.
_CALLS: Final = frozenset({"CALL", "CALL_METHOD", "CALL_FUNCTION"})
_KW_CALLS: Final = frozenset({"CALL_KW", "CALL_FUNCTION_KW"})
#: Instructions that load a name.
_NAME_LOADS: Final = frozenset(
    {
        "LOAD_FAST",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_BORROW",
        "LOAD_DEREF",
        "LOAD_GLOBAL",
        "LOAD_NAME",
    }
)
_ATTR_LOADS: Final = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_LOCK_TYPES: Final = (_thread.LockType, _thread.RLock)
_SLEEP: Final = time.sleep

#: Decoded code objects (a few dozen at most: the frames threads wait in).
_decoded: dict[CodeType, list[dis.Instruction]] = {}

#: A C call a frame is making: (the callable, its positional and keyword arguments).
_Call = tuple[object, tuple[object, ...], dict[str, object]]


def _instructions(code: CodeType) -> list[dis.Instruction]:
    found = _decoded.get(code)
    if found is None:
        if len(_decoded) > 256:
            _decoded.clear()
        found = _decoded[code] = list(dis.get_instructions(code))
    return found


def _call_at(frame: FrameType) -> _Call | None:
    """The call *frame* is making now, if it can be read without running code.

    A thread blocked in C (``lock.acquire()``, ``with lock:``,
    ``time.sleep(1)``) shows the frame that made the call, stopped at it;
    the instruction at ``f_lasti`` is the call, and the callable and its
    arguments were loaded just before: constants, names (locals, globals)
    and their attributes (read with `inspect.getattr_static`, from a
    module, a lock or a queue only). A thread pool's worker calling a C
    function as the job itself stops in ``_WorkItem.run``, whose work item
    holds the call. Anything else (a computed receiver, a starred call) is
    None.
    """
    if frame.f_code is _WORKER_CONTEXT_RUN:
        # 3.14+: the job's call is made here, from the task's parts.
        local = frame.f_locals
        fn, args, kwargs = local.get("fn"), local.get("args"), local.get("kwargs")
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            return None
        return fn, args, kwargs
    if frame.f_code is _WORK_ITEM_RUN:
        item = frame.f_locals.get("self")
        args, kwargs = getattr(item, "args", None), getattr(item, "kwargs", None)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            return None
        return getattr(item, "fn", None), args, kwargs
    instructions = _instructions(frame.f_code)
    at = frame.f_lasti
    i = next((k for k, ins in enumerate(instructions) if ins.offset == at), None)
    if i is None:
        return None
    ins = instructions[i]
    if ins.opname == "BEFORE_WITH":  # 3.11 to 3.13: entering ``with X:``
        found = _value(frame, instructions, i - 1)
        return None if found is None else (_method(found[0], "__enter__"), (), {})
    if (ins.opname not in _CALLS and ins.opname not in _KW_CALLS) or not isinstance(ins.arg, int):
        return None
    k = _skip_noise(instructions, i - 1)
    names: tuple[str, ...] = ()
    if ins.opname in _KW_CALLS or instructions[k].opname == "KW_NAMES":  # 3.13, PyPy / 3.11, 3.12
        names_ins = instructions[k]
        found_names = names_ins.argval
        if not isinstance(found_names, tuple) and isinstance(names_ins.arg, int):
            found_names = frame.f_code.co_consts[names_ins.arg]  # 3.11's KW_NAMES
        if not isinstance(found_names, tuple):
            return None
        names = found_names
        k = _skip_noise(instructions, k - 1)
    values: list[object] = []
    for _ in range(ins.arg):
        found = _value(frame, instructions, k)
        if found is None:
            return None
        values.append(found[0])
        k = _skip_noise(instructions, found[1])
    values.reverse()
    if k < 0:
        return None
    callee: object
    op = instructions[k]
    if op.opname in _ATTR_LOADS:
        found = _value(frame, instructions, k - 1)
        if found is None:
            return None
        callee = _method(found[0], str(op.argval))
    elif op.opname == "LOAD_SPECIAL" and op.argrepr == "__enter__":  # 3.14: ``with``
        while k > 0 and instructions[k - 1].opname in ("SWAP", "COPY", "LOAD_SPECIAL"):
            k -= 1
        found = _value(frame, instructions, k - 1)
        if found is None:
            return None
        callee = _method(found[0], "__enter__")
    else:
        found = _value(frame, instructions, k)
        if found is None:
            return None
        callee = found[0]
    split = len(values) - len(names)
    if split < 0:
        return None
    return callee, tuple(values[:split]), dict(zip(names, values[split:], strict=True))


def _skip_noise(instructions: list[dis.Instruction], k: int) -> int:
    while k >= 0 and instructions[k].opname in _CALL_NOISE:
        k -= 1
    return k


def _value(
    frame: FrameType, instructions: list[dis.Instruction], end: int
) -> tuple[object, int] | None:
    """The value that ``instructions[..end]`` loads (a constant, or a name and
    attributes of it), and the index before those instructions."""
    end = _skip_noise(instructions, end)
    if end < 0:
        return None
    if instructions[end].opname in ("LOAD_CONST", "LOAD_SMALL_INT"):
        return instructions[end].argval, end - 1
    attrs: list[str] = []
    k = end
    while k >= 0 and instructions[k].opname in _ATTR_LOADS | _CALL_NOISE:
        if instructions[k].opname in _ATTR_LOADS:
            attrs.append(str(instructions[k].argval))
        k -= 1
    if k < 0 or instructions[k].opname not in _NAME_LOADS:
        return None
    op = instructions[k]
    name = str(op.argval)
    namespaces: tuple[Mapping[str, Any], ...]
    if op.opname == "LOAD_GLOBAL":
        namespaces = (frame.f_globals, frame.f_builtins)
    elif op.opname == "LOAD_NAME":
        namespaces = (frame.f_locals, frame.f_globals, frame.f_builtins)
    else:
        namespaces = (frame.f_locals,)
    missing = object()
    obj: object = missing
    for namespace in namespaces:
        obj = namespace.get(name, missing)
        if obj is not missing:
            break
    if obj is missing:
        return None
    for attr in reversed(attrs):
        obj = _static_attr(obj, attr)
    return obj, k - 1


def _static_attr(obj: object, name: str) -> object:
    """``obj.name`` if reading it runs no code of the program's (an instance's
    ``__dict__`` entry or slot, a module's global), else None."""
    try:
        value = inspect.getattr_static(obj, name)
    except AttributeError:
        return None
    if isinstance(value, types.MemberDescriptorType):  # a __slots__ field
        try:
            return value.__get__(obj, type(obj))
        except AttributeError:
            return None
    if isinstance(obj, types.ModuleType):
        return value  # a module's functions are its globals: nothing binds them
    if hasattr(type(value), "__get__"):
        return None  # a property, a method: reading it runs the program's code
    return value


def _method(obj: object, name: str) -> object:
    """``obj.name`` for the objects whose blocking methods `_blocked` knows."""
    if isinstance(obj, socket.socket):
        return getattr(obj, name, None) if name in _SOCKET_READS else None
    if isinstance(obj, (*_LOCK_TYPES, queue.SimpleQueue)):
        return getattr(obj, name, None)
    if isinstance(obj, types.ModuleType):
        return _static_attr(obj, name)
    return None


def _unwrap(call: _Call) -> _Call:
    """A call through ``functools.partial`` or a ``functools.wraps`` wrapper
    (blockbuster's), as the call of what it wraps."""
    fn, args, kwargs = call
    for _ in range(8):
        if isinstance(fn, functools.partial):
            partial: functools.partial[object] = fn
            fn, args, kwargs = partial.func, partial.args + args, {**partial.keywords, **kwargs}
        elif isinstance(fn, types.FunctionType) and "__wrapped__" in vars(fn):
            fn = vars(fn)["__wrapped__"]
        else:
            break
    return fn, args, kwargs


#: A blocking socket's calls that wait for a peer to send (or connect).
_SOCKET_READS: Final = frozenset(
    {"recv", "recv_into", "recvfrom", "recvfrom_into", "recvmsg", "recvmsg_into", "_accept"}
)


class _Blocked(NamedTuple):
    """What a C call says of its thread (`_blocked`)."""

    #: It waits for another thread (or a peer) to act.
    waits: bool = False
    #: It sleeps this many seconds (``time.sleep``).
    sleeps: float | None = None
    #: It waits on a socket whose data, once the kernel hands it over,
    #: leaves no trace to poll while the thread waits for the GIL: before a
    #: jump, give it a moment (as a thread in ``accept``).
    settle: bool = False
    #: Once woken, its wait leaves no trace in Python (a SimpleQueue's item
    #: taken in C): whether the kernel is about to run it says.
    traceless: bool = False


_NOT_BLOCKED: Final = _Blocked()


def _blocked(call: _Call) -> _Blocked:
    """What a thread making the C call *call* is doing.

    An untimed acquire of a lock still held, an untimed get from a
    ``SimpleQueue`` still empty, a read from a blocking socket with nothing
    to read: the thread waits for another to act. Once the lock is free,
    the queue has an item or the socket data, it is about to run (it may
    only be waiting for the GIL): busy. ``time.sleep(s)``: busy, for *s*.
    """
    fn, args, kwargs = _unwrap(call)
    if fn is _SLEEP or fn is time.sleep:
        seconds = args[0] if len(args) == 1 and not kwargs else None
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            return _Blocked(sleeps=float(seconds))
        return _NOT_BLOCKED
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    # (PyPy names a lock's acquire "acquire_lock".)
    if isinstance(owner, _LOCK_TYPES) and name in ("acquire", "acquire_lock", "__enter__"):
        untimed = not kwargs and args in ((), (True,), (True, -1))
        untimed = untimed or (not args and kwargs in ({"blocking": True}, {"timeout": -1}))
        # settle: from 3.13 a released lock is handed to its waiter at
        # once, which then still shows this call, the lock held, until it
        # has the GIL: look again after a pause, in which it would run.
        return _Blocked(waits=untimed and _held(owner), settle=True)
    if isinstance(owner, queue.SimpleQueue) and name == "get":
        untimed = args in ((), (True,), (True, None)) and not kwargs
        untimed = untimed or (not args and kwargs in ({"block": True}, {"timeout": None}))
        untimed = untimed or (not args and kwargs == {"block": True, "timeout": None})
        return _Blocked(waits=untimed and owner.empty(), traceless=True)
    if isinstance(owner, socket.socket) and name in _SOCKET_READS:
        # A socket with a timeout waits in poll(2) and acts when it expires.
        fd = owner.fileno()
        if owner.gettimeout() is not None or fd < 0:
            return _NOT_BLOCKED
        return _Blocked(waits=not _ready(fd, select.POLLIN), settle=True, traceless=True)
    read_fd = _read_fd(fn, owner, name, args)
    if read_fd is not None:
        # A blocking read of a pipe, a tty or a socket file with nothing to
        # read (pytest-xdist's execnet reads its channel this way): it waits
        # for a peer to write.
        return _Blocked(waits=not _ready(read_fd, select.POLLIN), settle=True, traceless=True)
    return _NOT_BLOCKED


#: Bound now: a simulated disk (seeded_globals) patches os's file calls.
_OS_READ: Final = os.read
_FSTAT: Final = os.fstat
_GET_BLOCKING: Final = os.get_blocking

_FILE_TYPES: Final = (io.FileIO, io.BufferedReader, io.TextIOWrapper)
#: Reads of a file object (io's and os's) that wait for data on a pipe.
_FILE_READS: Final = frozenset({"read", "readinto", "readline", "read1", "readinto1"})


def _read_fd(fn: object, owner: object, name: str, args: tuple[Any, ...]) -> int | None:
    """The fd that a blocking read (``os.read(fd, n)``, a pipe's file object's
    ``read``) waits on, if *fn* is one; else None. Regular files never wait."""
    fd: object = None
    if (fn is _OS_READ or fn is os.read) and args:
        fd = args[0]
    elif (
        isinstance(owner, (io.FileIO, io.BufferedReader, io.TextIOWrapper)) and name in _FILE_READS
    ):
        try:
            fd = owner.fileno()
        except (OSError, ValueError):
            return None
    if not isinstance(fd, int) or fd < 0:
        return None
    try:
        mode = _FSTAT(fd).st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        return None
    try:
        if not _GET_BLOCKING(fd):
            return None  # it returns at once (EAGAIN): not a wait
    except OSError:
        return None
    return fd


def _ready(fd: int, mask: int) -> bool:
    return _any_ready({fd: mask})


def _any_ready(interest: dict[int, int]) -> bool:
    """Whether any fd of *interest* (fd -> poll mask) is ready now."""
    poller = select.poll()
    for fd, mask in interest.items():
        poller.register(fd, mask)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(ev & _WAKES and not ev & select.POLLNVAL for _, ev in events)


def _held(lock: object) -> bool:
    locked = getattr(lock, "locked", None)
    if callable(locked):
        return bool(locked())
    # _thread.RLock before 3.14 has no locked(); its repr says.
    return repr(lock).startswith("<locked")


def _work_item(frame: FrameType) -> Any:
    """The executor job (a ``concurrent.futures`` thread pool's work item, with
    its ``future`` and ``fn``) whose function the thread of *frame* runs: the
    ``_WorkItem.run`` frame on its stack. None if it runs none."""
    run = _WORK_ITEM_RUN
    f: FrameType | None = frame
    for _ in range(_STACK):
        if f is None:
            return None
        if f.f_code is run:
            item = f.f_locals.get("self")
            future = getattr(item, "future", None)
            return item if isinstance(future, concurrent.futures.Future) else None
        f = f.f_back
    return None


#: ``_WorkItem.run``: where a thread pool's worker calls a job's function.
_WORK_ITEM_RUN: Final = concurrent.futures.thread._WorkItem.run.__code__
#: 3.14+: a thread pool's worker runs a job's function in this method.
_WORKER_CONTEXT_RUN: Final = getattr(
    getattr(getattr(concurrent.futures.thread, "WorkerContext", None), "run", None),
    "__code__",
    None,
)


def _cpu_time(ident: int) -> float | None:
    """The CPU seconds thread *ident* has used (None where the kernel cannot say).

    Call it with the GIL held since ``sys._current_frames()`` named the
    thread: a thread with a Python frame cannot end without the GIL, so
    *ident* still names a live thread (``pthread_getcpuclockid`` of an
    ended one is undefined). Where ``time`` has no per-thread clock
    (PyPy), procfs says, by the thread's kernel id (`_task_file`).
    """
    if _cpu_clock_of is None or _clock_gettime is None:
        # /proc/self/task/TID/schedstat: "ns on the CPU, ns waiting, slices".
        schedstat = _task_file(ident, "schedstat")
        if not schedstat:
            return None
        try:
            return int(schedstat.split()[0]) / 1e9
        except (IndexError, ValueError):
            return None
    try:
        return _clock_gettime(_cpu_clock_of(ident))
    except (OSError, OverflowError, ValueError):
        return None


def _task_file(ident: int, name: str) -> bytes | None:
    """The text of ``/proc/self/task/TID/NAME`` for the thread *ident* (None if
    threading does not know its kernel id, or procfs cannot say). Opened
    non-blocking: procfs answers at once, and blockbuster fails a blocking
    read on a loop's thread."""
    native = next((t.native_id for t in threading.enumerate() if t.ident == ident), None)
    if native is None:
        return None
    try:
        fd = os.open(f"/proc/self/task/{native}/{name}", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, 512)
    except OSError:
        return None
    finally:
        os.close(fd)


def _runnable(ident: int) -> bool:
    """Whether the kernel has thread *ident* running or ready to run (state
    R in ``/proc/self/task/TID/stat``; False where it cannot say).

    A thread the program's action has just woken (its ``read`` returned)
    but the CPU has not run yet shows no sign of it anywhere else: its
    frame and CPU time are the wait's. (Waiting for the GIL, it sleeps in
    the kernel, but then it has run, and its CPU time moved.)
    """
    stat = _task_file(ident, "stat")
    if stat is None:
        return False
    # "TID (comm) S ...": the state follows the last ")" (comm may hold one).
    fields = stat[stat.rfind(b")") + 1 :].split()
    return bool(fields) and fields[0] == b"R"


def _frames(frame: FrameType, limit: int = 3) -> str:
    """The innermost *limit* frames of a thread, innermost first, for a warning."""
    parts: list[str] = []
    f: FrameType | None = frame
    while f is not None and len(parts) < limit:
        code = f.f_code
        parts.append(f"{code.co_qualname} ({code.co_filename}:{f.f_lineno})")
        f = f.f_back
    return " <- ".join(parts)


def _thread_name(ident: int) -> str:
    for thread in threading.enumerate():
        if thread.ident == ident:
            return repr(thread.name)
    return f"#{ident}"


#: The one wait that leaves no trace once woken: ``accept`` takes the
#: connection off the queue in the kernel, then waits for the GIL with the
#: frame unchanged, so nothing left to poll shows that it is about to act.
#: Before a jump past such a thread the watch leaves the GIL free for
#: `SETTLE` real seconds and looks again.
_ACCEPT: Final = ("socket.py", "accept")

#: poll(2) events that mean a waiting thread's call returns now (POLLNVAL,
#: an fd closed under it, does not: its owner closed it and moved on).
_WAKES: Final = select.POLLIN | select.POLLPRI | select.POLLOUT | select.POLLERR | select.POLLHUP


def _woken(frame: FrameType) -> bool:
    return _woken_at(*_where(frame))


def _woken_at(frame: FrameType, where: tuple[str, str]) -> bool:
    """Is a thread idle in ``select`` or ``accept`` already woken by its fds?

    The kernel wakes such a thread the moment data arrives (a request the
    loop just sent to a fixture's server thread), but its innermost frame
    stays the wait's until it has the GIL again, which the loop's thread
    holds: without this look at the fds themselves the clock would jump
    past the reply it is about to send. A zero-timeout poll(2) of the same
    fds answers without consuming anything (level-triggered, as selectors
    and accept are).
    """
    interest: dict[int, int] = {}
    if where in (("selectors.py", "select"), ("socketserver.py", "serve_forever")):
        local = frame.f_locals
        selector = local.get("self") if where[0] == "selectors.py" else local.get("selector")
        if isinstance(selector, selectors.BaseSelector):
            # None once closed, whatever typeshed says.
            mapping: Mapping[Any, selectors.SelectorKey] | None = selector.get_map()
            if mapping is None:
                return False
            try:
                keys = list(mapping.values())
            except RuntimeError:  # changed under us
                return False
            for key in keys:
                mask = 0
                if key.events & selectors.EVENT_READ:
                    mask |= select.POLLIN | select.POLLPRI
                if key.events & selectors.EVENT_WRITE:
                    mask |= select.POLLOUT
                interest[key.fd] = interest.get(key.fd, 0) | mask
    elif where == _ACCEPT:
        sock = frame.f_locals.get("self")
        if isinstance(sock, socket.socket) and (fd := sock.fileno()) >= 0:
            interest[fd] = select.POLLIN
    return bool(interest) and _any_ready(interest)


#: Real seconds the GIL is left free before a jump past a thread in ``accept``.
SETTLE: Final = 0.002


def _pause() -> None:
    # poll(2) of nothing rather than time.sleep: the same pause, and not a
    # call blockbuster reports on a loop's thread. A poll object of its own:
    # two loops' threads may pause at once.
    select.poll().poll(SETTLE * 1000)


class Baseline(set[int]):
    """A loop's baseline: the idents of the threads taken for a test runner's.

    A thread's ident is the address of its descriptor, which glibc hands to
    the next thread started once it has ended (at once: a thread started
    just after another was joined has its ident). A runner thread that
    ends while the loop runs (a previous test's worker, busy when the loop
    was made) would leave its ident to a thread of the program's, which
    the watch would then not see: virtual time would jump past its work
    (an executor's shutdown, joined with a 300 s timeout, "timed out" at
    once). So each member is also known by its ``threading.Thread`` object
    where it has one, and `refresh` forgets the idents whose thread ended
    or changed.

    Invariant: a member is a thread that was busy when the loop was made
    and is still alive; it only ever shrinks (`refresh`, and `discard`
    when a runner thread turns out to be a producer of the loop's work).
    """

    __slots__ = ("_bottoms", "_threads")

    def __init__(self, idents: Iterable[int] = ()) -> None:
        super().__init__(idents)
        by_ident = {t.ident: t for t in threading.enumerate()}
        frames = sys._current_frames()
        #: ident -> its Thread object when it was taken (None: a thread
        #: threading does not know, started with ``_thread``, as execnet's)
        self._threads: dict[int, threading.Thread | None] = {i: by_ident.get(i) for i in self}
        #: ident -> the outermost frame of a thread threading does not know:
        #: it runs in that frame until it ends
        self._bottoms: dict[int, FrameType] = {
            i: _outermost(frames[i]) for i in self if by_ident.get(i) is None and i in frames
        }

    def refresh(self, frames: Mapping[int, FrameType]) -> None:
        """Forget the members that ended, or whose ident a new thread took.

        *frames*: ``sys._current_frames()``, read just before. A thread
        threading knows is the same only while threading still lists its
        Thread object under its ident (it is taken off just before its
        last frames end: then it is about to be gone, and watching it does
        no harm). One threading did not know is the same while its
        outermost frame is the one it had.
        """
        if not self:
            return
        now = {t.ident: t for t in threading.enumerate()}
        for ident in list(self):
            then = self._threads.get(ident)
            if then is not None:
                same = now.get(ident) is then
            else:
                frame, bottom = frames.get(ident), self._bottoms.get(ident)
                same = frame is not None and (bottom is None or _outermost(frame) is bottom)
            if not same:
                self.discard(ident)
                self._threads.pop(ident, None)
                self._bottoms.pop(ident, None)


def _outermost(frame: FrameType) -> FrameType:
    back = frame.f_back
    while back is not None:
        frame, back = back, back.f_back
    return frame


def runner_threads() -> Baseline:
    """The threads alive now that do not look idle: a loop's baseline.

    Taken when a loop is made. Threads started with ``_thread.start_new_thread``
    (execnet's, under pytest-xdist) are not in ``threading.enumerate()``; the
    interpreter's frame table has them all. A thread without a Python frame
    counts as busy. A thread that runs an event loop or a socket server
    (`_serves`) is never a runner's, busy or not.
    """
    frames = sys._current_frames()
    idents = {t.ident for t in threading.enumerate() if t.ident is not None}
    idents.update(frames)
    return Baseline(
        i for i in idents if i not in frames or not (_idle(frames[i]) or _serves(frames[i]))
    )


#: Functions a thread that serves others runs in, anywhere in its stack.
_SERVING: Final = frozenset({"run_forever", "serve_forever"})


def _serves(innermost: FrameType) -> bool:
    """Does the thread run an event loop (``run_forever``, asyncio's or
    tideloop's) or a ``socketserver``'s ``serve_forever``?

    Such a thread is a server a fixture started (uvicorn in a thread, as
    httpx's suite does; anyio's blocking portal), never a test runner's:
    caught busy when a loop is made (finishing the previous test's
    connection), it would be taken for one, and the clock would jump past
    its answers for the whole test.
    """
    frame: FrameType | None = innermost
    while frame is not None:
        if frame.f_code.co_name in _SERVING:
            return True
        frame = frame.f_back
    return False


def track_producers(
    admit: Callable[[asyncio.Handle], None], baseline: set[int]
) -> Callable[[asyncio.Handle], None]:
    """*admit* (a loop's admission of ``call_soon_threadsafe`` handles: the
    ready queue's append or a schedule's), wrapped to take the calling thread
    out of *baseline*. On testing loops only: one ``get_ident`` per call."""
    discard = baseline.discard
    get_ident = threading.get_ident

    def admit_from_a_producer(handle: asyncio.Handle) -> None:
        discard(get_ident())
        admit(handle)

    return admit_from_a_producer


def _timed_wait(
    frame: FrameType, where: tuple[str, str], sleeps: float | None, cpu: float | None
) -> tuple[object, float, bool]:
    """(what tells this wait from the next, its length, not yet woken) of a
    thread in a timed ``Condition.wait`` or a ``time.sleep``; (None, 0, False)
    for any other state. A sleep is the same while the thread's CPU time
    stands still (a loop of sleeps runs code between two)."""
    if where == _CONDITION_WAIT:
        local = frame.f_locals
        waiter, timeout = local.get("waiter"), local.get("timeout")
        if waiter is None or not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            return None, 0.0, False
        waiters = _waiters_of(local)
        return waiter, float(timeout), waiters is not None and waiter in waiters
    if sleeps is not None and cpu is not None:
        return (frame, frame.f_lasti, cpu), sleeps, True
    return None, 0.0, False


def _waiters_of(local: Mapping[str, Any]) -> Any:
    """The waiter list of the condition a ``Condition.wait`` frame (its
    locals *local*) waits on, or None: ``notify()`` takes a waiter out of it
    before the thread runs again."""
    condition = local.get("self")
    return getattr(condition, "_waiters", None)


def _sleeps(innermost: FrameType) -> float | None:
    """How long the ``time.sleep`` the thread is in lasts, or None."""
    frame, where = _where(innermost)
    call = _call_at(frame) if where in _IDLE_FRAMES else _call_of(innermost, frame)
    return None if call is None else _blocked(call).sleeps


class _Busy:
    """A thread's (or an unseen job's) current spell of looking busy."""

    __slots__ = ("cpu", "last_cpu", "since", "slept_until", "still_since")

    def __init__(self, since: float, cpu: float | None) -> None:
        #: Real time and the thread's CPU time when it was first seen busy.
        self.since = since
        self.cpu = cpu
        #: Its CPU time when last seen, and since when (real time) unchanged.
        self.last_cpu = cpu
        self.still_since = since
        #: When the first ``time.sleep`` it was seen in ends, or None: only
        #: the first counts, so a loop of short sleeps (a poll) does not
        #: hold the clock past the grace.
        self.slept_until: float | None = None

    def saw(self, now: float, cpu: float | None) -> None:
        if cpu != self.last_cpu:
            self.last_cpu = cpu
            self.still_since = now

    def frozen(self, now: float, cpu: float | None, grace: float) -> bool:
        """Used no CPU for half a grace: blocked (or asleep), not working."""
        return cpu is not None and cpu == self.last_cpu and now - self.still_since >= grace / 2


class ThreadWatch:
    """``watch(jobs)`` is True while a thread not in *baseline* looks busy, or
    while an executor job of *jobs* runs where no thread of this process shows.

    *baseline* is shared with the loop's deadlock check and shrinks as
    `track_producers` finds producers among its threads. See the module
    docstring for what busy means, and for how long it holds the clock.
    """

    __slots__ = (
        "_baseline",
        "_bottoms",
        "_busy",
        "_compute_grace",
        "_grace",
        "_idle_cpu",
        "_let_go",
        "_looked_at",
        "_timed",
        "_unseen",
        "_warned",
    )

    def __init__(
        self,
        baseline: Baseline,
        *,
        grace: float = GRACE,
        compute_grace: float = COMPUTE_GRACE,
    ) -> None:
        self._baseline = baseline
        self._grace = grace
        self._compute_grace = compute_grace
        #: thread ident -> its spell of looking busy (without a pause)
        self._busy: dict[int, _Busy] = {}
        #: threads let go of (they held the clock too long), until next seen
        #: idle -> the CPU time of one that used none in its spell (blocked
        #: in a call the watch cannot see into): once that moves, it woke,
        #: and holds the clock again for what it does now
        self._let_go: dict[int, float | None] = {}
        #: threads warned about (once each)
        self._warned: set[int] = set()
        #: thread ident -> its CPU time when last seen waiting: a thread
        #: still in its wait whose CPU time moved has been woken
        self._idle_cpu: dict[int, float | None] = {}
        #: thread ident -> the outermost frame of the thread the tables above
        #: hold it for: glibc hands an ended thread's ident to the next one
        #: at once, and the new thread must not inherit what the watch knew
        #: of the old (let go of: "free" for its whole life)
        self._bottoms: dict[int, FrameType] = {}
        #: executor jobs running out of sight (a process pool's) -> since when
        #: (real time), None once let go of
        self._unseen: dict[concurrent.futures.Future[Any], float | None] = {}
        #: thread ident -> its Condition.wait: [the wait's waiter lock, real
        #: time it began after (None: unknown), virtual seconds let through
        #: since]
        self._timed: dict[int, list[Any]] = {}
        #: real time of the last look (`_scan`, or this construction, which
        #: notes the timed waits already under way: when they began is unknown)
        self._looked_at = _real_clock()
        me = threading.get_ident()
        for ident, innermost in sys._current_frames().items():
            if ident == me or ident in baseline:
                continue
            frame, where = _where(innermost)
            key = _timed_wait(frame, where, _sleeps(innermost), _cpu_time(ident))[0]
            if key is not None:
                self._timed[ident] = [key, None, 0.0]
                self._bottoms[ident] = _outermost(innermost)  # seen: not new at the next look

    def __call__(self, jobs: Iterable[object] = (), jump: float | None = None) -> bool:
        """*jump*: the virtual seconds the clock would move (None: unknown,
        as for a wait without a deadline)."""
        busy, unsure = self._scan(jobs, jump)
        if unsure and not busy:
            # A thread that has its connection but not the GIL yet would be
            # jumped past: leave the GIL free for a real slice, in which it
            # takes it and runs, then look again.
            _pause()
            busy = self._scan(jobs, jump, again=True)[0]
        return busy

    def _scan(
        self, jobs: Iterable[object], jump: float | None = None, *, again: bool = False
    ) -> tuple[bool, bool]:
        """(something is busy, a thread's idle wait may hide a wake-up)."""
        # (No cheaper pre-check: threading's count misses threads started
        # with _thread, which the baseline has; this runs once per jump.)
        baseline = self._baseline
        # A runner thread that ended may have left its ident to the
        # program's (`Baseline`).
        baseline.refresh(sys._current_frames())
        me = threading.get_ident()
        now = _real_clock()
        # Every thread's frame and CPU time first, with the GIL held
        # throughout (so each ident still names a live thread); the look at
        # fds below lets it go.
        watched = [
            (ident, frame, _cpu_time(ident))
            for ident, frame in sys._current_frames().items()
            if ident != me and ident not in baseline
        ]
        bottoms = self._bottoms
        for ident, innermost, _ in watched:
            bottom = _outermost(innermost)
            if bottoms.get(ident) is not bottom:
                # Another thread under a known ident (or a new one): what
                # the watch knew under it was another thread's.
                self._forget(ident)
                bottoms[ident] = bottom
        unseen = {j for j in jobs if isinstance(j, concurrent.futures.Future)}
        busy = unsure = False
        idle_workers = 0
        for ident, innermost, cpu in watched:
            job = _work_item(innermost)
            if job is not None:
                unseen.discard(job.future)
            state = self._look(ident, innermost, cpu, now, job, jump=jump, again=again)
            busy = busy or state == "busy"
            unsure = unsure or state == "settle"
            idle_workers += state == "idle" and _where(innermost)[1] == _POOL_WORKER
        seen = {ident for ident, _, _ in watched}
        for ident in [i for i in bottoms if i not in seen]:
            self._forget(ident)
            del bottoms[ident]
        for table in (self._busy, self._let_go, self._idle_cpu, self._timed):
            for ident in [i for i in table if i not in seen]:
                del table[ident]
        self._warned &= seen
        self._looked_at = now
        return self._out_of_sight(unseen, now, idle_workers) or busy, unsure

    def _forget(self, ident: int) -> None:
        self._busy.pop(ident, None)
        self._let_go.pop(ident, None)
        self._idle_cpu.pop(ident, None)
        self._timed.pop(ident, None)
        self._warned.discard(ident)

    def _waits_out(
        self,
        ident: int,
        frame: FrameType,
        where: tuple[str, str],
        now: float,
        jump: float | None,
        *,
        sleeps: float | None = None,
        cpu: float | None = None,
        again: bool = False,
    ) -> bool:
        """Is the thread in a timed ``Condition.wait``, or a ``time.sleep``
        (*sleeps* seconds, at CPU time *cpu*), that surely outlasts *jump*
        (see the module docstring)? Notes each one it sees, so that when it
        began is known at the next look; *again*: the second look before the
        same jump, which is counted once."""
        key, length, waiting = _timed_wait(frame, where, sleeps, cpu)
        if key is None:
            self._timed.pop(ident, None)
            return False
        record = self._timed.get(ident)
        if record is None or (record[0] is not key and record[0] != key):
            # Begun since the last look (which saw the thread elsewhere, or
            # not at all): after it.
            record = self._timed[ident] = [key, self._looked_at, 0.0]
        if jump is None or record[1] is None or not waiting:
            return False  # no jump asked about, began at an unknown time, or notified
        left = length - (now - record[1]) - record[2]
        if left <= (0.0 if again else jump):
            return False
        if not again:
            record[2] += jump
        return True

    def _look(
        self,
        ident: int,
        innermost: FrameType,
        cpu: float | None,
        now: float,
        job: Any,
        *,
        jump: float | None = None,
        again: bool = False,
    ) -> str:
        """One thread: ``"idle"``, ``"busy"`` (it holds the clock), ``"free"``
        (busy, but let go of) or ``"settle"`` (idle or let go of, in a wait
        whose wake-up leaves no trace until the thread runs: `_pause`)."""
        spells = self._busy
        let_go = self._let_go
        frame, where = _where(innermost)
        # Through blockbuster's wrapper the call it wraps reads as without
        # it (`_call_of`); the waits `_idle_at` knows (a condition's, a pool
        # worker's on its queue) are told by it, as without the wrapper.
        call = _call_at(frame) if where in _IDLE_FRAMES else _call_of(innermost, frame)
        blocked = _NOT_BLOCKED if call is None else _blocked(call)
        if where == _POOL_WORKER and _pool_closing(frame):
            blocked = _NOT_BLOCKED  # its queue's wait ends without the program
        sleeps = blocked.sleeps
        waits_out = self._waits_out(
            ident, frame, where, now, jump, sleeps=sleeps, cpu=cpu, again=again
        )
        if blocked.waits or waits_out or (_idle_at(frame, where) and not _woken_at(frame, where)):
            settle = where == _ACCEPT or blocked.settle
            # A wait whose wake leaves no trace in Python (the item taken
            # off a SimpleQueue, the data read, in C) until the thread runs:
            # is the kernel about to run it?
            traceless = settle or blocked.traceless or where == _POOL_WORKER
            last, self._idle_cpu[ident] = self._idle_cpu.get(ident), cpu
            ran = last is not None and cpu is not None and cpu != last
            if not ran and not (traceless and _runnable(ident)):
                spells.pop(ident, None)
                let_go.pop(ident, None)
                if traceless and last is None:
                    # First seen in this wait: it may have been woken (a pool
                    # worker handed its job, or the shutdown's sentinel) and
                    # wait for the GIL, which leaves no trace: look again
                    # after a pause, once per wait.
                    return "settle"
                return "settle" if settle else "idle"
            # It ran since it was last seen waiting (woken, and now maybe
            # waiting for the GIL), or the kernel is about to run it: busy.
        else:
            self._idle_cpu.pop(ident, None)
        if ident in let_go:
            frozen = let_go[ident]
            if frozen is None or cpu is None:
                return "free"
            if cpu == frozen and not _runnable(ident):
                # Maybe woken by what the loop just did, but not run yet:
                # before a jump, give it a moment (as a thread in accept).
                return "settle"
            del let_go[ident]  # it woke from the call it was blocked in
        spell = spells.get(ident)
        if spell is None:
            spell = spells[ident] = _Busy(now, cpu)
        spell.saw(now, cpu)
        if sleeps is not None and spell.slept_until is None:
            # Asleep since its CPU time last moved: it acts when the sleep ends.
            spell.slept_until = spell.still_since + sleeps
        if self._holds(spell, now, cpu):
            return "busy"
        del spells[ident]
        let_go[ident] = cpu if spell.frozen(now, cpu, self._grace) else None
        if ident not in self._warned:
            self._warned.add(ident)
            _warn(
                spell,
                now=now,
                cpu=cpu,
                who=f"thread {_thread_name(ident)}",
                job=job,
                frame=innermost,
            )
        return "free"

    def _out_of_sight(
        self, unseen: set[concurrent.futures.Future[Any]], now: float, idle_workers: int
    ) -> bool:
        """Whether executor jobs that run in no thread here hold the clock.

        One that runs (a process pool's) holds it for `COMPUTE_GRACE`. One
        not started yet while a thread pool's worker looks idle holds it
        for `GRACE`: a worker just woken to take it still shows its wait
        (its queue is a ``SimpleQueue``, emptied in C) until it has the GIL.
        One queued behind busy workers does not: they hold the clock, or
        not. Then each is let go of, with a warning.
        """
        waiting = self._unseen
        for job in [j for j in waiting if j not in unseen]:
            del waiting[job]
        busy = False
        for job in unseen:
            if job.done():
                continue
            if job.running():
                limit = self._compute_grace
                who = "an executor job running in no thread of this process (a process pool's?)"
            elif idle_workers:
                limit = self._grace
                who = "an executor job that no idle thread pool worker has taken"
            else:
                continue
            since = waiting.setdefault(job, now)
            if since is None:
                continue  # let go of
            if now - since <= limit:
                busy = True
                continue
            waiting[job] = None
            _warn(_Busy(since, None), now=now, cpu=None, who=who, job=None, frame=None)
        return busy

    def _holds(self, spell: _Busy, now: float, cpu: float | None) -> bool:
        """Does a thread busy for this spell still hold the clock?

        For `GRACE` real seconds, whatever it does; then up to
        `COMPUTE_GRACE` while it computes, or while the ``time.sleep`` it
        began the spell with lasts (and `GRACE` after, for what it does
        on waking).
        """
        elapsed = now - spell.since
        if elapsed <= self._grace:
            return True
        if elapsed > self._compute_grace:
            return False
        if spell.slept_until is not None and now <= spell.slept_until + self._grace:
            return True
        return cpu is not None and spell.cpu is not None and cpu - spell.cpu >= COMPUTING * elapsed


def _warn(
    spell: _Busy,
    *,
    now: float,
    cpu: float | None,
    who: str,
    job: Any,
    frame: FrameType | None,
) -> None:
    """Say that virtual time moves on without *who*, and why."""
    elapsed = now - spell.since
    used = "" if cpu is None or spell.cpu is None else f", using {cpu - spell.cpu:.2f} s of CPU"
    what = who
    if job is not None:
        what += f" (running the executor job {_callable_name(getattr(job, 'fn', None))})"
    where = "" if frame is None else f" in {_frames(frame)}"
    warnings.warn(
        f"virtual time moves on without {what}: it looked busy for {elapsed:.1f} s of "
        f"real time{used}{where}; tideloop cannot tell whether it works or waits for "
        "the program, so the clock no longer waits for it (until it is next seen idle)",
        VirtualTimeWarning,
        stacklevel=2,
    )


def _callable_name(fn: object) -> str:
    """``module.qualname`` of a job's function (through ``functools.partial``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:
        return repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else str(qualname)
