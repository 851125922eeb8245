"""The regression gate: tideloop results vs the committed expected results.

``expected/<minor>.json`` (one per Python minor version) lists the tests that
passed on tideloop when it was last updated. `compare` finds:

- regressions: expected to pass, but now failed, errored, hung, or are
  missing (only for modules that were run this time);
- leaks: tests whose tideloop run built a stdlib loop (outcome
  ``stdlib-loop``): the injection failed, so the run proves nothing;
- newly passing tests, to be recorded with ``--update``.

The gate fails on regressions and leaks. ``--update`` rewrites the passing set
of the modules that were run (tests of modules not run are kept).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report import PASSING

EXPECTED = Path(__file__).resolve().parent / "expected"
#: Longer lists of newly passing tests are summarised per module.
LIST_LIMIT = 100


def expected_path(minor: str) -> Path:
    return EXPECTED / f"{minor}.json"


def load_expected(minor: str) -> set[str]:
    path = expected_path(minor)
    if not path.exists():
        return set()
    data = json.loads(path.read_text())
    return set(data["passing"])


def _module(test_id: str) -> str:
    return test_id.partition(".")[0]


@dataclass
class Comparison:
    regressions: dict[str, str]
    leaks: list[str]
    new: list[str]
    current: set[str]


def compare(minor: str, tideloop: dict[str, Any], ran: set[str]) -> Comparison:
    outcomes: dict[str, str] = {}
    for name, module in tideloop["modules"].items():
        if name in ran:
            for test_id, record in module["tests"].items():
                outcomes[test_id] = record["outcome"]
    current = {t for t, o in outcomes.items() if o in PASSING}
    expected = {t for t in load_expected(minor) if _module(t) in ran}
    regressions = {t: outcomes.get(t, "missing") for t in sorted(expected - current)}
    leaks = sorted(t for t, o in outcomes.items() if o == "stdlib-loop")
    new = sorted(current - expected)
    return Comparison(regressions, leaks, new, current)


def write_expected(minor: str, comparison: Comparison, ran: set[str], meta: dict[str, Any]) -> None:
    kept = {t for t in load_expected(minor) if _module(t) not in ran}
    path = expected_path(minor)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "python": minor,
        "about": "Tests of CPython's test_asyncio that pass on tideloop; the regression gate "
        "(tests/stdlib/run.py --check) fails if one of them stops passing. Regenerate with "
        "--update after a full run.",
        "updated": time.strftime("%Y-%m-%d"),
        "from_run": meta,
        "passing": sorted(kept | comparison.current),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def report(comparison: Comparison, *, update: bool) -> str:
    lines = []
    if comparison.leaks:
        lines.append(f"INJECTION FAILURE: {len(comparison.leaks)} tests ran on a stdlib loop:")
        lines += [f"  {t}" for t in comparison.leaks]
    if comparison.regressions:
        verb = "dropped from the expected results" if update else "REGRESSIONS"
        lines.append(f"{verb}: {len(comparison.regressions)} tests expected to pass did not:")
        lines += [f"  {o:<11} {t}" for t, o in comparison.regressions.items()]
    if comparison.new:
        verb = "recorded as passing" if update else "newly passing (record with --update)"
        lines.append(f"{verb}: {len(comparison.new)} tests:")
        if len(comparison.new) <= LIST_LIMIT:
            lines += [f"  {t}" for t in comparison.new]
        else:
            per_module = Counter(_module(t) for t in comparison.new)
            lines += [f"  {n:5d} in {m}" for m, n in sorted(per_module.items())]
    if not lines:
        lines.append("gate: no change against the expected results")
    return "\n".join(lines)
