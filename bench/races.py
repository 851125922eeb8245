"""Schedules to find each planted race: tideloop's strategies, simloom and seedloop.

Not part of ``python -m bench`` (which measures loops under load): this
measures ``tideloop.testing`` as a race finder, on the planted races of
``scenarios/races.py`` (each an asyncio program whose assertion fails
only under some orderings) and on its `CONTROL`, a similar program done
right that must never fail. Run it from the repository root, one tool at a
time; each run replaces its own section of the JSON file and rewrites the
markdown table from every section the file holds::

    .ci-venvs/3.11/bin/python -m bench.races                        # tideloop
    .ci-venvs/3.12/bin/python -m bench.races --strategies random --no-shrink
    PYTHONPATH=src /work/.bench-venvs/simloom312/bin/python -m bench.races --tool simloom
    PYTHONPATH=src /work/.bench-venvs/simloom312/bin/python -m bench.races --tool seedloop

What it measures, for each race and each strategy:

- **schedules to the first failure** from each base seed (0, 1000, ...
  9000), up to ``--limit`` schedules: the search a developer runs. The
  median and the worst over the bases; a base that found nothing counts as
  worse than the limit. tideloop's ``systematic`` strategy has no seed (it
  enumerates every schedule with at most two deviations, fewest first), so
  it has one count; so has simloom's ``explore_systematic`` (delay bound 2).
- **ms per schedule**: the searches' wall time over the schedules they ran.
- tideloop: the first failure of each strategy **shrunk** (deviations before
  and after, and the runs it took) and its tape **replayed** ``--replays``
  times (how many replays failed). simloom: its random walk's first failure
  shrunk by ``simloom.shrink`` (its default budget of 1500 runs; deviations
  from FIFO before and after, candidate runs) and the shrunk universe
  replayed ``--replays`` times.
- the **control**: tideloop runs 1000 random, 200 PCT and up to 2000
  systematic schedules (bound 2); simloom 200 random-walk and 200 PCT
  schedules and up to ``--limit`` systematic ones. Any failure is a false
  alarm.

Only the race's own ``AssertionError`` counts as finding it. On simloom and
seedloop, a run that fails another way (a deadlock or livelock report, an
error the program cannot raise on asyncio) is counted as *other*, and a run
in which a thread of the program was refused by the simulator (simloom's
``EscapedSimulationError``, seedloop's ``BoundaryError``, raised in that
thread) is counted as *refused* even when the program then fails its
assertion: it failed because the thread's callback never came, not because
of the race. A race whose first ``--unsupported-after`` runs all end that
way is reported as unsupported, with the reason, and not searched further.
A race that no base found within the limit stops after ``--give-up`` bases.

How simloom 0.5.0 runs the programs (``simloom.run(main, seed=..., scheduler=...)``):

- its loop picks every ready callback from its tape: ``random`` (random
  walk) or ``pct:auto`` (PCT with simloom's default depth 3, i.e. two change
  points, as tideloop's PCT has; the horizon measured by one probe run per
  base, as ``simloom.explore`` does; the probe is not counted);
- ``max_steps_per_instant=20000`` (default 1,000,000): a program spinning on
  ``sleep(0)`` is reported as a livelock after about 0.6 s instead of a minute;
- **port 0**: simloom's ``create_server`` does not pick a free port for port
  0, so a program with two servers on ``127.0.0.1:0`` fails with EADDRINUSE.
  This script gives each such server the next port from 50000, as a kernel
  would (a patch of ``simloom._net.SimNetwork.create_server``);
- ``two_clients_in_order`` polls with ``await asyncio.sleep(0)`` until the
  server has logged both requests; simloom's virtual clock advances only when
  nothing is ready, so the data (default link latency 0.5-20 ms) never
  arrives: a livelock on every seed. It is also run with the link latency
  set to 0 (``world.net.set_latency(0, 0)``), reported as *adapted*.

seedloop 0.4.1 (``seedloop.replay(scenario, seed=...)``, one seed per run)
runs the ready queue in FIFO order and equal timers in the order they were
armed, so its seeds vary only its simulated network's message timing; it
refuses real sockets (``create_server``), executors and foreign threads.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from scenarios import races as planted_races

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("tideloop", "simloom", "seedloop")
TIDELOOP_STRATEGIES = ("random", "pct", "systematic")
#: simloom's schedulers, by the names this report gives them.
SIMLOOM_SCHEDULERS = {"random": "random", "pct": "pct:auto"}
SIMLOOM_MAX_STEPS = 20_000
#: simloom.shrink's own default budget of candidate runs.
SIMLOOM_SHRINK_RUNS = 1500
#: `explore`'s limit on a run, in seconds of loop time, on the real clock. Under
#: virtual time the default (a week) is kept: `timers_at_the_same_instant`
#: sleeps 30 virtual seconds, so a 10 s limit fails every schedule (`RunTimeout`).
REAL_CLOCK_TIMEOUT = 10.0
#: Errors a simulator raises in a program's thread when it refuses the thread's work.
REFUSALS = ("EscapedSimulationError", "BoundaryError")

#: One run of one seed: ("found" | "passed" | "other" | "refused", detail).
Outcome = tuple[str, str]

JSONDict = dict[str, Any]


def _median(counts: Sequence[int | None]) -> float:
    return statistics.median([math.inf if c is None else c for c in counts])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else ""


def _machine() -> JSONDict:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "commit": commit,
        "cpus": os.cpu_count(),
        "load_before": list(os.getloadavg()),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------
# Searches


def seed_search(
    prepare: Callable[[int], Callable[[int], Outcome]],
    bases: Sequence[int],
    limit: int,
    *,
    give_up: int,
    unsupported_after: int,
) -> JSONDict:
    """Seeds base, base + 1, ... until a run finds the race, for each base.

    *prepare(base)* returns the function that runs one seed (untimed: a
    probe run, for instance).
    """
    counts: list[int | None] = []
    searched: list[int] = []
    other: collections.Counter[str] = collections.Counter()
    schedules = 0
    seconds = 0.0
    passed = 0
    for index, base in enumerate(bases):
        run = prepare(base)
        found: int | None = None
        for i in range(limit):
            start = time.perf_counter()
            outcome, detail = run(base + i)
            seconds += time.perf_counter() - start
            schedules += 1
            if outcome == "found":
                found = i + 1
                break
            if outcome == "passed":
                passed += 1
            else:
                other[f"{outcome}: {detail}"] += 1
            if index == 0 and i + 1 == unsupported_after and not passed:
                reason = other.most_common(1)[0][0]
                return {
                    "unsupported": reason,
                    "schedules": schedules,
                    "seconds": seconds,
                    "ms_per_schedule": 1000 * seconds / schedules,
                    "other": dict(other),
                }
        counts.append(found)
        searched.append(base)
        if index + 1 >= give_up and all(c is None for c in counts):
            break
    return {
        "bases": searched,
        "counts": counts,
        "median": _median(counts),
        "worst": math.inf if None in counts else max(c for c in counts if c is not None),
        "schedules": schedules,
        "seconds": seconds,
        "ms_per_schedule": 1000 * seconds / schedules,
        "other": dict(other),
    }


# ----------------------------------------------------------------------
# tideloop


def _failure_type(text: str) -> str:
    return text.split(":", 1)[0].strip() if text else ""


def tideloop_section(args: argparse.Namespace, races: ModuleType) -> Iterator[tuple[str, JSONDict]]:
    """(race name, its results) for each race, then ("", the control)."""
    from tideloop import testing

    bases = [1000 * i for i in range(args.bases)]
    for planted in selected(races.RACES, args.only):
        entry: JSONDict = {
            "kind": planted.kind,
            "virtual_time": planted.virtual_time,
            "strategies": {},
            "shrink": {},
        }

        def explore(strategy: str, seed: int, shrink: bool, p: Any = planted) -> Any:
            return testing.explore(
                p.race,
                strategy=strategy,
                schedules=args.limit,
                seed=seed,
                virtual_time=p.virtual_time,
                name=p.name,
                timeout=None if p.virtual_time else REAL_CLOCK_TIMEOUT,
                shrink_failure=shrink,
            )

        for strategy in args.strategies:
            counts: list[int | None] = []
            failures: list[str] = []
            schedules = 0
            seconds = 0.0
            exhausted = False
            first_seed: int | None = None
            for base in [0] if strategy == "systematic" else bases:
                result = explore(strategy, base, False)
                schedules += result.schedules
                seconds += result.seconds
                exhausted = exhausted or result.exhausted
                counts.append(result.schedules if result.found else None)
                if result.tape is not None:
                    failures.append(_first_line(result.tape.failure))
                    if first_seed is None:
                        first_seed = base
            search: JSONDict = {
                "bases": [None] if strategy == "systematic" else bases,
                "counts": counts,
                "median": _median(counts),
                "worst": math.inf if None in counts else max(c for c in counts if c),
                "schedules": schedules,
                "seconds": seconds,
                "ms_per_schedule": 1000 * seconds / schedules,
                "failures": collections.Counter(_failure_type(f) for f in failures),
                "exhausted": exhausted,
            }
            entry["strategies"][strategy] = search
            _progress(
                f"tideloop {planted.name} {strategy}: {counts} "
                f"({search['ms_per_schedule']:.1f} ms/schedule)"
            )
            if args.shrink and first_seed is not None:
                entry["shrink"][strategy] = shrink_and_replay(
                    testing, planted, explore(strategy, first_seed, True), args.replays
                )
                _progress(f"  shrink: {entry['shrink'][strategy]['summary']}")
        yield planted.name, entry
    if args.control:
        yield "", tideloop_control(args, races.CONTROL, testing)


def shrink_and_replay(testing: Any, planted: Any, result: Any, replays: int) -> JSONDict:
    tape = result.tape
    if tape is None:  # a race on real thread timing that the second search missed
        return {"summary": "not found again", "found": False}
    failed: collections.Counter[str] = collections.Counter()
    for _ in range(replays):
        try:
            testing.replay(planted.race, tape)
        except Exception as exc:
            failed[type(exc).__name__] += 1
    before, after = tape.shrunk_from, len(tape.deviations)
    return {
        "found": True,
        "found_by": tape.found_by,
        "failure": _first_line(tape.failure),
        "deviations_before": before,
        "deviations_after": after,
        "shrink_runs": result.shrink_runs,
        "words": tape.words(),
        "replays": replays,
        "replays_failed": sum(failed.values()),
        "replay_failures": dict(failed),
        "summary": f"{before} -> {after} in {result.shrink_runs} runs; "
        f"replays failing {sum(failed.values())}/{replays}",
    }


def tideloop_control(args: argparse.Namespace, control: Any, testing: Any) -> JSONDict:
    runs: JSONDict = {}
    for strategy, schedules in (
        ("random", args.control_random),
        ("pct", args.control_pct),
        ("systematic", args.control_systematic),
    ):
        if strategy not in args.strategies:
            continue
        result = testing.explore(
            control.race,
            strategy=strategy,
            schedules=schedules,
            seed=0,
            virtual_time=control.virtual_time,
            name=control.name,
            timeout=None if control.virtual_time else REAL_CLOCK_TIMEOUT,
            shrink_failure=False,
        )
        runs[strategy] = {
            "limit": schedules,
            "schedules": result.schedules,
            "failed": int(result.found),
            "failure": _first_line(result.tape.failure) if result.tape else "",
            "exhausted": result.exhausted,
            "seconds": result.seconds,
            "ms_per_schedule": 1000 * result.seconds / result.schedules,
        }
        _progress(f"tideloop control {strategy}: {runs[strategy]}")
    return {"name": control.name, "kind": control.kind, "runs": runs}


# ----------------------------------------------------------------------
# simloom and seedloop


class ThreadErrors:
    """Exceptions raised in the programs' threads, and unraisable ones (counted, not printed)."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.unraisable = 0

    def install(self) -> None:
        def thread_hook(hook_args: threading.ExceptHookArgs) -> None:
            self.threads.append(hook_args.exc_type.__name__)

        def unraisable_hook(_: Any) -> None:
            self.unraisable += 1

        threading.excepthook = thread_hook
        sys.unraisablehook = unraisable_hook

    @contextmanager
    def watch(self) -> Iterator[list[str]]:
        """The names of the thread errors raised inside the block."""
        start = len(self.threads)
        seen: list[str] = []
        try:
            yield seen
        finally:
            seen.extend(self.threads[start:])


