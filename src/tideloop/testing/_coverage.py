"""Feedback for a search: what a schedule reached, and a corpus of schedules to mutate.

Layer: top (``tideloop.testing``; above ``_strategy``, below ``_search``,
which registers the ``"coverage"`` strategy). Blind strategies (random,
PCT, systematic) never look at what a run did. The coverage strategy does:
a `Probe` measures each run as a set of *features* (ints), and `Coverage`
keeps the schedules (deviation sets, as `ReplayStrategy` takes them) whose
run reached a feature no earlier run had, and makes each next schedule by
mutating one of them, rare ones first.

What a `Probe` counts as a feature, for one run:

- **code**: the program's own code, never tideloop's, asyncio's, the
  standard library's or site-packages' (`in_scope`: the scenario's and the
  test's modules). On CPython 3.12 and later with ``sys.monitoring`` (a
  tool id of its own, taken for the run and freed after it): each line
  reached and each branch taken (from, to); code out of scope is disabled
  at its first call, and only the program's code objects get line and
  branch events. On 3.11 and PyPy with ``sys.settrace``: each line
  transition (previous line, line) of a frame. A trace function already
  set (a debugger, coverage.py) is left alone: the run is then measured
  without code features;
- **task steps**: each pair of consecutive resumptions of the program's
  coroutines (which step, at which line, followed which): a new ordering
  of awaits;
- **decisions**: each decision point met (its identity: a new fd, a
  readiness more, a timer tie, a thread result), and the number of
  decisions on a log scale;
- **messages**: for each `SimNetwork` a loop of the run was given
  (`saw_network`), each pair of consecutive events of its log (what moved
  between which hosts, after what): a new ordering of messages;
- **fault points and properties**: each ``sometimes()`` site that fired
  and each ``eventually`` that held (`note`).

Features are mixed from stable names (file base names, qualified names,
line numbers, point identities), never from ``hash()`` of a str, so the
same run has the same features in every process (a corpus can be saved
and merged: ``_scale``).

`Coverage` is an enumeration (``_search.Enumeration``): ``next(last)``
learns from the run it handed out last (its log and its probe's features)
and hands out the next schedule, measured by a new probe that runs until
the next call (or `close`). Mutations of a parent: insert a deviation at a
point the parent's run met (anywhere, after its last deviation, or at a
point no earlier run met), move one to a nearby point, drop one, change a
value, or splice two parents. A parent is drawn with weight proportional
to its *energy*: the sum, over the features it was the first to reach, of
one over how many runs have reached each since, so parents that reached
rare things are mutated most.

Invariants:
- At most one probe measures at a time (`Probe.start` refuses a second);
  a probe's tracer or monitoring tool is removed by `Probe.stop`, which is
  idempotent, and `Coverage.close` stops the one it started.
- A failure is a deviation set like any other: it shrinks and replays
  with `ReplayStrategy`, without a probe.
- `Coverage` is deterministic: the same seed and the same runs give the
  same schedules.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import sys
import sysconfig
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Final

from ._strategy import DecisionLog, Point, ReplayStrategy
from ._where import absolute

_MASK: Final = (1 << 63) - 1

# Feature kinds: mixed into each feature so that kinds never collide.
_LINE, _BRANCH, _STEP, _POINT, _COUNT, _MESSAGE, _NOTE = range(1, 8)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def _mix(*parts: int) -> int:
    h = 0x9E3779B97F4A7C15
    for part in parts:
        h = ((h ^ part) * 0x100000001B3) & _MASK
    return h


# ----------------------------------------------------------------------
# Scope: the program's own code


def _excluded_roots() -> tuple[str, ...]:
    import tideloop

    roots = {os.path.dirname(absolute(tideloop.__file__))}
    roots.add(os.path.dirname(absolute(asyncio.__file__)))
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = paths.get(key)
        if path:
            roots.add(absolute(path))
    for path in sys.path:
        if path.rstrip(os.sep).endswith(("site-packages", "dist-packages")):
            roots.add(absolute(path))
    return tuple(root.rstrip(os.sep) + os.sep for root in roots)


_EXCLUDED: tuple[str, ...] | None = None
_SCOPE: dict[str, bool] = {}


def in_scope(filename: str) -> bool:
    """Whether code of *filename* is the program's own: a file outside
    tideloop, asyncio, the standard library and site-packages."""
    known = _SCOPE.get(filename)
    if known is not None:
        return known
    global _EXCLUDED
    if _EXCLUDED is None:
        _EXCLUDED = _excluded_roots()
    ours = not filename.startswith("<") and not absolute(filename).startswith(_EXCLUDED)
    _SCOPE[filename] = ours
    return ours


_BASES: dict[CodeType, int] = {}


def _base(code: CodeType) -> int:
    """A code object's stable number, or 0 if it is not the program's own."""
    base = _BASES.get(code)
    if base is None:
        if in_scope(code.co_filename):
            name = getattr(code, "co_qualname", code.co_name)
            where = f"{os.path.basename(code.co_filename)}:{name}:{code.co_firstlineno}"
            base = _crc(where) | 1
        else:
            base = 0
        _BASES[code] = base
    return base


_COROUTINE: Final = 0x80 | 0x100 | 0x200  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR


# ----------------------------------------------------------------------
# The probe


_ACTIVE: Probe | None = None


def note(kind: str, name: str) -> None:
    """Count *name* of *kind* ("sometimes", "eventually") as reached, if a
    probe measures this run (cheap otherwise: one global read)."""
    probe = _ACTIVE
    if probe is not None:
        probe.features.add(_mix(_NOTE, _crc(kind), _crc(name)))


def saw_network(net: Any) -> None:
    """A loop of the measured run was given *net* (a `SimNetwork`): its event
    log's orderings count (``tideloop.testing.new_event_loop`` calls this)."""
    probe = _ACTIVE
    if probe is not None and all(n is not net for n in probe.networks):
        probe.networks.append(net)


