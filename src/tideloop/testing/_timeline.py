"""The timeline: a failing schedule's recorded run drawn as one HTML file, or printed as text.

Layer: top (``tideloop.testing``). A tape's timeline (``Tape.timeline``, the
lanes and events of its recorded replay: the loop's recorder's events and
testing's own, ``_recording``) is shown two ways, in the same terms:

- `render_html`: ONE self-contained HTML file (its CSS, script and data
  inline, from the package resources in ``timeline/``; it loads and
  fetches nothing): one lane per host and per task
  (grouped by host), the loop's own callbacks in a lane of their own; task
  steps, where each task then waits, I/O readiness (deferred readiness
  too), timers armed and firing, executor jobs from submission to their
  run in a thread and their result, subprocesses, the loop's errors;
  messages between hosts as arrows and faults on their hosts (on a
  `SimNetwork`); the deviations highlighted across every lane; the failing
  assertion as a line at its time. The x axis is the run's order of events
  (a band per loop iteration, the loop's time above), since a virtual-time
  run does much at one instant. Zoom with the buttons or Ctrl and the
  wheel; hovering any mark shows its details.
- `render_text`: the same events, a line each, for a terminal
  (``python -m tideloop.testing trace``).

A tape without a timeline (recorded before timelines existed, or saved
without a replay) still renders: its verdict and deviations, and a note
saying how to record one.

Invariant: the HTML references no URL (no script, style, font or image
from elsewhere; tests check it), and the data it embeds cannot close its
``<script>`` element (``<`` is escaped).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any, Final, Protocol

from ._report import Verdict, deviation_words, seconds
from ._strategy import Decision


class Tape(Protocol):
    """What a timeline is drawn from: a `_explore.Tape` (this module does not
    import it: the tape draws itself with this module)."""

    @property
    def decision_count(self) -> int: ...
    @property
    def deviations(self) -> Sequence[Decision]: ...
    @property
    def failure(self) -> str: ...
    @property
    def failure_site(self) -> dict[str, Any] | None: ...
    @property
    def found_by(self) -> str: ...
    @property
    def implementation(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def scenario(self) -> str: ...
    @property
    def timeline(self) -> dict[str, Any] | None: ...
    @property
    def virtual_time(self) -> bool: ...
    def verdict(self) -> Verdict: ...


#: Lane kinds in the order a host's lanes are drawn.
_LANE_ORDER: Final = {"host": 0, "loop": 1, "task": 2}


def timeline_data(tape: Tape) -> dict[str, Any]:
    """What the page draws: the tape's summary, deviations, lanes and events."""
    verdict = tape.verdict()
    timeline = tape.timeline or {}
    lanes = sorted(
        timeline.get("lanes", []),
        key=lambda lane: (
            0 if lane["kind"] == "host" else 1,
            _LANE_ORDER.get(lane["kind"], 3),
        ),
    )
    return {
        "scenario": tape.scenario,
        "found_by": tape.found_by,
        "failure": tape.failure,
        "failure_site": tape.failure_site,
        "kind": verdict.kind,
        "summary": verdict.summary,
        "reasons": verdict.reasons,
        "python": f"{tape.implementation} {tape.python}",
        "virtual_time": tape.virtual_time,
        "deviations": [
            {"words": deviation_words(d), "point": list(d.point), "value": d.value}
            for d in tape.deviations
        ],
        "lanes": _grouped(lanes),
        "events": timeline.get("events", []),
        "dropped": timeline.get("dropped", 0),
        "note": timeline.get("note", "")
        if tape.timeline is not None
        else "This tape has no recorded run: replay it to record one "
        "(python -m tideloop.testing show TAPE --scenario MODULE:FUNCTION).",
    }


def _grouped(lanes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each host, then its loop lane and its tasks' lanes, in order of appearance."""
    hosts = [lane for lane in lanes if lane["kind"] == "host"]
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    for host in hosts:
        out.append(host)
        placed.add(host["id"])
        for lane in lanes:
            if lane["kind"] != "host" and lane.get("host") == host["name"]:
                out.append(lane)
                placed.add(lane["id"])
    out.extend(lane for lane in lanes if lane["id"] not in placed)
    return out


def _script_json(data: object) -> str:
    # Inside <script>, "</script>" (any "</") would end the element: escape "<".
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _asset(name: str) -> str:
    return (resources.files(__package__) / "timeline" / name).read_text(encoding="utf-8")


def render_html(tape: Tape, *, source: str = "") -> str:
    """The timeline of *tape* as one self-contained HTML page (its CSS and
    script, package resources in ``timeline/``, inlined)."""
    data = timeline_data(tape)
    title = f"tideloop timeline: {tape.scenario or source or 'a schedule'}"
    return (
        _asset("page.html")
        .replace("@TITLE@", html.escape(title))
        .replace("/*@STYLE@*/", _asset("timeline.css"))
        .replace("/*@SCRIPT@*/", _asset("timeline.js"))
        .replace("@DATA@", _script_json(data))
    )


def render_text(tape: Tape) -> str:
    """The recorded run, one event a line: ``*`` marks a deviation, ``!`` the failure."""
    data = timeline_data(tape)
    names = {lane["id"]: _lane_name(lane) for lane in data["lanes"]}
    width = min(36, max((len(n) for n in names.values()), default=8))
    lines = [
        f"tape of {tape.scenario or 'a scenario'}: {tape.found_by}",
        f"recorded on {tape.implementation} {tape.python}; "
        f"{tape.decision_count} decision(s), {len(tape.deviations)} deviation(s)",
        data["summary"],
    ]
    lines += [f"  {reason}" for reason in data["reasons"]]
    for d in data["deviations"]:
        lines.append(f"  * {d['words']}")
    if tape.failure:
        lines.append(f"failure: {tape.failure}")
    if data["note"]:
        lines.append(f"note: {data['note']}")
    lines.append(f"{'':1} {'time':>10} {'iter':>5}  {'lane':<{width}}  event")
    for event in data["events"]:
        mark = {"deviation": "*", "failure": "!"}.get(event["kind"], " ")
        lane = names.get(event["lane"], event["lane"])
        if len(lane) > width:
            lane = lane[: width - 1] + "~"
        t = float(event.get("t", 0.0))
        lines.append(f"{mark} {t:>10.6f} {event.get('it', 0):>5}  {lane:<{width}}  {event['text']}")
    if data["dropped"]:
        lines.append(f"  ... {data['dropped']} more event(s) not recorded")
    return "\n".join(lines)


def _lane_name(lane: dict[str, Any]) -> str:
    if lane["kind"] == "host":
        return f"[{lane['name']}]"
    if lane["kind"] == "task":
        return f"{lane.get('host', '')}/{lane['name']} {lane.get('coro', '')}".strip()
    return f"{lane.get('host', '')}/{lane['name']}"


__all__ = ["render_html", "render_text", "seconds", "timeline_data"]