def classify(error: BaseException | None, thread_errors: list[str]) -> Outcome:
    refused = [name for name in thread_errors if name in REFUSALS]
    if refused:
        return "refused", f"{refused[0]} in a thread of the program"
    if error is None:
        return "passed", ""
    if type(error) is AssertionError:
        return "found", ""
    name = type(error).__name__
    if name in REFUSALS:  # what was refused: "create_server (real socket)", ...
        return "other", f"{name}: {str(error).split(' cannot ')[0][:80]}"
    return "other", name


def patch_simloom_port_zero(simloom_net: Any) -> None:
    """Port 0 gets the next port from 50000 (simloom 0.5.0 takes 0 as a port)."""
    original = simloom_net.SimNetwork.create_server

    async def create_server(
        self: Any, factory: Any, host: Any = None, port: Any = None, **kwargs: Any
    ) -> Any:
        if port == 0:
            port = getattr(self, "_bench_next_port", 50000)
            self._bench_next_port = port + 1
        return await original(self, factory, host, port, **kwargs)

    simloom_net.SimNetwork.create_server = create_server


def simloom_main(race: Any, *, zero_latency: bool) -> Any:
    if not zero_latency:
        return race

    async def main(world: Any) -> None:
        world.net.set_latency(0, 0)
        await race()

    return main


