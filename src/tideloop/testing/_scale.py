"""Searches over an executor: worker processes or a cluster, shards, and a resumable state.

Layer: top (``tideloop.testing``; above ``_explore``'s runs and
``_search``'s registry, below `explore` and the command line, which call
`search`). A search's schedules run wherever a
``concurrent.futures.Executor`` runs functions: a local
``ProcessPoolExecutor`` (``explore(jobs=P)``, ``-j P``, the default), or
any other, such as a Dask cluster's (``distributed.Client(...).get_executor()``),
Ray's or MPI's (``explore(executor=...)``, ``--executor MODULE:FACTORY``).
tideloop runs no scheduler of its own: it submits `Work` (a batch of
schedules of one scenario) and merges what comes back (`Ran`).
`executor_factory` and `make_executor` turn a ``MODULE:FACTORY`` spec into
an executor, with the same words for the command line's ``--executor``
and the pytest plugin's ``--tideloop-executor`` (``_pytest_scale``).

What a batch is depends on the strategy's recipe (``_search.STRATEGIES``):

- a **seeded** strategy: seeds. Each worker makes the schedule of each
  seed itself (``Recipe.strategy``), so nothing but numbers travels;
  ``--shard K/N`` keeps the seeds ``seed + i`` with ``i % N == K - 1``;
- a **learning** strategy (coverage: a ``_search.Learning``): deviation
  sets, proposed here from the corpus as it stands. Each worker measures
  each run with a ``_coverage.Probe`` and sends back its features and the
  points it met; the corpus here learns from them. A shard is a search of
  its own (its mutations seeded by ``seed + K - 1``), taking its share of
  the schedules.

The *state* file (JSON, rewritten atomically) holds the search's key (a
rerun of another search is refused), the seeds that passed, the schedules
run, the corpus, and the failures found; a rerun resumes from it (a
failure it records is tried again first). The first failure stops the
search: batches not started are cancelled, and the caller (`explore`)
runs it again here, shrinks it and writes its tape.

Invariants:
- Every schedule a worker runs is one this process handed out, named by
  a seed or a deviation set, so a failure replays here from its name.
- The state file is written only here, whole, after each merge (at most
  every `SAVE_EVERY` seconds, and at the end).
- A pool this module made is shut down before `search` returns; an
  executor it was given is left to its owner.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ._coverage import Probe
from ._explore import (
    NetworkScenario,
    Scenario,
    _describe_failure,
    attempt,
    import_spec,
    load_scenario,
)
from ._search import STRATEGIES, Learning, Options
from ._strategy import Point, ReplayStrategy, Strategy

#: Seeds in a seeded batch; deviation sets in a learning one (smaller: the
#: corpus learns between batches).
BATCH: Final = 20
LEARNING_BATCH: Final = 8
#: The state file is rewritten at most this often (seconds), and at the end.
SAVE_EVERY: Final = 2.0

Deviations = list[tuple[Point, int]]

_MEASURING: Final = threading.Lock()


@dataclass
class Work:
    """A batch of schedules for a worker: picklable, and small."""

    #: A ``MODULE:FUNCTION`` spec (imported by the worker) or a picklable scenario.
    scenario: Scenario | NetworkScenario | str
    strategy: str
    options: Options
    length: int
    virtual_time: bool
    timeout: float | None
    wakeups: bool
    network: dict[str, Any] | None
    network_seed: int
    seeds: list[int] = field(default_factory=list)
    schedules: list[Deviations] = field(default_factory=list)


@dataclass
class Ran:
    """What a worker sends back for a `Work`."""

    #: Seeds that passed (seeded).
    passed: list[int] = field(default_factory=list)
    #: Per learning schedule that passed: (deviations met, features, points met).
    learned: list[tuple[Deviations, list[int], Deviations]] = field(default_factory=list)
    #: The failing schedule, by seed or by deviations, and what it raised.
    failed_seed: int | None = None
    failed_deviations: Deviations | None = None
    failure: str = ""
    schedules: int = 0
    seconds: float = 0.0


def run_work(work: Work) -> Ran:
    """A worker's body: run the batch, stop at its first failure."""
    start = time.perf_counter()
    scenario = work.scenario
    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
        if isinstance(scenario, NetworkScenario):
            scenario.seed = work.network_seed
    ran = Ran()
    mode: dict[str, Any] = {
        "virtual_time": work.virtual_time,
        "timeout": work.timeout,
        "wakeups": work.wakeups,
        "network": work.network,
    }
    recipe = STRATEGIES.get(work.strategy)
    for seed in work.seeds:
        strategy = recipe.strategy(seed, work.options, work.length)
        _, exc = attempt(scenario, strategy, network_seed=seed, **mode)
        ran.schedules += 1
        if exc is not None:
            ran.failed_seed, ran.failure = seed, _describe_failure(exc)
            break
        ran.passed.append(seed)
    for devs in work.schedules:
        # One probe per process at a time: a worker with several threads
        # (a Dask worker's) measures its runs one after another.
        with _MEASURING:
            probe = Probe().start()
            try:
                log, exc = attempt(
                    scenario, ReplayStrategy(dict(devs)), network_seed=work.network_seed, **mode
                )
            finally:
                features = probe.stop()
        ran.schedules += 1
        if exc is not None:
            ran.failed_deviations, ran.failure = devs, _describe_failure(exc)
            break
        features |= probe.stop(log)
        met = [(p, d.value) for p, d in log.deviations.items()]
        points = [(d.point, d.n) for d in log.decisions]
        ran.learned.append((met, sorted(features), points))
    ran.seconds = time.perf_counter() - start
    return ran


