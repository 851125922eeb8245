"""History: what clients asked of a system and what it answered, for the checkers.

Layer: testing (below ``_linearizable`` and ``_serializable``, which read
it; it imports nothing of tideloop's). A test records each client
operation twice, as Jepsen and Porcupine histories do:

    op = history.invoke("c1", "put", ("x", 1))   # before the request goes out
    ...
    history.ok(op, None)        # the answer came: the operation happened, with this result
    history.fail(op)            # it definitely did not happen (refused, rolled back)
    history.unknown(op)         # nobody knows (a timeout, a reset): it may have
                                # happened at any time after its invocation, or never

An operation never completed by the end of the history counts as unknown.

Order: every event (an invocation or a completion) gets the loop's time
(virtual under simulation; ``at=`` for a history built by hand) and a
sequence number in the order the calls were made. Operation A *precedes* B
(real-time order) when A completed before B was invoked: earlier by time,
or at the same time and earlier by sequence (under virtual time many
events share an instant; their order on the loop's one thread is the order
they happened in).

*client* is a label (a name or a number) that reports and timelines group
operations by; one client may have several operations in flight.

Invariants:
- An operation is completed at most once; completing it again raises
  ``ValueError`` (a history is a record, not a state to edit).
- Events are numbered in the order the calls are made, from any thread
  (a lock orders them).
"""

from __future__ import annotations

import asyncio.events
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

Status = Literal["pending", "ok", "fail", "unknown"]
_T = TypeVar("_T")


