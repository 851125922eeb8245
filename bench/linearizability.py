"""How fast tideloop.testing.check_linearizable decides: WGL against plain Wing-Gong.

Not a loop benchmark. Each case is a key-value history made by a
seeded model of a real store: *clients* clients (10 by default) each run
operations back to back (``put`` 70% / ``get`` 30%, on *keys* keys), each
taking effect at one instant between its invocation and its completion
(random durations), so the history is linearizable; with ``--stale`` the
last ``get`` that can be made stale returns the value of a ``put`` that a
later ``put`` of its key overwrote before the ``get`` began (a violation), and with
``--unknown`` a few operations lose their replies. The same histories are
checked by:

- ``wgl``: the default (Wing and Gong with Lowe's cache of configurations,
  each key checked on its own: P-compositionality);
- ``wgl-whole``: the cache, without splitting by key;
- ``wg``: plain Wing and Gong (no cache, no splitting);
- ``simloom``: simloom 0.5's ``check_linearizable`` (Wing and Gong with
  memoisation over frozensets, key by key, register operations only), when
  simloom is importable (it needs Python 3.12+: run this from a venv that
  has it), in a child process stopped past the limit. It gives up past its
  ``max_states`` (250,000 by default).

Each check runs in this process with a time limit (``--limit``, real
seconds; a check that passes it is reported as such, not as a number), the
best of ``--repeat`` runs. Prints a Markdown table and, with ``--json``,
writes the numbers.

    python -m bench.linearizability                    # the default cases
    python -m bench.linearizability --ops 10000 --keys 10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from tideloop.testing import History, check_linearizable
from tideloop.testing.models import KeyValue


def make_history(
    ops: int,
    *,
    clients: int = 10,
    keys: int = 10,
    seed: int = 0,
    stale: bool = False,
    unknown: int = 0,
) -> History:
    """A key-value history from *clients* clients (see the module docstring)."""
    rng = random.Random(seed)
    # Each client's operations back to back; each takes 1-10 ms and takes
    # effect at a random instant inside it.
    plans: list[tuple[float, float, float, int, str, Any]] = []
    per_client = ops // clients + (1 if ops % clients else 0)
    made = 0
    for client in range(clients):
        now = rng.uniform(0, 0.005)
        for _ in range(per_client):
            if made >= ops:
                break
            duration = rng.uniform(0.001, 0.010)
            point = now + rng.uniform(0.0, duration)
            key = f"k{rng.randrange(keys)}"
            if rng.random() < 0.7:
                plans.append((now, point, now + duration, client, "put", (key, made)))
            else:
                plans.append((now, point, now + duration, client, "get", key))
            made += 1
            now += duration + rng.uniform(0.0, 0.002)
    # The store: apply at the linearization points, in their order.
    store: dict[str, int | None] = {}
    results: dict[int, Any] = {}
    previous: dict[int, Any] = {}
    for index in sorted(range(len(plans)), key=lambda i: plans[i][1]):
        _, _, _, _, name, arg = plans[index]
        if name == "put":
            previous[index] = store.get(arg[0])
            store[arg[0]] = arg[1]
            results[index] = None
        else:
            results[index] = store.get(arg)
    if stale:
        # The last get that can be made stale returns the value of a put P
        # that completed before another put Q of its key began, Q having
        # completed before the get began: no order allows it.
        order = sorted(range(len(plans)), key=lambda i: plans[i][0])
        for index in reversed(order):
            start, _, _, _, name, arg = plans[index]
            if name != "get":
                continue
            done = [
                i
                for i in range(len(plans))
                if plans[i][4] == "put" and plans[i][5][0] == arg and plans[i][2] < start
            ]
            overwritten = [
                p for p in done if any(plans[p][2] < plans[q][0] for q in done if q != p)
            ]
            if overwritten:
                results[index] = plans[max(overwritten, key=lambda i: plans[i][2])][5][1]
                break
        else:
            raise ValueError("no get in this history can be made stale")
    lost = set(rng.sample(range(len(plans)), unknown)) if unknown else set()
    # Record the events in time order, as a live run would.
    history = History()
    events = []
    for index, (start, _, end, *_rest) in enumerate(plans):
        events.append((start, 0, index))
        events.append((end, 1, index))
    events.sort()
    handles = {}
    for at, kind, index in events:
        _, _, _, client, name, arg = plans[index]
        if kind == 0:
            handles[index] = history.invoke(f"c{client}", name, arg, at=at)
        elif index in lost:
            history.unknown(handles[index], "timeout", at=at)
        else:
            history.ok(handles[index], results[index], at=at)
    return history


@dataclass
class Case:
    ops: int
    keys: int
    stale: bool
    unknown: int = 0

    @property
    def label(self) -> str:
        kind = "a stale read" if self.stale else "linearizable"
        extra = f", {self.unknown} unknown" if self.unknown else ""
        return f"{self.ops:,} ops, {self.keys} keys, {kind}{extra}"


ALGORITHMS: dict[str, dict[str, Any]] = {
    "wgl": {"algorithm": "wgl"},
    "wgl-whole": {"algorithm": "wgl", "partition": False},
    "wg": {"algorithm": "wg"},
}
try:
    import simloom
except ImportError:  # not installed, or this Python is older than 3.12
    simloom = None
else:
    ALGORITHMS["simloom"] = {}


def simloom_history(history: History) -> Any:
    """The same history as simloom's RegisterHistory (a key's put is a write,
    a get a read), its events in the same order."""
    assert simloom is not None
    register = simloom.RegisterHistory()
    calls = {}
    for _, _, invocation, op in history.events():
        if invocation:
            if op.name == "put":
                calls[op.index] = register.invoke(op.arg[0], "write", op.arg[1], process=0)
            else:
                calls[op.index] = register.invoke(op.arg, "read", process=0)
        else:
            calls[op.index].complete(op.result)
    return register


def _simloom_child(history: History, repeat: int, out: Any) -> None:
    assert simloom is not None
    register = simloom_history(history)
    best: float | None = None
    verdict = None
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            result = simloom.check_linearizable(register)
        except RuntimeError:  # past its max_states
            out.put({"verdict": None, "seconds": None, "steps": None, "gave_up": True})
            return
        seconds = time.perf_counter() - start
        verdict = bool(result)
        best = seconds if best is None else min(best, seconds)
    out.put({"verdict": verdict, "seconds": best, "steps": None})


def measure_simloom(history: History, repeat: int, limit: float) -> dict[str, Any]:
    """simloom has no time limit of its own: its check runs in a child
    process, stopped after *limit* seconds a run."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_simloom_child, args=(history, repeat, out))
    child.start()
    child.join(limit * repeat + 5)
    if child.is_alive():
        child.terminate()
        child.join()
        return {"verdict": None, "seconds": None, "steps": None}
    got: dict[str, Any] = out.get()
    return got


