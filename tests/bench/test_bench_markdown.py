"""The published benchmark table (docs/benchmarks.md) is what bench.markdown makes of its run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

markdown = pytest.importorskip("bench.markdown", reason="run from the repository root")

ROOT = Path(__file__).resolve().parents[2]


def test_published_table_is_generated_from_its_run() -> None:
    import json

    readme = (ROOT / "docs" / "benchmarks.md").read_text()
    match = re.search(r"Raw data:\s*\[`(bench/results/[^`]+\.json)`\]", readme)
    assert match, "docs/benchmarks.md names the run its table comes from"
    doc = json.loads((ROOT / match.group(1)).read_text())
    cases = markdown.ordered(doc["cases"])
    assert markdown.table(cases) in readme
    assert f"at commit {doc['machine']['git_commit']}" in readme


def _case(workload: str, kind: str, ops: dict[str, list[float]], **params: int) -> dict[str, Any]:
    runs = [
        {
            "loop": loop,
            "status": "ok",
            "ops_per_s": v,
            "cpu_user_us_per_op": 1.0,
            "cpu_sys_us_per_op": 0.5,
        }
        for loop, values in ops.items()
        for v in values
    ]
    return {"id": workload, "workload": workload, "kind": kind, "params": params, "runs": runs}


def test_ratios_medians_and_targets() -> None:
    three = ("asyncio", "uvloop", "tideloop")
    echo = _case(
        "tcp_echo_protocol",
        "server",
        dict(zip(three, ([100, 90, 110], [400, 400, 400], [420, 300, 410]), strict=True)),
        size=1024,
        conns=100,
    )
    soon = _case("call_soon", "primitive", dict(zip(three, ([10], [40], [16]), strict=True)))
    table = markdown.table([echo, soon])
    assert "compiled" not in table
    # A run from before rloop and the pure core: none of their columns or lines.
    assert "rloop" not in table and "pure" not in table
    # Medians: tideloop 410 / stdlib 100 = 4.10x, / uvloop 400 = 1.02x.
    row = f"| TCP echo, `Protocol`, 1 KiB {markdown.TIMES} 100 |"
    assert f"{row} 100 | 400 | 410 | 4.10x | 1.02x | 1.5 / 1.5 / 1.5 |" in table
    assert "| `call_soon` (callbacks/s) | 10 | 40 | 16 | 1.60x | 0.40x |" in table
    summary = markdown.summary([echo, soon])
    assert "I/O, tideloop >= 1.0x uvloop:        1/1 rows; missed: none" in summary
    assert "primitives, tideloop >= 1.5x stdlib: 1/1 rows" in summary
    assert "compiled" not in summary
    assert "rloop" not in summary and "pure" not in summary and "Cannot run" not in summary
    # Spread of tideloop's echo repeats: (420 - 300) / 410.
    assert markdown.spread(echo, "tideloop") == pytest.approx(120 / 410)


def test_a_run_with_the_retired_compiled_build_keeps_its_columns() -> None:
    four = ("asyncio", "uvloop", "tideloop", "tideloop-compiled")
    soon = _case("call_soon", "primitive", dict(zip(four, ([10], [40], [16], [30]), strict=True)))
    table = markdown.table([soon])
    assert "| tideloop | compiled | tideloop vs stdlib | vs uvloop | compiled vs uvloop |" in table
    assert "| `call_soon` (callbacks/s) | 10 | 40 | 16 | 30 | 1.60x | 0.40x | 0.75x |" in table
    summary = markdown.summary([soon])
    assert "primitives, compiled >= 0.8x uvloop: 0/1 rows; missed: call_soon 0.75x" in summary


def test_a_run_with_pypy_gets_its_columns_and_ratios() -> None:
    five = ("asyncio", "uvloop", "tideloop", "pypy/asyncio", "pypy/tideloop")
    soon = _case(
        "call_soon", "primitive", dict(zip(five, ([10], [40], [16], [50], [80]), strict=True))
    )
    table = markdown.table([soon])
    assert (
        "| workload | stdlib | uvloop | tideloop | PyPy stdlib | PyPy tideloop"
        " | tideloop vs stdlib | vs uvloop | PyPy tideloop vs uvloop (CPython) | vs PyPy stdlib"
        " | CPU µs/op |"
    ) in table
    # 80 / 40 (uvloop on CPython) = 2.00x; 80 / 50 (PyPy's stdlib loop) = 1.60x.
    row = "| `call_soon` (callbacks/s) | 10 | 40 | 16 | 50 | 80 | 1.60x | 0.40x | 2.00x | 1.60x |"
    assert row in table
    assert table.splitlines()[1].count("|") == table.splitlines()[0].count("|")
    summary = markdown.summary([soon])
    assert "PyPy tideloop vs uvloop (CPython)   2.00" in summary
    assert "PyPy tideloop vs tideloop (CPython) 5.00" in summary


def test_a_run_with_rloop_and_the_pure_core_gets_their_columns_and_cannot_run_cells() -> None:
    five = ("asyncio", "uvloop", "rloop", "tideloop", "tideloop-pure")
    soon = _case(
        "call_soon", "primitive", dict(zip(five, ([10], [40], [70], [16], [8]), strict=True))
    )
    why = "needs Unix sockets: rloop.loop.RLoop.create_unix_server raises NotImplementedError"
    unix = _case(
        "unix_echo",
        "server",
        {"asyncio": [1], "uvloop": [4], "tideloop": [3], "tideloop-pure": [2]},
        size=1024,
        conns=10,
    )
    unix["id"] = "unix_echo 1KiB x10"
    unix["runs"].append({"loop": "rloop", "status": "cannot_run", "reason": why})
    table = markdown.table([unix, soon])
    lines = table.splitlines()
    assert lines[0] == (
        "| workload | stdlib | uvloop | rloop | tideloop | tideloop-pure | tideloop vs stdlib"
        " | vs uvloop | vs rloop | pure vs uvloop | tideloop vs pure | CPU µs/op |"
    )
    assert lines[1].count("|") == lines[0].count("|")
    # 16 / 70 = 0.23x (vs rloop); the pure core 8 / 40 = 0.20x of uvloop; 16 / 8 = 2.00x.
    assert (
        "| `call_soon` (callbacks/s) | 10 | 40 | 70 | 16 | 8 | 1.60x | 0.40x | 0.23x | 0.20x"
        " | 2.00x | 1.5 / 1.5 / 1.5 / 1.5 / 1.5 |"
    ) in lines
    dash = markdown.DASH
    assert (
        f"| Unix echo, `Protocol`, 1 KiB {markdown.TIMES} 10 | 1 | 4 | cannot run | 3 | 2"
        f" | 3.00x | 0.75x | {dash} | 0.50x | 1.50x | 1.5 / 1.5 / {dash} / 1.5 / 1.5 |"
    ) in lines
    summary = markdown.summary(markdown.ordered([soon, unix]))
    assert "  tideloop vs rloop    0.23" in summary
    assert "  rows rloop runs, tideloop >= 1.0x rloop: 0/1 rows; missed: call_soon 0.23x" in summary
    assert summary.endswith(f"Cannot run:\n  rloop: unix_echo 1KiB x10 ({why})")


def test_the_header_names_rloop_when_the_run_measured_it() -> None:
    doc = {
        "created": "2026-12-01T20:00:00+00:00",
        "finished": "2026-12-01T20:30:00+00:00",
        "command": "python -m bench",
        "machine": {"python": "3.11.7", "cpu_model": "AMD EPYC", "cpus": 2, "kernel": "6.18-x"},
        "config": {"loop_versions": {"uvloop": {"version": "0.23.0"}}},
    }
    doc["machine"]["git_commit"] = "abc1234"
    assert "CPython 3.11.7, uvloop 0.23.0, tideloop at" in markdown.header(doc)
    doc["config"]["loop_versions"]["rloop"] = {"version": "0.5.0"}
    assert "CPython 3.11.7, uvloop 0.23.0, rloop 0.5.0, tideloop at" in markdown.header(doc)


def test_the_terminal_table_fits_the_pypy_names() -> None:
    from bench import report

    five = ("asyncio", "uvloop", "tideloop", "pypy/asyncio", "pypy/tideloop")
    case = _case("call_soon", "primitive", {loop: [1000.0] for loop in five})
    runs = [{**r, "cpu_pct": 100.0} for r in case["runs"]]
    case.update(unit="callbacks", summary=report.summarise(runs, five))
    lines = report.table([case], five).splitlines()
    rows = [ln for ln in lines if ln.startswith("  ") and "1,000" in ln]
    assert len(rows) == 5
    # Every row's columns line up with the header's, whatever the name's length.
    assert {ln.index("1,000") + len("1,000") for ln in rows} == {lines[0].index("ops/s") + 5}
