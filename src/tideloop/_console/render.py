"""Render a console snapshot (the server's JSON) as lines of text.

Layer: top (the console). The same lines make ``--once``'s output and the
live screen (which cuts them to the terminal's size). Pure functions of
the snapshot: no I/O.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["lines"]


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{1000 * seconds:.1f}ms" if seconds < 10 else f"{seconds:.0f}s"


def _age(seconds: float | None, exact: bool) -> str:
    if seconds is None:
        return "?"
    prefix = "" if exact else ">"
    if seconds < 60:
        return f"{prefix}{seconds:.0f}s"
    if seconds < 3600:
        return f"{prefix}{seconds / 60:.0f}m"
    return f"{prefix}{seconds / 3600:.1f}h"


def _count(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def _flag(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _loop_lines(loop: dict[str, Any]) -> list[str]:
    number = loop.get("loop")
    out = []
    if loop.get("closed"):
        return [f"loop {number}: closed"]
    m = loop.get("metrics", {})
    if not loop.get("running"):
        return [
            f"loop {number}: not running  iterations {m.get('iterations')}  "
            f"callbacks {m.get('callbacks')}  timers {m.get('timers')}  fds {m.get('fds')}"
        ]
    if loop.get("blocked"):
        return [
            f"loop {number}: BLOCKED: its thread did not answer within a second "
            f"(a callback is running that long)  iterations {m.get('iterations')}  "
            f"callbacks {m.get('callbacks')}  ready {m.get('ready')}",
            "warnings:",
            "  ! blocking: the loop is blocked right now",
        ]
    lag = m.get("lag", {})
    out.append(
        f"loop {number}: utilisation {100 * m.get('utilisation', 0):.1f}%  "
        f"lag p50 {_ms(lag.get('p50'))} p99 {_ms(lag.get('p99'))} max {_ms(lag.get('max'))} "
        f"({lag.get('timers', 0)} timers)  "
        f"iterations {m.get('iterations_per_s', 0):.0f}/s  "
        f"callbacks {m.get('callbacks_per_s', 0):.0f}/s"
    )
    out.append(
        f"  ready {m.get('ready')}  timers {m.get('timers')}  fds {m.get('fds')}  "
        f"executor jobs {m.get('executor_pending')}  slow callbacks {m.get('slow_callbacks')}  "
        f"(task statistics since the console attached, {loop.get('since_attach', 0):.0f}s ago)"
    )
    warnings = loop.get("warnings", [])
    out.append(f"warnings ({len(warnings)}):" if warnings else "warnings: none")
    out.extend(f"  ! {w['kind']}: {w['text']}" for w in warnings)
    tasks = loop.get("tasks", [])
    count = loop.get("task_count", len(tasks))
    out.append(
        f"tasks ({count}{', the busiest ' + str(len(tasks)) if count > len(tasks) else ''}):"
    )
    out.append(
        f"  {'NAME':<20} {'STATE':<9} {'BUSY':>9} {'STEPS':>7} {'WAKES':>7} {'SELF':>6} "
        f"{'AGE':>6}  WAITING AT"
    )
    for t in tasks:
        chain = " > ".join(t.get("awaiting", [])) or "-"
        out.append(
            f"  {t['name'][:20]:<20} {t['state']:<9} {_ms(t.get('busy')):>9} "
            f"{t.get('steps', 0):>7} {t.get('wakeups', 0):>7} {t.get('self_wakes', 0):>6} "
            f"{_age(t.get('age'), t.get('age_exact', False)):>6}  {chain}"
        )
    slow = loop.get("slow", [])
    if slow:
        out.append(f"slow callbacks ({len(slow)}):")
        out.extend(
            f"  {_ms(s['duration']):>9}  {s['name']}"
            + (f"  resumed at {s['where']}" if s.get("where") else "")
            + f"  {s.get('ago', 0):.0f}s ago"
            for s in reversed(slow)
        )
    transports = loop.get("transports", [])
    out.append(f"transports ({len(transports)}):")
    if transports:
        out.append(
            f"  {'KIND':<20} {'FD':>4} {'PEER':<24} {'IN':>8} {'OUT':>8} {'BUFFERED':>8} "
            f"{'READ PAUSED':>11} {'WRITE PAUSED':>12}"
        )
    for t in transports:
        closing = " closing" if t.get("closing") else ""
        out.append(
            f"  {t['kind'][:20]:<20} {t['fd']:>4} {t['peer'][:24]:<24} "
            f"{_count(t.get('bytes_in')):>8} {_count(t.get('bytes_out')):>8} "
            f"{_count(t.get('buffered')):>8} {_flag(t.get('reading_paused')):>11} "
            f"{_flag(t.get('writing_paused')):>12}{closing}"
        )
    servers = loop.get("servers", [])
    out.append(f"servers ({len(servers)}):")
    out.extend(
        f"  {', '.join(s['addresses']) or '-'}  serving {_flag(s.get('serving'))}  "
        f"connections {s.get('connections') if s.get('connections') is not None else '?'}"
        for s in servers
    )
    children = loop.get("subprocesses", [])
    out.append(f"subprocesses ({len(children)}):")
    out.extend(
        f"  pid {c['pid']}  {c['program']}  "
        + ("running" if c.get("returncode") is None else f"exited {c['returncode']}")
        for c in children
    )
    return out


def lines(snapshot: dict[str, Any], *, target: str = "", now: float | None = None) -> list[str]:
    """The snapshot as text lines (first the header)."""
    if "error" in snapshot:
        return [f"tideloop console: {snapshot['error']}"]
    argv = " ".join(snapshot.get("argv", []))[:60]
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    out = [f"tideloop console  {stamp}  pid {snapshot.get('pid')}  {argv}  {target}"]
    loops = snapshot.get("loops", [])
    if not loops:
        out.append("no tideloop loop in this program yet")
    for loop in loops:
        out.append("")
        out.extend(_loop_lines(loop))
    return out