def simloom_section(args: argparse.Namespace, races: ModuleType) -> Iterator[tuple[str, JSONDict]]:
    simloom = importlib.import_module("simloom")
    simloom_run = importlib.import_module("simloom._run")
    patch_simloom_port_zero(importlib.import_module("simloom._net"))
    errors = ThreadErrors()
    errors.install()
    bases = [1000 * i for i in range(args.bases)]

    def run_one(main: Any, seed: int, scheduler: str) -> Outcome:
        with errors.watch() as seen:
            result = simloom.run(
                main,
                seed=seed,
                scheduler=scheduler,
                raise_on_error=False,
                max_steps_per_instant=SIMLOOM_MAX_STEPS,
            )
        return classify(result.error, seen)

    def prepare(main: Any, name: str) -> Callable[[int], Callable[[int], Outcome]]:
        spec = SIMLOOM_SCHEDULERS[name]

        def for_base(base: int) -> Callable[[int], Outcome]:
            scheduler = spec
            if spec == "pct:auto":  # one probe run per base, as simloom.explore
                scheduler = simloom_run.resolve_auto_horizon(
                    main, spec, seed=base, max_steps_per_instant=SIMLOOM_MAX_STEPS
                )
            return lambda seed: run_one(main, seed, scheduler)

        return for_base

    def systematic(main: Any) -> JSONDict:
        start = time.perf_counter()
        with errors.watch() as seen:
            result = simloom.explore_systematic(
                main,
                max_delays=2,
                max_schedules=args.limit,
                max_steps_per_instant=SIMLOOM_MAX_STEPS,
            )
        seconds = time.perf_counter() - start
        first = result.first
        outcome = classify(first.error, seen) if first is not None else ("passed", "")
        count = result.first_failure_at if outcome[0] == "found" else None
        return {
            "bases": [None],
            "counts": [count],
            "median": _median([count]),
            "worst": math.inf if count is None else count,
            "schedules": result.schedules,
            "seconds": seconds,
            "ms_per_schedule": 1000 * seconds / result.schedules,
            "exhausted": result.exhaustive,
            "other": {}
            if outcome[0] in ("found", "passed")
            else {f"{outcome[0]}: {outcome[1]}": 1},
        }

    def shrink(main: Any, search: JSONDict, label: str) -> JSONDict:
        """simloom.shrink on the random walk's first failure, then its replays."""
        if not args.shrink or "unsupported" in search:
            return {"found": False}
        first = next(
            ((b, c) for b, c in zip(search["bases"], search["counts"], strict=True) if c), None
        )
        if first is None:
            return {"found": False}
        seed = first[0] + first[1] - 1
        with errors.watch():
            failure = simloom.run(
                main,
                seed=seed,
                scheduler="random",
                raise_on_error=False,
                max_steps_per_instant=SIMLOOM_MAX_STEPS,
            )
            if type(failure.error) is not AssertionError:  # a real thread's timing
                return {"found": False, "seed": seed}
            shrunk = simloom.shrink(
                main, failure, max_runs=SIMLOOM_SHRINK_RUNS, max_steps_per_instant=SIMLOOM_MAX_STEPS
            )
            failed = 0
            for _ in range(args.replays):
                again = simloom.replay(
                    main,
                    tape=shrunk.result,
                    raise_on_error=False,
                    max_steps_per_instant=SIMLOOM_MAX_STEPS,
                )
                failed += type(again.error) is AssertionError
        result: JSONDict = {
            "found": True,
            "seed": seed,
            "deviations_before": shrunk.initial_deviations,
            "deviations_after": shrunk.deviations,
            "shrink_runs": shrunk.runs_used,
            "words": shrunk.describe(),
            "replays": args.replays,
            "replays_failed": failed,
        }
        _progress(
            f"simloom {label} shrink: {shrunk.initial_deviations} -> {shrunk.deviations} "
            f"in {shrunk.runs_used} runs; replays failing {failed}/{args.replays}"
        )
        return result

    def strategies(main: Any, label: str) -> JSONDict:
        found: JSONDict = {}
        for name in SIMLOOM_SCHEDULERS:
            found[name] = seed_search(
                prepare(main, name),
                bases,
                args.limit,
                give_up=args.give_up,
                unsupported_after=args.unsupported_after,
            )
            _progress(f"simloom {label} {name}: {_brief(found[name])}")
        if "unsupported" not in found["random"]:
            found["systematic"] = systematic(main)
            _progress(f"simloom {label} systematic: {_brief(found['systematic'])}")
        return found

    for planted in selected(races.RACES, args.only):
        main = simloom_main(planted.race, zero_latency=False)
        entry: JSONDict = {
            "kind": planted.kind,
            "virtual_time": planted.virtual_time,
            "strategies": strategies(main, planted.name),
        }
        # Keyed by strategy, as tideloop's: simloom's random walk's alone.
        entry["shrink"] = {"random": shrink(main, entry["strategies"]["random"], planted.name)}
        if planted.name == "two_clients_in_order":
            main = simloom_main(planted.race, zero_latency=True)
            label = planted.name + " (latency 0)"
            adapted: JSONDict = {
                "how": "link latency 0 (world.net.set_latency(0, 0))",
                "strategies": strategies(main, label),
            }
            adapted["shrink"] = {"random": shrink(main, adapted["strategies"]["random"], label)}
            entry["adapted"] = adapted
        entry["unraisable_so_far"] = errors.unraisable
        yield planted.name, entry
    if args.control:
        control = races.CONTROL
        runs: JSONDict = {}
        for name, spec in SIMLOOM_SCHEDULERS.items():
            outcomes: collections.Counter[str] = collections.Counter()
            start = time.perf_counter()
            scheduler = spec
            if spec == "pct:auto":
                scheduler = simloom_run.resolve_auto_horizon(
                    control.race, spec, seed=0, max_steps_per_instant=SIMLOOM_MAX_STEPS
                )
            for seed in range(args.control_others):
                outcome, detail = run_one(control.race, seed, scheduler)
                outcomes[f"{outcome}: {detail}" if detail else outcome] += 1
            seconds = time.perf_counter() - start
            runs[name] = {
                "limit": args.control_others,
                "schedules": args.control_others,
                "failed": args.control_others - outcomes["passed"],
                "outcomes": dict(outcomes),
                "seconds": seconds,
                "ms_per_schedule": 1000 * seconds / args.control_others,
            }
            _progress(f"simloom control {name}: {runs[name]}")
        search = systematic(control.race)
        runs["systematic"] = {
            "limit": args.limit,
            "schedules": search["schedules"],
            "failed": int(search["counts"][0] is not None or bool(search["other"])),
            "outcomes": search["other"],
            "exhausted": search["exhausted"],
            "seconds": search["seconds"],
            "ms_per_schedule": search["ms_per_schedule"],
        }
        _progress(f"simloom control systematic: {runs['systematic']}")
        yield "", {"name": control.name, "kind": control.kind, "runs": runs}