#: sys.monitoring tool ids tried, in order (0, 1, 2 and 5 are CPython's
#: debugger, coverage, profiler and optimizer ids: taken last).
_TOOL_IDS: Final = (4, 3, 2, 1, 0, 5)


class Probe:
    """Measures one run's features (see the module docstring)."""

    __slots__ = ("_codes", "_last_step", "_mode", "_running", "_tool", "features", "networks")

    def __init__(self) -> None:
        #: The run's features (while it runs, some as tuples: see `stop`).
        self.features: set[Any] = set()
        self.networks: list[Any] = []
        self._mode = ""
        self._tool = -1
        self._running = False
        self._last_step: tuple[int, int] = (0, 0)
        #: The program's code objects given local events (sys.monitoring).
        self._codes: set[CodeType] = set()

    @property
    def mode(self) -> str:
        """How code is measured: "monitoring", "settrace", "" (not: orderings only)."""
        return self._mode

    def start(self) -> Probe:
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("a coverage probe is measuring already")
        _ACTIVE = self
        self._running = True
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            self._start_monitoring(monitoring)
        elif sys.gettrace() is None:
            self._mode = "settrace"
            sys.settrace(self._global_trace)
        return self

    def stop(self, log: DecisionLog | None = None) -> frozenset[int]:
        """Stop measuring; the run's features (with *log*'s decisions)."""
        global _ACTIVE
        if self._running:
            self._running = False
            if _ACTIVE is self:
                _ACTIVE = None
            if self._mode == "settrace":
                if sys.gettrace() == self._global_trace:
                    sys.settrace(None)
            elif self._mode == "monitoring":
                self._stop_monitoring()
            self._networks_features()
            # Measured as tuples (cheap in the callbacks); stable ints from here on.
            self.features = {f if isinstance(f, int) else _mix(*f) for f in self.features}
        if log is not None:
            self.features.update(decision_features(log))
        return frozenset(self.features)

    def __enter__(self) -> Probe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sys.settrace (3.11, PyPy) ----------------------------------------

    def _global_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        base = _BASES.get(code)
        if base is None:
            base = _base(code)
        if not base:
            return None
        if code.co_flags & _COROUTINE:
            site = (base, frame.f_lineno)
            self.features.add((_STEP, *self._last_step, *site))
            self._last_step = site
        add = self.features.add
        prev = frame.f_lineno

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            nonlocal prev
            if event == "line":
                line = frame.f_lineno
                add((_LINE, base, prev, line))
                prev = line
            return local

        return local

    # -- sys.monitoring (3.12+) --------------------------------------------

    def _start_monitoring(self, monitoring: Any) -> None:
        # Facts: a callback that returns DISABLE is not called again at that
        # location (for this tool) until restart_events(); local events are
        # per code object. What this means for us: the only global event is
        # PY_START, one location per code object, disabled at once outside
        # the program; the program's code objects get LINE, BRANCH and
        # PY_RESUME locally. A line is disabled once counted (a run's lines
        # are a set), and restart_events() at each start counts it again in
        # the next run (out of scope, that re-fires one PY_START per code).
        for tool in _TOOL_IDS:
            if monitoring.get_tool(tool) is None:
                break
        else:
            return  # every tool id is taken: orderings only
        monitoring.use_tool_id(tool, "tideloop.testing coverage")
        self._tool = tool
        self._mode = "monitoring"
        events = monitoring.events
        disable = monitoring.DISABLE
        add = self.features.add
        bases = _BASES
        codes = self._codes
        branches = (
            (events.BRANCH_LEFT, events.BRANCH_RIGHT)
            if hasattr(events, "BRANCH_LEFT")
            else (events.BRANCH,)
        )
        local = events.LINE | events.PY_RESUME
        for event in branches:
            local |= event

        def line(code: CodeType, line: int) -> Any:
            add((_LINE, bases[code], line))
            return disable

        def branch(code: CodeType, source: int, dest: int) -> Any:
            add((_BRANCH, bases[code], source, dest))

        def step(code: CodeType, offset: int) -> Any:
            if code.co_flags & _COROUTINE:
                site = (bases[code], offset)
                add((_STEP, *self._last_step, *site))
                self._last_step = site

        def start(code: CodeType, offset: int) -> Any:
            base = bases.get(code)
            if base is None:
                base = _base(code)
            if not base:
                return disable
            if code not in codes:
                codes.add(code)
                monitoring.set_local_events(tool, code, local)
            step(code, offset)
            return None

        monitoring.register_callback(tool, events.PY_START, start)
        monitoring.register_callback(tool, events.PY_RESUME, step)
        monitoring.register_callback(tool, events.LINE, line)
        for event in branches:
            monitoring.register_callback(tool, event, branch)
        monitoring.set_events(tool, events.PY_START)
        monitoring.restart_events()

    def _stop_monitoring(self) -> None:
        monitoring: Any = getattr(sys, "monitoring")  # noqa: B009 (3.12+: typeshed for 3.11 lacks it)
        tool = self._tool
        monitoring.set_events(tool, 0)
        for code in self._codes:
            monitoring.set_local_events(tool, code, 0)
        self._codes.clear()
        events = monitoring.events
        for name in ("LINE", "PY_START", "PY_RESUME", "BRANCH", "BRANCH_LEFT", "BRANCH_RIGHT"):
            event = getattr(events, name, None)
            if event is not None:
                monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)
        self._tool = -1

    # -- the networks' logs ------------------------------------------------

    def _networks_features(self) -> None:
        add = self.features.add
        for net in self.networks:
            last = 0
            for entry in list(net.log):
                _, event, a, b, detail = entry
                key = _crc(f"{event}|{a}|{b}|{detail if event == 'sometimes' else ''}")
                add(_mix(_MESSAGE, last, key))
                last = key