class _Unknown:
    """The result of an operation whose outcome nobody knows (`UNKNOWN`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


#: The result of an operation completed with ``unknown`` (or never completed).
UNKNOWN: Final = _Unknown()


@dataclass(eq=False, slots=True)
class Op:
    """One client operation: its call, and how (and when) it completed."""

    #: Position in the history (order of invocation), from 0.
    index: int
    client: Hashable
    name: str
    arg: Any
    #: The loop's time at the invocation, and the event's sequence number.
    invoked_at: float
    invoke_seq: int
    status: Status = "pending"
    result: Any = UNKNOWN
    completed_at: float | None = None
    complete_seq: int | None = None
    #: Why it failed or is unknown (an exception's text), for reports.
    error: str = ""

    @property
    def completed(self) -> bool:
        return self.status in ("ok", "fail")

    def precedes(self, other: Op) -> bool:
        """Whether this operation completed before *other* was invoked."""
        if self.status != "ok" or self.completed_at is None or self.complete_seq is None:
            return False
        return (self.completed_at, self.complete_seq) < (other.invoked_at, other.invoke_seq)

    def call(self) -> str:
        """``name(arg)``: the call as code would write it."""
        if self.arg is None:
            return f"{self.name}()"
        if isinstance(self.arg, tuple):
            return f"{self.name}({', '.join(map(repr, self.arg))})"
        return f"{self.name}({self.arg!r})"

    def words(self, *, returns: bool = False) -> str:
        """The operation in a line: client, call, outcome and times. A result
        of None reads as ``ok`` unless *returns* (a read that returned None)."""
        if self.status == "ok":
            outcome = "ok" if self.result is None and not returns else f"-> {self.result!r}"
        elif self.status == "fail":
            outcome = "failed"
        else:
            outcome = "unknown (may have happened)"
        end = "..." if self.completed_at is None else f"{self.completed_at:.6g}"
        reason = f" ({self.error})" if self.error else ""
        return (
            f"#{self.index} {self.client}: {self.call()} {outcome}{reason}, "
            f"from {self.invoked_at:.6g} to {end}"
        )

    def to_json(self) -> dict[str, Any]:
        """The operation as JSON-able data (arguments and results as given, or
        their ``repr`` where JSON has no form for them)."""
        return {
            "index": self.index,
            "client": _jsonable(self.client),
            "name": self.name,
            "arg": _jsonable(self.arg),
            "status": self.status,
            "result": None if self.result is UNKNOWN else _jsonable(self.result),
            "invoked_at": self.invoked_at,
            "invoke_seq": self.invoke_seq,
            "completed_at": self.completed_at,
            "complete_seq": self.complete_seq,
            "error": self.error,
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _loop_time() -> float:
    loop = asyncio.events._get_running_loop()
    return loop.time() if loop is not None else 0.0


class History:
    """Client operations and their outcomes, in order (see the module docstring).

    *clock*: what gives an event's time when the call gives none (``at=``);
    by default the running loop's time (0.0 outside a loop).
    """

    def __init__(
        self, *, clock: Callable[[], float] | None = None, ops: list[Op] | None = None
    ) -> None:
        self._clock = clock or _loop_time
        self._lock = threading.Lock()
        #: The operations, in order of invocation (*ops*: those of a history
        #: being loaded, with the sequence numbers they were recorded with).
        self.ops: list[Op] = [] if ops is None else ops
        seqs = [op.invoke_seq for op in self.ops] + [op.complete_seq or 0 for op in self.ops]
        self._seq = max(seqs, default=0)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __repr__(self) -> str:
        done = sum(op.status != "pending" for op in self.ops)
        return f"<History of {len(self.ops)} operation(s), {done} completed>"

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def invoke(
        self, client: Hashable, name: str, arg: Any = None, *, at: float | None = None
    ) -> Op:
        """Record that *client* calls *name* with *arg* now; return the operation."""
        now = self._clock() if at is None else float(at)
        with self._lock:
            op = Op(len(self.ops), client, name, arg, now, self._next_seq())
            self.ops.append(op)
        return op

    def _complete(self, op: Op, status: Status, result: Any, error: Any, at: float | None) -> Op:
        now = self._clock() if at is None else float(at)
        with self._lock:
            if op.index >= len(self.ops) or self.ops[op.index] is not op:
                raise ValueError(f"operation {op.index} is not of this history")
            if op.status != "pending":
                raise ValueError(f"operation {op.words()} was completed already")
            if now < op.invoked_at:
                raise ValueError(
                    f"operation {op.index} cannot complete at {now!r}, "
                    f"before its invocation at {op.invoked_at!r}"
                )
            op.status = status
            op.result = result
            op.completed_at = now
            op.complete_seq = self._next_seq()
            if error is not None:
                op.error = error if isinstance(error, str) else _describe_error(error)
        return op

    def ok(self, op: Op, result: Any = None, *, at: float | None = None) -> Op:
        """Record that *op* happened and returned *result*."""
        return self._complete(op, "ok", result, None, at)

    def fail(self, op: Op, error: Any = None, *, at: float | None = None) -> Op:
        """Record that *op* definitely did not happen (*error*: why, for reports)."""
        return self._complete(op, "fail", UNKNOWN, error, at)

    def unknown(self, op: Op, error: Any = None, *, at: float | None = None) -> Op:
        """Record that nobody knows whether *op* happened (a timeout, a lost reply)."""
        return self._complete(op, "unknown", UNKNOWN, error, at)

    async def record(
        self,
        client: Hashable,
        name: str,
        arg: Any,
        awaitable: Awaitable[_T],
        *,
        definite: tuple[type[BaseException], ...] = (),
    ) -> _T:
        """Invoke, await *awaitable*, and complete: ok with its result; fail if
        it raised one of *definite* (errors that mean it did not happen: a
        refusal, a rollback); unknown for any other exception or a
        cancellation (a timeout, a reset: it may have happened). The
        exception propagates."""
        op = self.invoke(client, name, arg)
        try:
            result = await awaitable
        except definite as exc:
            self.fail(op, exc)
            raise
        except BaseException as exc:
            self.unknown(op, exc)
            raise
        self.ok(op, result)
        return result

    def add(  # noqa: PLR0917 (the fields of one operation, in their order)
        self,
        client: Hashable,
        name: str,
        arg: Any,
        result: Any,
        invoked_at: float,
        completed_at: float | None,
        status: Status = "ok",
    ) -> Op:
        """Record a whole operation at once (a history built by hand or loaded):
        *status* ``"ok"`` with *result*, ``"fail"``, ``"unknown"`` or ``"pending"``.
        Events of operations added this way are ordered by their times (and,
        at equal times, by the order they were added)."""
        op = self.invoke(client, name, arg, at=invoked_at)
        if status == "ok":
            self.ok(op, result, at=completed_at)
        elif status == "fail":
            self.fail(op, at=completed_at)
        elif status == "unknown":
            self.unknown(op, at=completed_at)
        elif status != "pending":
            raise ValueError(f"status must be ok, fail, unknown or pending, not {status!r}")
        return op

    def events(self) -> list[tuple[float, int, bool, Op]]:
        """Every invocation and completion, in real-time order: (time, sequence,
        is invocation, operation). Unknown and pending operations have no
        completion event."""
        found: list[tuple[float, int, bool, Op]] = []
        for op in self.ops:
            found.append((op.invoked_at, op.invoke_seq, True, op))
            if op.completed and op.completed_at is not None and op.complete_seq is not None:
                found.append((op.completed_at, op.complete_seq, False, op))
        found.sort(key=lambda e: (e[0], e[1]))
        return found

    def words(self, limit: int = 50) -> str:
        """The history in lines, one operation each (the first *limit*)."""
        lines = [op.words() for op in self.ops[:limit]]
        if len(self.ops) > limit:
            lines.append(f"... {len(self.ops) - limit} more")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The history as JSON-able data (for a file, or a timeline to draw)."""
        return {"tideloop_history": 1, "ops": [op.to_json() for op in self.ops]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> History:
        """A history saved with `to_json` (values as JSON gives them back:
        tuples become lists)."""
        if data.get("tideloop_history") != 1:
            raise ValueError("not a tideloop history (version 1)")
        raw = sorted(data["ops"], key=lambda d: d["index"])
        ops: list[Op] = []
        for d in raw:
            op = Op(
                len(ops),
                _hashable(d["client"]),
                d["name"],
                _tuples(d["arg"]),
                float(d["invoked_at"]),
                int(d["invoke_seq"]),
                d["status"],
                UNKNOWN if d["status"] != "ok" else _tuples(d["result"]),
                d["completed_at"],
                d["complete_seq"],
                d.get("error", ""),
            )
            ops.append(op)
        return cls(ops=ops)


def _tuples(value: Any) -> Any:
    """JSON's lists back as tuples (arguments are tuples by convention)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _hashable(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list) else value


def _describe_error(error: Any) -> str:
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return repr(error)


__all__ = ["UNKNOWN", "History", "Op", "Status"]
