"""Per-module report of a run: tideloop vs the stdlib loop, as text and markdown.

Outcomes recorded per test (by `run.py` / `child.py`) and the column each
one is counted in:

    pass, xfail (expected failure)          -> passed
    fail, xpass (unexpected success)        -> failed
    error, timeout, crash, not-run          -> errors
    skip                                    -> skipped
    stdlib-loop (tideloop run only: the     -> its own column; must be 0
      test built a stdlib loop, so its
      outcome says nothing about tideloop)

Not-applicable tests (`not_applicable.py`) run in neither column and are
counted once, in ``n/a`` - except the tests of upstream classes that run
under a variant's name instead (category REPLACED), which are not lost and
are only mentioned in the footnote.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import not_applicable

COLUMN = {
    "pass": "passed",
    "xfail": "passed",
    "fail": "failed",
    "xpass": "failed",
    "error": "errors",
    "timeout": "errors",
    "crash": "errors",
    "not-run": "errors",
    "skip": "skipped",
    "stdlib-loop": "stdlib-loop",
}
COLUMNS = ("passed", "failed", "errors", "skipped")
PASSING = frozenset({"pass", "xfail"})


def load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"modules": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


#: Counted besides the columns: tests that hung or crashed (inside "errors"),
#: and passing tests that built no event loop at all (inside "passed").
EXTRA = ("stdlib-loop", "hung/crashed", "passed, no loop")


def count(tests: dict[str, dict[str, Any]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for record in tests.values():
        column = COLUMN.get(record["outcome"], "errors")
        counts[column] += 1
        if record["outcome"] in ("timeout", "crash"):
            counts["hung/crashed"] += 1
        loops = record.get("loops")
        if column == "passed" and loops and not loops["tideloop"] and not loops["stdlib"]:
            counts["passed, no loop"] += 1
    return {k: counts[k] for k in (*COLUMNS, *EXTRA)}


def module_counts(module: dict[str, Any] | None) -> dict[str, int] | None:
    if module is None:
        return None
    counts = count(module["tests"])
    if not module["tests"]:
        # Nothing collected: the module was skipped or failed to import.
        for fixture in module["fixtures"]:
            key = "skipped" if fixture["outcome"] == "skip" else "errors"
            counts[key] += 1
    return counts


def _is_replaced(test_id: str, minor: str | None) -> bool:
    entry = not_applicable.entry_for(test_id, minor)
    return entry is not None and entry.category is not_applicable.Category.REPLACED


@dataclass
class Row:
    module: str
    tideloop: dict[str, int] | None
    stdlib: dict[str, int] | None
    not_applicable: int
    replaced: int
    note: str


@dataclass
class Table:
    rows: list[Row]

    @classmethod
    def build(
        cls,
        tideloop: dict[str, Any],
        stdlib: dict[str, Any],
        modules: Iterable[str] | None = None,
    ) -> Table:
        names = sorted(set(tideloop["modules"]) | set(stdlib["modules"]))
        version = tideloop.get("python") or stdlib.get("python") or ""
        minor = ".".join(version.split(".")[:2]) or None
        if modules is not None:
            wanted = set(modules)
            names = [n for n in names if n in wanted]
        rows = []
        for name in names:
            t = tideloop["modules"].get(name)
            s = stdlib["modules"].get(name)
            na_ids = (t or s or {}).get("not_applicable", {})
            replaced = sum(1 for i in na_ids if _is_replaced(i, minor))
            na = len(na_ids) - replaced
            notes = []
            tc = module_counts(t)
            if tc and tc["stdlib-loop"]:
                notes.append(f"{tc['stdlib-loop']} ran on a stdlib loop!")
            if tc and tc["hung/crashed"]:
                notes.append(f"{tc['hung/crashed']} hung/crashed")
            if t and t["problems"]:
                notes.append("; ".join(t["problems"]))
            rows.append(Row(name, tc, module_counts(s), na, replaced, ", ".join(notes)))
        return cls(rows)

    def totals(self) -> Row:
        def add(side: str) -> dict[str, int]:
            total: Counter[str] = Counter()
            for row in self.rows:
                counts = getattr(row, side)
                if counts:
                    total.update(counts)
            return {k: total[k] for k in (*COLUMNS, *EXTRA)}

        return Row(
            "total",
            add("tideloop"),
            add("stdlib"),
            sum(r.not_applicable for r in self.rows),
            sum(r.replaced for r in self.rows),
            "",
        )

    def _cells(self, row: Row) -> list[str]:
        def side(counts: dict[str, int] | None) -> list[str]:
            if counts is None:
                return ["-"] * len(COLUMNS)
            return [str(counts[c]) for c in COLUMNS]

        return [row.module, *side(row.tideloop), *side(row.stdlib), str(row.not_applicable)]

    def render_terminal(self, title: str) -> str:
        header = ["module", *COLUMNS, *COLUMNS, "n/a"]
        body = [self._cells(r) for r in self.rows]
        total = self._cells(self.totals())
        widths = [max(len(x[i]) for x in [header, *body, total]) for i in range(len(header))]

        def fmt(cells: list[str], note: str = "") -> str:
            out = [cells[0].ljust(widths[0])]
            for i, cell in enumerate(cells[1:], start=1):
                sep = " | " if i in (1, 1 + len(COLUMNS), 1 + 2 * len(COLUMNS)) else " "
                out.append(sep + cell.rjust(widths[i]))
            return "".join(out) + (f"   {note}" if note else "")

        group = (
            " " * widths[0]
            + " | "
            + "tideloop".center(sum(widths[1:5]) + 3)
            + " | "
            + "stdlib loop".center(sum(widths[5:9]) + 3)
        )
        rule = "-" * len(fmt(header))
        lines = [title, group, fmt(header), rule]
        lines += [fmt(c, r.note) for c, r in zip(body, self.rows, strict=True)]
        lines += [rule, fmt(total), "", self.footnote()]
        return "\n".join(lines)

    def render_markdown(self, title: str) -> str:
        lines = [
            f"### test_asyncio on {title}: tideloop vs the stdlib loop",
            "",
            "| module | tideloop passed | failed | errors | skipped "
            "| stdlib passed | failed | errors | skipped | n/a | notes |",
            "|---|" + "---:|" * 9 + "---|",
        ]
        for row in [*self.rows, self.totals()]:
            cells = self._cells(row)
            if row.module == "total":
                cells = [f"**{c}**" for c in cells]
            lines.append("| " + " | ".join([*cells, row.note]) + " |")
        lines += ["", self.footnote()]
        return "\n".join(lines)

    def footnote(self) -> str:
        totals = self.totals()
        total = totals.tideloop or {}
        return (
            f"n/a: tests listed in tests/stdlib/not_applicable.py (they test stdlib "
            f"internals), run on neither loop. Not counted at all: {totals.replaced} tests of "
            f"upstream classes that build a stdlib loop on purpose; they run under the name "
            f"of their Tideloop* variant instead (tests/stdlib/variants.py). Of the "
            f"{total.get('passed', 0)} tests passed on tideloop, "
            f"{total.get('passed, no loop', 0)} build no event loop at all (they test asyncio "
            f"classes that tideloop reuses, such as Future, Handle and the locks)."
        )


def list_failures(tideloop: dict[str, Any], modules: Iterable[str] | None = None) -> str:
    """One line per tideloop test that did not pass (for -v)."""
    wanted = set(modules) if modules is not None else None
    lines = []
    for name, module in sorted(tideloop["modules"].items()):
        if wanted is not None and name not in wanted:
            continue
        for test_id, record in sorted(module["tests"].items()):
            if record["outcome"] in PASSING or record["outcome"] == "skip":
                continue
            message = (record.get("message") or "").strip().splitlines()
            last = message[-1] if message else ""
            lines.append(f"{record['outcome']:<11} {test_id}  {last[:140]}")
    return "\n".join(lines)
