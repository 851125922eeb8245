"""Schedules per minute of the replicated-store scenario on tideloop's SimNetwork.

Not part of ``python -m bench`` (which measures loops under load): this
measures ``tideloop.testing`` as a simulation tester, on the three-node
store of ``scenarios/sim_store.py`` (a leader, two followers, two
clients, a partition drawn from the seed; its followers' leases let a read
return a stale value under some fault timings). One *schedule* is one seed:
a fresh ``SimNetwork(seed)`` and loop, the scenario, its check.

    python -m bench.sim_store                    # 300 schedules, 10 base seeds
    python -m bench.sim_store -n 1000 --perturb  # the loop's schedule perturbed too
    python -m bench.sim_store --control          # the correct store (forwarded reads)

It prints, for the interpreter it runs on:

- ms per schedule (wall time of seeds 0..n-1, failing ones included, after a
  few warm-up schedules) and schedules per minute;
- the failure rate over those seeds;
- schedules to the first failure from each base seed (0, 1000, ... 9000):
  the search a developer runs, seed after seed until the check fails; the
  median and the worst over the bases.

``bench/sim_store_simloom.py`` reports the same numbers for simloom on the
same store and scenario (`measure` and `report` are shared).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The store imports no simulator: simloom's adapter runs the same one.
from scenarios import sim_store

#: Base seeds of the searches for a first failure.
BASES = tuple(range(0, 10_000, 1000))
WARMUP = 3

#: Runs one seed; returns the failure message, or None if the check passed.
RunOne = Callable[[int], "str | None"]


@dataclass
class Measurement:
    simulator: str
    python: str
    options: dict[str, object]
    schedules: int
    seconds: float
    #: CPU time (user + system) of the process over the same schedules.
    cpu_seconds: float
    per_schedule_ms: list[float]
    failures: int
    #: Base seed -> schedules run until the first failure (None: none within the limit).
    first_failure: dict[int, int | None]
    limit: int

    @property
    def ms_per_schedule(self) -> float:
        return 1000 * self.seconds / self.schedules

    @property
    def cpu_ms_per_schedule(self) -> float:
        return 1000 * self.cpu_seconds / self.schedules

    @property
    def per_minute(self) -> float:
        return 60 * self.schedules / self.seconds


def measure(
    run: RunOne,
    *,
    simulator: str,
    options: dict[str, object],
    schedules: int,
    bases: Sequence[int] = BASES,
    limit: int = 1000,
    progress: bool = True,
) -> Measurement:
    """Time *run* over seeds 0..schedules-1, then search each base for a first failure."""
    for seed in range(WARMUP):
        run(10**6 + seed)
    times = []
    failures = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    for seed in range(schedules):
        t = time.perf_counter()
        failures += run(seed) is not None
        times.append(1000 * (time.perf_counter() - t))
        if progress and (seed + 1) % 100 == 0:
            print(f"  {seed + 1}/{schedules} schedules", file=sys.stderr)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    first: dict[int, int | None] = {}
    for base in bases:
        first[base] = next((n for n in range(1, limit + 1) if run(base + n - 1) is not None), None)
        if progress:
            print(f"  base {base}: first failure after {first[base]}", file=sys.stderr)
    return Measurement(
        simulator=simulator,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        options=options,
        schedules=schedules,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        per_schedule_ms=times,
        failures=failures,
        first_failure=first,
        limit=limit,
    )


def report(m: Measurement) -> str:
    options = ", ".join(f"{k}={v}" for k, v in m.options.items())
    lines = [
        f"{m.simulator} on {m.python} ({options})",
        f"  {m.schedules} schedules in {m.seconds:.2f} s: {m.ms_per_schedule:.1f} ms per "
        f"schedule (median {statistics.median(m.per_schedule_ms):.1f}, max "
        f"{max(m.per_schedule_ms):.1f}; CPU {m.cpu_ms_per_schedule:.1f}), "
        f"{m.per_minute:.0f} schedules per minute",
        f"  failed: {m.failures} of {m.schedules} ({100 * m.failures / m.schedules:.1f}%)",
    ]
    if m.first_failure:
        found = [n for n in m.first_failure.values() if n is not None]
        lines.append(
            "  schedules to the first failure, by base seed: "
            + ", ".join(
                f"{base}: {n if n is not None else f'>{m.limit}'}"
                for base, n in m.first_failure.items()
            )
        )
        if found:
            worst = f">{m.limit}" if len(found) < len(m.first_failure) else str(max(found))
            everything = [n if n is not None else m.limit + 1 for n in m.first_failure.values()]
            lines.append(f"  median {statistics.median(everything):g}, worst {worst}")
        else:
            lines.append(f"  no failure within {m.limit} schedules from any base")
    return "\n".join(lines)


def save(m: Measurement, path: str) -> None:
    data = asdict(m) | {
        "ms_per_schedule": m.ms_per_schedule,
        "cpu_ms_per_schedule": m.cpu_ms_per_schedule,
        "per_minute": m.per_minute,
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("-n", "--schedules", type=int, default=300, help="seeds to time")
    parser.add_argument("--bases", type=int, default=len(BASES), help="base seeds to search")
    parser.add_argument("--limit", type=int, default=1000, help="seeds searched per base")
    parser.add_argument("--control", action="store_true", help="the correct store")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--perturb", action="store_true", help="perturb the loop's schedule with the seed too"
    )
    args = parser.parse_args(argv)

    def run(seed: int) -> str | None:
        outcome = sim_store.run_tideloop(seed, stale_reads=not args.control, perturb=args.perturb)
        return outcome.failure

    return measure_and_report(
        run, "tideloop SimNetwork", {"stale_reads": not args.control, "perturb": args.perturb}, args
    )


def measure_and_report(
    run: Callable[[int], str | None], simulator: str, options: dict[str, Any], args: Any
) -> int:
    """`measure` *run* as the command line *args* ask, print the report, save it if asked."""
    m = measure(
        run,
        simulator=simulator,
        options=options,
        schedules=args.schedules,
        bases=BASES[: args.bases],
        limit=args.limit,
        progress=not args.quiet,
    )
    print(report(m))
    if args.json:
        save(m, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
