"""``python -m tideloop.testing``: explore a scenario's schedules, print and compare tapes.

Layer: top (``tideloop.testing``), a command line over ``_explore`` and ``_search``.

    python -m tideloop.testing explore MODULE:FUNCTION [--strategy NAME]
        [--schedules N] [--seed S] [--depth D] [--bound K] [--virtual-time]
        [--wakeups] [-j PROCESSES] [--executor MODULE:FACTORY] [--shard K/N]
        [--state FILE] [--tape FILE [--overwrite]] [--network-seed N]
        [--timeout SECONDS]
    python -m tideloop.testing replay MODULE:FUNCTION TAPE
    python -m tideloop.testing show TAPE [-o FILE.html] [--scenario MODULE:FUNCTION]
    python -m tideloop.testing trace TAPE [--scenario MODULE:FUNCTION] [--decisions]
    python -m tideloop.testing diff TAPE TAPE

``explore`` imports FUNCTION (an async function taking no argument, or
one, a `SimNetwork`: a `NetworkScenario`, given a network of seed
``--network-seed`` each run; each schedule calls it for a fresh coroutine)
and runs schedules until one fails. ``--help`` prints `DESCRIPTION`, for
users; every option says its default. ``--strategy`` takes a name of
``_search.STRATEGIES`` (random, pct, systematic, coverage); ``--depth`` and
``--bound`` are refused with a strategy that does not use them. A seeded or
learning strategy (random, pct, coverage) runs over many processes
(``_scale``): ``-j P``, a local pool of P processes, or ``--executor
MODULE:FACTORY``, the ``concurrent.futures.Executor`` FACTORY returns (a
Dask cluster's); ``--shard K/N`` runs the K-th of N shares of the
schedules; ``--state FILE`` records the search (seeds passed, the
coverage corpus, failures found) and a rerun with the same file, scenario
and strategy resumes from it. The first failure stops the workers.
A failure is shrunk in this process and written as a tape (``--tape``,
refused if the file exists unless ``--overwrite``; by default
``FUNCTION.tape.json``, or the first free ``FUNCTION.tape.N.json``: a tape
is never overwritten silently); the exit status is 1 when a failure was
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
import concurrent.futures
import sys
from pathlib import Path
from typing import Final

from ._explore import (
    NetworkScenario,
    Scenario,
    Tape,
    _describe_failure,
    describe_tape,
    diff,
    explore,
    load_scenario,
    record,
    replay,
    timeline_path,
)
from ._scale import executor_factory, make_executor, parse_shard
from ._search import STRATEGIES, Options


def _options(args: argparse.Namespace) -> Options:
    return Options(depth=args.depth, bound=args.bound)


def _check_explore(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``explore``'s arguments, beyond what argparse checks; fills in defaults."""
    if args.schedules < 1 or args.jobs < 1:
        parser.error("--schedules and --jobs must be at least 1")
    given = {name for name in ("depth", "bound") if getattr(args, name) is not None}
    for option, takers in STRATEGIES.unused(args.strategy, given):
        parser.error(
            f"--{option} is for --strategy {takers}: the {args.strategy} strategy does "
            f"not use it (give --strategy {takers}, or drop --{option})"
        )
    args.depth = 2 if args.depth is None else args.depth
    args.bound = 2 if args.bound is None else args.bound
    if args.depth < 1 or args.bound < 0:
        parser.error("--depth must be at least 1, --bound at least 0")
    if args.shard is not None:
        try:
            parse_shard(args.shard)
        except ValueError as exc:
            parser.error(str(exc))
    if args.tape is not None and Path(args.tape).exists() and not args.overwrite:
        parser.error(f"{args.tape} exists: give another --tape, or --overwrite to replace it")
    if args.overwrite and args.tape is None:
        parser.error("--overwrite is for --tape FILE")


def _executor(spec: str) -> concurrent.futures.Executor:
    """``--executor MODULE:FACTORY``: call FACTORY for the executor."""
    return make_executor(spec, executor_factory(spec, "--executor takes MODULE:FACTORY"))


def _record(tape: Tape, scenario: Scenario | NetworkScenario) -> None:
    """Replay *tape* once with a recording: its details and its timeline (on
    the tape's network, with its livelock watch)."""
    if isinstance(scenario, NetworkScenario):
        scenario = NetworkScenario(scenario.fn, tape.network_seed)
        network = None
    else:
        network = tape.network
    recorded = record(
        scenario,
        {d.point: d.value for d in tape.deviations},
        virtual_time=tape.virtual_time,
        wakeups=tape.wakeups,
        network=network,
        network_seed=tape.network_seed,
        livelock_after=tape.livelock_after,
    )
    describe_tape(tape, recorded)


def _report_tape(args: argparse.Namespace, tape: Tape, runs: int) -> None:
    if args.tape is not None:
        # Checked free (or --overwrite) before the exploration began.
        path = tape.save(args.tape)
        renamed = ""
    else:
        path, renamed = tape.save_new(f"{args.scenario.rpartition(':')[2]}.tape.json")
    timeline = tape.save_timeline(tape_path=path)
    print(f"found by {tape.found_by}: {tape.failure}")
    print(tape.report())
    if tape.shrunk_from is not None:
        print(f"(shrunk from {tape.shrunk_from} deviation(s) in {runs} run(s))")
    print(f"tape: {path}" + (f" ({renamed})" if renamed else ""))
    print(f"timeline: {timeline}")
    print(f"replay: python -m tideloop.testing replay {args.scenario} {path}")


