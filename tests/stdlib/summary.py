"""All interpreters' saved test_asyncio results side by side, as markdown.

``python tests/stdlib/summary.py`` reads every ``results/<version>-tideloop*.json``
with its ``results/<version>-stdlib.json`` (what ``run.py`` saved for each
interpreter it ran) and prints two tables: one line per interpreter (and per
tideloop poller where a run used another one), the totals the README shows;
then per module, "tideloop / stdlib" passed for each interpreter, which is
``docs/conformance.md``. Needs nothing but the standard library and this
directory's modules; run it from anywhere.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report

RESULTS = Path(__file__).resolve().parent / "results"
_NAME = re.compile(r"^(?P<version>.+)-tideloop(?:-(?P<poller>[a-z]+))?\.json$")


def collect(results: Path) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, tideloop results, stdlib results) per run, oldest Python first."""
    runs = []
    for path in results.glob("*-tideloop*.json"):
        match = _NAME.match(path.name)
        if match is None:
            continue
        version = match["version"]
        stdlib_path = results / f"{version}-stdlib.json"
        if not stdlib_path.exists():
            continue
        label = f"PyPy {version[4:]}" if version.startswith("pypy") else f"CPython {version}"
        if match["poller"]:
            label += f" ({match['poller']})"
        runs.append((label, report.load(path), report.load(stdlib_path)))

    def key(run: tuple[str, dict[str, Any], dict[str, Any]]) -> tuple[int, list[int], str]:
        label = run[0]
        is_pypy = label.startswith("PyPy")
        numbers = [int(n) for n in re.findall(r"\d+", label)[:3]]
        return (is_pypy, numbers, label)

    return sorted(runs, key=key)


def _totals(data: dict[str, Any]) -> dict[str, int]:
    total = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    for module in data["modules"].values():
        counts = report.module_counts(module) or {}
        for k in total:
            total[k] += counts.get(k, 0)
    return total


def _not_applicable(data: dict[str, Any]) -> int:
    """Tests listed as testing stdlib internals (not those run as Tideloop* variants)."""
    version = str(data.get("python") or "")
    minor = ".".join(version.split(".")[:2]) or None
    return sum(
        1
        for module in data["modules"].values()
        for test_id in module.get("not_applicable", {})
        if not report._is_replaced(test_id, minor)
    )


def summary_table(runs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        "| interpreter | passed: tideloop / stdlib | failed + errors: tideloop / stdlib "
        "| not applicable |",
        "|---|--:|--:|--:|",
    ]
    for label, tideloop, stdlib in runs:
        t, s = _totals(tideloop), _totals(stdlib)
        lines.append(
            f"| {label} | {t['passed']} / {s['passed']} | "
            f"{t['failed'] + t['errors']} / {s['failed'] + s['errors']} | "
            f"{_not_applicable(tideloop)} |"
        )
    return "\n".join(lines)


def module_table(runs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    modules = sorted({m for _, t, s in runs for m in (*t["modules"], *s["modules"])})
    header = "| module | " + " | ".join(label for label, _, _ in runs) + " |"
    lines = [header, "|---|" + "--:|" * len(runs)]
    for name in modules:
        cells = []
        for _, tideloop, stdlib in runs:
            tc = report.module_counts(tideloop["modules"].get(name))
            sc = report.module_counts(stdlib["modules"].get(name))
            if tc is None and sc is None:
                cells.append("-")
            elif (tc or {}).get("passed", 0) == 0 and (sc or {}).get("passed", 0) == 0:
                cells.append("n/a")
            else:
                cells.append(f"{(tc or {}).get('passed', 0)} / {(sc or {}).get('passed', 0)}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    runs = collect(args.results)
    if not runs:
        print(f"no saved results in {args.results}", file=sys.stderr)
        return 1
    print(summary_table(runs))
    print()
    print(module_table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
