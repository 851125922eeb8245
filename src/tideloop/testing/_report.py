"""Reports: a failing schedule in the program's terms, and what kind of failure it is.

Layer: top (``tideloop.testing``). A deviation's *detail* (``_schedule``
notes it on a recorded replay, in the terms of ``_where``) is worded here:
which task, which connection, which line armed which timer for how long,
which function an executor job ran and where it was submitted. And every
failing schedule is *classified* from its deviations alone:

- **ordering**: it reorders only what asyncio leaves unordered at any
  speed (an fd's readiness a poll later or ahead of another's, timers due
  at the same instant): the race needs no duration, and a fast machine
  hits it as well as a slow one;
- **timing**: it holds a thread's result (an executor job's, a
  ``call_soon_threadsafe`` from a thread) behind timer firings, or defers
  the readiness of the loop's own waker or signal pipe (what tells the loop
  that a thread's result or a signal arrived): it needs
  that operation to take longer than a timer's delay ("needs
  `q.sync_q.join` (test_x.py:285) to take more than 100 ms: the 100 ms
  timeout of asyncio.wait_for at test_x.py:285 fires first"). Such a test
  assumes a duration; whether that is a bug is the author's call;
- **latent**: it needs a task's step to come later than asyncio queues it
  (the opt-in wake-up mode): a race one more ``await`` would expose;
- **deterministic**: the unperturbed schedule fails; no race is involved.

Invariant: wording never changes a tape; a tape without details (recorded
before they existed, or whose replay did not meet its points) is worded
from its decisions' own words, and classified by their kinds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tideloop._core.debug import full_frames

from ._strategy import Decision

ORDERING: Final = "ordering"
TIMING: Final = "timing"
LATENT: Final = "latent"
DETERMINISTIC: Final = "deterministic"


def hide_loop_frames(_excinfo: object = None) -> bool:
    """pytest's ``__tracebackhide__`` for the frames of testing's checks, which
    raise reports only: hidden unless `FULL_FRAMES_ENV` (``TIDELOOP_FULL_FRAMES=1``:
    show tideloop's and asyncio's frames in deadlock and property reports too)
    asks for them."""
    return not full_frames()


def plural(n: object, word: str) -> str:
    """``1 poll``, ``2 polls``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def seconds(value: object) -> str:
    """A duration as a person says it: ``100 ms``, ``30 s``, ``5 µs``."""
    if not isinstance(value, (int, float)):
        return "?"
    v = float(value)
    if v >= 1.0 or v <= 0.0:
        return f"{v:.4g} s"
    if v >= 0.001:
        return f"{v * 1e3:.3g} ms"
    return f"{v * 1e6:.3g} µs"


# ----------------------------------------------------------------------
# Words of the parts


def site_text(site: dict[str, Any] | None, *, code: bool = True) -> str:
    if not site:
        return ""
    text = str(site.get("where", ""))
    if code and site.get("code"):
        text += f" `{site['code']}`"
    return text


def task_text(words: dict[str, Any] | None, *, where: bool = True) -> str:
    """``task 'Task-4' (handle(), waiting at races.py:106 `line` in StreamReader.readline)``."""
    if not words:
        return "a task"
    text = f"task {words.get('task')!r} ({words.get('coro')}"
    at = words.get("at")
    if where and words.get("state") == "not started":
        return text + ", not started yet)"
    if where and at:
        text += f", waiting at {site_text(at)}"
        if words.get("in"):
            text += f" in {words['in']}"
    return text + ")"


def _tasks_text(tasks: Sequence[dict[str, Any]] | None) -> str:
    if not tasks:
        return ""
    return " and ".join(task_text(t) for t in tasks)


def _end(words: dict[str, Any], key_host: str, key_addr: str) -> str:
    addr = str(words.get(key_addr, "?"))
    host = words.get(key_host)
    return f"{host} ({addr})" if host else addr