def _cmd_explore(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    if isinstance(scenario, NetworkScenario):
        scenario.seed = args.network_seed = args.network_seed or 0
    elif args.network_seed is not None:
        raise ValueError(
            f"--network-seed is for a SimNetwork scenario: {args.scenario} takes no network"
        )
    recipe = STRATEGIES.get(args.strategy)
    parallel = recipe.seeded or recipe.learns
    over = bool(args.executor or args.shard)
    if over and not parallel:
        names = ", ".join(STRATEGIES.parallel_names())
        raise ValueError(
            f"--executor and --shard are for --strategy {names}: the {args.strategy} "
            "strategy walks its space in order, in one process"
        )
    executor = _executor(args.executor) if args.executor else None
    try:
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
            executor=executor,
            jobs=args.jobs if parallel else 1,
            state=args.state if parallel else None,
            shard=parse_shard(args.shard) if args.shard else None,
            spec=args.scenario,
            say=print,
        )
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
    if result.unreproduced:
        print("it passed when run again here (real timing in its input): not shrunk")
        return 1
    if result.tape is None:
        extra = ""
        if recipe.space is not None:
            extra = (
                f" ({recipe.space(_options(args))}: exhausted)"
                if result.exhausted
                else " (the bounded space was not exhausted)"
            )
        if result.resumed or executor is not None or args.jobs > 1 or args.state:
            total = result.resumed + result.schedules
            print(
                f"{total} schedule(s) of {args.strategy} passed; no failure found "
                f"({result.schedules} in {result.seconds:.1f} s here)"
            )
            return 0
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


#: ``--help``'s text (the module docstring is for the code's readers).
DESCRIPTION: Final = """\
Find the schedules that make an asyncio program fail, shrink them, and
replay them.

A scenario is MODULE:FUNCTION, imported from the current directory: an
async function of no argument, or of one, a tideloop.testing.SimNetwork
(each run then gets a simulated network of its own, on virtual time).
Each schedule calls it for a fresh coroutine. A failure is shrunk to its
fewest deviations and saved as a tape, which replays it.

Exit status: 0 when no schedule failed (or a replay passed), 1 when one
failed, 2 on bad usage.
"""

EXPLORE_EPILOG: Final = """\
examples:
  python -m tideloop.testing explore races:two_clients_in_order --strategy pct
  python -m tideloop.testing explore app_test:failover --network-seed 3
  python -m tideloop.testing explore mod:scenario -j 4 --state explore.json
  python -m tideloop.testing replay mod:scenario scenario.tape.json
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tideloop.testing",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "explore",
        help="run schedules until one fails; shrink it to a tape",
        description="Run a scenario under schedules of a strategy until one fails;\n"
        "shrink the failure to its fewest deviations and save it as a tape.",
        epilog=EXPLORE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "scenario",
        help="MODULE:FUNCTION: an async function of no argument, or of one (a SimNetwork)",
    )
    seeded = ", ".join(STRATEGIES.seeded_names())
    parallel = ", ".join(STRATEGIES.parallel_names())
    p.add_argument(
        "--strategy",
        choices=STRATEGIES.names,
        default="random",
        metavar="NAME",
        help=f"how schedules are picked: {STRATEGIES.described()} (default: random)",
    )
    p.add_argument(
        "--schedules",
        type=int,
        default=1000,
        metavar="N",
        help="run at most N schedules (default: 1000)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help=f"the first seed: seeds S, S+1, ... ({seeded}; default: 0)",
    )
    p.add_argument(
        "--depth",
        type=int,
        default=None,
        metavar="D",
        help="pct only: change points (deviations) per schedule (default: 2)",
    )
    p.add_argument(
        "--bound",
        type=int,
        default=None,
        metavar="K",
        help="systematic only: at most K deviations per schedule (default: 2)",
    )
    p.add_argument(
        "--virtual-time",
        action="store_true",
        help="run on virtual time: sleeps and timeouts take no real time "
        "(default: off; always on for a SimNetwork scenario)",
    )
    p.add_argument(
        "--wakeups",
        action="store_true",
        help="also vary how many iterations a task's step takes, to find latent "
        "races (default: off)",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="P",
        help=f"worker processes, a local pool of P; with --executor, how many workers "
        f"it has ({parallel}; default: 1)",
    )
    p.add_argument(
        "--executor",
        metavar="MODULE:FACTORY",
        help="run the schedules on the concurrent.futures.Executor FACTORY() returns "
        f"(a Dask cluster's client.get_executor(), Ray, MPI) ({parallel}; default: a "
        "local process pool with -j)",
    )
    p.add_argument(
        "--shard",
        metavar="K/N",
        help=f"run the K-th of N shares of the schedules, for a CI matrix ({parallel}; "
        "default: all of them)",
    )
    p.add_argument(
        "--state",
        metavar="FILE",
        help="record the search in FILE (seeds passed, the corpus, failures found) and "
        f"resume from it ({parallel}; default: none)",
    )
    p.add_argument(
        "--tape",
        metavar="FILE",
        help="where the failing schedule's tape goes; an existing FILE is refused "
        "unless --overwrite (default: FUNCTION.tape.json, or FUNCTION.tape.1.json and "
        "so on if that exists)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="let --tape replace an existing file (default: off)",
    )
    p.add_argument(
        "--network-seed",
        type=int,
        default=None,
        metavar="N",
        help="a SimNetwork scenario's network seed: its latencies, losses, fault "
        "points (default: 0)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a run longer than this (seconds of loop time) fails "
        "(default: 60, or a week under virtual time)",
    )
    p.set_defaults(run=_cmd_explore)
    p = commands.add_parser("replay", help="run a scenario under a tape's schedule")
    p.add_argument("scenario", help="MODULE:FUNCTION, as given to explore")
    p.add_argument("tape", help="the tape file explore wrote")
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
    if args.command == "explore":
        _check_explore(parser, args)
    try:
        code: int = args.run(args)
    except (ValueError, ImportError, AttributeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
