"""Clocks per host: the wall clock each simulated host reads.

Layer: testing (the simulation; below ``network``, which owns one
`HostClocks`; imports nothing of tideloop's). A real host's wall clock
(``time.time()``, ``datetime.now()``) is set by NTP and drifts between
corrections: two hosts' clocks disagree by an *offset* that grows at the
rate of their *drift*. Code that compares one host's timestamp with
another's clock (a lease's expiry, a token's validity, last-writer-wins by
timestamp) breaks then.

The model: at loop time *t* a host reads, as seconds since the Unix epoch,

    EPOCH + t + offset + drift * (t - since)

where ``SimNetwork.set_clock(host, offset=, drift=)`` at loop time *since*
sets *offset* (the reading's offset from the loop's clock at that moment;
not given: the host's current one, so the clock does not jump) and *drift*
(the rate of the host's clock, less one: 0.01 gains 10 ms a second, -0.01
loses them; not given: unchanged). A host never set has offset 0 and no
drift. A host's clock can jump back (an NTP step), as real wall clocks do.

What stays global (facts / what this means for us): the loop has one
clock, so every host's timers (``asyncio.sleep``, ``wait_for``,
``asyncio.timeout``, ``call_later``) and ``time.monotonic()`` run on the
same time, and a drifting host's timers do not fire early or late. Making
them per host would mean a timer queue per host, or a loop that converts
every deadline by the current task's host: the loop reads one clock in one
place, by design. So a bug that needs one host's *durations* to run fast
(a lease measured with ``monotonic()`` on a host whose crystal is fast) is
not found here; a bug that needs its *wall clock* to be off (the common
kind: timestamps compared across hosts) is.

Invariant: a host's reading is a pure function of the loop's time and the
settings made so far (no randomness; the same run reads the same times).
"""

from __future__ import annotations

import math
from typing import Final

#: What ``time.time()`` reads at virtual time 0 in a simulated run (2026-01-01 UTC).
EPOCH: Final = 1_767_225_600.0


class HostClocks:
    """The wall-clock settings of every host (see the module docstring)."""

    __slots__ = ("_settings",)

    def __init__(self) -> None:
        #: host name -> (offset at `since`, drift, since)
        self._settings: dict[str, tuple[float, float, float]] = {}

    def offset(self, host: str, now: float) -> float:
        """How far *host*'s wall clock is ahead of the loop's (plus `EPOCH`) at *now*."""
        setting = self._settings.get(host)
        if setting is None:
            return 0.0
        offset, drift, since = setting
        return offset + drift * (now - since)

    def drift(self, host: str) -> float:
        setting = self._settings.get(host)
        return 0.0 if setting is None else setting[1]

    def set(
        self, host: str, now: float, *, offset: float | None = None, drift: float | None = None
    ) -> tuple[float, float]:
        """Set *host*'s clock from *now* on; returns its (offset, drift) now."""
        if offset is not None and math.isnan(offset):
            raise ValueError("offset must be a number of seconds, not NaN")
        if drift is not None and not drift > -1.0:
            raise ValueError(f"drift must be > -1 (the clock must move forward), not {drift!r}")
        new_offset = self.offset(host, now) if offset is None else float(offset)
        new_drift = self.drift(host) if drift is None else float(drift)
        self._settings[host] = (new_offset, new_drift, now)
        return new_offset, new_drift

    def __bool__(self) -> bool:
        return bool(self._settings)


__all__ = ["EPOCH", "HostClocks"]