def seedloop_section(args: argparse.Namespace, races: ModuleType) -> Iterator[tuple[str, JSONDict]]:
    seedloop = importlib.import_module("seedloop")
    errors = ThreadErrors()
    errors.install()
    bases = [1000 * i for i in range(args.bases)]

    def scenario_of(race: Any) -> Any:
        async def scenario(world: Any) -> None:
            await race()

        return scenario

    def run_one(scenario: Any, seed: int) -> Outcome:
        error: BaseException | None = None
        with errors.watch() as seen:
            try:
                seedloop.replay(scenario, seed=seed)
            except Exception as exc:
                error = exc
        return classify(error, seen)

    for planted in selected(races.RACES, args.only):
        scenario = scenario_of(planted.race)

        def prepare(base: int, s: Any = scenario) -> Callable[[int], Outcome]:
            return lambda seed: run_one(s, seed)

        search = seed_search(
            prepare,
            bases,
            args.limit,
            give_up=args.give_up,
            unsupported_after=args.unsupported_after,
        )
        _progress(f"seedloop {planted.name}: {_brief(search)}")
        yield (
            planted.name,
            {
                "kind": planted.kind,
                "virtual_time": planted.virtual_time,
                "strategies": {"seeds": search},
            },
        )
    if args.control:
        control = races.CONTROL
        scenario = scenario_of(control.race)
        outcomes: collections.Counter[str] = collections.Counter()
        start = time.perf_counter()
        for seed in range(args.control_others):
            outcome, detail = run_one(scenario, seed)
            outcomes[f"{outcome}: {detail}" if detail else outcome] += 1
        seconds = time.perf_counter() - start
        runs = {
            "seeds": {
                "limit": args.control_others,
                "schedules": args.control_others,
                "failed": args.control_others - outcomes["passed"],
                "outcomes": dict(outcomes),
                "seconds": seconds,
                "ms_per_schedule": 1000 * seconds / args.control_others,
            }
        }
        _progress(f"seedloop control: {runs['seeds']}")
        yield "", {"name": control.name, "kind": control.kind, "runs": runs}