_KINDS: dict[str | int, int] = {}


_POINT_KEYS: dict[Point, int] = {}


def point_key(point: Point) -> int:
    """A decision point's stable number (the same in every process)."""
    known = _POINT_KEYS.get(point)
    if known is not None:
        return known
    if len(_POINT_KEYS) > 100_000:
        _POINT_KEYS.clear()
    h = 0
    for part in point:
        if isinstance(part, str):
            value = _KINDS.get(part)
            if value is None:
                value = _KINDS[part] = _crc(part)
        else:
            value = part
        h = _mix(h, value)
    _POINT_KEYS[point] = h
    return h


def decision_features(log: DecisionLog) -> set[int]:
    """The features of a run's decisions: each point met, and their number
    on a log scale."""
    features = {_mix(_POINT, point_key(d.point)) for d in log.decisions}
    features.add(_mix(_COUNT, int(math.log2(log.count + 1))))
    return features


# ----------------------------------------------------------------------
# The corpus and its mutations


@dataclass
class Entry:
    """A schedule that reached something new."""

    deviations: dict[Point, int]
    #: The features it was first to reach (its energy comes from them).
    new: frozenset[int]
    #: The decision points its run met, in order, with their number of values.
    points: list[tuple[Point, int]] = field(default_factory=list)
    #: Points its run met that no earlier run had (indexes into *points*).
    fresh: list[int] = field(default_factory=list)
    picked: int = 0


