"""``python -m tideloop.testing``: explore a scenario's schedules, print and compare tapes.

Layer: top (``tideloop.testing``), a command line over ``_explore`` and ``_search``.

    python -m tideloop.testing explore MODULE:FUNCTION [--strategy NAME]
        [--schedules N] [--seed S] [--depth D] [--bound K] [--virtual-time]
        [--wakeups] [-j PROCESSES] [--state FILE] [--tape FILE] [--timeout SECONDS]
    python -m tideloop.testing replay MODULE:FUNCTION TAPE
    python -m tideloop.testing show TAPE [-o FILE.html] [--scenario MODULE:FUNCTION]
    python -m tideloop.testing trace TAPE [--scenario MODULE:FUNCTION] [--decisions]
    python -m tideloop.testing diff TAPE TAPE

``explore`` imports FUNCTION (an async function taking no argument: each
schedule calls it for a fresh coroutine) and runs schedules until one
fails. ``--strategy`` takes a name of ``_search.STRATEGIES`` (random, pct,
systematic). With ``-j P`` (a seeded strategy), P worker processes take seeds
``seed + i`` for ``i = w, w + P, ...``; the first failure stops them all.
With ``--state FILE``, the seeds that passed are recorded there after each
batch, and a rerun with the same file, scenario and strategy resumes after
them. A failure is shrunk in this process and written as a tape (``--tape``,
default ``FUNCTION.tape.json``); the exit status is 1 when a failure was
found, 0 when none was (and the summary says whether a systematic search
exhausted its space), 2 on bad usage. ``--wakeups`` turns on the opt-in
variation of how many iterations a task's step takes; a failure that needs
it is reported as latent. ``replay`` and ``trace`` take the mode from the
tape. A failure's report names each deviation in the program's terms and
says whether it is an ordering or a timing failure (``_report``), and its
timeline is written next to the tape (``FUNCTION.tape.html``).

``show`` writes a tape's timeline as one self-contained HTML file (default:
next to the tape, ``.html`` for ``.json``); ``trace`` prints the same run
as text. Both draw the run recorded in the tape; a tape without one (an
older tape) is replayed once, with ``--scenario`` or the ``MODULE:FUNCTION``
it names, to record it. ``trace --decisions`` prints the decision log.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import sys
from pathlib import Path
from typing import Any

from ._explore import (
    Scenario,
    SeedJob,
    Tape,
    _describe_failure,
    attempt,
    describe_tape,
    diff,
    explore,
    load_scenario,
    record,
    replay,
    run_seeds,
    shrink,
    timeline_path,
)
from ._search import STRATEGIES, Options


def _load_state(path: Path | None, key: dict[str, Any]) -> set[int]:
    if path is None or not path.exists():
        return set()
    data = json.loads(path.read_text())
    if data.get("key") != key:
        raise SystemExit(
            f"{path} records another exploration ({data.get('key')}); remove it to start over"
        )
    return set(data.get("passed", ()))


def _save_state(path: Path | None, key: dict[str, Any], passed: set[int]) -> None:
    if path is None:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"key": key, "passed": sorted(passed)}) + "\n")
    tmp.replace(path)


def _options(args: argparse.Namespace) -> Options:
    return Options(depth=args.depth, bound=args.bound)


def _explore_parallel(args: argparse.Namespace, scenario: Scenario) -> int:
    """A seeded strategy over processes, resumable; shrinks a failure here."""
    recipe = STRATEGIES.get(args.strategy)
    state = Path(args.state) if args.state else None
    key = {
        "scenario": args.scenario,
        "strategy": args.strategy,
        "seed": args.seed,
        "depth": args.depth,
        "virtual_time": args.virtual_time,
        "wakeups": args.wakeups,
    }
    passed = _load_state(state, key)
    length = 0
    first = recipe.first()
    if first is not None:
        log, exc = attempt(
            scenario,
            first,
            virtual_time=args.virtual_time,
            timeout=args.timeout,
            wakeups=args.wakeups,
        )
        length = log.count
        if exc is not None:
            print(f"the unperturbed schedule fails: {_describe_failure(exc)}")
            return 1
    todo = [n for n in range(args.seed, args.seed + args.schedules) if n not in passed]
    if passed:
        print(f"resuming: {len(passed)} schedule(s) passed before, {len(todo)} to go")
    jobs = max(1, min(args.jobs, len(todo) or 1))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    workers = [
        ctx.Process(
            target=run_seeds,
            args=(
                SeedJob(
                    args.scenario,
                    args.strategy,
                    todo[w::jobs],
                    _options(args),
                    length,
                    args.virtual_time,
                    args.timeout,
                    args.wakeups,
                ),
                out,
            ),
            daemon=True,
        )
        for w in range(jobs)
    ]
    for w in workers:
        w.start()
    failed: tuple[int, str] | None = None
    running = len(workers)
    try:
        while running and failed is None:
            try:
                message = out.get(timeout=1.0)
            except queue.Empty:
                if not any(w.is_alive() for w in workers):
                    raise SystemExit("the worker processes died without a report") from None
                continue
            if message[0] == "passed":
                passed.update(message[1])
                _save_state(state, key, passed)
            elif message[0] == "failed":
                failed = (message[1], message[2])
            else:
                running -= 1
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
            w.join()
    if failed is None:
        print(f"{len(passed)} schedule(s) of {args.strategy} passed; no failure found")
        return 0
    seed, text = failed
    print(f"seed {seed} failed: {text}")
    strategy = recipe.strategy(seed, _options(args), length)
    log, exc = attempt(
        scenario,
        strategy,
        virtual_time=args.virtual_time,
        timeout=args.timeout,
        wakeups=args.wakeups,
    )
    if exc is None:
        print("it passed when run again here (real timing in its input): not shrunk")
        return 1
    original = len(log.deviations)
    log, exc2, runs = shrink(
        scenario,
        log,
        virtual_time=args.virtual_time,
        failure=exc,
        timeout=args.timeout,
        wakeups=args.wakeups,
    )
    tape = Tape.from_log(
        log,
        found_by=strategy.describe(),
        scenario=args.scenario,
        failure=_describe_failure(exc2 or exc),
        virtual_time=args.virtual_time,
        wakeups=args.wakeups,
        shrunk_from=original,
    )
    _record(tape, scenario)
    _report_tape(args, tape, runs)
    return 1


def _record(tape: Tape, scenario: Scenario) -> None:
    """Replay *tape* once with a recording: its details and its timeline."""
    recorded = record(
        scenario,
        {d.point: d.value for d in tape.deviations},
        virtual_time=tape.virtual_time,
        wakeups=tape.wakeups,
    )
    describe_tape(tape, recorded)


def _report_tape(args: argparse.Namespace, tape: Tape, runs: int) -> None:
    path = tape.save(args.tape or f"{args.scenario.rpartition(':')[2]}.tape.json")
    timeline = tape.save_timeline(tape_path=path)
    print(f"found by {tape.found_by}: {tape.failure}")
    print(tape.report())
    if tape.shrunk_from is not None:
        print(f"(shrunk from {tape.shrunk_from} deviation(s) in {runs} run(s))")
    print(f"tape: {path}")
    print(f"timeline: {timeline}")
    print(f"replay: python -m tideloop.testing replay {args.scenario} {path}")


def _cmd_explore(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    recipe = STRATEGIES.get(args.strategy)
    if recipe.seeded and (args.jobs > 1 or args.state):
        return _explore_parallel(args, scenario)
    result = explore(
        scenario,
        strategy=args.strategy,
        schedules=args.schedules,
        seed=args.seed,
        depth=args.depth,
        bound=args.bound,
        virtual_time=args.virtual_time,
        wakeups=args.wakeups,
        name=args.scenario,
        timeout=args.timeout,
    )
    if result.tape is None:
        extra = ""
        if recipe.space is not None:
            extra = (
                f" ({recipe.space(_options(args))}: exhausted)"
                if result.exhausted
                else " (the bounded space was not exhausted)"
            )
        print(f"{result.schedules} schedule(s) passed in {result.seconds:.1f} s{extra}")
        return 0
    print(f"{result.schedules} schedule(s) run in {result.seconds:.1f} s")
    _report_tape(args, result.tape, result.shrink_runs)
    return 1


def _cmd_replay(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    try:
        replay(scenario, args.tape)
    except Exception as exc:
        print(f"the tape's schedule fails: {_describe_failure(exc)}")
        return 1
    print("the tape's schedule passes")
    return 0


def _recorded_tape(args: argparse.Namespace) -> Tape:
    """The tape, with its run recorded (replayed here if it has none and its
    scenario can be imported)."""
    tape = Tape.load(args.tape)
    if tape.timeline is not None and not args.scenario:
        return tape
    spec = args.scenario or tape.scenario
    if ":" not in spec or "::" in spec:
        print(
            f"note: {args.tape} has no recorded run and names no MODULE:FUNCTION "
            "(a pytest tape: rerun the test with --tideloop-seeds to record one); "
            "showing its decisions",
            file=sys.stderr,
        )
        return tape
    _record(tape, load_scenario(spec))
    return tape


def _cmd_show(args: argparse.Namespace) -> int:
    tape = _recorded_tape(args)
    out = Path(args.output) if args.output else timeline_path(args.tape)
    path = tape.save_timeline(out, tape_path=args.tape)
    print(f"timeline: {path}")
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    if args.decisions:
        print(Tape.load(args.tape).decision_trace())
        return 0
    print(_recorded_tape(args).trace())
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    print(diff(Tape.load(args.a), Tape.load(args.b)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tideloop.testing", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("explore", help="run schedules until one fails; shrink it to a tape")
    p.add_argument("scenario", help="MODULE:FUNCTION, an async function of no argument")
    seeded = ", ".join(STRATEGIES.seeded_names())
    p.add_argument(
        "--strategy",
        choices=STRATEGIES.names,
        default="random",
        help=f"how schedules are picked: {STRATEGIES.described()} (default: random)",
    )
    p.add_argument("--schedules", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help=f"the first seed ({seeded})")
    p.add_argument("--depth", type=int, default=2, help="pct: deviations per schedule")
    p.add_argument("--bound", type=int, default=2, help="systematic: at most K deviations")
    p.add_argument("--virtual-time", action="store_true")
    p.add_argument(
        "--wakeups",
        action="store_true",
        help="also vary how many iterations a task's step takes (latent races)",
    )
    p.add_argument("-j", "--jobs", type=int, default=1, help=f"worker processes ({seeded})")
    p.add_argument("--state", help="record passed seeds here, and resume from it")
    p.add_argument("--tape", help="where the failing schedule's tape goes")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="a run longer than this (seconds of loop time) fails "
        "(default: 60, or a week under --virtual-time)",
    )
    p.set_defaults(run=_cmd_explore)
    p = commands.add_parser("replay", help="run a scenario under a tape's schedule")
    p.add_argument("scenario")
    p.add_argument("tape")
    p.set_defaults(run=_cmd_replay)
    p = commands.add_parser("show", help="write a tape's timeline as one self-contained HTML file")
    p.add_argument("tape")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE.html",
        help="where the page goes (default: next to the tape, .html for .json)",
    )
    p.add_argument(
        "--scenario",
        metavar="MODULE:FUNCTION",
        help="replay the tape on this scenario to record its run (default: the "
        "tape's own, when it has no recorded run)",
    )
    p.set_defaults(run=_cmd_show)
    p = commands.add_parser("trace", help="print a tape's recorded run, a line per event")
    p.add_argument("tape")
    p.add_argument(
        "--scenario",
        metavar="MODULE:FUNCTION",
        help="replay the tape on this scenario to record its run",
    )
    p.add_argument(
        "--decisions",
        action="store_true",
        help="print the decision log instead (every decision, deviations marked *)",
    )
    p.set_defaults(run=_cmd_trace)
    p = commands.add_parser("diff", help="where two tapes' event logs first differ")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(run=_cmd_diff)
    args = parser.parse_args(argv)
    if args.command == "explore" and (args.schedules < 1 or args.jobs < 1):
        parser.error("--schedules and --jobs must be at least 1")
    try:
        code: int = args.run(args)
    except (ValueError, ImportError, AttributeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
