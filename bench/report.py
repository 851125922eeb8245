"""Summaries, the terminal table, the JSON file and the charts.

A case's summary per loop is the median over its repeats of each metric
(ops/s, latency percentiles, CPU per op, CPU %), plus min/max of ops/s;
ratios divide medians: ``vs_asyncio`` = loop ops/s / stdlib ops/s, and
``vs_uvloop`` and ``vs_rloop`` likewise (above 1 is faster).

A loop with no successful run of a case has its first run's status and
reason instead: ``cannot_run`` (the loop lacks what the workload needs:
shown as ``cannot run: <reason>``), ``unavailable`` (something the machine
lacks), ``error``, or ``skipped``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DISTURBED_PCT",
    "SATURATED_PCT",
    "charts",
    "status_text",
    "summarise",
    "table",
    "write_json",
]

#: A server below this CPU % was not saturated: the number may be limited elsewhere.
SATURATED_PCT = 90.0
#: Other programs using more than this CPU % (100 = a core) during a run disturbed it.
DISTURBED_PCT = 25.0
METRICS = (
    "ops_per_s",
    "p50_us",
    "p99_us",
    "cpu_user_us_per_op",
    "cpu_sys_us_per_op",
    "cpu_pct",
    "client_cpu_pct",
    "other_cpu_pct",
    "rss_per_conn_kib",
)


#: The ratio columns: ops/s over these loops' (rloop's when the run measured it), their widths.
BASES = {"asyncio": 12, "uvloop": 11, "rloop": 10}


def status_text(status: str) -> str:
    """How a run's status reads in a table: ``cannot_run`` is ``cannot run``."""
    return status.replace("_", " ")


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: list[dict[str, Any]], loops: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per-loop summary of one case's runs (each run has a ``loop`` key)."""
    summary: dict[str, dict[str, Any]] = {}
    for loop in loops:
        mine = [r for r in runs if r["loop"] == loop]
        ok = [r for r in mine if r["status"] == "ok"]
        if not ok:
            first = mine[0] if mine else {"status": "skipped", "reason": "not run"}
            summary[loop] = {"status": first["status"], "reason": first.get("reason", "")}
            continue
        entry: dict[str, Any] = {"status": "ok", "repeats": len(ok)}
        for metric in METRICS:
            entry[metric] = _median([r.get(metric) for r in ok])
        entry["ops_per_s_min"] = min(r["ops_per_s"] for r in ok)
        entry["ops_per_s_max"] = max(r["ops_per_s"] for r in ok)
        if len(ok) < len(mine):
            entry["failed_repeats"] = len(mine) - len(ok)
        summary[loop] = entry
    for base in BASES:
        ref = summary.get(base, {}).get("ops_per_s")
        for entry in summary.values():
            if entry["status"] == "ok" and ref:
                entry[f"vs_{base}"] = entry["ops_per_s"] / ref
    return summary


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}"


