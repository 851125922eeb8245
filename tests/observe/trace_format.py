"""A checker of the Trace Event Format (Chrome's JSON trace format, which Perfetto reads).

Written from the format's specification (the "Trace Event Format" document
of the Catapult project), for the parts tideloop writes, and strict where
the viewers are lenient:

- the file is JSON: either an array of events (the JSON Array Format; its
  closing bracket is optional in the spec, required here for a finished
  trace) or an object with a ``traceEvents`` array (the JSON Object Format);
- every event is an object with a one-character ``ph`` (phase) among the
  known ones, a string ``name`` (metadata and flow events included), and
  integer ``pid`` and ``tid``; every phase but metadata has a numeric
  ``ts`` (microseconds) >= 0; ``cat`` when present is a string; ``args``
  when present is an object;
- duration events: ``B`` and ``E`` pair up per thread (pid, tid) in
  timestamp order, like a stack, an ``E`` closing the innermost open
  ``B`` (with the same name, when it has one); complete events ``X`` have
  a ``dur`` >= 0, and on one thread any two of them either nest or do not
  overlap (a viewer cannot draw a partial overlap on one track);
- nestable async events ``b``, ``n``, ``e`` have a ``cat`` and an ``id``
  (or ``id2``); per (cat, id) the ``b`` and ``e`` pair up like a stack in
  timestamp order (an ``e`` ends the innermost open ``b``, which must have
  its name), and none is left open;
- instant events ``i`` (or the older ``I``) have a scope ``s`` of ``g``,
  ``p`` or ``t`` when given;
- flow events ``s``, ``t``, ``f`` have a ``cat`` and an ``id``; each id
  starts with one ``s``, ends with one ``f`` no earlier than it, with
  ``t`` steps in between; ``bp``, when given, is ``e``;
- counter events ``C`` have numeric ``args`` values;
- metadata events ``M`` are ``process_name``, ``process_labels``,
  ``process_sort_index``, ``thread_name`` or ``thread_sort_index``, with
  their value in ``args``.

`check` returns the problems found (empty: the file is well formed), and
`events` the parsed events.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASES = set("BEXiIbneSTpFstfCMPONDcR(),")
METADATA = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}


def events(text: str) -> list[dict[str, Any]]:
    """The events of a trace file's text (array or object form)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data["traceEvents"]
    if not isinstance(data, list):
        raise ValueError("a trace is a JSON array of events or an object with traceEvents")
    return data


