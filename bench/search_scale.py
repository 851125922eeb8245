"""Schedules per minute of a search over worker processes: a local pool, and a Dask cluster.

Not a loop benchmark. A passing scenario (so every search runs its whole
budget: ``races.DEEP_CONTROL`` on virtual time, and ``races.CONTROL`` on
loopback sockets) is explored with ``--schedules`` schedules of a seeded
strategy (random) and of the coverage strategy, over 1 and then 2
workers: a local ``ProcessPoolExecutor`` (``explore(jobs=P)``) and a
dask.distributed ``LocalCluster`` (``processes=True``, one thread per
worker; ``explore(executor=client.get_executor(), jobs=P)``). The table
gives the wall time (the cluster's start excluded), schedules per minute,
per minute per worker, and the speed-up from 1 to 2 workers.

    python -m bench.search_scale                 # 2000 schedules each
    python -m bench.search_scale --schedules 500 --json out.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from scenarios.races import CONTROL, DEEP_CONTROL, Planted
from tideloop import testing


@contextlib.contextmanager
def _dask(workers: int) -> Iterator[concurrent.futures.Executor]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client.get_executor()


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[concurrent.futures.Executor]:
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        pool.submit(int).result()  # started
        yield pool


def measure(
    planted: Planted, strategy: str, engine: str, workers: int, schedules: int
) -> dict[str, Any]:
    make = _dask if engine == "dask" else _pool
    with make(workers) as executor:
        start = time.perf_counter()
        result = testing.explore(
            planted.race,
            strategy=strategy,
            schedules=schedules,
            virtual_time=planted.virtual_time,
            executor=executor,
            jobs=workers,
            spec=f"scenarios.races:{planted.race.__name__}",
        )
        seconds = time.perf_counter() - start
    assert not result.found, f"{planted.name} failed"
    per_minute = result.schedules / seconds * 60
    return {
        "scenario": planted.name,
        "strategy": strategy,
        "engine": engine,
        "workers": workers,
        "schedules": result.schedules,
        "seconds": seconds,
        "per_minute": per_minute,
        "per_minute_per_worker": per_minute / workers,
        "busy_per_minute_per_worker": result.schedules / result.worker_seconds * 60
        if result.worker_seconds
        else 0.0,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--engines", default="pool,dask")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    rows = []
    print(
        "| scenario | strategy | engine | workers | wall (s) | schedules/min "
        "| per worker | busy worker | 1 -> 2 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for planted in (DEEP_CONTROL, CONTROL):
        for strategy in ("random", "coverage"):
            for engine in args.engines.split(","):
                one = None
                for workers in (1, 2):
                    row = measure(planted, strategy, engine, workers, args.schedules)
                    rows.append(row)
                    if workers == 1:
                        one = row["per_minute"]
                    speedup = f"{row['per_minute'] / one:.2f}x" if one and workers == 2 else ""
                    print(
                        f"| {planted.name} | {strategy} | {engine} | {workers} "
                        f"| {row['seconds']:.1f} | {row['per_minute']:.0f} "
                        f"| {row['per_minute_per_worker']:.0f} "
                        f"| {row['busy_per_minute_per_worker']:.0f} | {speedup} |",
                        flush=True,
                    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
