"""The benchmark suite's command line: plan, run interleaved, report.

    python -m bench --quick                    # about a minute, rough numbers
    python -m bench                            # full run, the published numbers
    python -m bench --only tcp_echo_protocol --loops asyncio,tideloop
    python bench/run.py --quick                # same thing, as a script

For each case (a workload with one set of parameters), every repeat runs
each loop once, in turn (asyncio, uvloop, rloop, tideloop, tideloop-pure,
pypy/asyncio, pypy/tideloop, asyncio, ...),
each in a fresh process, so that slow drifts of the machine hit every loop
alike. The PyPy loops run in the Debian root of ``.ci/sid`` (see
``bench/interpreters.py``); without ``--loops`` they are measured when they
can run here, and left out with a note otherwise. A loop that cannot run a
case (NotImplementedError: rloop has no Unix sockets) is reported as
``cannot run`` for that case, with the reason, and not tried again; one
that something on the machine is missing for (wrk) as unavailable. A run
during which other
programs used more than a quarter of a core is measured again (``--retries``,
2 by default in full mode); the disturbed attempts are kept in the JSON.

Progress goes to stderr, the table to stdout, the JSON and the PNG charts
to ``bench/results/`` (``bench/results/tmp/`` for quick or partial runs).
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness, interpreters, loops, machine, report
from bench.api import case_label, needs_text
from bench.workloads import Workload, all_workloads

RESULTS = Path(__file__).resolve().parent / "results"
#: A primitive's measured part lasts at least this long (its run of n is
#: repeated): n is sized for CPython, and PyPy can finish it in a few ms.
MIN_SECONDS = 0.5
MIN_SECONDS_QUICK = 0.2
#: The least warm-up on a JIT interpreter (PyPy), in seconds (harness.warmup_for says why).
JIT_WARMUP = 8.0
JIT_WARMUP_QUICK = 3.0


class Progress:
    """One status line on stderr, rewritten in place on a terminal, appended otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream
        self.tty = stream.isatty()

    def _clock(self) -> str:
        elapsed = time.monotonic() - self.start
        text = f"{elapsed:4.0f}s"
        if self.done:
            left = elapsed / self.done * (self.total - self.done)
            text += f" ~{left:.0f}s left"
        return text

    def begin(self, what: str) -> None:
        if self.tty:
            line = f"[{self.done + 1:>3}/{self.total}] {self._clock()}  {what} ..."
            self.stream.write("\r\x1b[K" + line[:150])
            self.stream.flush()

    def note(self, text: str) -> None:
        self.stream.write(("\r\x1b[K" if self.tty else "") + f"{'':10}{text}\n")
        self.stream.flush()

    def end(self, what: str, outcome: str) -> None:
        self.done += 1
        line = f"[{self.done:>3}/{self.total}] {self._clock()}  {what}: {outcome}"
        self.stream.write(("\r\x1b[K" if self.tty else "") + line + "\n")
        self.stream.flush()


#: Statuses after which a loop is not tried again in the same case.
GIVE_UP = ("unavailable", "cannot_run")