def check_file(path: str | Path) -> list[str]:
    try:
        return check(events(Path(path).read_text(encoding="utf-8")))
    except (ValueError, KeyError) as exc:
        return [f"not a trace: {exc}"]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check(trace: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    durations: dict[tuple[int, int], list[tuple[float, int, dict[str, Any]]]] = defaultdict(list)
    complete: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    nestable: dict[tuple[str, str], list[tuple[float, int, dict[str, Any]]]] = defaultdict(list)
    flows: dict[tuple[str, str], list[tuple[float, int, dict[str, Any]]]] = defaultdict(list)
    for index, event in enumerate(trace):
        where = f"event {index}"
        if not isinstance(event, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = event.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            problems.append(f"{where}: unknown phase {ph!r}")
            continue
        where = f"event {index} ({ph} {event.get('name')!r})"
        if not isinstance(event.get("name"), str):
            problems.append(f"{where}: no string name")
        problems.extend(
            f"{where}: {key} is not an integer"
            for key in ("pid", "tid")
            if not isinstance(event.get(key), int) or isinstance(event.get(key), bool)
        )
        if "cat" in event and not isinstance(event["cat"], str):
            problems.append(f"{where}: cat is not a string")
        if "args" in event and not isinstance(event["args"], dict):
            problems.append(f"{where}: args is not an object")
        if ph == "M":
            field = METADATA.get(event.get("name", ""))
            if field is None:
                problems.append(f"{where}: unknown metadata")
            elif field not in event.get("args", {}):
                problems.append(f"{where}: metadata without args.{field}")
            continue
        ts = event.get("ts")
        if not _number(ts) or ts < 0:
            problems.append(f"{where}: ts is not a number >= 0")
            continue
        thread = (event.get("pid", 0), event.get("tid", 0))
        if ph in "BE":
            durations[thread].append((ts, index, event))
        elif ph == "X":
            dur = event.get("dur")
            if not _number(dur) or dur < 0:
                problems.append(f"{where}: X without a dur >= 0")
            else:
                complete[thread].append((ts, ts + dur, where))
        elif ph in "bne":
            ident = event.get("id", event.get("id2"))
            if not isinstance(event.get("cat"), str) or ident is None:
                problems.append(f"{where}: async event without cat and id")
                continue
            nestable[(event["cat"], json.dumps(ident, sort_keys=True))].append((ts, index, event))
        elif ph in "iI":
            if event.get("s", "t") not in ("g", "p", "t"):
                problems.append(f"{where}: instant scope {event.get('s')!r}")
        elif ph in "stf":
            if not isinstance(event.get("cat"), str) or "id" not in event:
                problems.append(f"{where}: flow event without cat and id")
                continue
            if "bp" in event and event["bp"] != "e":
                problems.append(f"{where}: flow binding point {event['bp']!r}")
            flows[(event["cat"], str(event["id"]))].append((ts, index, event))
        elif ph == "C" and not all(_number(v) for v in event.get("args", {}).values()):
            problems.append(f"{where}: counter with a non-numeric value")
    problems += _check_durations(durations)
    problems += _check_complete(complete)
    problems += _check_nestable(nestable)
    problems += _check_flows(flows)
    return problems


def _check_durations(
    durations: dict[tuple[int, int], list[tuple[float, int, dict[str, Any]]]],
) -> list[str]:
    problems = []
    for thread, items in durations.items():
        stack: list[dict[str, Any]] = []
        for _, index, event in sorted(items, key=lambda x: (x[0], x[1])):
            if event["ph"] == "B":
                stack.append(event)
            elif not stack:
                problems.append(f"event {index}: E without B on thread {thread}")
            else:
                begun = stack.pop()
                if "name" in event and event["name"] != begun["name"]:
                    problems.append(f"event {index}: E {event['name']!r} ends B {begun['name']!r}")
        problems += [f"B {e['name']!r} never ended on thread {thread}" for e in stack]
    return problems


def _check_complete(complete: dict[tuple[int, int], list[tuple[float, float, str]]]) -> list[str]:
    problems = []
    for thread, items in complete.items():
        stack: list[tuple[float, float, str]] = []
        # Outer slices first: by start, then longest first.
        for start, end, where in sorted(items, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][1] <= start + 1e-3:  # touching, to 1 ns
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:  # 1 ns of rounding
                problems.append(
                    f"{where} [{start}, {end}] overlaps {stack[-1][2]} "
                    f"[{stack[-1][0]}, {stack[-1][1]}] on thread {thread} without nesting"
                )
            stack.append((start, end, where))
    return problems


def _check_nestable(
    nestable: dict[tuple[str, str], list[tuple[float, int, dict[str, Any]]]],
) -> list[str]:
    problems = []
    for key, items in nestable.items():
        stack: list[dict[str, Any]] = []
        for _, index, event in sorted(items, key=lambda x: (x[0], x[1])):
            ph = event["ph"]
            if ph == "b":
                stack.append(event)
            elif ph == "e":
                if not stack:
                    problems.append(f"event {index}: e {event['name']!r} without b for {key}")
                    continue
                begun = stack.pop()
                if event["name"] != begun["name"]:
                    problems.append(
                        f"event {index}: e {event['name']!r} ends b {begun['name']!r} for {key}"
                    )
                elif event["ts"] < begun["ts"]:
                    problems.append(f"event {index}: e before its b for {key}")
            elif not stack:
                problems.append(f"event {index}: n outside any b for {key}")
        problems += [f"b {e['name']!r} never ended for {key}" for e in stack]
    return problems


def _check_flows(
    flows: dict[tuple[str, str], list[tuple[float, int, dict[str, Any]]]],
) -> list[str]:
    problems = []
    for key, items in flows.items():
        phases = [e["ph"] for _, _, e in sorted(items, key=lambda x: (x[0], x[1]))]
        ends = phases.count("s") == 1 and phases.count("f") == 1
        if not ends or phases[0] != "s" or phases[-1] != "f":
            problems.append(f"flow {key}: phases {phases} (one s first, one f last)")
    return problems
