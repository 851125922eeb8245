"""Exploration: many schedules of one scenario, shrinking, and tapes.

Layer: top (``tideloop.testing``). A *scenario* is a function that returns
a fresh coroutine (a test body, a planted race); `attempt` runs it once on a
perturbed loop and returns its `DecisionLog` and the exception it raised.
On top of that:

- `explore` runs schedules with a strategy until one fails: ``"random"``
  (one `RandomStrategy` per seed), ``"pct"`` (`PCTStrategy`, its change
  points spread over the decision count a first unperturbed run measured,
  kept up to date), or ``"systematic"`` (every schedule with at most
  *bound* deviations, fewest first, each deviation a point of the run it
  deviates from; it says *exhausted* only when it ran them all and no run
  met more points than a log keeps), or ``"coverage"`` (feedback-directed:
  ``_coverage``). Each strategy's recipe is its entry in
  ``_search.STRATEGIES``, which the plugin and the command line use too;
- `shrink` reduces a failing run's deviations to a 1-minimal list that still
  fails (delta debugging: no single deviation of it can be dropped), then
  lowers each value as far as the failure allows;
- a `Tape` is that list, by point identity, with its words, the run's full
  decision log and what failed: saved as JSON, it replays with
  `ReplayStrategy` on any supported Python;
- `record` replays a failing schedule once more with a `Recording`
  (``_recording``): its deviations get their details in the program's
  terms (``_where``; worded and classified as ordering or timing by
  ``_report``) and the tape the run's events (``Tape.timeline``: what the
  loop's recorder, ``tideloop.Recorder``, recorded of it, with testing's
  own events), which ``_timeline`` draws and `Tape.trace` prints.
  `explore` does it for the failure it returns.

With ``network=`` every run also gets a new `SimNetwork` (seeded with
the run's seed; the scenario is called with it), recorded in the tape so
that a replay builds the same one; ``livelock_after=`` watches every run
for livelocks (``_liveness``) and is recorded too.

Invariant: a scenario's runs share nothing but what the scenario itself
shares; every run gets new loops, a new strategy, a new log (and a new
network).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ._recording import Recording, exception_words, failure_site
from ._report import Verdict, classify, deviation_words
from ._search import STRATEGIES, Options
from ._sim import SimNetwork
from ._strategy import Decision, DecisionLog, Point, ReplayStrategy, Strategy

#: A function that returns a fresh coroutine: with no argument, or (for
#: ``network=``) given the run's `SimNetwork`.
Scenario = Callable[..., Coroutine[Any, Any, object]]


class NetworkScenario:
    """A scenario on a simulated network: ``async def scenario(net)``.

    Each run builds a `SimNetwork` of seed *seed* for its loop (virtual
    time, as ``testing.run(..., network=net)``) and calls *fn* with it.
    The schedules vary the loop's decisions (the network delivers through
    timers and readiness, so they vary its timing too); *seed* fixes the
    network's own draws (latencies, losses, fault points), and a tape
    records it.
    """

    __slots__ = ("fn", "seed")

    def __init__(
        self, fn: Callable[[SimNetwork], Coroutine[Any, Any, object]], seed: int = 0
    ) -> None:
        self.fn = fn
        self.seed = seed

    def network(self) -> SimNetwork:
        return SimNetwork(seed=self.seed)

    def __repr__(self) -> str:
        return f"<NetworkScenario {getattr(self.fn, '__qualname__', self.fn)!r} seed={self.seed}>"


#: A run's limit in seconds of loop time when none is given (`attempt`):
#: on the real clock, and on a virtual one (where hours pass in no time).
REAL_TIMEOUT: Final = 60.0
VIRTUAL_TIMEOUT: Final = 7 * 86400.0

#: A tape file's format version.
TAPE_VERSION: Final = 1


def _point(raw: list[Any]) -> Point:
    return tuple(raw)


@dataclass
class Tape:
    """A failing schedule: its deviations by identity, its words, its log."""

    deviations: list[Decision]
    found_by: str = ""
    scenario: str = ""
    failure: str = ""
    python: str = field(default_factory=platform.python_version)
    implementation: str = field(default_factory=lambda: sys.implementation.name)
    virtual_time: bool = False
    wakeups: bool = False
    decisions: list[Decision] = field(default_factory=list)
    decision_count: int = 0
    shrunk_from: int | None = None
    #: The recorded replay's lanes and events (`record`), or None.
    timeline: dict[str, Any] | None = None
    #: Where the failure was raised, in the program (a recorded replay's).
    failure_site: dict[str, Any] | None = None
    #: The run's SimNetwork options and seed (None: no network), and its
    #: livelock watch (seconds; None: none). A `NetworkScenario`'s tape has
    #: options {} and its scenario's seed.
    network: dict[str, Any] | None = None
    network_seed: int = 0
    livelock_after: float | None = None
    #: For a schedule with late task steps: how many schedules without them
    #: were tried (none failed), of how many; None: not looked for.
    plain_tried: int | None = None
    plain_space: int = 0

    @classmethod
    def from_log(cls, log: DecisionLog, **kwargs: Any) -> Tape:
        deviations = sorted(log.deviations.values(), key=lambda d: d.index)
        return cls(
            deviations=deviations,
            decisions=list(log.decisions),
            decision_count=log.count,
            plain_tried=log.plain_tried,
            plain_space=log.plain_space,
            **kwargs,
        )

    @property
    def latent(self) -> bool:
        """Whether the failure needs a task step to be late (wake-up mode):
        a race one more await would expose, not one asyncio can produce
        with the program as it is. Only said of a shrunk failure for which
        no schedule without late steps failed (`shrink_deviations` looks);
        an unchecked schedule with late steps is not called latent."""
        return self.plain_tried is not None and any(d.point[0] == "wake" for d in self.deviations)

    def verdict(self) -> Verdict:
        """What kind of failure this is: ordering, timing, latent (``_report``)."""
        return classify(self.deviations)

    @property
    def kind(self) -> str:
        """``"ordering"``, ``"timing"``, ``"latent"`` or ``"deterministic"``."""
        return self.verdict().kind

    def strategy(self) -> ReplayStrategy:
        """A strategy that replays this tape."""
        return ReplayStrategy({d.point: d.value for d in self.deviations})

    def words(self) -> str:
        """The schedule in words: what kind of failure it is, each deviation in
        the program's terms, and that all else kept order."""
        verdict = self.verdict()
        if not self.deviations:
            return f"the unperturbed schedule (no deviation)\n{verdict.summary}"
        lines = [verdict.summary]
        lines += [f"  {reason}" for reason in verdict.reasons]
        lines.append(f"{len(self.deviations)} deviation(s) from the unperturbed schedule:")
        lines += [f"  - {deviation_words(d)}" for d in self.deviations]
        lines.append("  everything else in order")
        if self.latent:
            if not self.plain_space:
                tried = "this run meets no other decision point"
            elif self.plain_tried == self.plain_space:
                tried = (
                    f"tried: all {self.plain_space} single and paired deviations at "
                    "this run's other decision points"
                )
            else:
                tried = (
                    f"tried: {self.plain_tried} of the {self.plain_space} single and "
                    "paired deviations at this run's other decision points"
                )
            # The verdict's first line already says it is latent: this says
            # why it may (no schedule without a late step failed).
            lines.append(f"  no schedule without a late task step failed ({tried})")
        elif any(d.point[0] == "wake" for d in self.deviations):
            lines.append(
                "  (it has late task steps, the wake-up mode's; whether it fails "
                "without them was not checked: it was not shrunk)"
            )
        return "\n".join(lines)

    def report(self) -> str:
        """The whole report: the schedule in words, then what failed and where."""
        lines = [self.words()]
        if self.failure:
            where = ""
            if self.failure_site:
                where = f"\n  at {self.failure_site.get('where')}"
                if self.failure_site.get("code"):
                    where += f": {self.failure_site['code']}"
            lines.append(f"failure: {self.failure}{where}")
        return "\n".join(lines)

    # ------------------------------------------------------------------
    # Files

    def to_json(self) -> dict[str, Any]:
        def dump(d: Decision) -> dict[str, Any]:
            out = {
                "i": d.index,
                "point": list(d.point),
                "n": d.n,
                "value": d.value,
                "words": d.words,
            }
            if d.detail:
                out["detail"] = d.detail
            return out

        verdict = self.verdict()
        return {
            "tideloop_tape": TAPE_VERSION,
            "scenario": self.scenario,
            "found_by": self.found_by,
            "failure": self.failure,
            "python": self.python,
            "implementation": self.implementation,
            "virtual_time": self.virtual_time,
            "wakeups": self.wakeups,
            "shrunk_from": self.shrunk_from,
            "kind": verdict.kind,
            "summary": verdict.summary,
            "failure_site": self.failure_site,
            "plain_tried": self.plain_tried,
            "plain_space": self.plain_space,
            "deviations": [dump(d) for d in self.deviations],
            "decision_count": self.decision_count,
            "decisions": [dump(d) for d in self.decisions],
            "timeline": self.timeline,
            "network": self.network,
            "network_seed": self.network_seed,
            "livelock_after": self.livelock_after,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tape:
        if data.get("tideloop_tape") != TAPE_VERSION:
            raise ValueError(f"not a tideloop tape (version {TAPE_VERSION})")

        def load(d: dict[str, Any]) -> Decision:
            return Decision(
                int(d["i"]),
                _point(d["point"]),
                int(d["n"]),
                int(d["value"]),
                d["words"],
                d.get("detail"),
            )

        return cls(
            deviations=[load(d) for d in data["deviations"]],
            found_by=data.get("found_by", ""),
            scenario=data.get("scenario", ""),
            failure=data.get("failure", ""),
            python=data.get("python", ""),
            implementation=data.get("implementation", ""),
            virtual_time=bool(data.get("virtual_time", False)),
            wakeups=bool(data.get("wakeups", False)),
            decisions=[load(d) for d in data.get("decisions", ())],
            decision_count=int(data.get("decision_count", 0)),
            shrunk_from=data.get("shrunk_from"),
            timeline=data.get("timeline"),
            failure_site=data.get("failure_site"),
            network=data.get("network"),
            network_seed=int(data.get("network_seed") or 0),
            livelock_after=data.get("livelock_after"),
            plain_tried=data.get("plain_tried"),
            plain_space=int(data.get("plain_space", 0)),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    def save_timeline(self, path: str | Path | None = None, *, tape_path: str | Path = "") -> Path:
        """Write this tape's timeline as one self-contained HTML file: at *path*,
        or next to *tape_path* (``x.json`` -> ``x.html``)."""
        from ._timeline import render_html

        if path is None:
            path = timeline_path(tape_path)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_html(self, source=str(tape_path)))
        return path

    def save_new(self, path: str | Path) -> tuple[Path, str]:
        """Save to *path*, or, if a file is there, to the first free
        ``NAME.1.json``, ``NAME.2.json``...: a tape is never overwritten
        silently. The path written, and a sentence saying why it is not
        *path* ("" when it is)."""
        path = Path(path)
        target = path
        n = 0
        while target.exists():
            n += 1
            target = path.with_name(f"{path.stem}.{n}{path.suffix}")
        self.save(target)
        if target == path:
            return target, ""
        return target, f"{path} exists (another failure's tape): saved as {target.name}"

    @classmethod
    def load(cls, path: str | Path) -> Tape:
        return cls.from_json(json.loads(Path(path).read_text()))

    def trace(self) -> str:
        """The run in text: its recorded events (`timeline`), in the program's
        terms, deviations marked ``*`` and the failure ``!``; without a
        recording, every decision, deviations marked ``*``."""
        if self.timeline is not None:
            from ._timeline import render_text

            return render_text(self)
        return self.decision_trace()

    def decision_trace(self) -> str:
        """The run's decision log: every decision, deviations marked ``*``."""
        lines = [
            f"tape of {self.scenario or 'a scenario'}: {self.found_by}",
            f"recorded on {self.implementation} {self.python}; "
            f"{self.decision_count} decision(s), {len(self.deviations)} deviation(s)",
        ]
        if self.failure:
            lines.append(f"failure: {self.failure}")
        for d in self.decisions:
            mark = "*" if d.value else " "
            lines.append(f"{mark} #{d.index:<5} {deviation_words(d) if d.value else d.words}")
        if self.decision_count > len(self.decisions):
            lines.append(f"  ... {self.decision_count - len(self.decisions)} more not logged")
        return "\n".join(lines)


def timeline_path(tape_path: str | Path) -> Path:
    """Where a tape's timeline goes: beside it, ``.html`` for ``.json``."""
    path = Path(tape_path)
    name = path.name
    stem = name[: -len(".json")] if name.endswith(".json") else name
    return path.with_name(stem + ".html")


def diff(a: Tape, b: Tape) -> str:
    """Where two tapes' event logs first differ (or that they do not)."""
    for da, db in zip(a.decisions, b.decisions, strict=False):
        if da.point != db.point or da.value != db.value:
            return (
                f"first divergence at decision #{da.index}:\n"
                f"  A: {da.words or da.point} (value {da.value})\n"
                f"  B: {db.words or db.point} (value {db.value})"
            )
    if len(a.decisions) != len(b.decisions):
        shorter, longer = ("A", "B") if len(a.decisions) < len(b.decisions) else ("B", "A")
        n = min(len(a.decisions), len(b.decisions))
        return f"the same first {n} decisions; then {shorter} ends and {longer} goes on"
    return f"the same {len(a.decisions)} decisions"


# ----------------------------------------------------------------------
# Runs


def _describe_failure(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text if len(text) < 2000 else text[:2000] + "..."


class RunTimeout(AssertionError):
    """A schedule of the scenario did not finish within its time (a hang)."""


async def _within(scenario: Callable[[], Coroutine[Any, Any, object]], timeout: float) -> object:
    if timeout == math.inf:
        return await scenario()
    try:
        async with asyncio.timeout(timeout):
            return await scenario()
    except TimeoutError as exc:
        raise RunTimeout(f"the run did not finish within {timeout} s of loop time") from exc


def attempt(
    scenario: Scenario | NetworkScenario,
    strategy: Strategy,
    *,
    virtual_time: bool = False,
    timeout: float | None = None,
    wakeups: bool = False,
    network: Mapping[str, Any] | None = None,
    network_seed: int = 0,
    livelock_after: float | None = None,
) -> tuple[DecisionLog, BaseException | None]:
    """Run *scenario* once under *strategy*: its log, and what it raised (or None).

    A run that takes more than *timeout* seconds of loop time (virtual
    seconds under virtual time; None: `REAL_TIMEOUT` or `VIRTUAL_TIMEOUT`,
    ``math.inf``: no limit) fails with `RunTimeout`: a schedule that hangs is
    a failure too. *wakeups*: the opt-in mode that also varies how many
    iterations a task's step takes (`Perturber`). *network*: the options of
    a new `SimNetwork` of seed *network_seed* that the scenario is called
    with (virtual time then). *livelock_after*: watch the run for livelocks.
    """
    from . import run  # the package imports this module
    from ._sim import SimNetwork

    net = None
    call: Callable[[], Coroutine[Any, Any, object]]
    if isinstance(scenario, NetworkScenario):
        net = scenario.network()
        call = functools.partial(scenario.fn, net)
        virtual_time = True
    elif network is not None:
        net = SimNetwork(seed=network_seed, **network)
        call = functools.partial(scenario, net)
        virtual_time = True
    else:
        call = scenario
    if timeout is None:
        timeout = VIRTUAL_TIMEOUT if virtual_time else REAL_TIMEOUT
    log = DecisionLog(strategy)
    try:
        run(
            _within(call, timeout),
            virtual_time=virtual_time,
            strategy=log,
            wakeups=wakeups,
            network=net,
            livelock_after=livelock_after,
        )
    except Exception as exc:
        return log, exc
    return log, None


def _body(scenario: Scenario | NetworkScenario) -> tuple[Scenario, SimNetwork | None]:
    """What a run awaits, and the network it runs on (a `NetworkScenario`'s)."""
    if isinstance(scenario, NetworkScenario):
        net = scenario.network()
        return functools.partial(scenario.fn, net), net
    return scenario, None


@dataclass
class Recorded:
    """A failing schedule replayed once more with a `Recording` (`record`)."""

    log: DecisionLog
    recording: Recording
    exception: BaseException | None
    #: Whether the replay failed (a test runner's replay has no exception).
    failed: bool | None = None

    def __post_init__(self) -> None:
        if self.failed is None:
            self.failed = self.exception is not None


def record(
    scenario: Scenario | NetworkScenario,
    deviations: dict[Point, int],
    *,
    virtual_time: bool = False,
    timeout: float | None = None,
    wakeups: bool = False,
    network: Mapping[str, Any] | None = None,
    network_seed: int = 0,
    livelock_after: float | None = None,
) -> Recorded:
    """Replay *deviations* once with a `Recording`: the run's events, and its
    log, whose deviations carry their details in the program's terms. The
    run is made as `attempt` makes it (its network, its livelock watch)."""
    recording = Recording()
    log, exc = attempt(
        scenario,
        ReplayStrategy(deviations, recording=recording),
        virtual_time=virtual_time,
        timeout=timeout,
        wakeups=wakeups,
        network=network,
        network_seed=network_seed,
        livelock_after=livelock_after,
    )
    recording.finish(exc)
    return Recorded(log, recording, exc)


def describe_tape(tape: Tape, recorded: Recorded) -> Tape:
    """*tape* with what its recorded replay saw: each deviation's detail (where
    the replay met the same point), the timeline, and where it failed."""
    met = recorded.log.deviations
    for d in tape.deviations:
        seen = met.get(d.point)
        if seen is not None and seen.detail:
            d.detail = seen.detail
    by_index = {d.point: d for d in tape.deviations}
    for d in tape.decisions:
        if d.value and d.point in by_index:
            d.detail = by_index[d.point].detail
    tape.timeline = recorded.recording.to_json()
    if not recorded.failed:
        tape.timeline["note"] = (
            "the replay recorded here passed: its real input (a thread's timing, a "
            "real peer) arrived differently from the failing run's"
        )
    site = None
    if recorded.exception is not None:
        tape.timeline["failure"] = exception_words(recorded.exception)
        site = failure_site(recorded.exception)
    failure = recorded.recording.failure
    if site is None and failure is not None:
        site = failure.get("site")
    if site is not None and tape.failure_site is None:
        tape.failure_site = site
    return tape


@dataclass
class Exploration:
    """What `explore` did: how many schedules, and the failure it found."""

    strategy: str
    schedules: int = 0
    exhausted: bool = False
    tape: Tape | None = None
    seconds: float = 0.0
    shrink_runs: int = 0
    #: Over an executor with a state file: schedules run before this run.
    resumed: int = 0
    #: Over an executor: the seconds its workers spent running schedules.
    worker_seconds: float = 0.0
    #: A worker's failure that passed when run again here (real timing in
    #: its input): what it raised there; not shrunk, no tape.
    unreproduced: str = ""

    @property
    def found(self) -> bool:
        return self.tape is not None


def shrink_deviations(
    log: DecisionLog,
    fails: Callable[[dict[Point, int]], DecisionLog | None],
    *,
    budget: int = 500,
) -> tuple[DecisionLog, int]:
    """A 1-minimal failing run under *log*'s deviations, and the runs it took.

    *fails(deviations)* runs the scenario under those deviations and
    returns its log if it failed, else None. Delta debugging over the
    deviations (a subset that still fails replaces the set; a run that
    meets fewer points keeps only those), then each remaining value is
    lowered while it still fails. Late task steps (the opt-in wake-up
    mode) go first, when the others fail without them: a failure asyncio
    can produce is reported as such, not as a latent one.
    """
    best = log
    devs = {p: d.value for p, d in log.deviations.items()}
    runs = 0

    def trial(candidate: dict[Point, int]) -> DecisionLog | None:
        nonlocal runs
        runs += 1
        return fails(candidate)

    real = {p: v for p, v in devs.items() if p[0] != "wake"}
    if real and len(real) < len(devs):
        failed = trial(real)
        if failed is not None:
            best = failed
            devs = {p: d.value for p, d in failed.deviations.items()}

    n = 2
    while len(devs) >= 2 and runs < budget:
        items = sorted(devs.items(), key=lambda kv: best.deviations[kv[0]].index)
        size = max(1, len(items) // n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        reduced = False
        for chunk in chunks + [[kv for kv in items if kv not in c] for c in chunks]:
            if not chunk or len(chunk) == len(items):
                continue
            failed = trial(dict(chunk))
            if failed is not None:
                best = failed
                devs = {p: d.value for p, d in failed.deviations.items()}
                n = 2 if len(chunk) <= size else max(n - 1, 2)
                reduced = True
                break
            if runs >= budget:
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(2 * n, len(items))
    if len(devs) == 1 and runs < budget:
        failed = trial({})
        if failed is not None:
            best, devs = failed, {}
    # Lower each value while the failure stays.
    for point in list(devs):
        while devs.get(point, 0) > 1 and runs < budget:
            candidate = dict(devs)
            candidate[point] -= 1
            failed = trial(candidate)
            if failed is None:
                break
            best = failed
            devs = {p: d.value for p, d in failed.deviations.items()}
    if any(p[0] == "wake" for p in devs):
        # Latent only if asyncio cannot produce it: look for the same
        # failure without late steps before saying so.
        plain, tried, space = _plain_failure(best, trial)
        if plain is not None:
            best, more = shrink_deviations(plain, fails, budget=max(budget - runs, 0))
            return best, runs + more
        best.plain_tried, best.plain_space = tried, space
    return best, runs


#: Schedules without late task steps tried, at most, before a failure that
#: has them is called latent.
PLAIN_BUDGET: Final = 200


def _plain_failure(
    log: DecisionLog, trial: Callable[[dict[Point, int]], DecisionLog | None]
) -> tuple[DecisionLog | None, int, int]:
    """A failing run without late task steps, if one is near *log*'s run.

    Tries each deviation alone at the decision points *log*'s run met (but
    its late steps), then each pair, up to `PLAIN_BUDGET` runs: (the first
    that fails or None, runs made, candidates there were).
    """
    points: dict[Point, int] = {}
    for d in log.decisions:
        if d.point[0] != "wake" and d.n > 1:
            points.setdefault(d.point, d.n)
    singles = [(p, v) for p, n in points.items() for v in range(1, n)]
    pairs = (
        len(singles) * (len(singles) - 1) // 2
        - sum((n - 1) * (n - 2) // 2 for n in points.values())  # same point twice
    )
    space = len(singles) + pairs
    tried = 0
    for p, v in singles:
        if tried >= PLAIN_BUDGET:
            return None, tried, space
        tried += 1
        failed = trial({p: v})
        if failed is not None:
            return failed, tried, space
    for i, (p, v) in enumerate(singles):
        for q, w in singles[i + 1 :]:
            if q == p:
                continue
            if tried >= PLAIN_BUDGET:
                return None, tried, space
            tried += 1
            failed = trial({p: v, q: w})
            if failed is not None:
                return failed, tried, space
    return None, tried, space


def shrink(
    scenario: Scenario | NetworkScenario,
    log: DecisionLog,
    *,
    virtual_time: bool = False,
    budget: int = 500,
    failure: BaseException | None = None,
    timeout: float | None = None,
    wakeups: bool = False,
    network: Mapping[str, Any] | None = None,
    network_seed: int = 0,
    livelock_after: float | None = None,
) -> tuple[DecisionLog, BaseException | None, int]:
    """`shrink_deviations` for a scenario: the 1-minimal failing run, what it
    raised, and the runs it took. *failure* is what *log*'s run raised: a
    smaller schedule must fail with the same exception type to replace it.
    """
    last = failure

    def fails(candidate: dict[Point, int]) -> DecisionLog | None:
        nonlocal last
        trial, exc = attempt(
            scenario,
            ReplayStrategy(candidate),
            virtual_time=virtual_time,
            timeout=timeout,
            wakeups=wakeups,
            network=network,
            network_seed=network_seed,
            livelock_after=livelock_after,
        )
        if exc is None or (failure is not None and type(exc) is not type(failure)):
            return None  # passed, or failed another way: not this failure
        last = exc
        return trial

    best, runs = shrink_deviations(log, fails, budget=budget)
    return best, last, runs


def explore(
    scenario: Scenario | NetworkScenario,
    *,
    strategy: str = "random",
    schedules: int = 1000,
    seed: int = 0,
    depth: int = 2,
    bound: int = 2,
    virtual_time: bool = False,
    shrink_failure: bool = True,
    name: str = "",
    timeout: float | None = None,
    wakeups: bool = False,
    describe: bool = True,
    network: bool | Mapping[str, Any] | None = None,
    livelock_after: float | None = None,
    executor: concurrent.futures.Executor | None = None,
    jobs: int = 1,
    state: str | Path | None = None,
    shard: tuple[int, int] | None = None,
    spec: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Exploration:
    """Run *scenario* under up to *schedules* schedules; stop at the first failure.

    *strategy*: ``"random"`` (seeds *seed*, *seed* + 1, ...), ``"pct"``
    (that many PCT schedules of *depth* change points, seeded the same way)
    ``"systematic"`` (every schedule with at most *bound* deviations, in
    order of their number, up to *schedules* of them) or ``"coverage"``
    (mutations of the schedules that reached new code, orderings or
    ``sometimes()`` sites; its choices seeded by *seed*). A failure is shrunk
    (unless *shrink_failure* is false) and returned as a `Tape`. A run
    longer than *timeout* seconds of loop time fails (`RunTimeout`).
    *wakeups* turns on the opt-in variation of how many iterations a task's
    step takes: a failure that needs it is marked latent (`Tape.latent`).
    With *describe* (the default) the failure is replayed once more and
    recorded (`record`): its tape then names every deviation in the
    program's terms, says whether it is an ordering or a timing failure
    (`Tape.verdict`) and carries the run's timeline.
    *network*: True (or `SimNetwork` keyword options) to call the scenario
    with a new `SimNetwork` in each run, seeded with the run's seed
    (*seed*, *seed* + 1, ...; virtual time then), recorded in the tape.
    *livelock_after*: fail a run that livelocks (`Livelock`) for that many
    seconds of loop time.

    Over many processes or machines (``_scale``; a seeded or learning
    strategy): *executor*, any ``concurrent.futures.Executor`` (a Dask
    cluster's ``client.get_executor()``; the caller shuts it down), or
    *jobs* > 1 for a local process pool of that many (with an executor,
    *jobs* says how many workers it has). The scenario travels to the
    workers pickled (a module-level function), or as *spec*,
    ``MODULE:FUNCTION``, which they import. *state*: a file that records
    the search (seeds passed, the corpus, failures), resumed from when it
    exists. *shard*: (K, N), the K-th of N shares of the schedules (a CI
    matrix). *say*: where to say what such a search does. The first
    failure is run again here, shrunk and made a tape as above.
    """
    recipe = STRATEGIES.get(strategy)
    if schedules < 1:
        raise ValueError(f"schedules must be at least 1, not {schedules!r}")
    result = Exploration(strategy)
    options: dict[str, Any] | None = None
    if network is not None and network is not False:
        options = {} if network is True else dict(network)
        virtual_time = True
    mode: dict[str, Any] = {
        "wakeups": wakeups,
        "network": options,
        "livelock_after": livelock_after,
    }
    failing_seed = seed
    start = time.perf_counter()
    failing: DecisionLog | None = None
    failure: BaseException | None = None
    found_by = ""
    search = recipe.search(Options(depth=depth, bound=bound, seed=seed))
    last: DecisionLog | None = None
    parallel = executor is not None or jobs > 1 or state is not None or shard is not None
    first = None if parallel else search.first()
    if first is not None:
        last, exc = attempt(
            scenario, first, virtual_time=virtual_time, timeout=timeout, network_seed=seed, **mode
        )
        result.schedules += 1
        if exc is not None:
            failing, failure, found_by = last, exc, "the unperturbed schedule"
    i = 0
    if parallel:
        from ._scale import search as search_over  # it runs `attempt`: imported late

        net_seed = scenario.seed if isinstance(scenario, NetworkScenario) else seed
        searched = search_over(
            spec or scenario,
            strategy=strategy,
            schedules=schedules,
            seed=seed,
            options=Options(depth=depth, bound=bound, seed=seed),
            virtual_time=virtual_time,
            timeout=timeout,
            wakeups=wakeups,
            network=options,
            network_seed=net_seed,
            executor=executor,
            jobs=jobs,
            state=state,
            shard=shard,
            key={
                "scenario": spec or name or getattr(scenario, "__qualname__", repr(scenario)),
                "depth": depth,
                "bound": bound,
                "virtual_time": virtual_time,
                "wakeups": wakeups,
                "network_seed": net_seed,
            },
            say=say,
        )
        result.schedules, result.resumed = searched.schedules, searched.resumed
        result.worker_seconds = searched.worker_seconds
        found = searched.found
        if found is not None:
            # Again here: the log to shrink, and the exception.
            last, exc = attempt(
                scenario,
                found.strategy,
                virtual_time=virtual_time,
                timeout=timeout,
                network_seed=found.seed,
                **mode,
            )
            if exc is None:
                result.unreproduced = found.failure
            else:
                failing, failure, found_by = last, exc, found.strategy.describe()
                failing_seed = found.seed
    try:
        while not parallel and failing is None and result.schedules < schedules:
            chosen = search.next(seed + i, last)
            if chosen is None:
                result.exhausted = search.exhausted
                break
            i += 1
            run_seed = seed + i
            last, exc = attempt(
                scenario,
                chosen,
                virtual_time=virtual_time,
                timeout=timeout,
                network_seed=run_seed,
                **mode,
            )
            result.schedules += 1
            if exc is not None:
                failing, failure, found_by = last, exc, chosen.describe()
                failing_seed = run_seed
    finally:
        search.close()
    if failing is not None and failure is not None:
        original = len(failing.deviations)
        if shrink_failure:
            failing, shrunk_exc, result.shrink_runs = shrink(
                scenario,
                failing,
                virtual_time=virtual_time,
                failure=failure,
                timeout=timeout,
                network_seed=failing_seed,
                **mode,
            )
            failure = shrunk_exc or failure
        net_scenario = scenario if isinstance(scenario, NetworkScenario) else None
        result.tape = Tape.from_log(
            failing,
            found_by=found_by,
            scenario=name,
            failure=_describe_failure(failure),
            virtual_time=virtual_time or net_scenario is not None,
            wakeups=wakeups,
            shrunk_from=original if shrink_failure else None,
            network=options if options is not None else ({} if net_scenario is not None else None),
            network_seed=(
                failing_seed
                if options is not None
                else (net_scenario.seed if net_scenario is not None else 0)
            ),
            livelock_after=livelock_after,
        )
        if describe:
            recorded = record(
                scenario,
                {p: d.value for p, d in failing.deviations.items()},
                virtual_time=virtual_time,
                timeout=timeout,
                wakeups=wakeups,
                network=options,
                network_seed=failing_seed,
                livelock_after=livelock_after,
            )
            describe_tape(result.tape, recorded)
    result.seconds = time.perf_counter() - start
    return result


# ----------------------------------------------------------------------
# Scenarios by name (the command line, and workers: ``_scale``)


def import_spec(spec: str, usage: str) -> Any:
    """The object ``package.module:name.attr`` names (the current directory is
    importable); ValueError "*usage*, not SPEC" if *spec* has no such form."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{usage}, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: Any = importlib.import_module(module_name)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def load_scenario(spec: str) -> Scenario | NetworkScenario:
    """``package.module:function`` (the current directory is importable): an
    async function of no argument, or of one, a `SimNetwork` (a
    `NetworkScenario`, network seed 0)."""
    target = import_spec(spec, "expected MODULE:FUNCTION")
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        params = []  # type: ignore[assignment]
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) == 1:
        return NetworkScenario(target)  # async def scenario(net)
    if required:
        raise ValueError(
            f"{spec} takes {len(required)} arguments: a scenario takes none, or one (a SimNetwork)"
        )
    scenario: Scenario = target
    return scenario


def replay(scenario: Scenario | NetworkScenario, tape: Tape | str | Path) -> DecisionLog:
    """Run *scenario* under a tape's deviations; raise what it raises."""
    if not isinstance(tape, Tape):
        tape = Tape.load(tape)
    log = DecisionLog(tape.strategy())
    from . import run
    from ._sim import SimNetwork

    net = None
    fn: Any = scenario
    if isinstance(scenario, NetworkScenario):
        fn = scenario.fn
        net = SimNetwork(seed=tape.network_seed, **(tape.network or {}))
    elif tape.network is not None:
        net = SimNetwork(seed=tape.network_seed, **tape.network)
    run(
        fn() if net is None else fn(net),
        virtual_time=tape.virtual_time or net is not None,
        strategy=log,
        wakeups=tape.wakeups,
        network=net,
        livelock_after=tape.livelock_after,
    )
    return log