def outcome(result: dict[str, Any], unit: str) -> str:
    if result["status"] != "ok":
        return f"{report.status_text(result['status'])} ({str(result.get('reason', ''))[:100]})"
    text = f"{result['ops_per_s']:,.0f} {unit}/s, CPU {result['cpu_pct']:.0f}%"
    if result.get("client_cpu_pct") is not None:
        text += f", client {result['client_cpu_pct']:.0f}%"
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run event loops side by side: the stdlib loop, uvloop, rloop and tideloop"
        " (as built, and its pure-Python core), and the stdlib loop and tideloop on PyPy.",
    )
    p.add_argument("--quick", action="store_true", help="short run (about a minute)")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated patterns (fnmatch or substring) selecting workloads or cases, "
        "e.g. 'tcp_echo_*,call_soon' or 'tcp_echo_protocol 1KiB*'; loop names here select loops",
    )
    p.add_argument(
        "--loops",
        default="",
        help=f"comma-separated loops, of {', '.join(loops.LOOPS)} (default: the host's"
        f" {len(loops.HOST_LOOPS)}, and the PyPy ones if they can run here)",
    )
    p.add_argument("--repeat", type=int, help="repeats per loop (median of N); default 3, quick 1")
    p.add_argument("--duration", type=float, help="measured seconds per server run")
    p.add_argument(
        "--warmup",
        type=float,
        help="seconds of load (servers) or of warm-up runs (primitives) before measuring;"
        " default 1, quick 0.5",
    )
    p.add_argument(
        "--jit-warmup",
        type=float,
        help=f"the least warm-up on an interpreter with a JIT (PyPy); default {JIT_WARMUP:g},"
        f" quick {JIT_WARMUP_QUICK:g}",
    )
    p.add_argument(
        "--retries",
        type=int,
        help="measure a run again (up to N times) when other programs used more than 25%% of a"
        " core during it; default 2, quick 0 (disturbed runs are kept in the JSON)",
    )
    p.add_argument("--server-cpu", type=int, default=0, help="CPU for the measured process")
    p.add_argument("--client-cpu", type=int, default=1, help="CPU for the load generator")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--out", type=Path, help="JSON path (default: bench/results/<date>-<host>.json)")
    p.add_argument(
        "--list", action="store_true", help="list workloads and cases, and the loops, then exit"
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run tideloop as of git revision REF (as loop 'tideloop@REF'), interleaved",
    )
    return p.parse_args(argv)


def select(
    workloads: list[Workload], patterns: list[str], quick: bool
) -> list[tuple[Workload, dict[str, int], str]]:
    """The (workload, params, case id) triples the patterns select (all if none)."""
    chosen = []
    for w in workloads:
        for params in w.cases(quick):
            label = case_label(params)
            case_id = f"{w.name} {label}" if label else w.name
            if not patterns or any(
                fnmatch.fnmatch(name, pat) or pat in name
                for pat in patterns
                for name in (w.name, case_id)
            ):
                chosen.append((w, params, case_id))
    return chosen


def runs_status(runs: list[dict[str, Any]], loop: str) -> str:
    """The status of *loop*'s last run among *runs*."""
    return next(r["status"] for r in reversed(runs) if r["loop"] == loop)


def choose_loops(requested: list[str], stream: TextIO | None = None) -> list[str]:
    """The loops to run, in the canonical order (asyncio first: the baseline).

    The *requested* ones, or by default the host's loops (one that cannot
    be imported is reported as skipped later) and the other interpreters'
    loops that can run here; those that cannot are named on *stream*
    (stderr) with the reason, once per reason.
    """
    if requested:
        return [n for n in loops.LOOPS if n in requested]
    wanted = [n for n in loops.LOOPS if loops.default(n)]
    left_out: dict[str, list[str]] = {}
    for n in loops.LOOPS:
        if n not in wanted:
            left_out.setdefault(loops.unavailable_reason(n) or "", []).append(n)
    for reason, names in left_out.items():
        print(f"not measuring {', '.join(names)}: {reason}", file=stream or sys.stderr)
    return wanted


def list_loops() -> str:
    """The loops ``--loops`` takes, each with its version or why it cannot run here."""
    lines = ["loops:"]
    for name in loops.LOOPS:
        reason = loops.unavailable_reason(name)
        what = f"not available: {reason}" if reason else loops.version(name)
        default = "" if loops.default(name) else " (not a default)"
        lines.append(f"  {name:<16} {what}{default}")
    lines.append("  tideloop@REF     tideloop's source at git revision REF (--baseline REF)")
    return "\n".join(lines)


