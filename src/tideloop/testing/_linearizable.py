"""check_linearizable: is there an order of a history's operations that a model explains?

Layer: testing (above ``_history`` and ``models``). A history is
*linearizable* under a model when its operations can be put in one order
that (1) keeps every operation that completed before another was invoked
ahead of it (real time), and (2) makes each return what the model returns
when the operations run one at a time in that order. Operations that failed
are left out; an unknown one may take effect at any time after its
invocation, or never (and one that only reads is then left out).

The search (facts / what this means for us):

- Wing and Gong's algorithm walks the history's events in order, keeping a
  list of invocations and completions: at an invocation it tries to
  *linearize* that operation now (apply it to the model; if the model
  accepts its result, the operation's events leave the list and the walk
  restarts from the top); at a completion whose operation has not been
  linearized, the last choice was wrong, so it backtracks. It is
  exponential in the worst case, and on real histories it explores the same
  configurations over and over (`algorithm="wg"`).
- Lowe's improvements (WGL, what Porcupine implements; the default
  ``"wgl"``): a configuration is (the set of operations linearized, the
  model's state); the search remembers every one it has entered and never
  enters one twice. The set is a bitset (a Python ``int``) and states are
  hashable, so a configuration is a dictionary key.
- P-compositionality (Herlihy and Wing: a history is linearizable exactly
  when each object's sub-history is): a model that partitions (`KeyValue`
  by key) is checked one partition at a time, each small.

A violation is reported as a minimal sub-history (`Counterexample`). The
search that fails stops at a completion with nothing left to undo: every
order of the operations invoked before it fails there, so the history cut
at that point (operations still in flight then may or may not take
effect, with their results) is already a violation. That cut is reduced by
delta debugging: an operation goes when the rest still fails with it
allowed to take effect at any time after its invocation, or never (a read
just goes). What is left is 1-minimal: each of its operations is needed,
and no order of them alone is legal. The search is then run once more on it
to name the furthest any order gets, and the operation that cannot go next.

Invariant: a result is decided (true or false) only by a search that ran to
its end; one stopped by *timeout* is undecided (falsy, and says so).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._history import UNKNOWN, History, Op
from .models import Spec

Algorithm = Literal["wgl", "wg"]

#: Model steps each trial of the reduction may take (a trial that needs
#: more counts as passing: the operation stays).
_TRIAL_STEPS = 20_000
#: Real seconds the reduction of one violation may take in all.
_REDUCE_SECONDS = 5.0


class NotLinearizable(AssertionError):
    """A history that no order explains (raised by `Linearizability.assert_ok`)."""


def _model_name(model: Any) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def _describe_state(model: Any, state: Any) -> str:
    describe = getattr(model, "describe_state", None)
    return describe(state) if describe is not None else repr(state)


def _read_only(model: Any, op: Op) -> bool:
    check = getattr(model, "read_only", None)
    return bool(check(op.name, op.arg)) if check is not None else False


# ----------------------------------------------------------------------
# The search

#: What a step of the search was: a choice (undone, the next one tried), a
#: read taken for good, or a drop (an operation that never took effect).
_CHOICE, _READ, _DROP = 0, 1, 2


@dataclass
class _Outcome:
    """What one search found."""

    #: True (an order exists), False (none does), None (stopped: undecided).
    ok: bool | None
    steps: int
    #: The position (in the sorted events) of the furthest completion any
    #: order got stuck at: no order of the operations invoked before it
    #: gets past it (the search never linearized one invoked later).
    fail_at: int = -1
    #: With *record*: the furthest order (indices), the state after each,
    #: and the operation whose completion stopped it.
    order: list[int] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    stuck: int = -1


class _Search:
    """One partition's operations, laid out for the search.

    *ops*: the operations. *late[i]*: operation i may take effect at any
    time after its invocation, or never (unknown, or in flight at a cut):
    its completion is put after every other event. *dropped[i]*: operation i
    may take effect within its interval, or never (a reduction's trial).
    *timeless*: real time is ignored (any order of the operations; those not
    late must take effect). Events are sorted by (time, sequence); a call
    precedes its completion.
    """

    def __init__(
        self,
        model: Spec,
        ops: Sequence[Op],
        late: Sequence[bool],
        dropped: Sequence[bool] | None = None,
        timeless: bool = False,
    ) -> None:
        self.model = model
        self.ops = list(ops)
        n = len(self.ops)
        self.late = list(late)
        events: list[tuple[float, int, int, bool]] = []  # (time, seq, op, is call)
        tail: list[int] = []
        for i, op in enumerate(self.ops):
            if timeless:
                # Each must take effect (as late ones may), in any order.
                events.append((-math.inf, 0, i, True))
                tail.append(i)
                continue
            events.append((op.invoked_at, op.invoke_seq, i, True))
            if self.late[i] or op.completed_at is None or op.complete_seq is None:
                self.late[i] = True
                tail.append(i)
            else:
                events.append((op.completed_at, op.complete_seq, i, False))
        events.sort(key=lambda e: (e[0], e[1]))
        # Between two completions, the calls' order is free (none of them
        # precedes another): reads first (taken for good when the state allows
        # them), then the one due first. The walk then tries first what
        # real time and the reads constrain most.
        reads = [_read_only(model, op) for op in self.ops]
        due = {e[2]: (e[0], e[1]) for e in events if not e[3]}
        never = (float("inf"), 0)
        run_start = 0
        for k in range(len(events) + 1):
            if k == len(events) or not events[k][3]:
                if k - run_start > 1:
                    events[run_start:k] = sorted(
                        events[run_start:k],
                        key=lambda e: (not reads[e[2]], due.get(e[2], never)),
                    )
                run_start = k + 1
        #: Whether reaching i's completion with i not linearized is allowed.
        self.optional = [self.late[i] or (dropped is not None and dropped[i]) for i in range(n)]
        # Entries 0..2n-1; a call's return is known by ret_of.
        self.is_call = [e[3] for e in events] + [False] * len(tail)
        self.op_of = [e[2] for e in events] + tail
        self.ret_of = [0] * (2 * n)
        self.pos_call = [0] * n
        self.pos_ret = [0] * n
        for entry, (i, call) in enumerate(zip(self.op_of, self.is_call, strict=True)):
            if call:
                self.pos_call[i] = entry
            else:
                self.pos_ret[i] = entry
        for i in range(n):
            self.ret_of[self.pos_call[i]] = self.pos_ret[i]
        self.names = [op.name for op in self.ops]
        self.args = [op.arg for op in self.ops]
        self.results = [op.result if op.status == "ok" else UNKNOWN for op in self.ops]
        self.reads = reads

    def run(
        self,
        *,
        cache: bool = True,
        max_steps: int | None = None,
        deadline: float | None = None,
        record: bool = False,
    ) -> _Outcome:
        n = len(self.ops)
        size = 2 * n
        head, end = size, size + 1
        # A doubly linked list of the entries, between head and end.
        nxt = [*range(1, size + 1), 0 if size else end, end]
        prv = [*range(-1, size - 1), head, size - 1 if size else head]
        if size:
            nxt[size - 1] = end
            prv[0] = head
        is_call, op_of, ret_of = self.is_call, self.op_of, self.ret_of
        names, args, results, optional = self.names, self.args, self.results, self.optional
        late, pos_call, reads = self.late, self.pos_call, self.reads
        step = self.model.step
        state: Any = self.model.init()
        linearized = 0
        seen: set[tuple[int, Any]] = set()
        # (call entry, state before it, forced): the steps taken. A forced one
        # (a drop, a read) is no choice: backtracking goes past it.
        stack: list[tuple[int, Any, int]] = []
        steps = 0
        limit = max_steps if max_steps is not None else -1
        best: tuple[list[int], list[Any], int] | None = None
        furthest = depth = -1
        entry = nxt[head]
        while entry != end:
            i = op_of[entry]
            if is_call[entry]:
                steps += 1
                if steps == limit or (
                    deadline is not None and not steps & 0x3FFF and time.perf_counter() > deadline
                ):
                    return _Outcome(None, steps)
                legal, new = step(state, names[i], args[i], results[i])
                if legal:
                    if cache:
                        bits = linearized | (1 << i)
                        key = (bits, new)
                        if key in seen:
                            entry = nxt[entry]
                            continue
                        seen.add(key)
                        linearized = bits
                    # A read the state allows now is taken now, for good: any
                    # order that takes it later can take it here instead (it
                    # changes nothing, and nothing still pending must precede
                    # it, or the walk would have met that one's completion).
                    stack.append((entry, state, _READ if reads[i] else _CHOICE))
                    state = new
                    # Lift the call and its completion out of the list.
                    ret = ret_of[entry]
                    nxt[prv[entry]] = nxt[entry]
                    prv[nxt[entry]] = prv[entry]
                    nxt[prv[ret]] = nxt[ret]
                    prv[nxt[ret]] = prv[ret]
                    entry = nxt[head]
                    continue
                entry = nxt[entry]
                continue
            if late[i]:
                entry = nxt[entry]  # past every completion: it may never take effect
                continue
            if optional[i]:
                # Dropped, and not taken effect by its completion: it never
                # happened. Not a choice but a step, done like one so that
                # configurations that differ only in it meet in the cache.
                call = pos_call[i]
                dead = False
                if cache:
                    bits = linearized | (1 << i)
                    key = (bits, state)
                    if key in seen:
                        dead = True
                    else:
                        seen.add(key)
                        linearized = bits
                if not dead:
                    stack.append((call, state, _DROP))
                    ret = entry
                    nxt[prv[call]] = nxt[call]
                    prv[nxt[call]] = prv[call]
                    nxt[prv[ret]] = nxt[ret]
                    prv[nxt[ret]] = prv[ret]
                    entry = nxt[head]
                    continue
            else:
                # Stuck at this completion. The furthest one any order got
                # stuck at is the violation's point (see `_counterexample`).
                if entry > furthest:
                    furthest = entry
                    depth = -1
                if record and entry == furthest and len(stack) > depth:
                    depth = len(stack)
                    taken = [(e, s) for e, s, kind in stack if kind != _DROP]
                    best = (
                        [op_of[e] for e, _ in taken],
                        [s for _, s in taken[1:]] + [state] if taken else [],
                        i,
                    )
            # The last choice was wrong: put that operation back and try the
            # next (undoing the forced steps taken since).
            while True:
                if not stack:
                    outcome = _Outcome(False, steps, fail_at=furthest)
                    if best is not None:
                        outcome.order, outcome.states, outcome.stuck = best
                    return outcome
                call, state, kind = stack.pop()
                if cache:
                    linearized ^= 1 << op_of[call]
                ret = ret_of[call]
                prv[nxt[ret]] = ret
                nxt[prv[ret]] = ret
                prv[nxt[call]] = call
                nxt[prv[call]] = call
                if kind == _CHOICE:
                    break
            entry = nxt[call]
        return _Outcome(True, steps)


def _prepare(model: Any, ops: Iterable[Op]) -> tuple[list[Op], list[bool]]:
    """The operations the check considers, and which of them may take effect
    late or never (unknown outcome)."""
    kept: list[Op] = []
    optional: list[bool] = []
    for op in ops:
        if op.status == "fail":
            continue  # it did not happen
        if op.status in ("unknown", "pending"):
            if _read_only(model, op):
                continue  # it may not have happened, and it changed nothing
            kept.append(op)
            optional.append(True)
        else:
            kept.append(op)
            optional.append(False)
    return kept, optional


# ----------------------------------------------------------------------
# Results


@dataclass
class Counterexample:
    """A minimal violating sub-history, and how far any order of it gets.

    *ops*: the operations (in order of invocation) that no order explains,
    and that no other single operation of the history, taking effect within
    its interval or not at all, would make orderable. Unless *minimal* is
    false (the reduction ran out of time; they still admit no order), each
    is needed: without any one of them, the rest can be ordered, or another
    operation of the history would let them be (a read's write is part of
    the story). *order* and
    *states*: the furthest an order of them gets (each operation, and the
    model's state after it, in words); *stuck*: the operation whose
    completion came with it still unplaced, in every such order.
    """

    model: str
    partition: Hashable | None
    ops: list[Op]
    order: list[Op]
    states: list[str]
    stuck: Op | None
    minimal: bool
    #: How many operations the partition has, and how many were invoked
    #: before its first violation.
    partition_ops: int = 0
    cut_ops: int = 0
    #: Operations that were still in flight at the cut (may or may not
    #: have taken effect) among *ops*.
    in_flight: list[Op] = field(default_factory=list)
    #: Operations among *ops* not needed for the violation but where the
    #: stuck operation's result came from (the write a stale read read).
    sources: list[Op] = field(default_factory=list)
    #: The read-only operations among *ops* (their None results are shown).
    reads: list[Op] = field(default_factory=list)

    def precedence(self) -> list[tuple[Op, Op]]:
        """Real-time order among *ops*: (a, b) when a completed before b was
        invoked, without the pairs that follow from others."""
        pairs = [(a, b) for a in self.ops for b in self.ops if a is not b and a.precedes(b)]
        direct = []
        for a, b in pairs:
            if not any(
                a.precedes(c) and c.precedes(b) for c in self.ops if c is not a and c is not b
            ):
                direct.append((a, b))
        return direct

    def words(self) -> str:
        where = self.model if self.partition is None else f"{self.model}"
        count = len(self.ops)
        lines = [
            f"not linearizable under {where}: no order of these {count} operation(s) "
            f"respects real time and the model"
            + (
                f" (a minimal set, out of {self.cut_ops} invoked before the violation"
                + (f", {self.partition_ops} on this key" if self.partition is not None else "")
                + ")"
                if self.minimal
                else " (the reduction ran out of time: maybe not minimal)"
            )
            + ":"
        ]
        for op in self.ops:
            note = ""
            if op in self.in_flight:
                note = " [in flight at the violation: may or may not have taken effect]"
            elif op in self.sources:
                note = " [not needed for the violation: where a result came from]"
            lines.append("  " + op.words(returns=op in self.reads) + note)
        order = self.precedence()
        if order:
            lines.append(
                "real-time order: "
                + "; ".join(f"#{a.index} completed before #{b.index} began" for a, b in order)
            )
        if self.stuck is not None:
            if self.order:
                steps = ", ".join(
                    f"#{op.index} {op.call()} ({state})"
                    for op, state in zip(self.order, self.states, strict=True)
                )
                lines.append(f"the furthest any order gets: {steps};")
                before = f"then #{self.stuck.index} "
            else:
                before = f"no operation can go first: #{self.stuck.index} "
            end = self.stuck.completed_at
            lines.append(
                f"{before}{self.stuck.call()}"
                + (
                    f" -> {self.stuck.result!r}"
                    if self.stuck.result is not UNKNOWN
                    and (self.stuck.result is not None or self.stuck in self.reads)
                    else ""
                )
                + f" must take effect before it completed at {end:.6g}, and cannot"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The counterexample as data (a timeline draws it): the operations
        with their times, the furthest order and its states, the stuck
        operation and the real-time pairs, by operation index."""
        return {
            "model": self.model,
            "partition": None if self.partition is None else repr(self.partition),
            "ops": [op.to_json() for op in self.ops],
            "order": [op.index for op in self.order],
            "states": list(self.states),
            "stuck": None if self.stuck is None else self.stuck.index,
            "in_flight": [op.index for op in self.in_flight],
            "sources": [op.index for op in self.sources],
            "precedes": [[a.index, b.index] for a, b in self.precedence()],
            "minimal": self.minimal,
            "partition_ops": self.partition_ops,
            "cut_ops": self.cut_ops,
            "words": self.words(),
        }


@dataclass
class Linearizability:
    """What `check_linearizable` found: truthy when the history is linearizable.

    *ok* is None when the search was stopped by its *timeout* (undecided:
    falsy too). *counterexample* is the violation, when there is one.
    """

    ok: bool | None
    model: str
    algorithm: str
    operations: int
    partitions: int
    steps: int
    seconds: float
    counterexample: Counterexample | None = None
    undecided: str = ""

    def __bool__(self) -> bool:
        return self.ok is True

    def words(self) -> str:
        if self.ok:
            return (
                f"linearizable under {self.model}: {self.operations} operation(s) in "
                f"{self.partitions} part(s), {self.steps} model step(s), {self.seconds:.3f} s"
            )
        if self.ok is None:
            return f"undecided under {self.model}: {self.undecided}"
        assert self.counterexample is not None
        return self.counterexample.words()

    __str__ = words

    def __repr__(self) -> str:
        verdict = {True: "linearizable", False: "NOT linearizable", None: "undecided"}[self.ok]
        return f"<Linearizability: {verdict} under {self.model}, {self.operations} operation(s)>"

    def assert_ok(self) -> None:
        """Raise `NotLinearizable` with the counterexample in words unless linearizable."""
        if not self.ok:
            raise NotLinearizable(self.words())

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "model": self.model,
            "algorithm": self.algorithm,
            "operations": self.operations,
            "partitions": self.partitions,
            "steps": self.steps,
            "seconds": self.seconds,
            "undecided": self.undecided,
            "counterexample": None
            if self.counterexample is None
            else self.counterexample.to_json(),
        }


# ----------------------------------------------------------------------
# The check


def check_linearizable(
    history: History | Iterable[Op],
    model: Spec,
    *,
    algorithm: Algorithm = "wgl",
    partition: bool = True,
    timeout: float | None = None,
    minimize: bool = True,
) -> Linearizability:
    """Whether *history* is linearizable under *model* (see the module docstring).

    *algorithm*: ``"wgl"`` (Wing and Gong with Lowe's cache of
    configurations: the default) or ``"wg"`` (plain Wing and Gong, no cache,
    no partitions: for comparison). *partition*: check a model that
    partitions (`KeyValue`: by key) one part at a time (``"wgl"`` only).
    *timeout*: real seconds the search may take; past it the result is
    undecided. *minimize*: reduce a violation to a minimal sub-history (off:
    the cut at the first violation).
    """
    if algorithm not in ("wgl", "wg"):
        raise ValueError(f"algorithm must be 'wgl' or 'wg', not {algorithm!r}")
    start = time.perf_counter()
    deadline = None if timeout is None else start + timeout
    kept, optional = _prepare(model, history)
    cache = algorithm == "wgl"
    parts: list[tuple[Hashable | None, Spec, list[Op], list[bool]]] = []
    splitter = getattr(model, "partition", None) if cache and partition else None
    split = splitter(kept) if splitter is not None else None
    if split is None:
        parts.append((None, model, kept, optional))
    else:
        unknown = {id(op): flag for op, flag in zip(kept, optional, strict=True)}
        sub = getattr(model, "for_partition", None)
        for key, ops in split.items():
            part_model = sub(key) if sub is not None else model
            parts.append((key, part_model, list(ops), [unknown[id(op)] for op in ops]))
    steps = 0
    name = _model_name(model)
    for key, part_model, ops, late in parts:
        search = _Search(part_model, ops, late)
        outcome = search.run(cache=cache, deadline=deadline)
        steps += outcome.steps
        if outcome.ok is None:
            return Linearizability(
                None,
                name,
                algorithm,
                len(kept),
                len(parts),
                steps,
                time.perf_counter() - start,
                undecided=f"the search ran past its timeout of {timeout} s "
                f"after {steps} model step(s)",
            )
        if outcome.ok is False:
            example = _counterexample(search, outcome, key, minimize)
            return Linearizability(
                False,
                name,
                algorithm,
                len(kept),
                len(parts),
                steps,
                time.perf_counter() - start,
                counterexample=example,
            )
    return Linearizability(
        True, name, algorithm, len(kept), len(parts), steps, time.perf_counter() - start
    )


def _counterexample(
    search: _Search, outcome: _Outcome, key: Hashable | None, minimize: bool
) -> Counterexample:
    """The violation *outcome* found, cut at its point and reduced."""
    fail_at = outcome.fail_at
    # The cut: operations invoked before the furthest completion any order
    # got stuck at. The search never linearized an operation invoked later
    # (to reach one, it must have got past that completion), so it explored
    # exactly the cut's orders: the cut, where operations still in flight
    # may or may not have taken effect (with their results), is a violation.
    cut: list[int] = []
    late: set[int] = set()
    for i in range(len(search.ops)):
        if search.pos_call[i] < fail_at:
            cut.append(i)
            if search.late[i] or search.pos_ret[i] > fail_at:
                late.add(i)
    model = search.model
    ops = search.ops
    in_flight = {i for i in late if not search.late[i]}
    stuck = search.op_of[fail_at]
    sources: list[int] = []
    if minimize:
        keep, minimal = _reduce(cut, ops, model, late, stuck)
        sources = _sources(keep, cut, ops, model, late)
        keep = sorted([*keep, *sources])
    else:
        keep, minimal = cut, False
    final = _Search(model, [ops[i] for i in keep], [i in late for i in keep])
    explained = final.run(record=True, max_steps=1_000_000)
    if explained.ok is not False:
        # Cannot happen (each trial the reduction kept failed); the cut then.
        keep, minimal, sources = cut, False, []
        final = _Search(model, [ops[i] for i in keep], [i in late for i in keep])
        explained = final.run(record=True, max_steps=1_000_000)
    order = [final.ops[i] for i in explained.order]
    states = [_describe_state(model, s) for s in explained.states]
    return Counterexample(
        model=_model_name(model),
        partition=key,
        ops=[ops[i] for i in keep],
        order=order,
        states=states,
        stuck=final.ops[explained.stuck] if explained.stuck >= 0 else None,
        minimal=minimal,
        partition_ops=len(ops),
        cut_ops=len(cut),
        in_flight=[ops[i] for i in keep if i in in_flight],
        sources=[ops[i] for i in sources],
        reads=[ops[i] for i in keep if _read_only(model, ops[i])],
    )


#: How many of the operations nearest a candidate set are tried together,
#: as rescuers (allowed to take effect or not) or as where results came from.
_NEAR = 16


def _reduce(
    cut: list[int], ops: list[Op], model: Spec, late: set[int], stuck: int
) -> tuple[list[int], bool]:
    """The operations of the cut that must stay for it to fail (see
    `Counterexample`), and whether the reduction finished in its time.

    A trial keeps some operations and leaves the others out; it fails when no
    order of those kept exists. First the last few operations before the
    violation are tried (2, 4, 8... with the one that got stuck), then ddmin
    reduces what failed to a 1-minimal set. Leaving operations out can make
    a set fail that the history explains (a read whose write was left out,
    a counter's increments), so the other operations of the cut are then
    tried beside the set, allowed to take effect within their intervals or
    not at all: each on its own, then the `_NEAR` latest together. Those
    that make the set orderable are part of the story: the reduction runs
    again with them kept.
    """
    deadline = time.perf_counter() + _REDUCE_SECONDS
    fixed: set[int] = set()

    def search(keep: Iterable[int], dropped: Iterable[int] = ()) -> bool | None:
        soft = set(dropped)
        chosen = sorted(set(keep) | soft, key=lambda i: (ops[i].invoked_at, ops[i].invoke_seq))
        trial = _Search(
            model,
            [ops[i] for i in chosen],
            [i in late for i in chosen],
            [i in soft for i in chosen],
        )
        return trial.run(max_steps=_TRIAL_STEPS, deadline=deadline).ok

    def fails(keep: Sequence[int]) -> bool:
        return search([*keep, *fixed]) is False

    by_start = sorted(cut, key=lambda i: (ops[i].invoked_at, ops[i].invoke_seq))
    while True:
        # The violation is usually among the last operations before it.
        items = [i for i in by_start if i not in fixed]
        size = 2
        while size < len(items):
            window = items[-size:]
            if stuck not in window and stuck not in fixed:
                window = [stuck, *window]
            if fails(window):
                items = window
                break
            if time.perf_counter() > deadline:
                return by_start, False
            size *= 2
        reduced, finished = _ddmin(items, fails, deadline)
        keep = [*reduced, *fixed]
        if not finished:
            return sorted(keep), False
        rescuers = _rescuers(keep, by_start, search, deadline)
        if not rescuers:
            # A kept rescuer may have become needless beside what was found
            # since: without it the rest fails, and nothing rescues that.
            for i in sorted(fixed):
                rest = [j for j in keep if j != i]
                if search(rest) is False and not _rescuers(rest, by_start, search, deadline):
                    keep = rest
            return sorted(keep), time.perf_counter() <= deadline
        fixed.update(rescuers)


def _rescuers(
    keep: list[int],
    cut: list[int],
    search: Callable[..., bool | None],
    deadline: float,
) -> list[int]:
    """Operations of the cut that, beside *keep* and allowed to take effect
    within their intervals or not, make them orderable: one, or a minimal set
    of the `_NEAR` latest (empty: none found)."""
    chosen = set(keep)
    others = [i for i in cut if i not in chosen]
    for i in others:
        if search(keep, dropped=[i]) is True:
            return [i]
    near = others[-_NEAR:]
    if len(near) < 2 or search(keep, dropped=near) is not True:
        return []
    found, _ = _ddmin(near, lambda some: search(keep, dropped=some) is True, deadline)
    return found


def _sources(
    keep: list[int], cut: list[int], ops: list[Op], model: Spec, late: set[int]
) -> list[int]:
    """Where the results in *keep* came from, when *keep* does not say.

    An operation of *keep* whose result no sequence of the others (in any
    order, real time ignored) makes legal (a read of a value no kept write
    wrote, a counter's second increment alone) is explained by adding the
    fewest of the latest operations of the cut that make every result
    legal that way, while the set still admits no order in real time.
    These operations are not needed for the violation; they make it readable.
    """

    def explained(chosen: Sequence[int]) -> bool:
        for target in chosen:
            trial = _Search(
                model,
                [ops[i] for i in chosen],
                [i != target for i in chosen],
                timeless=True,
            )
            if trial.run(max_steps=_TRIAL_STEPS).ok is not True:
                return False
        return True

    def fails(chosen: Sequence[int]) -> bool:
        chosen = sorted(chosen, key=lambda i: (ops[i].invoked_at, ops[i].invoke_seq))
        trial = _Search(model, [ops[i] for i in chosen], [i in late for i in chosen])
        return trial.run(max_steps=_TRIAL_STEPS).ok is False

    def explains(extra: Sequence[int]) -> bool:
        return explained([*keep, *extra]) and fails([*keep, *extra])

    if explained(keep):
        return []
    chosen = set(keep)
    latest = [
        i
        for i in sorted(cut, key=lambda i: (ops[i].invoked_at, ops[i].invoke_seq), reverse=True)
        if i not in chosen
    ]
    size = 1
    while size <= _NEAR:
        window = latest[:size]
        if explains(window):
            found, _ = _ddmin(window, explains, time.perf_counter() + 1.0)
            return found
        if size >= len(latest):
            break
        size *= 2
    return []


def _ddmin(
    items: list[int], fails: Callable[[Sequence[int]], bool], deadline: float
) -> tuple[list[int], bool]:
    """Zeller's ddmin: a 1-minimal sublist of *items* for which *fails* holds
    (it holds for *items*). Stops at *deadline* with what it has."""
    n = 2
    while len(items) >= 2:
        if time.perf_counter() > deadline:
            return items, False
        size = max(1, len(items) // n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        reduced = False
        for chunk in chunks:
            if len(chunk) < len(items) and fails(chunk):
                items, n, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:
                drop = set(chunk)
                rest = [i for i in items if i not in drop]
                if rest and len(rest) < len(items) and fails(rest):
                    items, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(items):
                break
            n = min(2 * n, len(items))
    if len(items) == 1 and fails([]):
        return [], True
    return items, time.perf_counter() <= deadline


__all__ = ["Counterexample", "Linearizability", "NotLinearizable", "check_linearizable"]