def fd_words_text(words: dict[str, Any]) -> str:
    """What an fd is to the program: a connection and who reads it, a server's socket."""
    if "listening" in words:
        host = words.get("listening_host")
        where = f"{host} ({words['listening']})" if host else words["listening"]
        return f"a new connection to the server listening on {where}"
    conn = words.get("conn") or {}
    if "peer" in conn:
        local, peer = _end(conn, "local_host", "local"), _end(conn, "peer_host", "peer")
        text = f"the connection {local} <- {peer}"
    elif words.get("writing"):
        text = f"the connection from {_end(conn, 'local_host', 'local')}"
    else:
        text = _end(conn, "local_host", "local") if "local" in conn else "an fd"
    readers = words.get("readers")
    if readers and words.get("writing"):
        text += f", written by {_tasks_text(readers)} ({words.get('callback')})"
    elif readers:
        text += f", read by {_tasks_text(readers)}"
    elif conn.get("protocol") and conn.get("protocol") != "StreamReaderProtocol":
        text += f", read by its protocol {conn['protocol']}"
    elif words.get("callback"):
        text += f", watched by {words['callback']}"
    return text


def timer_text(timer: dict[str, Any] | None, *, with_task: bool = True) -> str:
    """A timer as its program armed it: ``the 100 ms timeout of asyncio.wait_for at x.py:9``."""
    if not timer:
        return "a timer"
    api = str(timer.get("api") or "")
    delay = seconds(timer.get("delay")) if "delay" in timer else ""
    site = timer.get("site")
    at = f" at {site_text(site)}" if site else ""
    if api in ("asyncio.wait_for", "asyncio.timeout"):
        text = f"the {delay} timeout of {api}{at}"
    elif api == "asyncio.sleep":
        text = f"the {delay} asyncio.sleep{at}"
    else:
        callback = timer.get("callback") or "a callback"
        how = f"{api} " if api else ""
        given = timer.get("delay")
        if isinstance(given, (int, float)) and given < 0:
            # loop.call_at with a time already past (its arming came later
            # than the program reckoned): due at once.
            delay = f"due {seconds(-given)} before it was armed"
        elif delay:
            delay = f"for {delay}"
        text = f"the timer {callback} ({how}{delay}){at}" if delay else f"the timer {callback}"
    task = timer.get("task")
    if with_task and isinstance(task, dict) and task.get("task"):
        text += f" in task {task['task']!r}"
    return text


def job_text(job: dict[str, Any]) -> str:
    """An executor job by its function and the line that submitted it."""
    what = f"`{job['expr']}`" if job.get("expr") else str(job.get("func", f"job #{job.get('job')}"))
    if job.get("expr") and job.get("func") and job["func"] != job["expr"]:
        what += f" ({job['func']})"
    site = job.get("site")
    text = f"the executor job {what}"
    if site:
        text += f" submitted at {site_text(site)}"
    task = job.get("task")
    if isinstance(task, dict) and task.get("task"):
        text += f" by task {task['task']!r}"
    return text


def _after_text(after: Sequence[dict[str, Any]] | None, held: int) -> str:
    if not after:
        return f"after {held} more timer firing(s)"
    names = [timer_text(t) for t in after[:3]]
    more = f" and {len(after) - 3} more" if len(after) > 3 else ""
    return "after " + "; ".join(names) + more + (" fires" if len(after) == 1 else " fire")


def deviation_words(decision: Decision) -> str:
    """One deviation in the program's terms (its own words without a detail)."""
    d = decision.detail
    if not d:
        return decision.words or str(decision.point)
    kind = d.get("kind")
    if kind == "fd":
        nth = d.get("nth", 0)
        what = fd_words_text(d)
        when = f" (its readiness #{nth})" if nth else ""
        if "deferred" in d:
            return f"{what}{when}: ready, but reported {plural(d['deferred'], 'poll')} late"
        return (
            f"{what}{when}: dispatched ahead of the other fds ready with it "
            f"(priority {d.get('priority')})"
        )
    if kind == "tie":
        ahead = d.get("ahead_of") or []
        others = "; ".join(timer_text(t) for t in ahead) or "the timers armed before it"
        return (
            f"{timer_text(d.get('timer'))} runs before {others}, armed earlier for the same instant"
        )
    if kind == "job":
        return f"{job_text(d)}: its result comes {_after_text(d.get('after'), decision.value)}"
    if kind == "thread":
        text = f"thread {d.get('thread')!r}'s call_soon_threadsafe({d.get('callback')})"
        if d.get("site"):
            text += f" at {site_text(d['site'])}"
        if d.get("wakes"):
            text += f", which wakes {_tasks_text(d['wakes'])},"
        return f"{text} comes {_after_text(d.get('after'), decision.value)}"
    if kind == "wake":
        late = d.get("late")
        return (
            f"step #{d.get('step')} of {task_text(d.get('task'))} comes "
            f"{plural(late, 'iteration')} late (latent: as if it awaited "
            f"{plural(late, 'more time')})"
        )
    return decision.words or str(decision.point)


