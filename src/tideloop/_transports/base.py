"""FlowControlTransport: write flow control shared by writing transports.

Layer: transports. A writing transport buffers what the kernel would not take
at once and tells its protocol to stop producing when the buffer grows past
the *high-water mark* (``protocol.pause_writing()``), and to go on when it
drains to the *low-water mark* (``protocol.resume_writing()``). This is what
asyncio's ``_FlowControlMixin`` does, with the same defaults (64 KiB high,
high // 4 low), the same validation message, and the same error reporting (a
failing pause_writing/resume_writing goes to the exception handler).

Invariants:
- ``_protocol_paused`` is True exactly between a pause_writing() call and the
  matching resume_writing() call: the two always alternate.
- Subclasses keep the buffer size in an int (no summing on each call) and
  call `_maybe_pause_protocol` after the buffer grows and
  `_maybe_resume_protocol` after it shrinks.

The class sets ``__slots__`` (asyncio's transport bases do too) and adds
``__weakref__``: the fd registry and servers hold transports weakly.

`ConnectionTracker` is what a transport needs from the server that accepted
it (a net-layer object): to be counted while it lives. The method names are
asyncio's ``Server._attach``/``_detach``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from tideloop._core.run import CoreLoop


class ConnectionTracker(Protocol):
    """The server side of a transport's lifetime (``asyncio.Server``'s hooks)."""

    def _attach(self, transport: asyncio.BaseTransport | None = None) -> None: ...

    def _detach(self, transport: asyncio.BaseTransport | None = None) -> None: ...


class FlowControlTransport(asyncio.Transport):
    __slots__ = (
        "__weakref__",
        "_high_water",
        "_loop",
        "_low_water",
        "_protocol",
        "_protocol_paused",
    )

    _loop: CoreLoop
    # Duck-typed, as in asyncio: any object with the protocol's methods.
    _protocol: Any

    def __init__(self, loop: CoreLoop, extra: dict[str, Any] | None) -> None:
        super().__init__(extra)
        self._loop = loop
        self._protocol_paused = False
        self._high_water = 64 * 1024
        self._low_water = 16 * 1024

    def _maybe_pause_protocol(self) -> None:
        if self.get_write_buffer_size() <= self._high_water or self._protocol_paused:
            return
        self._protocol_paused = True
        try:
            self._protocol.pause_writing()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler(
                {
                    "message": "protocol.pause_writing() failed",
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and self.get_write_buffer_size() <= self._low_water:
            self._protocol_paused = False
            try:
                self._protocol.resume_writing()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._loop.call_exception_handler(
                    {
                        "message": "protocol.resume_writing() failed",
                        "exception": exc,
                        "transport": self,
                        "protocol": self._protocol,
                    }
                )

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water = high
        self._low_water = low

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()
