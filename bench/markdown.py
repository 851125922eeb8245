"""The README's benchmark table, generated from one results JSON.

    python -m bench.markdown bench/results/2026-11-24-vm.json

Prints, for a run with the three loops (asyncio, uvloop, tideloop): a line
that says when, where and how the run was made;
a Markdown table with every case (throughput per loop, the ratios, server
CPU per operation, and memory per connection where measured); then the
summary the README quotes: ratio ranges and medians by kind of row, the
rows that meet the performance issue's targets, and the run-to-run spread
(max - min over median of each loop's repeats). Nothing is selected by hand:
the published table is this output.

Runs made before the compiled (mypyc) build was retired also measured
``tideloop-compiled``; their tables keep its columns and summary lines, so
that a table published from such a run is still this output.

A run that measured the PyPy loops (``pypy/asyncio``, ``pypy/tideloop``) gets
their columns too: throughput, PyPy's tideloop against uvloop on CPython and
against PyPy's own stdlib loop; the summary gives those ratios' ranges and
PyPy's tideloop against CPython's. A run without them prints what it printed
before they existed.

So does a run that measured rloop or ``tideloop-pure`` (tideloop's
pure-Python core; ``tideloop`` is then the build ``import tideloop`` gave,
native where built): rloop's column sits after uvloop's, with tideloop
against rloop, and the pure core's after tideloop's, with the pure core
against uvloop and tideloop against the pure core; the summary gives their
ranges, the rows where tideloop meets rloop, and the rows a loop cannot run
(``cannot run`` in its cells, the reason in the summary). Runs made before
these loops existed have none of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report

# The README's typography: a multiplication sign and an en dash.
TIMES = "\u00d7"
DASH = "\u2013"

LOOPS = ("asyncio", "uvloop", "tideloop")
#: rloop (Rust), and tideloop's pure-Python core beside the build `import tideloop` gives.
RLOOP = "rloop"
PURE = "tideloop-pure"
#: The retired compiled build, in runs made before it was retired.
COMPILED = "tideloop-compiled"
#: The stdlib loop and tideloop on PyPy (bench/interpreters.py).
PYPY_STDLIB = "pypy/asyncio"
PYPY = "pypy/tideloop"
#: Every loop a run may have measured, in column order.
ALL_LOOPS = ("asyncio", "uvloop", RLOOP, "tideloop", PURE, COMPILED, PYPY_STDLIB, PYPY)
#: A cell of a loop that cannot run the case (the loop lacks what the workload needs).
CANNOT_RUN = "cannot run"

#: Row titles by workload; "{size}" and "{conns}" come from the case's params.
TITLES: dict[str, str] = {
    "tcp_echo_protocol": "TCP echo, `Protocol`, {size} {times} {conns}",
    "tcp_echo_buffered": "TCP echo, `BufferedProtocol`, {size} {times} {conns}",
    "tcp_echo_streams": "TCP echo, streams, {size} {times} {conns}",
    "tcp_echo_scale": "TCP echo, {size}, {conns} conns (scale)",
    "unix_echo": "Unix echo, `Protocol`, {size} {times} {conns}",
    "http_minimal": "HTTP hello, minimal protocol, `wrk` {times} {conns}",
    "http_aiohttp": "HTTP hello, aiohttp, `wrk` {times} {conns}",
    "https_minimal": "HTTPS hello, minimal protocol, `wrk` {times} {conns}",
    "tls_echo_protocol": "TLS echo, `Protocol`, {size} {times} {conns}",
    "udp_pingpong": "UDP ping-pong, 64 B, 10 in flight (datagrams/s)",
    "subprocess_spawn": "subprocess spawn + communicate (processes/s)",
    "call_soon": "`call_soon` (callbacks/s)",
    "call_later_cancel": "`call_later` + cancel churn (timers/s)",
    "timers_pending": "{timers} timers pending: arm + cancel (timers/s)",
    "sleep0": "one `sleep(0)` round (rounds/s)",
    "task_create": "task create + await (tasks/s)",
    "sleeping_tasks": "100k tasks sleeping and waking (wakeups/s)",
    "threadsafe": "`call_soon_threadsafe` from threads (callbacks/s)",
}

#: Primitive workloads that are I/O rows in the issue's sense.
IO_PRIMITIVES = ("udp_pingpong",)
#: Neither I/O nor a scheduling primitive: reported on its own.
OTHER = ("subprocess_spawn",)


def kind(case: dict[str, Any]) -> str:
    if case["workload"] in OTHER:
        return "other"
    if case["kind"] != "primitive" or case["workload"] in IO_PRIMITIVES:
        return "io"
    return "primitive"


def ordered(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """I/O rows, then the others, then primitives; the run's order within each.

    Primitive workloads that are I/O rows (UDP) go last among the I/O rows.
    """
    rank = {"io": 0, "other": 1, "primitive": 2}
    return sorted(cases, key=lambda c: (rank[kind(c)], c["kind"] == "primitive"))


def _size(nbytes: int) -> str:
    return f"{nbytes // 1024} KiB" if nbytes >= 1024 else f"{nbytes} B"


def title(case: dict[str, Any]) -> str:
    params = case["params"]
    fmt = TITLES.get(case["workload"], case["id"])
    return fmt.format(
        size=_size(params.get("size", 0)),
        conns=f"{params.get('conns', 0):,}",
        timers=f"{params.get('timers', 0):,}",
        times=TIMES,
    )


def measured(cases: Sequence[dict[str, Any]], *names: str) -> bool:
    """Whether the run measured any of the loops *names*."""
    return any(r["loop"] in names for case in cases for r in case["runs"])


def has_compiled(cases: Sequence[dict[str, Any]]) -> bool:
    """Whether the run measured the retired compiled build."""
    return measured(cases, COMPILED)


def has_pypy(cases: Sequence[dict[str, Any]]) -> bool:
    """Whether the run measured the PyPy loops."""
    return measured(cases, PYPY_STDLIB, PYPY)


def cannot_run(case: dict[str, Any], loop: str) -> str | None:
    """Why *loop* cannot run *case* (a ``cannot_run`` status), or None."""
    entry = stats(case)[loop]
    return str(entry.get("reason", "")) if entry["status"] == "cannot_run" else None


def columns(
    cases: Sequence[dict[str, Any]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The table's throughput columns (header, loop) and ratio columns (header, loop, base)."""
    ops = [("stdlib", "asyncio"), ("uvloop", "uvloop"), ("tideloop", "tideloop")]
    ratios = [("tideloop vs stdlib", "tideloop", "asyncio"), ("vs uvloop", "tideloop", "uvloop")]
    if measured(cases, RLOOP):
        ops.insert(2, ("rloop", RLOOP))
        ratios.append(("vs rloop", "tideloop", RLOOP))
    if measured(cases, PURE):
        ops.insert(ops.index(("tideloop", "tideloop")) + 1, ("tideloop-pure", PURE))
        ratios += [("pure vs uvloop", PURE, "uvloop"), ("tideloop vs pure", "tideloop", PURE)]
    if has_compiled(cases):
        ops.append(("compiled", COMPILED))
        ratios.append(("compiled vs uvloop", COMPILED, "uvloop"))
    if has_pypy(cases):
        ops += [("PyPy stdlib", PYPY_STDLIB), ("PyPy tideloop", PYPY)]
        ratios += [
            ("PyPy tideloop vs uvloop (CPython)", PYPY, "uvloop"),
            ("vs PyPy stdlib", PYPY, PYPY_STDLIB),
        ]
    return ops, ratios