#: At most this many deviations in a schedule the coverage strategy makes.
MAX_DEVIATIONS: Final = 8


class Coverage:
    """The coverage strategy's enumeration (see the module docstring).

    Never exhausted: ``next`` always returns a schedule. `propose` and
    `learn` are its two halves, for searches that run many schedules
    before they learn from them (``_scale``).
    """

    exhausted = False

    def __init__(self, seed: int = 0, *, measure: Callable[[], Probe] = Probe) -> None:
        self.seed = seed
        self._rng = random.Random(f"tideloop:{seed}:coverage")
        self.corpus: list[Entry] = []
        #: Runs that reached each feature.
        self.hits: dict[int, int] = {}
        #: Decision points some run met.
        self.met: set[int] = set()
        self.runs = 0
        self._tried: set[frozenset[tuple[Point, int]]] = set()
        self._measure = measure
        self._probe: Probe | None = None
        self._pending: dict[Point, int] | None = None

    # -- the enumeration -------------------------------------------------

    def next(self, last: DecisionLog | None) -> ReplayStrategy:
        if self._probe is not None:
            features = self._probe.stop(last)
            self._probe = None
            if self._pending is not None:
                if last is None:
                    self.learn(self._pending, features)
                else:
                    applied = {p: d.value for p, d in last.deviations.items()}
                    self.learn(applied, features, [(d.point, d.n) for d in last.decisions])
        devs = self.propose()
        self._pending = devs
        strategy = ReplayStrategy(
            devs,
            label=f"coverage, schedule {self.runs + 1} "
            f"({len(devs)} deviation(s), corpus of {len(self.corpus)})",
        )
        self._probe = self._measure().start()
        return strategy

    def close(self) -> None:
        """Stop measuring (the search ended: a failure, or its budget)."""
        if self._probe is not None:
            self._probe.stop()
            self._probe = None

    # -- learning --------------------------------------------------------

    def learn(
        self,
        deviations: dict[Point, int],
        features: Iterable[int],
        points: list[tuple[Point, int]] | None = None,
    ) -> bool:
        """Count a run of *deviations* (those its run met) that reached
        *features* and met *points* (in order, with their number of values);
        keep it if it reached something new."""
        self.runs += 1
        hits = self.hits
        new = []
        for f in features:
            seen = hits.get(f)
            if seen is None:
                new.append(f)
                hits[f] = 1
            else:
                hits[f] = seen + 1
        fresh: list[int] = []
        for i, (point, _) in enumerate(points or ()):
            key = point_key(point)
            if key not in self.met:
                self.met.add(key)
                if self.runs > 1:
                    fresh.append(i)
        if not new and self.corpus:
            return False
        self.corpus.append(Entry(dict(deviations), frozenset(new), list(points or ()), fresh))
        return True

    def energy(self, entry: Entry) -> float:
        hits = self.hits
        rare = sum(1.0 / hits.get(f, 1) for f in entry.new)
        return (rare + 0.01) / (1.0 + entry.picked / 16)

    # -- proposing -------------------------------------------------------

    def propose(self) -> dict[Point, int]:
        """The next schedule: the unperturbed one first, then mutations."""
        if not self.corpus:
            return {}
        rng = self._rng
        candidate: dict[Point, int] = {}
        weights = [self.energy(e) for e in self.corpus]
        for _ in range(20):
            parent = rng.choices(self.corpus, weights)[0]
            parent.picked += 1
            candidate = dict(parent.deviations)
            for _ in range(1 + (rng.random() < 0.25) + (rng.random() < 0.1)):
                self._mutate(candidate, parent)
            key = frozenset(candidate.items())
            if key not in self._tried and candidate:
                self._tried.add(key)
                return candidate
        return candidate

    def _mutate(self, devs: dict[Point, int], parent: Entry) -> None:
        rng = self._rng
        points = parent.points
        op = rng.random()
        if not devs or op < 0.5:
            if len(devs) < MAX_DEVIATIONS:
                self._insert(devs, parent)
            return
        if op < 0.65:  # drop one
            del devs[rng.choice(list(devs))]
        elif op < 0.8:  # move one to a nearby point
            index = {p: i for i, (p, _) in enumerate(points)}
            point = rng.choice(list(devs))
            at = index.get(point)
            del devs[point]
            if at is not None and points:
                j = min(max(at + rng.choice((-3, -2, -1, 1, 2, 3)), 0), len(points) - 1)
                p, n = points[j]
                devs[p] = rng.randrange(1, n)
        elif op < 0.9:  # change a value
            index = {p: n for p, n in points}
            point = rng.choice(list(devs))
            n = index.get(point, 2)
            if n > 2:
                devs[point] = rng.randrange(1, n)
        elif len(self.corpus) > 1:  # splice another parent's deviations in
            other = rng.choice(self.corpus)
            for p, v in other.deviations.items():
                if len(devs) < MAX_DEVIATIONS:
                    devs.setdefault(p, v)

    def _insert(self, devs: dict[Point, int], parent: Entry) -> None:
        rng = self._rng
        points = parent.points
        if not points:
            return
        where = rng.random()
        if parent.fresh and where < 0.4:
            # At a point no run had met before the parent: what its
            # deviations opened up.
            i = rng.choice(parent.fresh[:64])
        elif parent.deviations and where < 0.7:
            # Soon after the parent's last deviation.
            index = {p: i for i, (p, _) in enumerate(points)}
            last = max((index.get(p, -1) for p in parent.deviations), default=-1)
            if last + 1 >= len(points):
                i = rng.randrange(len(points))
            else:
                span = min(len(points) - last - 1, 1 + int(rng.expovariate(1 / 8)))
                i = last + 1 + rng.randrange(span)
        else:
            i = rng.randrange(len(points))
        point, n = points[i]
        devs[point] = rng.randrange(1, n)

    # -- state (``_scale``) ------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "hits": sorted(self.hits.items()),
            "corpus": [
                {
                    "deviations": [[list(p), v] for p, v in e.deviations.items()],
                    "new": sorted(e.new),
                    "points": [[list(p), n] for p, n in e.points],
                    "fresh": e.fresh,
                }
                for e in self.corpus
            ],
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self.runs = int(data.get("runs", 0))
        self.hits = {int(f): int(n) for f, n in data.get("hits", ())}
        self.corpus = []
        for e in data.get("corpus", ()):
            entry = Entry(
                {tuple(p): int(v) for p, v in e["deviations"]},
                frozenset(int(f) for f in e["new"]),
                [(tuple(p), int(n)) for p, n in e.get("points", ())],
                [int(i) for i in e.get("fresh", ())],
            )
            self.corpus.append(entry)
            self._tried.add(frozenset(entry.deviations.items()))
            self.met.update(point_key(p) for p, _ in entry.points)