def builds(results: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Which tideloop core each loop's runs reported (``build``), by loop."""
    found: dict[str, set[str]] = {}
    for case in results:
        for r in case["runs"]:
            if r.get("build"):
                found.setdefault(r["loop"], set()).add(r["build"])
    return {loop: sorted(seen) for loop, seen in found.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick: bool = args.quick
    workloads = all_workloads()
    patterns = [p.strip() for p in args.only.split(",") if p.strip()]
    loop_names = [p.strip() for p in args.loops.split(",") if p.strip()]
    loop_names += [p for p in patterns if p in loops.LOOPS]
    patterns = [p for p in patterns if p not in loops.LOOPS]
    cases = select(workloads, patterns, quick)
    if args.list:
        for w, _params, case_id in cases:
            needs = f"  (needs {needs_text(w.needs)})" if w.needs else ""
            print(f"{case_id:<36} {w.kind:<10} {w.title}{needs}")
        print()
        print(list_loops())
        return 0
    if not cases:
        print(f"no workload matches {args.only!r}; try --list", file=sys.stderr)
        return 2

    unknown = [n for n in loop_names if n not in loops.LOOPS]
    if unknown:
        print(f"unknown loop(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    wanted = choose_loops(loop_names)
    if args.baseline:
        wanted.append(loops.export_baseline(args.baseline))
    loop_info = {
        n: {"version": loops.version(n), "unavailable": loops.unavailable_reason(n)} for n in wanted
    }
    run_loops = [n for n in wanted if loop_info[n]["unavailable"] is None]
    for n in run_loops:
        loops.byte_compile(n)
    for n in wanted:
        if loop_info[n]["unavailable"]:
            print(f"skipping {n}: {loop_info[n]['unavailable']}", file=sys.stderr)

    ncpu = len(os.sched_getaffinity(0))
    pinned = not args.no_pin and ncpu >= 2
    repeats = args.repeat or (1 if quick else 3)
    cfg = harness.Config(
        quick=quick,
        repeats=repeats,
        warmup=args.warmup if args.warmup is not None else (0.5 if quick else 1.0),
        duration=args.duration if args.duration is not None else (1.5 if quick else 5.0),
        server_cpu=args.server_cpu if pinned else None,
        client_cpu=args.client_cpu if pinned else None,
        min_seconds=MIN_SECONDS_QUICK if quick else MIN_SECONDS,
        jit_warmup=args.jit_warmup
        if args.jit_warmup is not None
        else (JIT_WARMUP_QUICK if quick else JIT_WARMUP),
    )

    info = machine.describe()
    prefixes = sorted({interpreters.split(n)[0] for n in run_loops} - {""})
    info["interpreters"] = {p: loops.version(f"{p}/asyncio") for p in prefixes}
    print(
        f"tideloop bench ({'quick' if quick else 'full'}): {len(cases)} cases x "
        f"{len(run_loops)} loops x {repeats} repeats on {info['cpu_model']}, "
        f"{info['cpus']} CPUs, Python {info['python']}"
        + "".join(f", {v}" for v in info["interpreters"].values()),
        file=sys.stderr,
    )
    if not pinned:
        print("note: not pinning (needs 2 CPUs and taskset)", file=sys.stderr)
    load_before = machine.loadavg()
    background_before = machine.background_cpu()
    print(
        f"load average {load_before}; other load on the machine now: "
        f"{background_before}% of all CPUs",
        file=sys.stderr,
    )

    progress = Progress(len(cases) * len(run_loops) * repeats)
    started = datetime.datetime.now(datetime.UTC)
    results: list[dict[str, Any]] = []
    discarded: list[dict[str, Any]] = []
    retries: int = args.retries if args.retries is not None else (0 if quick else 2)
    for workload, params, case_id in cases:
        runs: list[dict[str, Any]] = []
        gave_up: set[str] = set()
        for rep in range(repeats):
            # Each repeat starts one loop further on, so no loop always runs
            # right after the same other one (an A/A run of one tree against
            # itself favoured the copy that always ran second).
            shift = rep % len(run_loops)
            for loop in run_loops[shift:] + run_loops[:shift]:
                what = f"{case_id} · {loop} #{rep + 1}"
                if loop in gave_up:
                    progress.end(what, f"skipped ({report.status_text(runs_status(runs, loop))})")
                    continue
                progress.begin(what)
                for attempt in range(retries + 1):
                    result = harness.run_case(workload, params, loop, cfg)
                    result = {"loop": loop, "repeat": rep + 1, **result}
                    other = result.get("other_cpu_pct") or 0.0
                    if result["status"] != "ok" or other <= report.DISTURBED_PCT:
                        break
                    if attempt < retries:
                        # Disturbed by other programs: keep it on record, measure again.
                        discarded.append({"case": case_id, **result})
                        progress.note(f"{what}: other load {other:.0f}%, measuring again")
                        machine.wait_quiet(report.DISTURBED_PCT, timeout=10.0)
                runs.append(result)
                progress.end(what, outcome(result, workload.unit))
                if result["status"] in GIVE_UP:
                    gave_up.add(loop)
        results.append(
            {
                "id": case_id,
                "workload": workload.name,
                "kind": workload.kind,
                "title": workload.title,
                "unit": workload.unit,
                "label": case_label(params),
                "params": params,
                "runs": runs,
                "summary": report.summarise(runs, run_loops),
            }
        )
    finished = datetime.datetime.now(datetime.UTC)
    for loop, seen in builds(results).items():
        loop_info[loop]["build"] = seen[0] if len(seen) == 1 else seen
    if loop_info.get("tideloop", {}).get("build") == "pure" and loops.PURE in run_loops:
        print(
            f"note: tideloop ran its pure core (no native one here): its numbers and"
            f" {loops.PURE}'s measure the same build",
            file=sys.stderr,
        )
    background_after = machine.background_cpu()
    info["load_before"] = load_before
    info["load_after"] = machine.loadavg()
    info["background_cpu_pct_before"] = background_before
    info["background_cpu_pct_after"] = background_after
    info["git_commit_after"] = machine.git_commit()
    info["tideloop_source_sha256_after"] = machine.source_fingerprint()
    if info["tideloop_source_sha256_after"] != info["tideloop_source_sha256"]:
        print("warning: tideloop's source changed during the run", file=sys.stderr)

    doc: dict[str, Any] = {
        "schema": 1,
        "created": started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "mode": "quick" if quick else "full",
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info,
        "config": {
            "loops": run_loops,
            "repeats": repeats,
            "retries_when_disturbed": retries,
            "disturbed_above_other_cpu_pct": report.DISTURBED_PCT,
            "warmup_s": cfg.warmup,
            "jit_warmup_s": cfg.jit_warmup,
            "duration_s": cfg.duration,
            "primitive_min_s": cfg.min_seconds,
            "server_cpu": cfg.server_cpu,
            "client_cpu": cfg.client_cpu,
            "loop_versions": loop_info,
        },
        "cases": results,
        "discarded_runs": discarded,
    }
    print(report.table(results, run_loops))
    others = "".join(f"{v} · " for v in info["interpreters"].values())
    print(
        f"\n{started:%Y-%m-%d %H:%M} UTC · {info['host']} · {info['cpu_model']} "
        f"({info['cpus']} CPUs) · Linux {info['kernel']} · Python {info['python']} · {others}"
        f"load {load_before} -> {info['load_after']}, other load "
        f"{background_before}% -> {background_after}%"
    )

    complete = not quick and not patterns and not loop_names and not args.baseline
    stem = f"{started:%Y-%m-%d}-{socket.gethostname()}" + ("" if not quick else "-quick")
    out: Path = args.out or (RESULTS if complete else RESULTS / "tmp") / f"{stem}.json"
    report.write_json(out, doc)
    print(f"\nJSON: {out}", file=sys.stderr)
    if not args.no_charts:
        try:
            pngs = report.charts(doc, out.with_suffix(""))
        except ImportError:
            print("charts skipped: matplotlib is not installed (bench extra)", file=sys.stderr)
        else:
            print(f"charts: {out.with_suffix('')}/ ({len(pngs)} PNG)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