def stats(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The case's per-loop medians and ratios, as the suite's own report computes them."""
    return report.summarise(case["runs"], ALL_LOOPS)


def median_of(case: dict[str, Any], loop: str, key: str) -> float | None:
    entry = stats(case)[loop]
    value: float | None = entry.get(key)
    return value


def ratio(case: dict[str, Any], loop: str, base: str) -> float | None:
    return _ratio(median_of(case, loop, "ops_per_s"), median_of(case, base, "ops_per_s"))


def cpu_per_op(case: dict[str, Any], loop: str) -> float | None:
    entry = stats(case)[loop]
    if entry.get("cpu_user_us_per_op") is None or entry.get("cpu_sys_us_per_op") is None:
        return None
    total: float = entry["cpu_user_us_per_op"] + entry["cpu_sys_us_per_op"]
    return total


def spread(case: dict[str, Any], loop: str) -> float | None:
    """Max - min over median of the loop's throughput repeats (None below two)."""
    entry = stats(case)[loop]
    if entry.get("repeats", 0) < 2:
        return None
    spread_: float = (entry["ops_per_s_max"] - entry["ops_per_s_min"]) / entry["ops_per_s"]
    return spread_


def _num(v: float | None) -> str:
    return DASH if v is None else f"{v:,.0f}"


def _cpu(v: float | None) -> str:
    if v is None:
        return DASH
    return f"{v:.2g}" if v < 1 else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def _x(v: float | None) -> str:
    return DASH if v is None else f"{v:.2f}x"


def header(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    versions = doc["config"].get("loop_versions", {})
    uv = versions.get("uvloop", {}).get("version", "?")
    rloop = versions.get(RLOOP, {}).get("version")
    pypy = versions.get(PYPY_STDLIB, {}).get("version")
    interpreters = (
        f"CPython {m['python']}, uvloop {uv}, "
        + (f"rloop {rloop}, " if rloop else "")
        + (f"{pypy}, " if pypy else "")
    )
    return (
        f"Run {doc['created'][:16].replace('T', ' ')}{DASH}{doc['finished'][11:16]} UTC, "
        f"{m['cpu_model']} ({m['cpus']} CPUs), Linux {m['kernel'].split('-')[0]}, "
        f"{interpreters}tideloop at commit {m['git_commit']}, `{doc['command']}`"
    )


def table(cases: Sequence[dict[str, Any]]) -> str:
    ops_columns, ratio_columns = columns(cases)
    loops = [loop for _, loop in ops_columns]
    heads = [h for h, _ in ops_columns] + [h for h, _, _ in ratio_columns]
    lines = [
        "| workload | " + " | ".join(heads) + " | CPU µs/op |",
        "|---|" + "--:|" * (len(heads) + 1),
    ]
    for case in cases:
        ops = {loop: median_of(case, loop, "ops_per_s") for loop in loops}
        cpu = " / ".join(_cpu(cpu_per_op(case, loop)) for loop in loops)
        mem = [median_of(case, loop, "rss_per_conn_kib") for loop in loops]
        if case["workload"] == "tcp_echo_scale" and all(v is not None for v in mem):
            cpu += " · mem/conn KiB " + " / ".join(f"{v:.1f}" for v in mem if v is not None)
        cells = [CANNOT_RUN if cannot_run(case, loop) else _num(ops[loop]) for loop in loops]
        cells += [_x(_ratio(ops[loop], ops[base])) for _, loop, base in ratio_columns]
        lines.append(f"| {title(case)} | " + " | ".join(cells) + f" | {cpu} |")
    return "\n".join(lines)


def _range(values: Sequence[float]) -> str:
    if not values:
        return DASH
    return f"{min(values):.2f}{DASH}{max(values):.2f}x, median {statistics.median(values):.2f}x"


def summary(cases: Sequence[dict[str, Any]]) -> str:
    out: list[str] = []
    compiled = has_compiled(cases)

    def ratios(group: str, loop: str, base: str) -> list[float]:
        result = []
        for case in cases:
            if kind(case) != group:
                continue
            r = ratio(case, loop, base)
            if r is not None:
                result.append(r)
        return result

    io = [c for c in cases if kind(c) == "io"]
    prim = [c for c in cases if kind(c) == "primitive"]
    out.append(f"I/O rows ({len(io)}):")
    out.append(f"  tideloop vs uvloop   {_range(ratios('io', 'tideloop', 'uvloop'))}")
    out.append(f"  tideloop vs stdlib   {_range(ratios('io', 'tideloop', 'asyncio'))}")
    # rloop and the pure core, when the run measured them (after the lines older runs had).
    extra = []
    if measured(cases, RLOOP):
        extra.append(("tideloop vs rloop   ", "tideloop", RLOOP))
    if measured(cases, PURE):
        extra += [
            ("pure vs uvloop      ", PURE, "uvloop"),
            ("tideloop vs pure    ", "tideloop", PURE),
        ]
    if compiled:
        out.append(f"  compiled vs uvloop   {_range(ratios('io', COMPILED, 'uvloop'))}")
        out.append(f"  compiled vs tideloop {_range(ratios('io', COMPILED, 'tideloop'))}")
    out.extend(f"  {label} {_range(ratios('io', loop, base))}" for label, loop, base in extra)
    out.append(f"Primitive rows ({len(prim)}):")
    out.append(f"  tideloop vs stdlib   {_range(ratios('primitive', 'tideloop', 'asyncio'))}")
    out.append(f"  tideloop vs uvloop   {_range(ratios('primitive', 'tideloop', 'uvloop'))}")
    if compiled:
        out.append(f"  compiled vs uvloop   {_range(ratios('primitive', COMPILED, 'uvloop'))}")
        out.append(f"  compiled vs tideloop {_range(ratios('primitive', COMPILED, 'tideloop'))}")
    out.extend(
        f"  {label} {_range(ratios('primitive', loop, base))}" for label, loop, base in extra
    )
    if has_pypy(cases):
        for group, name, count in (("io", "I/O", len(io)), ("primitive", "primitive", len(prim))):
            out.append(f"PyPy, {name} rows ({count}):")
            for label, loop, base in (
                ("PyPy tideloop vs uvloop (CPython)  ", PYPY, "uvloop"),
                ("PyPy tideloop vs PyPy stdlib       ", PYPY, PYPY_STDLIB),
                ("PyPy tideloop vs tideloop (CPython)", PYPY, "tideloop"),
                ("PyPy stdlib vs stdlib (CPython)    ", PYPY_STDLIB, "asyncio"),
            ):
                out.append(f"  {label} {_range(ratios(group, loop, base))}")

    def meets(group: list[dict[str, Any]], loop: str, base: str, target: float) -> str:
        met = []
        missed = []
        for case in group:
            r = ratio(case, loop, base)
            (met if r is not None and r >= target else missed).append(f"{case['id']} {_x(r)}")
        return f"{len(met)}/{len(group)} rows; missed: " + ("; ".join(missed) or "none")

    out.append("Targets:")
    out.append(f"  I/O, tideloop >= 1.0x uvloop:        {meets(io, 'tideloop', 'uvloop', 1.0)}")
    out.append(f"  primitives, tideloop >= 1.5x stdlib: {meets(prim, 'tideloop', 'asyncio', 1.5)}")
    if compiled:
        out.append(f"  I/O, compiled >= 1.05x uvloop:       {meets(io, COMPILED, 'uvloop', 1.05)}")
        out.append(f"  primitives, compiled >= 0.8x uvloop: {meets(prim, COMPILED, 'uvloop', 0.8)}")
    loops = [loop for _, loop in columns(cases)[0]]
    if measured(cases, RLOOP):
        runs = [c for c in cases if stats(c)[RLOOP]["status"] == "ok"]
        out.append(
            f"  rows rloop runs, tideloop >= 1.0x rloop: {meets(runs, 'tideloop', RLOOP, 1.0)}"
        )
    cannot = [(loop, c, why) for loop in loops for c in cases if (why := cannot_run(c, loop))]
    if cannot:
        out.append("Cannot run:")
        for loop in dict.fromkeys(loop for loop, _, _ in cannot):
            by_reason: dict[str, list[str]] = {}
            for name, case, why in cannot:
                if name == loop:
                    by_reason.setdefault(why, []).append(case["id"])
            for why, ids in by_reason.items():
                out.append(f"  {loop}: {', '.join(ids)} ({why})")
    spreads = [s for c in cases for loop in loops if (s := spread(c, loop)) is not None]
    if spreads:
        out.append(
            f"Run-to-run spread (max - min over median, per loop and case): "
            f"median {statistics.median(spreads):.0%}, worst {max(spreads):.0%}"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.markdown", description=__doc__)
    parser.add_argument("results", type=Path, help="a results JSON written by python -m bench")
    args = parser.parse_args(argv)
    doc = json.loads(args.results.read_text())
    cases = ordered(doc["cases"])
    print(header(doc))
    print()
    print(table(cases))
    print()
    print(summary(cases))


if __name__ == "__main__":
    main()
