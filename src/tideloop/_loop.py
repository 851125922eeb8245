"""Loop: the public event loop class, composed from the layers.

Layer: top. Each layer is a class that extends the one below it and imports
only from below:

    CoreLoop     (_core/run.py)     scheduling, run loop, lifecycle, errors,
                                    debug, threads, executor, async generators
    FdLoop       (_fdio/registry.py) fd registry, add_reader/add_writer
    SignalLoop   (_signals.py)       add_signal_handler/remove_signal_handler
    Loop         (here)              what users construct

`Loop` adds nothing of its own yet; networking layers slot in between
SignalLoop and Loop as they land. Methods of `asyncio.AbstractEventLoop` not
provided by any layer yet raise NotImplementedError (asyncio's default).
"""

from __future__ import annotations

from ._core.clock import Clock
from ._pollers import Poller
from ._signals import SignalLoop

__all__ = ["Loop", "new_event_loop"]


class Loop(SignalLoop):
    """A drop-in `asyncio.AbstractEventLoop`.

    *poller* picks the readiness mechanism: ``"epoll"``, ``"kqueue"``,
    ``"poll"``, a `Poller` instance, or None for the platform's best.
    *clock* supplies time (see ``tideloop._core.clock``); None means real
    monotonic time.
    """

    def __init__(self, *, poller: Poller | str | None = None, clock: Clock | None = None) -> None:
        super().__init__(poller=poller, clock=clock)


def new_event_loop(*, poller: Poller | str | None = None, clock: Clock | None = None) -> Loop:
    """Create a new tideloop event loop (usable as asyncio's ``loop_factory``)."""
    # mypy sees AbstractEventLoop's networking methods as abstract: they
    # raise NotImplementedError until the networking layers land.
    return Loop(poller=poller, clock=clock)  # type: ignore[abstract]