# ----------------------------------------------------------------------
# State


@dataclass
class State:
    """A search's state file (see the module docstring)."""

    path: Path | None
    key: dict[str, Any]
    passed: set[int] = field(default_factory=set)
    schedules: int = 0
    corpus: dict[str, Any] | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    _saved: float = 0.0

    @classmethod
    def load(cls, path: str | Path | None, key: dict[str, Any]) -> State:
        if path is None:
            return cls(None, key)
        path = Path(path)
        if not path.exists():
            return cls(path, key)
        data = json.loads(path.read_text())
        if data.get("key") != key:
            raise ValueError(
                f"{path} records another exploration ({data.get('key')}); remove it to start over"
            )
        return cls(
            path,
            key,
            passed=set(data.get("passed", ())),
            schedules=int(data.get("schedules", len(data.get("passed", ())))),
            corpus=data.get("corpus"),
            failures=list(data.get("failures", ())),
        )

    def save(self, *, force: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._saved < SAVE_EVERY:
            return
        self._saved = now
        data = {
            "key": self.key,
            "passed": sorted(self.passed),
            "schedules": self.schedules,
            "corpus": self.corpus,
            "failures": self.failures,
        }
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(self.path)


# ----------------------------------------------------------------------
# The search


@dataclass
class Found:
    """The first failure a search found: the strategy that replays it here."""

    strategy: Strategy
    #: The seed it ran with (seeded: its seed; learning: the search's).
    seed: int
    failure: str


@dataclass
class Searched:
    """What `search` did."""

    schedules: int = 0
    resumed: int = 0
    to_go: int = 0
    found: Found | None = None
    #: Schedules per worker-second (the workers' own time, summed).
    worker_seconds: float = 0.0


def executor_factory(spec: str, usage: str) -> Callable[[], cf.Executor]:
    """``MODULE:FACTORY``'s FACTORY, imported (`_explore.import_spec`), not called
    yet; ValueError "*usage*, not SPEC" for a spec of another form, or if
    FACTORY is not callable (ImportError, AttributeError: no such module or
    name)."""
    factory = import_spec(spec, usage)
    if not callable(factory):
        raise ValueError(f"{spec} is not callable")
    made: Callable[[], cf.Executor] = factory
    return made


def make_executor(spec: str, factory: Callable[[], object]) -> cf.Executor:
    """What *factory* (``executor_factory(spec)``) returns; ValueError unless
    it is a ``concurrent.futures.Executor``."""
    executor = factory()
    if not isinstance(executor, cf.Executor):
        raise ValueError(
            f"{spec} returned {type(executor).__name__}, not a concurrent.futures.Executor"
        )
    return executor


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` (1 <= K <= N) as (K, N); ValueError otherwise."""
    k, sep, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (0, 0)
    if not sep or not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"a shard is K/N with 1 <= K <= N, not {text!r}")
    return shard


def search(
    scenario: Scenario | NetworkScenario | str,
    *,
    strategy: str,
    schedules: int,
    seed: int,
    options: Options,
    virtual_time: bool,
    timeout: float | None,
    wakeups: bool,
    network: Mapping[str, Any] | None,
    network_seed: int,
    executor: cf.Executor | None = None,
    jobs: int = 2,
    state: str | Path | None = None,
    shard: tuple[int, int] | None = None,
    key: Mapping[str, Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> Searched:
    """Run a seeded or learning strategy's schedules on *executor* (None: a
    local pool of *jobs* processes) until one fails or *schedules* ran.

    *scenario*: what workers run (a spec is imported there). *jobs*: with
    an executor of one's own, how many workers it has (batches in flight:
    twice that). *state*: the state file; *key* what identifies the search
    in it. *shard*: (K, N), this shard's share. *say*: where to say what
    happens (resuming, a failure).
    """
    recipe = STRATEGIES.get(strategy)
    if not (recipe.seeded or recipe.learns):
        names = ", ".join(STRATEGIES.parallel_names())
        raise ValueError(
            f"the {strategy} strategy walks its space in order, in one process: "
            f"an executor, jobs or a shard are for {names}"
        )
    k, n = shard or (1, 1)
    key = dict(key or {})
    key.update(strategy=strategy, seed=seed, shard=f"{k}/{n}")
    saved = State.load(state, key)
    result = Searched(resumed=saved.schedules)
    mode: dict[str, Any] = {
        "virtual_time": virtual_time,
        "timeout": timeout,
        "wakeups": wakeups,
        "network": None if network is None else dict(network),
    }
    run_scenario: Scenario | NetworkScenario
    run_scenario = load_scenario(scenario) if isinstance(scenario, str) else scenario
    if isinstance(run_scenario, NetworkScenario) and isinstance(scenario, str):
        run_scenario.seed = network_seed
    learning: Learning | None = None
    if recipe.learns:
        learning = STRATEGIES.learning(
            strategy, Options(options.depth, options.bound, seed + k - 1)
        )
        if saved.corpus:
            learning.load_json(saved.corpus)
    # A failure the state records is tried first, here.
    for failed in saved.failures:
        again = _strategy_of(failed, recipe, options, failed.get("length", 0))
        run_seed = int(failed.get("seed", seed))
        _, exc = attempt(run_scenario, again, network_seed=run_seed, **mode)
        if exc is not None:
            if say is not None:
                say(f"the failure {state} records fails again: {_describe_failure(exc)}")
            # A new strategy for the caller's replay: `again` has used its draws.
            fresh = _strategy_of(failed, recipe, options, failed.get("length", 0))
            result.found = Found(fresh, run_seed, _describe_failure(exc))
            return result
    length = 0
    first = recipe.first()
    if first is not None:
        log, exc = attempt(run_scenario, first, network_seed=seed, **mode)
        length = log.count
        result.schedules += 1
        if exc is not None:
            result.found = Found(first, seed, _describe_failure(exc))
            return result
    base = Work(
        scenario,
        strategy,
        options,
        length,
        virtual_time,
        timeout,
        wakeups,
        mode["network"],
        network_seed,
    )
    share = len(range(k - 1, schedules, n))
    todo: list[int] = []
    if recipe.seeded:
        todo = [s for s in range(seed + k - 1, seed + schedules, n) if s not in saved.passed]
        result.to_go = len(todo)
    else:
        result.to_go = max(share - saved.schedules, 0)
    if saved.schedules and say is not None:
        say(f"resuming: {saved.schedules} schedule(s) passed before, {result.to_go} to go")
    own = executor is None
    pool: cf.Executor = executor or cf.ProcessPoolExecutor(
        max_workers=max(jobs, 1), mp_context=multiprocessing.get_context("spawn")
    )
    inflight: dict[cf.Future[Ran], Work] = {}
    handed = 0
    try:
        while result.found is None:
            while len(inflight) < 2 * max(jobs, 1) and handed < result.to_go:
                if recipe.seeded:
                    batch = todo[handed : handed + BATCH]
                    work = _with(base, seeds=batch)
                    handed += len(batch)
                else:
                    assert learning is not None
                    if not learning.corpus and inflight:
                        break  # the unperturbed run first: nothing to mutate yet
                    size = min(LEARNING_BATCH, result.to_go - handed)
                    proposals = [learning.propose() for _ in range(size)]
                    if not learning.corpus:
                        proposals = proposals[:1]
                    work = _with(base, schedules=[list(p.items()) for p in proposals])
                    handed += len(proposals)
                inflight[pool.submit(run_work, work)] = work
            if not inflight:
                break
            done, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
            for future in done:
                work = inflight.pop(future)
                ran = future.result()
                result.schedules += ran.schedules
                result.worker_seconds += ran.seconds
                saved.schedules += ran.schedules
                saved.passed.update(ran.passed)
                if learning is not None:
                    for met, features, points in ran.learned:
                        learning.learn(dict(met), features, points)
                if ran.failure and result.found is None:
                    result.found = _found(
                        ran, recipe, options, length, seed=seed, learning=learning
                    )
                    record: dict[str, Any] = {"failure": ran.failure, "length": length}
                    if ran.failed_seed is not None:
                        record["seed"] = ran.failed_seed
                    else:
                        devs = ran.failed_deviations or []
                        record["deviations"] = [[list(p), v] for p, v in devs]
                        record["seed"] = network_seed
                    saved.failures.append(record)
                    if say is not None:
                        say(f"{result.found.strategy.describe()} failed: {ran.failure}")
            if learning is not None:
                saved.corpus = learning.to_json()
            saved.save(force=result.found is not None)
    finally:
        for future in inflight:
            future.cancel()
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
        if learning is not None:
            saved.corpus = learning.to_json()
        saved.save(force=True)
    return result


def _with(base: Work, **changes: Any) -> Work:
    work = Work(**{**base.__dict__, **changes})
    return work


def _strategy_of(failed: Mapping[str, Any], recipe: Any, options: Options, length: int) -> Strategy:
    if "deviations" in failed:
        return ReplayStrategy({tuple(p): int(v) for p, v in failed["deviations"]})
    made: Strategy = recipe.strategy(int(failed["seed"]), options, length)
    return made


def _found(
    ran: Ran, recipe: Any, options: Options, length: int, *, seed: int, learning: Learning | None
) -> Found:
    if ran.failed_seed is not None:
        made: Strategy = recipe.strategy(ran.failed_seed, options, length)
        return Found(made, ran.failed_seed, ran.failure)
    devs = dict(ran.failed_deviations or ())
    runs = getattr(learning, "runs", 0)
    label = f"{recipe.name}, a schedule of {len(devs)} deviation(s) after {runs} run(s)"
    return Found(ReplayStrategy(devs, label=label), seed, ran.failure)
