"""Entry points: `run`, `install` and the event loop policy.

Layer: top. ``tideloop.run(main())`` is ``asyncio.run`` with a tideloop loop
(it uses ``asyncio.Runner``, so signal handling, cancellation of leftover
tasks, async generator and executor shutdown are exactly asyncio's).
`install` is for code that creates loops through the policy
(``asyncio.new_event_loop()``, ``asyncio.get_event_loop()``, ``asyncio.run``
without ``loop_factory``).

Python 3.14 deprecates the policy system (removal is planned for 3.16):
touching ``asyncio.DefaultEventLoopPolicy`` or calling
``asyncio.set_event_loop_policy`` warns. So the policy class is built on
first use, from the base class under whichever name the running Python has,
and importing tideloop touches none of it. What `install` means per version:

- 3.11-3.13: it sets the policy; no warning.
- 3.14, 3.15: it still sets the policy (through asyncio's non-warning
  setter), and warns with a DeprecationWarning of its own, pointing at
  `run` / ``asyncio.run(main, loop_factory=tideloop.new_event_loop)``, the
  entry points that do not depend on the policy. ``python -m tideloop``
  installs the policy without warning: the user did not ask for the policy.
- A Python without the policy system: RuntimeError, saying what to use.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import os
import sys
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from ._loop import Loop, new_event_loop

_T = TypeVar("_T")

_policy_class: type[Any] | None = None


def run(
    main: Coroutine[Any, Any, _T],
    *,
    debug: bool | None = None,
    console: str | os.PathLike[str] | None = None,
) -> _T:
    """Run *main* on a new tideloop loop and return its result (like asyncio.run).

    *console*: a path where the run opens a console socket, owner-only, for
    ``python -m tideloop console PATH`` (see ``tideloop._console``); it is
    removed when the run ends.
    """
    if asyncio.events._get_running_loop() is not None:
        raise RuntimeError("tideloop.run() cannot be called from a running event loop")
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        if console is None:
            return runner.run(main)
        from ._console import serve

        try:
            server = serve(cast(Loop, runner.get_loop()), console)
        except BaseException:
            main.close()  # never awaited: asyncio.run closes it too when it cannot start
            raise
        try:
            return runner.run(main)
        finally:
            server.close()


def _policy_base() -> type[Any]:
    # On Unix, asyncio's own default policy: before 3.14 it also carries the
    # child watcher API (get/set_child_watcher) that subprocess code and
    # CPython's tests call through the policy. Taken from its module, not
    # from asyncio.DefaultEventLoopPolicy, which code may have replaced.
    unix_events = sys.modules.get("asyncio.unix_events")
    base = getattr(unix_events, "_UnixDefaultEventLoopPolicy", None)
    if base is None:
        base = getattr(asyncio.events, "_BaseDefaultEventLoopPolicy", None)
    if base is None:
        base = getattr(asyncio.events, "BaseDefaultEventLoopPolicy", None)
    if base is None:
        raise RuntimeError(NO_POLICY_MESSAGE)
    return cast(type[Any], base)


def policy_class() -> type[Any]:
    """The ``EventLoopPolicy`` class whose loops are tideloop loops."""
    global _policy_class
    if _policy_class is None:
        base = _policy_base()

        class EventLoopPolicy(base):  # type: ignore[misc,valid-type]
            """asyncio event loop policy creating `tideloop.Loop` instances."""

            _loop_factory = staticmethod(new_event_loop)

            def __repr__(self) -> str:
                return "<tideloop.EventLoopPolicy>"

        EventLoopPolicy.__module__ = "tideloop"
        _policy_class = EventLoopPolicy
    return _policy_class


#: What `install` and ``python -m tideloop`` say where the policy is gone.
NO_POLICY_MESSAGE = (
    "this Python has no asyncio event loop policy for tideloop.install() to set: use "
    "tideloop.run(main()) or asyncio.run(main(), loop_factory=tideloop.new_event_loop)"
)


def install() -> None:
    """Make the asyncio policy create tideloop loops, for code that uses it.

    Deprecated on Python 3.14+, as asyncio's policy system is: prefer
    ``tideloop.run(main())`` or ``asyncio.run(main(), loop_factory=...)``.
    """
    if hasattr(asyncio.events, "_set_event_loop_policy"):
        warnings.warn(
            "tideloop.install() sets asyncio's event loop policy, which Python 3.14 "
            "deprecates (removal is planned for 3.16): use tideloop.run(main()) or "
            "asyncio.run(main(), loop_factory=tideloop.new_event_loop)",
            DeprecationWarning,
            stacklevel=2,
        )
    install_policy()


def install_policy() -> None:
    """`install` without its deprecation warning (for ``python -m tideloop``)."""
    # 3.14+: the setter that does not warn; before, the public one.
    setter = getattr(asyncio.events, "_set_event_loop_policy", None)
    if setter is None:
        setter = getattr(asyncio, "set_event_loop_policy", None)
    if setter is None:
        raise RuntimeError(NO_POLICY_MESSAGE)
    setter(policy_class()())