def measure(history: History, options: dict[str, Any], limit: float, repeat: int) -> dict[str, Any]:
    best: float | None = None
    verdict: bool | None = None
    steps = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = check_linearizable(history, KeyValue(), timeout=limit, **options)
        seconds = time.perf_counter() - start
        if result.ok is None:
            return {"verdict": None, "seconds": None, "steps": result.steps}
        verdict, steps = result.ok, result.steps
        best = seconds if best is None else min(best, seconds)
    return {"verdict": verdict, "seconds": best, "steps": steps}


def _seconds(value: float) -> str:
    return f"{value * 1000:.2f} ms" if value < 0.1 else f"{value:.2f} s"


DEFAULT_CASES = [
    Case(20, 2, False),
    Case(20, 2, True),
    Case(40, 2, False),
    Case(40, 2, True),
    Case(100, 10, False),
    Case(100, 10, True),
    Case(300, 10, False),
    Case(300, 10, True),
    Case(1_000, 10, False),
    Case(1_000, 10, True),
    Case(10_000, 10, False),
    Case(10_000, 10, True),
    Case(10_000, 100, False),
    Case(10_000, 1, False),
    Case(10_000, 10, False, unknown=20),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ops", type=int, help="one case of this many operations")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--stale", action="store_true")
    parser.add_argument("--unknown", type=int, default=0)
    parser.add_argument("--limit", type=float, default=30.0, help="seconds per check")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the numbers to this file")
    args = parser.parse_args(argv)
    cases = (
        [Case(args.ops, args.keys, args.stale, args.unknown)]
        if args.ops is not None
        else DEFAULT_CASES
    )
    rows = []
    print(f"| history ({args.clients} clients) | " + " | ".join(ALGORITHMS) + " |")
    print("|---|" + "--:|" * len(ALGORITHMS))
    for case in cases:
        history = make_history(
            case.ops,
            clients=args.clients,
            keys=case.keys,
            seed=args.seed,
            stale=case.stale,
            unknown=case.unknown,
        )
        cells = []
        row: dict[str, Any] = {"case": case.label, "ops": case.ops, "keys": case.keys}
        for name, options in ALGORITHMS.items():
            if name == "simloom":
                got = measure_simloom(history, args.repeat, args.limit)
            else:
                got = measure(history, options, args.limit, args.repeat)
            row[name] = got
            if got.get("gave_up"):
                cells.append("gave up (max_states)")
            elif got["seconds"] is None:
                cells.append(f"over {args.limit:g} s")
            else:
                verdict = "ok" if got["verdict"] else "violation"
                cells.append(f"{_seconds(got['seconds'])} ({verdict})")
        rows.append(row)
        print(f"| {case.label} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        meta = {
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "machine": platform.machine(),
            "clients": args.clients,
            "seed": args.seed,
            "limit": args.limit,
            "repeat": args.repeat,
            "simloom": None if simloom is None else getattr(simloom, "__version__", "?"),
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
