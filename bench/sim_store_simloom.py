"""The replicated-store benchmark of ``bench/sim_store.py``, run on simloom instead.

simloom (PyPI, Python >= 3.12, no dependencies) is another deterministic
simulation tester for asyncio: its own event loop (a tape of seeded choices
picks every ready callback), virtual time, and an in-memory network behind
``loop.create_server`` / ``create_connection``. It runs plain asyncio streams,
so the store and the scenario here are ``scenarios/sim_store.py``'s own,
unchanged; only the network object differs: `SimloomNetwork` gives simloom's
``World`` the four methods the scenario calls (``sim_store.Network``).

Run it from the repository root with an interpreter that has simloom, in a
virtual environment of its own (tideloop is not needed, nor imported)::

    python3.12 -m venv /work/.bench-venvs/simloom312
    /work/.bench-venvs/simloom312/bin/pip install simloom==0.5.0
    /work/.bench-venvs/simloom312/bin/python -m bench.sim_store_simloom -n 300

It prints the same report as ``python -m bench.sim_store``.

How the scenario maps onto simloom's API (0.5.0), and where it differs:

- ``spawn(host, coro)`` is ``world.host(host).spawn(coro)``.
- ``set_latency(a, b, low, high)``: simloom's link latency is directional
  (``net.set_link_latency(src, dst, ...)``), so both directions are set. Its
  delay is drawn as one of 64 steps of the range, from the tape.
- ``partition(a, b)`` is ``net.partition([a], [b])``; ``oneway=True`` is
  ``net.block(a, b)``. ``heal(a, b)`` unblocks both directions
  (``net.unblock``); ``heal()`` is ``net.heal()``. As in tideloop, held
  stream data is delivered in order after the heal.
- **The schedule is always perturbed**: simloom's loop picks every ready
  callback from the tape (random walk, or PCT); there is no fixed-order
  mode. Compare with ``python -m bench.sim_store --perturb``.
- **Connecting has no latency**: a connect reaches the listener at once (a
  partition makes it wait for the heal), where tideloop's SYN and SYN-ACK
  each take a link latency. The scenario's connections are made before its
  faults, so this changes timings, not what it can find.
- ``start_server`` needs the host's name (``None`` is refused), which is
  why the store binds its own host's name on both simulators.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/sim_store_simloom.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import simloom

from bench.sim_store import arguments, measure_and_report
from scenarios import sim_store


class SimloomNetwork:
    """``sim_store.Network`` on a simloom ``World``."""

    def __init__(self, world: simloom.World) -> None:
        self._world = world
        self._net = world.net

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._world.host(host).spawn(coro)

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None:
        high = low if high is None else high
        ha, hb = self._world.host(a), self._world.host(b)
        self._net.set_link_latency(ha, hb, low, high)
        self._net.set_link_latency(hb, ha, low, high)

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None:
        ha, hb = self._world.host(a), self._world.host(b)
        if oneway:
            self._net.block(ha, hb)
        else:
            self._net.partition([ha], [hb])

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        if a is None or b is None:
            self._net.heal()
            return
        ha, hb = self._world.host(a), self._world.host(b)
        self._net.unblock(ha, hb)
        self._net.unblock(hb, ha)


def run_simloom(
    seed: int, *, stale_reads: bool = True, scheduler: str | None = None
) -> tuple[str | None, str]:
    """One seed on simloom: (the check's failure or None, the digest of simloom's event log)."""

    async def main(world: simloom.World) -> sim_store.Result:
        return await sim_store.scenario(
            SimloomNetwork(world), random.Random(seed), stale_reads=stale_reads, check=False
        )

    run = simloom.run(main, seed=seed, scheduler=scheduler)
    result: sim_store.Result = run.value
    try:
        result.check()
    except AssertionError as exc:
        return str(exc), run.digest
    return None, run.digest


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--scheduler", default=None, help="simloom's scheduler: random (default), pct, pct:auto"
    )
    args = parser.parse_args(argv)

    def run(seed: int) -> str | None:
        return run_simloom(seed, stale_reads=not args.control, scheduler=args.scheduler)[0]

    return measure_and_report(
        run,
        f"simloom {simloom.__version__}",
        {"stale_reads": not args.control, "scheduler": args.scheduler or "random"},
        args,
    )


if __name__ == "__main__":
    sys.exit(main())