def _brief(search: JSONDict) -> str:
    if "unsupported" in search:
        return f"unsupported ({search['unsupported']})"
    return (
        f"{search['counts']} ({search['ms_per_schedule']:.1f} ms/schedule"
        + (f"; other: {search['other']}" if search["other"] else "")
        + ")"
    )


def selected(planted: Sequence[Any], only: str) -> list[Any]:
    names = {n for n in only.split(",") if n}
    chosen = [p for p in planted if not names or p.name in names]
    if names and len(chosen) != len(names):
        raise SystemExit(f"unknown race in --only: {sorted(names - {p.name for p in chosen})}")
    return chosen


# ----------------------------------------------------------------------
# Files and the table


def _version(tool: str) -> str:
    if tool == "tideloop":
        module = importlib.import_module("tideloop")
    else:
        module = importlib.import_module(tool)
    return str(getattr(module, "__version__", "?"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return None  # not found within the limit
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def save(path: Path, section: str, data: JSONDict) -> None:
    everything: JSONDict = json.loads(path.read_text()) if path.exists() else {}
    everything.setdefault("sections", {})[section] = _jsonable(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(everything, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown(everything))


def _cell_search(search: JSONDict | None, notes: Notes, tool: str, note: str = "") -> str:
    if search is None:
        return "-"
    if "unsupported" in search:
        return "n/a" + notes.mark(f"{tool} cannot run it: {search['unsupported']}")
    counts: list[int | None] = search["counts"]
    found = [c for c in counts if c is not None]
    limit_text = f">{search.get('limit', 1000)}"
    mark = notes.mark(note) if note else ""
    unexpected = sorted(k for k in search.get("failures", {}) if k != "AssertionError")
    if unexpected:
        mark += notes.mark(f"{tool}: a failure other than the race's assertion: {unexpected}")
    if search.get("other"):
        mark += notes.mark(
            f"{tool}: other failures in the searches (not counted as finding the race): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(search["other"].items()))
        )
    if not found:
        if counts == [None]:
            text = "none" + (" (exhausted)" if search.get("exhausted") else "")
            return text + mark
        return f"none in {len(counts)}x{limit_text[1:]}" + mark
    if len(counts) == 1:
        return f"{found[0]}" + mark
    median = search["median"]
    worst = search["worst"]
    median_text = limit_text if median is None else f"{median:g}"
    worst_text = limit_text if worst is None else f"{worst}"
    return f"{median_text}, {worst_text}" + mark


class Notes:
    """Numbered footnotes, one per distinct text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f" [{self.texts.index(text) + 1}]"


def _shrink_cell(shrinks: JSONDict) -> str:
    """The random strategy's shrink: deviations before -> after, runs."""
    shrink = shrinks.get("random", {})
    if not shrink.get("found"):
        return "-"
    return f"{shrink['deviations_before']} -> {shrink['deviations_after']}, {shrink['shrink_runs']}"


def _replays_cell(shrinks: JSONDict) -> str:
    """Failing replays of every strategy's shrunk tape, over all of them."""
    found = [v for v in shrinks.values() if v.get("found")]
    if not found:
        return "-"
    return f"{sum(v['replays_failed'] for v in found)}/{sum(v['replays'] for v in found)}"


def _ms(search: JSONDict | None) -> str:
    return "-" if search is None else f"{search['ms_per_schedule']:.1f}"


def _control_cell(runs: JSONDict, name: str) -> str:
    run = runs.get(name)
    if run is None:
        return "-"
    text = f"{run['failed']} failed / {run['schedules']}"
    if run.get("exhausted"):
        text += " (exhausted)"
    return text


def markdown(everything: JSONDict) -> str:
    sections: JSONDict = everything.get("sections", {})
    main_key = next(
        (
            k
            for k, s in sections.items()
            if k.startswith("tideloop")
            and "systematic" in s.get("options", {}).get("strategies", ())
        ),
        None,
    )
    tide = sections.get(main_key or "", {})
    other_tide = [(k, s) for k, s in sections.items() if k.startswith("tideloop") and k != main_key]
    sim = sections.get("simloom", {})
    seed = sections.get("seedloop", {})
    notes = Notes()
    limit = tide.get("limit") or sim.get("limit") or 1000
    header = [
        "race",
        "kind",
        "tideloop random: median, worst",
        "pct: median, worst",
        "systematic",
        "ms/schedule r / p / s",
        *[f"ms/schedule random, {s['machine']['python']}" for _, s in other_tide],
        "shrink (random's failure): deviations, runs",
        "replays failing",
        "simloom random: median, worst",
        "simloom PCT: median, worst",
        "simloom systematic",
        "simloom ms/schedule r / p",
        "simloom shrink (random's failure): deviations, runs",
        "simloom replays failing",
        "seedloop: median, worst",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    names = list(tide.get("races", {})) or list(sim.get("races", {})) or list(seed.get("races", {}))
    for name in names:
        t = tide.get("races", {}).get(name, {})
        ts = t.get("strategies", {})
        s_entry = sim.get("races", {}).get(name, {})
        ss = s_entry.get("strategies", {})
        adapted = s_entry.get("adapted")
        s_shrink = s_entry.get("shrink", {})
        if adapted and "unsupported" in ss.get("random", {}):
            reason = ss["random"]["unsupported"]
            note = f"simloom's default run: {reason}; shown: {adapted['how']}"
            ss = adapted["strategies"]
            s_shrink = adapted.get("shrink", {})
        else:
            note = ""
        shrink = t.get("shrink", {})
        kind = t.get("kind") or s_entry.get("kind", "")
        row = [
            f"`{name}`",
            kind,
            _cell_search(ts.get("random"), notes, "tideloop"),
            _cell_search(ts.get("pct"), notes, "tideloop"),
            _cell_search(ts.get("systematic"), notes, "tideloop"),
            " / ".join(_ms(ts.get(k)) for k in TIDELOOP_STRATEGIES),
            *[
                _ms(s.get("races", {}).get(name, {}).get("strategies", {}).get("random"))
                for _, s in other_tide
            ],
            _shrink_cell(shrink),
            _replays_cell(shrink),
            _cell_search(ss.get("random"), notes, "simloom", note) if ss else "-",
            _cell_search(ss.get("pct"), notes, "simloom", note) if ss else "-",
            _cell_search(ss.get("systematic"), notes, "simloom", note) if ss else "-",
            f"{_ms(ss.get('random'))} / {_ms(ss.get('pct'))}" if ss else "-",
            _shrink_cell(s_shrink),
            _replays_cell(s_shrink),
            _cell_search(
                seed.get("races", {}).get(name, {}).get("strategies", {}).get("seeds"),
                notes,
                "seedloop",
            )
            if seed
            else "-",
        ]
        lines.append("| " + " | ".join(row) + " |")
    tc = tide.get("control", {}).get("runs", {})
    sc = sim.get("control", {}).get("runs", {})
    kc = seed.get("control", {}).get("runs", {})
    control_name = (tide.get("control") or sim.get("control") or {}).get("name", "control")
    seed_control = kc.get("seeds")
    seed_text = "-"
    if seed_control:
        if (
            seed_control["failed"] == seed_control["schedules"]
            and len(seed_control["outcomes"]) == 1
        ):
            seed_text = "n/a" + notes.mark(
                "seedloop cannot run it: " + next(iter(seed_control["outcomes"]))
            )
        else:
            seed_text = f"{seed_control['failed']} failed / {seed_control['schedules']}"
    control_row = [
        f"`{control_name}` (must not fail)",
        "control",
        _control_cell(tc, "random"),
        _control_cell(tc, "pct"),
        _control_cell(tc, "systematic"),
        " / ".join(
            f"{tc[k]['ms_per_schedule']:.1f}" if k in tc else "-" for k in TIDELOOP_STRATEGIES
        ),
        *[_ms(s.get("control", {}).get("runs", {}).get("random")) for _, s in other_tide],
        "-",
        "-",
        _control_cell(sc, "random"),
        _control_cell(sc, "pct"),
        _control_cell(sc, "systematic"),
        " / ".join(
            f"{sc[k]['ms_per_schedule']:.1f}" if k in sc else "-" for k in ("random", "pct")
        ),
        "-",
        "-",
        seed_text,
    ]
    lines.append("| " + " | ".join(control_row) + " |")
    out = [
        "# Planted races: schedules to the first failure",
        "",
        f"Limit {limit} schedules per search; median and worst over base seeds "
        "0, 1000, ... 9000 (a base that found nothing counts as worse than the limit; "
        "`none in NxL`: N bases of L schedules found nothing, the remaining bases skipped). "
        "Systematic columns: schedules until the first failure (bound 2), one search. "
        "ms/schedule: wall time of the searches over the schedules they ran. "
        "Shrink: the random strategy's first failure, deviations before -> after, runs; "
        "replays: the shrunk tapes of all three strategies, each replayed "
        f"{_replays(tide)} times. simloom shrink: `simloom.shrink` (its default budget, "
        "1500 runs) on its random walk's first failure, deviations from FIFO before -> "
        "after, candidate runs; its shrunk tape replayed "
        f"{_replays(sim)} times. Made by `python -m bench.races` (bench/README.md).",
        "",
        *lines,
        "",
        SETUP,
        "",
    ]
    for key, section in sections.items():
        machine = section.get("machine", {})
        out.append(
            f"- `{key}`: {section.get('tool')} {section.get('version')} on "
            f"{machine.get('implementation')} {machine.get('python')}, commit "
            f"{machine.get('commit')}, {section.get('seconds', 0):.0f} s, load average "
            f"{_load(machine.get('load_before'))} before, {_load(section.get('load_after'))} after"
        )
    if notes.texts:
        out.append("")
        out.extend(f"- [{i}] {text}" for i, text in enumerate(notes.texts, 1))
    return "\n".join(out) + "\n"


#: How the tools were run, under the table (the module docstring has the details).
SETUP = (
    "tideloop: `testing.explore(race, strategy=..., schedules=limit, seed=base, "
    "virtual_time=..., timeout=...)`, PCT depth 2 (its first, unperturbed run counted), "
    "systematic bound 2; timeout 10 s of loop time on the real clock, the default (a "
    "virtual week) under virtual time. Columns for another Python: the random strategy "
    "(control row: its 1000 random schedules). "
    "simloom 0.5.0: `simloom.run(race, seed=..., scheduler='random' | 'pct:auto')` (PCT "
    "depth 3, i.e. two change points, horizon from one uncounted probe run per base) and "
    "`simloom.explore_systematic(max_delays=2)`; `max_steps_per_instant=20000`; port 0 "
    "given a fresh port (simloom takes it literally: a second listener on 127.0.0.1:0 "
    "fails with EADDRINUSE). seedloop 0.4.1: `seedloop.replay(scenario, seed=...)`, one "
    "seed per run. On both, only the race's own `AssertionError` counts as finding it; "
    "a run in which the simulator refused a thread's callback is not counted."
)


def _replays(section: JSONDict) -> str:
    for race in section.get("races", {}).values():
        for shrink in race.get("shrink", {}).values():
            if shrink.get("found"):
                return str(shrink["replays"])
    return "N"


def _load(load: list[float] | None) -> str:
    return "?" if not load else f"{load[0]:.2f}"


# ----------------------------------------------------------------------
# Command line


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tool", choices=TOOLS, default="tideloop")
    parser.add_argument("--limit", type=int, default=1000, help="schedules per search")
    parser.add_argument("--bases", type=int, default=10, help="base seeds 0, 1000, ...")
    parser.add_argument("--only", default="", help="races, comma-separated")
    parser.add_argument(
        "--strategies",
        default=",".join(TIDELOOP_STRATEGIES),
        help="tideloop's strategies, comma-separated",
    )
    parser.add_argument("--no-shrink", dest="shrink", action="store_false")
    parser.add_argument("--no-control", dest="control", action="store_false")
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--control-random", type=int, default=1000)
    parser.add_argument("--control-pct", type=int, default=200)
    parser.add_argument("--control-systematic", type=int, default=2000)
    parser.add_argument(
        "--control-others", type=int, default=200, help="control schedules per simloom scheduler"
    )
    parser.add_argument(
        "--give-up",
        type=int,
        default=2,
        help="stop a race's search after this many bases found nothing (other tools)",
    )
    parser.add_argument(
        "--unsupported-after",
        type=int,
        default=20,
        help="unsupported if this many first runs all failed another way (other tools)",
    )
    parser.add_argument(
        "--section", default="", help="the JSON section (default: tool, and python for tideloop)"
    )
    parser.add_argument(
        "--json",
        default=str(ROOT / "bench" / "results" / f"{datetime.date.today()}-races.json"),
        help="results file (the .md beside it is rewritten)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    if unknown := set(args.strategies) - set(TIDELOOP_STRATEGIES):
        raise SystemExit(f"unknown strategies: {sorted(unknown)}")
    section = args.section or (
        f"tideloop-py{sys.version_info[0]}.{sys.version_info[1]}"
        if args.tool == "tideloop"
        else args.tool
    )
    path = Path(args.json)
    data: JSONDict = {
        "tool": args.tool,
        "version": _version(args.tool),
        "machine": _machine(),
        "limit": args.limit,
        "options": {k: v for k, v in vars(args).items() if k not in ("json", "section")},
        "races": {},
    }
    runners = {
        "tideloop": tideloop_section,
        "simloom": simloom_section,
        "seedloop": seedloop_section,
    }
    start = time.perf_counter()
    for name, entry in runners[args.tool](args, planted_races):
        if name:
            for search in entry.get("strategies", {}).values():
                search.setdefault("limit", args.limit)
            data["races"][name] = entry
        else:
            data["control"] = entry
        data["seconds"] = time.perf_counter() - start
        data["load_after"] = list(os.getloadavg())
        save(path, section, data)
    _progress(f"wrote {path} and {path.with_suffix('.md')} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
