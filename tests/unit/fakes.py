"""Fakes injected through the loop's constructor: a scripted poller and a manual clock.

`FakePoller` stands in for the kernel: it records every registration call,
returns scripted events, and, because a real poll *blocks* for its timeout,
advances the `ManualClock` by the timeout it is given (or by a scripted
amount). Together they make the core's decisions observable without real
time or real fds: which timeout it asked for, which callbacks it ran, in
which order.
"""

from __future__ import annotations

from collections import deque

import tideloop


class ManualClock:
    """Time that moves only when told to (or when the fake poller 'blocks')."""

    def __init__(self, start: float = 1000.0, resolution: float = 1e-9) -> None:
        self.t = start
        self.resolution = resolution
        self.wait = None

    def now(self) -> float:
        return self.t


class FakePoller:
    name = "fake"

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, int, int]] = []
        self.registered: dict[int, int] = {}
        self.timeouts: list[float | None] = []
        self.scripted: deque[list[tuple[int, int]]] = deque()
        # How far a poll moves the clock; None means "by the timeout".
        self.elapse: deque[float] = deque()
        self.fail_next: OSError | None = None
        self.closed = False

    def fileno(self) -> int:
        return -1

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def register(self, fd: int, events: int) -> None:
        self.calls.append(("register", fd, events))
        self._maybe_fail()
        assert fd not in self.registered, "registered twice"
        self.registered[fd] = events

    def modify(self, fd: int, events: int) -> None:
        self.calls.append(("modify", fd, events))
        self._maybe_fail()
        assert fd in self.registered, "modify of an unregistered fd"
        self.registered[fd] = events

    def unregister(self, fd: int) -> None:
        self.calls.append(("unregister", fd, 0))
        self.registered.pop(fd, None)

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        events = self.scripted.popleft() if self.scripted else []
        if self.elapse:
            self.clock.t += self.elapse.popleft()
        elif timeout is not None and not events:
            self.clock.t += timeout
        elif timeout is None and not events:
            raise AssertionError("the loop would block forever")
        return events

    def close(self) -> None:
        self.closed = True


def fake_loop(resolution: float = 1e-9) -> tuple[tideloop.Loop, FakePoller, ManualClock]:
    clock = ManualClock(resolution=resolution)
    poller = FakePoller(clock)
    loop = tideloop.new_event_loop(poller=poller, clock=clock)
    return loop, poller, clock