# ----------------------------------------------------------------------
# Classification


@dataclass
class Verdict:
    """What kind of failure a schedule is (see the module docstring), in words."""

    kind: str
    #: One sentence: the kind and, for timing, which operation must take how long.
    summary: str
    #: Further sentences (one per held result).
    reasons: list[str] = field(default_factory=list)


def _timing_reason(d: dict[str, Any] | None, decision: Decision) -> str:
    """``needs `f` (x.py:3) to take more than 100 ms: <timer> fires first``."""
    if not d:
        what = decision.words.split(":", 1)[0] if decision.words else "a thread's result"
        return (
            f"needs {what} to come after {decision.value} more timer firing(s): "
            "a thread that takes that long"
        )
    after = d.get("after") or []
    if d.get("kind") == "job":
        what = f"`{d['expr']}`" if d.get("expr") else str(d.get("func", "an executor job"))
        site = d.get("site")
        if site:
            what += f" ({site.get('where')})"
        start = d.get("submitted")
    else:
        what = f"thread {d.get('thread')!r}"
        start = None
    if not after:
        return f"needs {what} to take longer than {decision.value} more timer firing(s)"
    last = max(after, key=lambda t: float(t.get("when", 0.0)))
    if start is not None and "when" in last:
        duration = float(last["when"]) - float(start)
    else:
        duration = float(last.get("delay", 0.0))
    first = after[0]
    fires = f"{timer_text(first)} fires first"
    if len(after) > 1:
        fires = f"{timer_text(first)} and {len(after) - 1} more timer(s) fire first"
    if d.get("kind") == "job":
        return f"needs {what} to take more than {seconds(duration)}: {fires}"
    call = f"call_soon_threadsafe({d.get('callback')})"
    if d.get("site"):
        call += f" ({d['site'].get('where')})"
    return f"needs {what} to take more than {seconds(duration)} to {call}: {fires}"


def _own_fd(decision: Decision) -> bool:
    """A deferred readiness of the loop's own waker or signal pipe?"""
    return decision.point[0] == "fd" and bool((decision.detail or {}).get("own"))


def _own_fd_reason(decision: Decision) -> str:
    polls = (decision.detail or {}).get("deferred", decision.value)
    return (
        f"needs a thread's call_soon_threadsafe (or a signal) to reach the loop {polls} "
        "poll(s) later: a thread that takes that long"
    )


def classify(deviations: Iterable[Decision]) -> Verdict:
    """The kind of a failing schedule, decided from its deviations alone."""
    devs = list(deviations)
    if not devs:
        return Verdict(
            DETERMINISTIC,
            "deterministic: the unperturbed schedule fails (no reordering, no duration: "
            "not a race)",
        )
    kinds = [str(d.point[0]) for d in devs]
    if "wake" in kinds:
        return Verdict(
            LATENT,
            "latent: this schedule needs a task step to come later than asyncio queues it "
            "now; the program is right as it is, but one more await in it or in a library "
            "it calls makes this failure possible",
        )
    held = [d for d in devs if d.point[0] in ("job", "thread") or _own_fd(d)]
    if held:
        reasons = [_own_fd_reason(d) if _own_fd(d) else _timing_reason(d.detail, d) for d in held]
        others = len(devs) - len(held)
        tail = f" (and {others} reordering(s) that need no duration)" if others else ""
        return Verdict(
            TIMING,
            f"timing: the failure needs an operation to take longer than a timer: "
            f"{reasons[0]}{tail}",
            reasons[1:],
        )
    return Verdict(
        ORDERING,
        "ordering: the failure needs no duration, only an order asyncio leaves open "
        f"({plural(len(devs), 'reordering')}); it can happen on a fast machine as on a "
        "slow one",
    )