def _lat(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 10_000:
        return f"{us / 1000:.0f}ms"
    if us >= 1000:
        return f"{us / 1000:.1f}ms"
    return f"{us:.0f}us" if us >= 10 else f"{us:.1f}us"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _kib(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}KiB"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def table(cases: list[dict[str, Any]], loops: Sequence[str]) -> str:
    """The human-readable results table (one block per case, one row per loop).

    ``vs rloop`` is a column when rloop is among *loops*.
    """
    w = max(10, *(len(loop) + 1 for loop in loops))  # "pypy/tideloop" is wider than "asyncio"
    bases = [b for b in BASES if b != "rloop" or b in loops]
    head = (
        f"{'':2}{'loop':<{w}}{'ops/s':>12}{'p50':>9}{'p99':>9}"
        f"{'usr us/op':>11}{'sys us/op':>11}{'srv CPU':>9}{'cli CPU':>9}{'other':>7}"
        + "".join(f"{'vs ' + b:>{BASES[b]}}" for b in bases)
        + f"{'mem/conn':>10}"
    )
    lines = [head, "-" * len(head)]
    flagged = disturbed = False
    for case in cases:
        lines.append(f"{case['id']}  ({case['unit']}/s)")
        for loop in loops:
            s = case["summary"].get(loop)
            if s is None:
                continue
            if s["status"] != "ok":
                reason = str(s.get("reason", "")).replace("\n", " ")
                lines.append(f"{'':2}{loop:<{w}}{status_text(s['status'])}: {reason[:100]}")
                continue
            srv = _pct(s["cpu_pct"])
            if case["kind"] == "server" and (s["cpu_pct"] or 0) < SATURATED_PCT:
                srv += "*"
                flagged = True
            other = _pct(s["other_cpu_pct"])
            if (s["other_cpu_pct"] or 0) > DISTURBED_PCT:
                other += "!"
                disturbed = True
            lines.append(
                f"{'':2}{loop:<{w}}{_num(s['ops_per_s']):>12}{_lat(s['p50_us']):>9}"
                f"{_lat(s['p99_us']):>9}{_us(s['cpu_user_us_per_op']):>11}"
                f"{_us(s['cpu_sys_us_per_op']):>11}{srv:>9}{_pct(s['client_cpu_pct']):>9}"
                f"{other:>7}"
                + "".join(f"{_ratio(s.get('vs_' + b)):>{BASES[b]}}" for b in bases)
                + f"{_kib(s.get('rss_per_conn_kib')):>10}"
            )
    lines.append("")
    lines.append(
        "Medians over repeats. srv CPU: server (or primitive worker) CPU time / wall time in the"
    )
    lines.append(
        "measurement window, 100% = one core busy; cli CPU: the load generator's. us/op: CPU"
    )
    lines.append(
        "microseconds per op (user, system). other: CPU used by everything else on the machine"
    )
    lines.append(
        "meanwhile (100% = one core; high = disturbed run). vs X: ops/s ratio to loop X"
        " (>1 = faster)."
    )
    lines.append(
        "mem/conn: growth of the server's RSS from listening to all connections busy, per"
        " connection (echo)."
    )
    if flagged:
        lines.append(
            f"* server below {SATURATED_PCT:.0f}% CPU: not saturated, the number may be limited"
            " by the client or by other load."
        )
    if disturbed:
        lines.append(
            f"! other programs used more than {DISTURBED_PCT:.0f}% of a core during the run:"
            " treat it as noisy."
        )
    return "\n".join(lines)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")


COLOURS = {
    "asyncio": "#4c72b0",
    "uvloop": "#dd8452",
    "rloop": "#c44e52",
    "tideloop": "#55a868",
    # tideloop's pure-Python core: its hue, lighter.
    "tideloop-pure": "#8fd19e",
    # The same loops on PyPy: the same hues, darker.
    "pypy/asyncio": "#2a4a7f",
    "pypy/tideloop": "#2f6b3c",
}
#: For loops without a colour of their own (tideloop@REF): distinct from the above.
SPARE_COLOURS = ("#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#64b5cd")


def loop_colour(loop: str, loops: Sequence[str]) -> str:
    """The loop's colour in every chart: its own, or a spare one by its place in *loops*."""
    if loop in COLOURS:
        return COLOURS[loop]
    others = [name for name in loops if name not in COLOURS]
    return SPARE_COLOURS[others.index(loop) % len(SPARE_COLOURS)] if loop in others else "#333333"


def scaling_param(cases: list[dict[str, Any]]) -> str | None:
    """The one parameter a workload's cases vary (connections, timers), if exactly one does."""
    if len(cases) < 2:
        return None
    keys = [k for k in cases[0]["params"] if k != "n"] or ["n"]
    varying = [k for k in keys if len({c["params"].get(k) for c in cases}) > 1]
    return varying[0] if len(varying) == 1 else None


def charts(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """One PNG per workload: ops/s (bars: median, whiskers: min-max) and CPU per op.

    A workload whose cases vary one parameter (connections, pending timers)
    also gets ``<name>-scaling.png``: ops/s against that parameter, a line per
    loop, over memory per connection (echo) or CPU per op.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    loops: list[str] = doc["config"]["loops"]
    machine = doc["machine"]
    footer = (
        f"{doc['created'][:10]} · {machine['cpu_model']} ({machine['cpus']} CPUs) · "
        f"Linux {machine['kernel']} · Python {machine['python']}"
        + "".join(f" · {v}" for v in machine.get("interpreters", {}).values())
        + f"\n{doc['mode']} mode, "
        f"median of {doc['config']['repeats']} (whiskers: min-max); labels: ratio to asyncio"
    )
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for case in doc["cases"]:
        by_workload.setdefault(case["workload"], []).append(case)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, cases in by_workload.items():
        fig, (ax1, ax2) = plt.subplots(
            2, 1, figsize=(max(8.0, 1.6 * len(cases) + 3), 7), sharex=True
        )
        width = 0.8 / len(loops)
        for i, loop in enumerate(loops):
            xs, ys, lo, hi, user, system, missing = [], [], [], [], [], [], []
            ratios: list[float | None] = []
            for j, case in enumerate(cases):
                s = case["summary"].get(loop, {})
                x = j + (i - (len(loops) - 1) / 2) * width
                if s.get("status") != "ok":
                    missing.append((x, "cannot run" if s.get("status") == "cannot_run" else "n/a"))
                    continue
                xs.append(x)
                ys.append(s["ops_per_s"])
                ratios.append(s.get("vs_asyncio"))
                lo.append(s["ops_per_s"] - s["ops_per_s_min"])
                hi.append(s["ops_per_s_max"] - s["ops_per_s"])
                user.append(s["cpu_user_us_per_op"] or 0.0)
                system.append(s["cpu_sys_us_per_op"] or 0.0)
            colour = loop_colour(loop, loops)
            ax1.bar(xs, ys, width, yerr=[lo, hi], capsize=3, color=colour)
            for x, y, ratio in zip(xs, ys, ratios, strict=True):
                if ratio is not None and loop != "asyncio":
                    ax1.text(x, y, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=7)
            ax2.bar(xs, user, width, color=colour)
            ax2.bar(xs, system, width, bottom=user, color=colour, alpha=0.45, hatch="//")
            for x, why in missing:
                ax1.text(x, 0, f"{loop}: {why}", ha="center", va="bottom", fontsize=7, rotation=90)
        unit = cases[0]["unit"]
        ax1.set_ylabel(f"{unit}/s (higher is better)")
        ax1.set_title(cases[0]["title"])
        ax1.legend(
            handles=[Patch(color=loop_colour(loop, loops), label=loop) for loop in loops],
            loc="best",
            fontsize=8,
        )
        ax1.grid(axis="y", alpha=0.3)
        ax2.set_ylabel("CPU us per op (user, sys hatched)")
        ax2.grid(axis="y", alpha=0.3)
        ax2.set_xlim(-0.5, len(cases) - 0.5)
        ax2.set_xticks(range(len(cases)))
        ax2.set_xticklabels([c["label"] or c["workload"] for c in cases], fontsize=8)
        fig.text(0.01, 0.005, footer, fontsize=7, color="#555555")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
        param = scaling_param(cases)
        if param is not None:
            written.append(
                _scaling_chart(
                    plt, name, cases=cases, param=param, loops=loops, footer=footer, out_dir=out_dir
                )
            )
    return written


def _scaling_chart(
    plt: Any,
    name: str,
    *,
    cases: list[dict[str, Any]],
    param: str,
    loops: Sequence[str],
    footer: str,
    out_dir: Path,
) -> Path:
    """Throughput (and memory or CPU per op) against the one varying parameter, a line per loop."""
    xs_all = [c["params"][param] for c in cases]
    memory = any(
        s.get("rss_per_conn_kib") is not None for c in cases for s in c["summary"].values()
    )
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for loop in loops:
        xs, ys, lo, hi, second = [], [], [], [], []
        for case in cases:
            s = case["summary"].get(loop, {})
            if s.get("status") != "ok":
                continue
            xs.append(case["params"][param])
            ys.append(s["ops_per_s"])
            lo.append(s["ops_per_s"] - s["ops_per_s_min"])
            hi.append(s["ops_per_s_max"] - s["ops_per_s"])
            if memory:
                second.append(s.get("rss_per_conn_kib") or 0.0)
            else:
                second.append((s["cpu_user_us_per_op"] or 0.0) + (s["cpu_sys_us_per_op"] or 0.0))
        if not xs:
            continue
        colour = loop_colour(loop, loops)
        ax1.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=colour, label=loop)
        ax2.plot(xs, second, marker="o", color=colour, label=loop)
    if max(xs_all) >= 10 * min(xs_all):
        ax1.set_xscale("log")
    ax1.set_ylim(bottom=0)
    ax1.set_ylabel(f"{cases[0]['unit']}/s (higher is better)")
    ax1.set_title(f"{cases[0]['title']}: against {param}")
    ax1.legend(loc="best", fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel(
        "server RSS growth per connection (KiB)" if memory else "CPU us per op (user + sys)"
    )
    ax2.set_xlabel(param)
    ax2.set_xticks(xs_all)
    ax2.set_xticklabels([f"{x:,}" for x in xs_all])
    ax2.grid(alpha=0.3)
    fig.text(0.01, 0.005, footer, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = out_dir / f"{name}-scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
