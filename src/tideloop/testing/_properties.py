"""Property checks: `always` after every callback, `eventually` within a time.

Layer: testing. A loop calls its callback observers after every callback
(``loop.add_callback_observer``; callbacks then run one by one on the
loop's timed path, so a loop without observers never looks for them). This
module keeps each loop's checks, observes the loop while it has any, and
turns a broken one into `PropertyViolation`:

- ``always(predicate)``: from now until the returned function is called,
  the predicate is evaluated after every callback the loop runs (a task's
  step, an I/O callback, a timer); the first time it is false, the loop
  stops with `PropertyViolation` naming that callback and the virtual (or
  real) time. It is also checked at once.
- ``await eventually(predicate, within=s)``: returns as soon as the
  predicate holds (checked at once, then after every callback), or raises
  `PropertyViolation` when *within* seconds of the loop's time pass first.

Combined with seeds (`Perturber`, `SimNetwork`), a property breaks on the
seed's schedule and the seed replays it.

A violation names the callback after which the predicate broke in the
program's terms (``_where``): a task's step by the task, its coroutine and
the line it then waits at; a predicate that is a lambda by its file and
line. Under pytest, the frames of the check are hidden from the traceback
unless ``TIDELOOP_FULL_FRAMES=1`` (``_report.hide_loop_frames``).

Invariant: the observer is added exactly while a loop has at least one
check, and removed with the last.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from tideloop._loop import Loop

from . import _coverage, _where
from ._report import hide_loop_frames, task_text


class PropertyViolation(AssertionError):
    """An `always` predicate became false, or an `eventually` one did not hold in time."""

    #: A report: the loop's frames are hidden from its traceback under pytest.
    tideloop_report = True


PropertyViolation.__module__ = "tideloop.testing"  # where users import it from


def _name(predicate: Callable[[], object]) -> str:
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    code = getattr(predicate, "__code__", None)
    if name.endswith("<lambda>") and code is not None:
        filename = _where.short_path(code.co_filename)
        text = _where.source_line(code.co_filename, code.co_firstlineno)
        where = f"lambda at {filename}:{code.co_firstlineno}"
        return f"{where} `{text}`" if text else where
    return _where.short_name(str(name))


def _describe(handle: asyncio.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return f"a step of {task_text(_where.task_words(owner))}"
    return f"the callback {_where.callback_words(callback)}"


class _Checks:
    """One loop's checks, and the hook the core calls after each callback."""

    def __init__(self, loop: Loop) -> None:
        self._loop = weakref.ref(loop)
        self.always: dict[int, tuple[str, Callable[[], object]]] = {}
        self.eventually: dict[int, tuple[Callable[[], object], asyncio.Future[None]]] = {}
        self._next = 0
        self._observing = False

    def key(self) -> int:
        self._next += 1
        return self._next

    def sync(self) -> None:
        loop = self._loop()
        want = bool(self.always or self.eventually)
        if loop is None or want == self._observing:
            return
        if want:
            loop.add_callback_observer(self.after)
        else:
            loop.remove_callback_observer(self.after)
        self._observing = want

    def after(self, handle: asyncio.Handle) -> None:
        __tracebackhide__ = hide_loop_frames  # pytest: the program's frames first
        for name, predicate in list(self.always.values()):
            if not predicate():
                loop = self._loop()
                now = loop.time() if loop is not None else float("nan")
                # Reported once: the cleanup that follows (cancelling the
                # tasks) runs unchecked.
                self.always.clear()
                self.sync()
                raise PropertyViolation(
                    f"always({name}) became false after {_describe(handle)}, at loop time {now!r}"
                )
        for key, (predicate, waiter) in list(self.eventually.items()):
            if not waiter.done() and predicate():
                _coverage.note("eventually", _name(predicate))  # a coverage search counts it
                waiter.set_result(None)
                del self.eventually[key]
        if not self.eventually and not self.always:
            self.sync()


_CHECKS: weakref.WeakKeyDictionary[Loop, _Checks] = weakref.WeakKeyDictionary()


def _checks() -> tuple[Loop, _Checks]:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, Loop):
        raise RuntimeError("property checks need a tideloop loop (tideloop.testing.run)")
    checks = _CHECKS.get(loop)
    if checks is None:
        checks = _CHECKS[loop] = _Checks(loop)
    return loop, checks


def always(predicate: Callable[[], object], *, name: str | None = None) -> Callable[[], None]:
    """Check *predicate* now and after every callback until the returned function
    is called; the loop stops with `PropertyViolation` the first time it is false."""
    loop, checks = _checks()
    label = name or _name(predicate)
    if not predicate():
        raise PropertyViolation(f"always({label}) is false already, at loop time {loop.time()!r}")
    key = checks.key()
    checks.always[key] = (label, predicate)
    checks.sync()

    def stop() -> None:
        if checks.always.pop(key, None) is not None:
            checks.sync()

    return stop


async def eventually(
    predicate: Callable[[], object], *, within: float, name: str | None = None
) -> None:
    """Return once *predicate* holds (checked now and after every callback);
    raise `PropertyViolation` if *within* seconds of loop time pass first."""
    if within < 0:
        raise ValueError(f"within must be >= 0 seconds, not {within!r}")
    loop, checks = _checks()
    if predicate():
        return
    label = name or _name(predicate)
    waiter: asyncio.Future[None] = loop.create_future()
    key = checks.key()
    checks.eventually[key] = (predicate, waiter)
    checks.sync()
    start = loop.time()
    try:
        await asyncio.wait_for(waiter, within)
    except TimeoutError:
        raise PropertyViolation(
            f"eventually({label}) did not hold within {within!r} s "
            f"(from loop time {start!r} to {loop.time()!r})"
        ) from None
    finally:
        if checks.eventually.pop(key, None) is not None:
            checks.sync()
