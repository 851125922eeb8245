"""Decisions: who picks each open ordering of a perturbed run, and how it is recorded.

Layer: top (``tideloop.testing``). A `Perturber` (``_schedule``) meets a
*decision point* wherever asyncio leaves an order open (an fd's readiness, a
timer that ties another's deadline, another thread's result) and asks its
`Strategy` for a value ``0 .. n-1``. Value 0 is always the unperturbed
choice (dispatch now, in order; admit now), so a run whose strategy answers
0 everywhere is tideloop's fixed order, and a *deviation* is a point that
got another value.

Points are named by stable identities, not by fd numbers or positions:

- ``("fd", loop, i, k)``: the k-th readiness of the i-th fd to become ready
  on that loop (fds are numbered in the order they first became ready,
  which for loopback connections is their creation order; an fd is an open
  file, so a number closed and reused is a new fd);
- ``("tie", loop, i)``: the i-th timer pushed onto a deadline that already
  had timers;
- ``("thread", loop, i)``: the i-th handle another thread queued with
  ``call_soon_threadsafe``;
- ``("job", loop, i)``: the result of the i-th executor or ``to_thread`` job
  the loop was given (submission order, which the program fixes, where the
  order in which results arrive is the threads');
- ``("wake", loop, t, k)``: only in the opt-in wake-up mode, the k-th step
  of the t-th task to have a step queued (how many iterations late it runs).

So a list of deviations (a *tape*, ``_tape``) replays by identity: a run
that meets the same points on another Python version makes the same
choices, even where the versions differ in fd numbers, in how many
iterations a library takes between them, or in how many decisions come
before.

Strategies:

- `RandomStrategy`: each point independently, with the probabilities the
  Perturber gives for its values (a seed's own random streams per kind).
- `PCTStrategy`: probabilistic concurrency testing adapted to these
  points: *depth* change points placed uniformly over the run's observed
  number of decision points; each deviates (a uniform non-default value),
  every other point keeps 0. A bug that needs d specific deviations among
  N points is hit with probability at least about ``(1/N)^d / values``
  per schedule, however long the run; random sampling gives no such bound.
- `ReplayStrategy`: the values of a tape, 0 elsewhere (replay, shrinking,
  and the systematic enumeration in ``_explore``).

Every strategy is wrapped by a `DecisionLog` for the run, which records the
points met, in order, with the value taken and, for deviations, words.
A strategy may carry a `Recording` (``_recording``; a `ReplayStrategy`
made to replay a failing schedule once more for its report): its
deviations then also get a *detail*, what they concern in the program's
terms (``_where``, worded by ``_report``), and the recording sees every
decision.

Invariant: ``choose`` returns a value in ``0 .. n-1``; a strategy never
sees ``n < 2`` (a point with no freedom is not a decision).
"""

from __future__ import annotations

import abc
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tideloop._core.interfaces import LoopView

#: A decision point's identity: a kind, then ints (see the module docstring).
Point = tuple[str | int, ...]

#: At most this many decisions are kept in a run's log (all are counted).
LOG_LIMIT: Final = 20_000


class Recording(Protocol):
    """What a recorded run's strategy carries (``_recording.Recording``)."""

    def loop(self, loop_no: int, view: LoopView) -> Any:
        """The recorder of the run's *loop_no*-th loop (a ``LoopRecorder``)."""
        ...

    def decided(self, decision: Decision) -> None:
        """A decision was taken."""
        ...


class Strategy(abc.ABC):
    """Picks a value for each decision point; 0 is the unperturbed choice."""

    name = "strategy"
    #: A run recorded for its report and timeline (only a replay has one).
    recording: Recording | None = None

    @abc.abstractmethod
    def choose(self, point: Point, n: int, weights: Sequence[float]) -> int:
        """A value in ``0 .. n-1`` for *point*.

        *weights* are the probabilities the random strategy gives values
        ``1 .. n-1`` (len ``n - 1``); others may ignore them.
        """

    def describe(self) -> str:
        return self.name


def _stream(seed: int, kind: str) -> random.Random:
    # A str seed is hashed with SHA-512 by random.Random: stable across runs,
    # processes and Python versions (unlike hash()), independent per kind.
    return random.Random(f"tideloop:{seed}:{kind}")


