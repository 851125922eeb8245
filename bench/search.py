"""How many schedules each search strategy needs to find a planted race, and what it costs.

Not a loop benchmark. For each race (a classic one of ``scenarios.races``
and the deep ones, ``races.DEEP``: two or three specific deviations late
in a long run), each strategy of ``tideloop.testing``'s registry
(random, pct, systematic, coverage) explores it from ``--bases`` base
seeds (0, 1000, 2000, ...) with a budget of ``--budget`` schedules, and the
table gives the schedules to the first failure (median and worst, or how
many bases found it) and the wall time. Shrinking and the recorded replay
are off: only the search is timed. The controls (``races.CONTROL``,
``races.DEEP_CONTROLS``) run ``--control`` schedules under every strategy
and must never fail.

The cost of feedback: schedules per second of the coverage strategy
against random on the same passing scenarios (its probe measures every
run: ``sys.settrace`` on 3.11, ``sys.monitoring`` on 3.12+).

    python -m bench.search                       # the default: budget 1000, 3 bases
    python -m bench.search --budget 2000 --bases 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from scenarios.races import CONTROL, DEEP, DEEP_CONTROLS, RACES, Planted
from tideloop import testing
from tideloop.testing._search import STRATEGIES


def search(planted: Planted, strategy: str, budget: int, seed: int) -> tuple[int | None, float]:
    """Schedules to the first failure (None: none within *budget*), and seconds."""
    start = time.perf_counter()
    result = testing.explore(
        planted.race,
        strategy=strategy,
        schedules=budget,
        seed=seed,
        virtual_time=planted.virtual_time,
        shrink_failure=False,
        describe=False,
    )
    return (result.schedules if result.found else None), time.perf_counter() - start


def rate(planted: Planted, strategy: str, schedules: int) -> float:
    """Schedules per second on a passing scenario."""
    start = time.perf_counter()
    result = testing.explore(
        planted.race,
        strategy=strategy,
        schedules=schedules,
        virtual_time=planted.virtual_time,
        describe=False,
    )
    assert not result.found, f"{planted.name} failed under {strategy}"
    return result.schedules / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=1000, help="schedules per search")
    parser.add_argument("--bases", type=int, default=3, help="base seeds per race and strategy")
    parser.add_argument("--control", type=int, default=300, help="schedules per control")
    parser.add_argument("--rate", type=int, default=300, help="schedules for the rate")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    races = [next(p for p in RACES if p.name == "read_your_writes_on_a_replica"), *DEEP]
    rows: list[dict[str, Any]] = []
    print(f"budget {args.budget} schedules, {args.bases} base seeds; {platform.python_version()}")
    print()
    print("| race | strategy | found | schedules to first failure | wall time (s) |")
    print("|---|---|---|---|---|")
    for planted in races:
        for name in STRATEGIES.names:
            counts: list[int | None] = []
            seconds: list[float] = []
            for b in range(args.bases):
                n, s = search(planted, name, args.budget, b * 1000)
                counts.append(n)
                seconds.append(s)
            found = [n for n in counts if n is not None]
            text = f"median {statistics.median(found):g}, worst {max(found)}" if found else "-"
            print(
                f"| {planted.name} | {name} | {len(found)}/{args.bases} | {text} "
                f"{[n if n is not None else '>' + str(args.budget) for n in counts]} | "
                f"{statistics.median(seconds):.2f} |",
                flush=True,
            )
            rows.append(
                {"race": planted.name, "strategy": name, "counts": counts, "seconds": seconds}
            )
    print()
    false_alarms = {}
    for control in (CONTROL, *DEEP_CONTROLS):
        for name in STRATEGIES.names:
            result = testing.explore(
                control.race,
                strategy=name,
                schedules=args.control,
                virtual_time=control.virtual_time,
                describe=False,
            )
            false_alarms[f"{control.name}/{name}"] = int(result.found)
    print(f"false alarms on the controls ({args.control} schedules each): {false_alarms}")
    print()
    print("| scenario | random (schedules/s) | coverage (schedules/s) | overhead |")
    print("|---|---|---|---|")
    rates = {}
    for control in (CONTROL, *DEEP_CONTROLS):
        plain = rate(control, "random", args.rate)
        fed = rate(control, "coverage", args.rate)
        rates[control.name] = {"random": plain, "coverage": fed}
        print(f"| {control.name} | {plain:.0f} | {fed:.0f} | {plain / fed:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "python": platform.python_version(),
                    "budget": args.budget,
                    "searches": rows,
                    "false_alarms": false_alarms,
                    "rates": rates,
                },
                out,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
