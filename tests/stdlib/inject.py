"""Loop injection and loop accounting for one test subprocess (used by `child.py`).

CPython's ``test_asyncio`` gets "the default loop" in several ways; in a
tideloop run every one of them must produce a tideloop loop:

- the event loop policy: ``asyncio.new_event_loop()``, ``get_event_loop()``,
  ``asyncio.run()`` / ``asyncio.Runner()`` without ``loop_factory``, and
  ``unittest.IsolatedAsyncioTestCase`` before 3.13 all go through it. Many
  modules call ``asyncio.set_event_loop_policy(None)`` in tearDown, after which
  asyncio builds a new policy from the *package attribute*
  ``asyncio.DefaultEventLoopPolicy`` (``events._init_event_loop_policy`` does
  ``from . import DefaultEventLoopPolicy``; 3.14+ takes
  ``unix_events._DefaultEventLoopPolicy``). So those attributes are pointed at
  tideloop's policy class for the whole process, and the current policy reset;
- ``asyncio.EventLoop`` (3.13+), the documented "default loop class" that tests
  pass as ``loop_factory``;
- ``unittest.IsolatedAsyncioTestCase.loop_factory`` (3.13+);
- ``test.test_asyncio.utils.TestLoop``, the generator-driven virtual-time loop
  that ``TestCase.new_test_loop()`` builds (test_tasks, test_futures, ...): it
  is a stdlib ``BaseEventLoop`` subclass, so it is replaced by
  `TideloopTestLoop`, the same protocol on a tideloop loop with an injected
  virtual clock.

Tests that observe the stdlib loop's logging by patching
``asyncio.base_events.logger`` would never see tideloop's log calls, so the
``logger`` globals of tideloop's core are routed through whatever that
attribute is at the time of the call (`route_tideloop_logging`).

Classes that build a stdlib loop on purpose (``asyncio.SelectorEventLoop(...)``)
are handled by `variants.py`, not here.

Verification: ``asyncio.BaseEventLoop.__init__`` and ``tideloop.Loop.__init__``
are wrapped so that every loop constructed in the process is recorded (its
class and whether it is a tideloop loop). `child.py` attributes them to the
running test, and the runner reports a test that built a stdlib loop during a
tideloop run as ``stdlib-loop`` instead of trusting its outcome.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.log
import functools
import importlib
import sys
import unittest
from collections.abc import Callable, Generator
from typing import Any

#: Loops constructed since the last `take_created_loops()`: (class name, is tideloop).
_created: list[tuple[str, bool]] = []
_tideloop_loop_class: type[Any] | None = None


def _loop_name(loop: object) -> str:
    cls = type(loop)
    return f"{cls.__module__}.{cls.__qualname__}"


def _record(loop: object) -> None:
    cls = _tideloop_loop_class
    _created.append((_loop_name(loop), cls is not None and isinstance(loop, cls)))


def take_created_loops() -> list[tuple[str, bool]]:
    """Return and forget the loops constructed since the previous call."""
    taken = list(_created)
    del _created[:]
    return taken


def _wrap_init(cls: type[Any]) -> None:
    original: Callable[..., None] = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _record(self)
        original(self, *args, **kwargs)

    cls.__init__ = __init__


def track_stdlib_loops() -> None:
    """Record every stdlib loop (all derive from ``asyncio.BaseEventLoop``)."""
    _wrap_init(asyncio.BaseEventLoop)


# ---------------------------------------------------------------------------
# tideloop injection

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def tideloop_factory(kind: str, default_poller: str | None) -> LoopFactory:
    import tideloop

    poller = default_poller if kind == "default" else kind
    return functools.partial(tideloop.new_event_loop, poller=poller)


class _GeneratorClock:
    """Virtual time for `TideloopTestLoop`: only the test's generator moves it.

    Implements tideloop's clock protocol (``now``, ``resolution``, ``wait``).
    ``wait`` never blocks: like ``utils.TestSelector.select``, the poll returns
    at once, so time advances only through ``advance_time``.
    """

    __slots__ = ("t",)

    #: TestLoop's ``_clock_resolution``.
    resolution = 1e-9

    def __init__(self) -> None:
        self.t: float = 0

    def now(self) -> float:
        return self.t

    @staticmethod
    def wait(
        poll: Callable[[float | None], list[tuple[int, int]]], timeout: float | None
    ) -> list[tuple[int, int]]:
        return poll(0.0)


def make_test_loop_class(poller: str | None) -> type[Any]:
    """``test.test_asyncio.utils.TestLoop``'s protocol on a tideloop loop.

    TestLoop semantics (from ``utils.py``): time starts at 0 and moves only by
    ``advance_time``; after every loop iteration, each deadline passed to
    ``call_at`` during it (``call_later`` included) is sent to the generator,
    which answers with the time to advance; on ``close`` the generator must be
    finished. The loop's own scheduling, timers and run phases are tideloop's:
    only the clock is virtual, injected through tideloop's ``clock=`` argument.
    Overriding ``_run_once`` is the one use of a tideloop internal here.
    """
    import tideloop

    if not callable(getattr(tideloop.Loop, "_run_once", None)):
        raise RuntimeError("tideloop.Loop has no _run_once: TideloopTestLoop needs updating")

    # Typed as Any: the overrides below take TestLoop's loose signatures.
    base: Any = tideloop.Loop

    class TideloopTestLoop(base):  # type: ignore[misc]
        def __init__(self, gen: Callable[[], Generator[Any, Any, Any]] | None = None) -> None:
            self._test_clock = _GeneratorClock()
            super().__init__(poller=poller, clock=self._test_clock)
            if gen is None:

                def gen() -> Generator[Any, Any, Any]:
                    yield

                self._test_check_on_close = False
            else:
                self._test_check_on_close = True
            self._test_gen = gen()
            next(self._test_gen)
            self._test_deadlines: list[float] = []

        def advance_time(self, advance: float) -> None:
            if advance:
                self._test_clock.t += advance

        def close(self) -> None:
            super().close()
            if self._test_check_on_close:
                try:
                    self._test_gen.send(0)
                except StopIteration:
                    pass
                else:  # pragma: no cover
                    raise AssertionError("Time generator is not finished")

        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
            self._test_deadlines.append(when)
            return super().call_at(when, callback, *args, context=context)

        def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:
            timer = super().call_later(delay, callback, *args, context=context)
            self._test_deadlines.append(timer.when())
            return timer

        def _run_once(self) -> None:
            super()._run_once()
            for when in self._test_deadlines:
                self.advance_time(self._test_gen.send(when))
            self._test_deadlines = []

    TideloopTestLoop.__module__ = __name__
    return TideloopTestLoop


def install_tideloop(poller: str | None) -> dict[str, str]:
    """Make every default-loop path of this process produce tideloop loops.

    Returns a description of what was patched (for the run's metadata).
    """
    global _tideloop_loop_class
    import tideloop

    _tideloop_loop_class = tideloop.Loop
    _wrap_init(tideloop.Loop)
    patched: dict[str, str] = {}

    factory = tideloop_factory("default", poller)
    policy_cls: type[Any] = tideloop.EventLoopPolicy
    if poller is not None:
        policy_cls = type(
            "EventLoopPolicy", (policy_cls,), {"_loop_factory": staticmethod(factory)}
        )
    # 3.14+ builds the default policy from unix_events._DefaultEventLoopPolicy,
    # and asyncio.DefaultEventLoopPolicy is a module __getattr__ that returns
    # it with a DeprecationWarning (which a test checks): patch the former.
    unix_events: Any = sys.modules.get("asyncio.unix_events")
    if unix_events is not None and hasattr(asyncio.events, "_set_event_loop_policy"):
        unix_events._DefaultEventLoopPolicy = policy_cls
        patched["asyncio.unix_events._DefaultEventLoopPolicy"] = repr(policy_cls)
    else:
        asyncio.DefaultEventLoopPolicy = policy_cls
        patched["asyncio.DefaultEventLoopPolicy"] = repr(policy_cls)
    setter: Any = getattr(asyncio.events, "_set_event_loop_policy", None)
    (setter or asyncio.set_event_loop_policy)(None)

    if hasattr(asyncio, "EventLoop"):
        loop_cls: type[Any] = tideloop.Loop
        if poller is not None:

            def __init__(self: Any) -> None:
                tideloop.Loop.__init__(self, poller=poller)

            loop_cls = type("EventLoop", (tideloop.Loop,), {"__init__": __init__})
        asyncio.EventLoop = loop_cls
        patched["asyncio.EventLoop"] = repr(loop_cls)

    if hasattr(unittest.IsolatedAsyncioTestCase, "loop_factory"):
        unittest.IsolatedAsyncioTestCase.loop_factory = staticmethod(factory)
        patched["unittest.IsolatedAsyncioTestCase.loop_factory"] = "tideloop.new_event_loop"

    test_utils: Any = importlib.import_module("test.test_asyncio.utils")
    test_utils.TestLoop = make_test_loop_class(poller)
    patched["test.test_asyncio.utils.TestLoop"] = "TideloopTestLoop"
    return patched


class _BaseEventsLogger:
    """Stands in for asyncio's logger inside tideloop's modules.

    Tests observe the stdlib loop's logging by patching the module global
    ``asyncio.base_events.logger`` (``@mock.patch('asyncio.base_events.logger')``),
    which a third-party loop never reads. tideloop logs to the same
    ``asyncio`` logger object; this proxy makes its calls go through whatever
    ``asyncio.base_events.logger`` is at the time of the call, so such a test
    sees tideloop's log calls (message and exc_info) exactly as it would see
    the stdlib loop's. Unpatched, it *is* asyncio's logger: nothing changes.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(_base_events_logger(), name)

    def __repr__(self) -> str:
        return f"<proxy of asyncio.base_events.logger: {_base_events_logger()!r}>"


def _base_events_logger() -> Any:
    return getattr(asyncio.base_events, "logger")  # noqa: B009 (not in typeshed)


_LOGGER_PROXY = _BaseEventsLogger()


def route_tideloop_logging() -> None:
    """Point the ``logger`` globals of tideloop's core modules at the proxy.

    Only the core (``tideloop._core``: exception handler, debug mode) does
    what ``asyncio.base_events`` does; transports and signals log where
    ``selector_events`` / ``unix_events`` do, which the proxy must not
    redirect. Called before each test, since modules may load lazily."""
    real = asyncio.log.logger
    for name, module in list(sys.modules.items()):
        if name.startswith("tideloop._core.") and getattr(module, "logger", None) is real:
            module.logger = _LOGGER_PROXY  # type: ignore[attr-defined]