class RandomStrategy(Strategy):
    """Each point drawn on its own, with the Perturber's probabilities."""

    name = "random"

    def __init__(self, seed: int) -> None:
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        self.seed = seed
        self._streams: dict[str | int, random.Random] = {}

    def choose(self, point: Point, n: int, weights: Sequence[float]) -> int:
        kind = point[0]
        rng = self._streams.get(kind)
        if rng is None:
            rng = self._streams[kind] = _stream(self.seed, str(kind))
        r = rng.random()
        for value, w in enumerate(weights, 1):
            if r < w:
                return value
            r -= w
        return 0

    def describe(self) -> str:
        return f"random, seed {self.seed}"


class PCTStrategy(Strategy):
    """*depth* deviations at change points spread over *length* decisions."""

    name = "pct"

    def __init__(self, seed: int, *, depth: int = 2, length: int = 100) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth!r}")
        if length < 1:
            raise ValueError(f"length must be at least 1, not {length!r}")
        self.seed = seed
        self.depth = depth
        self.length = length
        rng = _stream(seed, f"pct:{depth}:{length}")
        self._at = set(rng.sample(range(length), min(depth, length)))
        self._rng = rng
        self._index = 0

    def choose(self, point: Point, n: int, weights: Sequence[float]) -> int:
        i = self._index
        self._index = i + 1
        if i not in self._at:
            return 0
        return self._rng.randrange(1, n)

    def describe(self) -> str:
        return f"pct, seed {self.seed}, depth {self.depth}, over {self.length} decisions"


class ReplayStrategy(Strategy):
    """The values of a list of deviations; 0 at every other point."""

    name = "replay"

    def __init__(
        self,
        deviations: dict[Point, int],
        *,
        label: str = "",
        recording: Recording | None = None,
    ) -> None:
        self.deviations = dict(deviations)
        self.label = label
        self.recording = recording

    def choose(self, point: Point, n: int, weights: Sequence[float]) -> int:
        value = self.deviations.get(point, 0)
        return value if value < n else n - 1

    def describe(self) -> str:
        return self.label or f"replay of {len(self.deviations)} deviation(s)"


@dataclass
class Decision:
    """One decision point met in a run."""

    index: int
    point: Point
    n: int
    value: int
    words: str = ""
    #: A deviation in the program's terms (a recorded run only; see ``_where``).
    detail: dict[str, Any] | None = None


@dataclass
class DecisionLog:
    """A run's strategy and every decision it took (the first `LOG_LIMIT`)."""

    strategy: Strategy
    decisions: list[Decision] = field(default_factory=list)
    count: int = 0
    deviations: dict[Point, Decision] = field(default_factory=dict)
    loops: int = 0
    #: Set by shrinking a failure that has late task steps (wake-up mode):
    #: how many schedules without them it tried, of how many it could, and
    #: none failed (None: not looked for).
    plain_tried: int | None = None
    plain_space: int = 0
    #: Real seconds the run's loops slept (a wait with a timer deadline that
    #: ran out with nothing to do) on real time: what virtual time would skip.
    slept: float = 0.0

    @property
    def recording(self) -> Recording | None:
        """The strategy's `Recording`, if this run is recorded."""
        return self.strategy.recording

    def new_loop(self) -> int:
        """A number for the next loop of the run (points name their loop)."""
        n = self.loops
        self.loops = n + 1
        return n

    def choose(
        self,
        point: Point,
        n: int,
        weights: Sequence[float],
        words: Callable[[int], str],
        detail: Callable[[int], dict[str, Any]] | None = None,
    ) -> int:
        """The strategy's value for *point*, logged. *words(value)* says it in
        the loop's terms; *detail(value)*, given only on a recorded run, says
        a deviation in the program's."""
        value = self.strategy.choose(point, n, weights)
        if not 0 <= value < n:
            raise ValueError(f"{self.strategy!r} chose {value!r} of {n} at {point!r}")
        i = self.count
        self.count = i + 1
        text = words(value) if value or i < LOG_LIMIT else ""
        decision = Decision(i, point, n, value, text)
        if value and detail is not None:
            decision.detail = detail(value)
        if i < LOG_LIMIT:
            self.decisions.append(decision)
        if value:
            self.deviations[point] = decision
        recording = self.strategy.recording
        if recording is not None:
            recording.decided(decision)
        return value
