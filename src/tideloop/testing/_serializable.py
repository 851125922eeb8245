"""check_serializable: dependency cycles in a history of transactions, named (Elle's way).

Layer: testing (above ``_history``). A transaction is one operation of a
`History` whose argument is a list of micro-operations, and whose result
(when it committed: ``ok``) is that list with the reads filled in:

- **list-append** (Elle's best case): ``("append", key, value)`` and
  ``("r", key, None)``, read as ``("r", key, [v1, v2, ...])``: each key is a
  list, appends add to its end. Every append of a key must append a value
  no other append of that key appends.
- **read-write registers**: ``("w", key, value)`` and ``("r", key, None)``,
  read as ``("r", key, value)`` (None: never written). Every write of a key
  must write a value no other write of it writes.

A transaction that failed (``fail``) did not commit: nothing may have read
its writes. One whose outcome is unknown (``unknown``, or never completed)
may have committed: its writes may be read; its own reads are not known.

What it infers (facts / what this means for us):

- **list-append.** A read returns the whole list, so every read of a key is
  a prefix of one order of its appends (if two reads are not prefixes of
  each other, the key's order is *incompatible*, and the key gives no
  edges). The longest read of a key is its version order. From it: *ww*
  (T1 appended a value, T2 appended the next one), *wr* (T2 read a list
  whose last element T1 appended), *rw* (T1 read a list that stops just
  before the value T2 appended: T2's write came after T1's read, an
  anti-dependency).
- **registers.** A read names the write it read (*wr*). The version order
  is known only where a transaction read a version and then wrote the key
  (its write comes right after the version it read, if it committed
  serializably), and the initial version (None) comes before every write:
  *ww* and *rw* edges come only from those.
- **Cycles.** The edges make a graph of transactions; a serializable
  history has an order of its committed transactions that every edge
  agrees with, so a cycle is a violation. Its strongly connected components
  (Tarjan) are searched for the shortest cycle of each kind, from the
  weakest isolation level it breaks: **G0** (ww only: write cycle), **G1c**
  (ww and wr: circular information flow), **G-single** (exactly one rw:
  read skew, lost update), **G2** (two or more rw: write skew).
  ``realtime=True`` adds real-time order (T1 completed before T2 began):
  strict serializability (the anomaly is then named ``-realtime``).
- **Without a cycle:** *G1a* (aborted read: a read saw a failed
  transaction's write), *G1b* (intermediate read: a read saw a value its
  writer overwrote in the same transaction), *internal* (a transaction's
  read disagrees with its own earlier reads and writes, or shows its own
  later append; its appends shown out of the order it made them), *incompatible
  order*, *duplicate* elements in a list, a value that no transaction
  wrote, and (registers) *lost update*: two committed transactions read the
  same version and both wrote the key.

What it cannot: it proves nothing when it finds nothing (a falsy result
means a violation; a truthy one means none was found). An append nobody
read has no known place, and a register write nobody read over (a blind
write) has no known predecessor or successor, so anomalies made only of
those (a lost update between blind writes, write skew between blind
writes) go unseen. Predicates, ranges and deletes are not modelled.

Invariant: every edge and every anomaly carries the reason it was
inferred (which read, which write), so a report reads as an argument.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._history import History, Op

Kind = Literal["list-append", "rw-register"]

#: The cycle anomalies, from the weakest isolation level they break.
_CYCLES = ("G0", "G1c", "G-single", "G2")
_NAMES = {
    "G0": "write cycle",
    "G1c": "circular information flow",
    "G-single": "read skew: a cycle with one anti-dependency",
    "G2": "anti-dependency cycle (write skew)",
}
_EDGE_WORDS = {
    "ww": "write-write",
    "wr": "write-read",
    "rw": "read-write (anti-dependency)",
    "rt": "real time",
}


class NotSerializable(AssertionError):
    """A transactional history with an anomaly (`Serializability.assert_ok`)."""


@dataclass(frozen=True)
class Edge:
    """One inferred ordering: *source* must come before *target* (indices of
    operations in the history), of *type* ``ww``, ``wr``, ``rw`` or ``rt``,
    with the reason in words."""

    source: int
    target: int
    type: str
    why: str


@dataclass
class Anomaly:
    """One violation: its *name* (``G0``, ``G1c``, ``G-single``, ``G2``,
    with ``-realtime`` when a real-time edge is in the cycle; ``G1a``,
    ``G1b``, ``internal``, ``incompatible-order``, ``duplicate``,
    ``unwritten-value``, ``lost-update``), the transactions involved, and for
    a cycle its edges in order."""

    name: str
    txns: list[Op]
    edges: list[Edge] = field(default_factory=list)
    why: str = ""

    def words(self) -> str:
        names = {op.index: f"T{n + 1}" for n, op in enumerate(self.txns)}
        lines = []
        base = self.name.removesuffix("-realtime")
        title = _NAMES.get(base, "")
        lines.append(f"{self.name}" + (f" ({title})" if title else "") + ":")
        lines.extend(f"  {names[op.index]} = {txn_words(op)}" for op in self.txns)
        if self.edges:
            lines.extend(
                f"  {names[edge.source]} < {names[edge.target]} "
                f"({_EDGE_WORDS[edge.type]}): {edge.why}"
                for edge in self.edges
            )
            chain = " < ".join(
                [names[e.source] for e in self.edges] + [names[self.edges[0].source]]
            )
            lines.append(f"  so {chain}: a contradiction")
        if self.why:
            lines.append(f"  {self.why}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "txns": [op.to_json() for op in self.txns],
            "edges": [
                {"from": e.source, "to": e.target, "type": e.type, "why": e.why} for e in self.edges
            ],
            "why": self.why,
            "words": self.words(),
        }


@dataclass
class Serializability:
    """What `check_serializable` found: truthy when no anomaly was found (which
    proves nothing: see the module docstring); otherwise the anomalies."""

    kind: str
    transactions: int
    edges: dict[str, int]
    anomalies: list[Anomaly]
    realtime: bool = False

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def __bool__(self) -> bool:
        return self.ok

    def words(self) -> str:
        inferred = ", ".join(f"{n} {t}" for t, n in sorted(self.edges.items()))
        level = "strict serializability" if self.realtime else "serializability"
        if self.ok:
            return (
                f"no anomaly found ({level}, {self.kind}): {self.transactions} "
                f"transaction(s), edges inferred: {inferred or 'none'}"
            )
        names = collections.Counter(a.name for a in self.anomalies)
        head = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
        parts = [
            f"not serializable ({level}, {self.kind}): {head}; "
            f"{self.transactions} transaction(s), edges inferred: {inferred or 'none'}"
        ]
        parts.extend(a.words() for a in self.anomalies)
        return "\n".join(parts)

    __str__ = words

    def __repr__(self) -> str:
        verdict = "no anomaly found" if self.ok else f"{len(self.anomalies)} anomaly(ies)"
        return f"<Serializability: {verdict}, {self.transactions} transaction(s)>"

    def assert_ok(self) -> None:
        """Raise `NotSerializable` with the anomalies in words, if there are any."""
        if not self.ok:
            raise NotSerializable(self.words())

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "kind": self.kind,
            "realtime": self.realtime,
            "transactions": self.transactions,
            "edges": dict(self.edges),
            "anomalies": [a.to_json() for a in self.anomalies],
        }


# ----------------------------------------------------------------------
# Transactions


@dataclass
class _Txn:
    op: Op
    micro: list[tuple[str, Hashable, Any]]
    #: committed (ok), aborted (fail), or maybe (unknown, pending).
    status: str


def _micro(value: Any, where: Op) -> list[tuple[str, Hashable, Any]]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"transaction {where.index}: not a list of micro-operations: {value!r}")
    found = []
    for m in value:
        if not isinstance(m, (list, tuple)) or len(m) != 3 or m[0] not in ("r", "w", "append"):
            raise ValueError(
                f"transaction {where.index}: a micro-operation is (f, key, value) with f one of "
                f"'r', 'w', 'append', not {m!r}"
            )
        f, key, v = m
        if isinstance(key, list):
            key = tuple(key)
        found.append((str(f), key, v))
    return found


def _transactions(history: History | Iterable[Op]) -> list[_Txn]:
    txns = []
    for op in history:
        if op.status == "ok":
            micro = _micro(op.result if op.result is not None else op.arg, op)
            declared = _micro(op.arg, op)
            if [(f, k) for f, k, _ in micro] != [(f, k) for f, k, _ in declared]:
                raise ValueError(
                    f"transaction {op.index}: its result's micro-operations are not its "
                    f"argument's ({op.result!r} for {op.arg!r})"
                )
            txns.append(_Txn(op, micro, "committed"))
        else:
            status = "aborted" if op.status == "fail" else "maybe"
            txns.append(_Txn(op, _micro(op.arg, op), status))
    return txns


def _kind_of(txns: Sequence[_Txn]) -> Kind:
    fs = {f for t in txns for f, _, _ in t.micro}
    if "append" in fs and "w" in fs:
        raise ValueError("a history mixes appends and register writes: check one kind at a time")
    return "rw-register" if "w" in fs else "list-append"


def txn_words(op: Op) -> str:
    """A transaction in a line, Elle's way: ``#3 c1: [r 'x' [1 2], append 'y' 3] ok``."""
    micro = op.result if op.status == "ok" and op.result is not None else op.arg
    try:
        parts = [
            f"{f} {key!r}"
            + ("" if value is None and f == "r" and op.status != "ok" else f" {_show(value)}")
            for f, key, value in micro
        ]
    except (TypeError, ValueError):
        return op.words()
    outcome = {"ok": "committed", "fail": "aborted"}.get(op.status, "unknown")
    end = "..." if op.completed_at is None else f"{op.completed_at:.6g}"
    return (
        f"#{op.index} {op.client}: [{', '.join(parts)}] {outcome}, "
        f"from {op.invoked_at:.6g} to {end}"
    )


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(repr, value)) + "]"
    return repr(value)


class _Graph:
    """Typed edges between transactions (by operation index); the first
    reason seen for each (source, target, type) is kept."""

    def __init__(self) -> None:
        self.out: dict[int, dict[int, dict[str, Edge]]] = collections.defaultdict(dict)
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, source: int, target: int, type: str, why: str) -> None:
        if source == target:
            return
        by_type = self.out[source].setdefault(target, {})
        if type not in by_type:
            by_type[type] = Edge(source, target, type, why)
            self.counts[type] += 1

    def nodes(self) -> set[int]:
        found = set(self.out)
        for targets in self.out.values():
            found.update(targets)
        return found


# ----------------------------------------------------------------------
# Inference: list-append


def _infer_append(txns: list[_Txn], graph: _Graph, anomalies: list[Anomaly]) -> None:
    by_index = {t.op.index: t for t in txns}
    # Who appended each value of each key, and which appends were a
    # transaction's last to that key.
    writer: dict[tuple[Hashable, Any], int] = {}
    final: dict[tuple[Hashable, int], Any] = {}
    for t in txns:
        for f, key, value in t.micro:
            if f == "append":
                if (key, value) in writer and writer[key, value] != t.op.index:
                    raise ValueError(
                        f"value {value!r} is appended to key {key!r} twice "
                        f"(transactions {writer[key, value]} and {t.op.index}): "
                        "list-append needs unique values per key"
                    )
                writer[key, value] = t.op.index
                final[key, t.op.index] = value
    # External reads (what a transaction saw of others), checking each
    # transaction's reads against its own earlier operations.
    reads: dict[Hashable, list[tuple[int, tuple[Any, ...]]]] = collections.defaultdict(list)
    for t in txns:
        if t.status != "committed":
            continue
        seen: dict[Hashable, list[Any]] = {}
        own: dict[Hashable, list[Any]] = collections.defaultdict(list)
        for f, key, value in t.micro:
            if f == "append":
                own[key].append(value)
                if key in seen:
                    seen[key].append(value)
                continue
            if value is None:
                continue  # a read whose result is not known
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"transaction {t.op.index}: a list-append read returns a list")
            got = list(value)
            if key in seen:
                if got != seen[key]:
                    anomalies.append(
                        Anomaly(
                            "internal",
                            [t.op],
                            why=f"it read {key!r} = {_show(got)}, but its own earlier "
                            f"operations on it say {_show(seen[key])}",
                        )
                    )
                continue
            if own[key]:
                mine = own[key]
                if got[-len(mine) :] != mine:
                    anomalies.append(
                        Anomaly(
                            "internal",
                            [t.op],
                            why=f"it read {key!r} = {_show(got)}, which does not end with "
                            f"its own appends {_show(mine)}",
                        )
                    )
                    seen[key] = got
                    continue
                external = got[: len(got) - len(mine)]
            else:
                external = got
            future = [v for v in external if writer.get((key, v)) == t.op.index]
            if future:
                anomalies.append(
                    Anomaly(
                        "internal",
                        [t.op],
                        why=f"it read {key!r} = {_show(got)}, with its own append of "
                        f"{future[0]!r} before making it",
                    )
                )
                seen[key] = got
                continue
            seen[key] = got
            reads[key].append((t.op.index, tuple(external)))
    for key, found in reads.items():
        for reader, values in found:
            _check_read_values(key, reader, values, writer, final, by_index, anomalies)
        # The version order: the longest read, if every read is a prefix of it.
        longest = max((v for _, v in found), key=len)
        conflict = next(((r, v) for r, v in found if longest[: len(v)] != v), None)
        if conflict is not None:
            other = next(r for r, v in found if v == longest)
            anomalies.append(
                Anomaly(
                    "incompatible-order",
                    [by_index[other].op, by_index[conflict[0]].op],
                    why=f"they read {key!r} = {_show(longest)} and {_show(conflict[1])}: "
                    "neither is a prefix of the other, so no single order of appends "
                    "explains both",
                )
            )
            continue
        if len(set(longest)) != len(longest):
            continue  # reported as a duplicate; no order to draw edges from
        order = [writer.get((key, v)) for v in longest]
        # Each transaction's appends must show in the order it made them.
        for index in {w for w in order if w is not None}:
            made = [v for f, k, v in by_index[index].micro if f == "append" and k == key]
            shown = [v for v, w in zip(longest, order, strict=True) if w == index]
            if shown != [v for v in made if v in shown]:
                anomalies.append(
                    Anomaly(
                        "internal",
                        [by_index[index].op],
                        why=f"it appended {_show(made)} to {key!r}, but a read shows them "
                        f"in the order {_show(shown)}",
                    )
                )
        for i in range(len(longest) - 1):
            a, b = order[i], order[i + 1]
            if a is not None and b is not None:
                graph.add(
                    a,
                    b,
                    "ww",
                    f"the order of {key!r} puts T(b)'s append of {longest[i + 1]!r} right "
                    f"after T(a)'s append of {longest[i]!r}",
                )
        # A committed append no read shows came after every read of the key
        # (a read returns the whole list): an anti-dependency from each.
        placed = set(longest)
        unread = [
            (value, w)
            for (k, value), w in writer.items()
            if k == key and value not in placed and by_index[w].status == "committed"
        ]
        for reader, values in found:
            for value, w in unread:
                graph.add(
                    reader,
                    w,
                    "rw",
                    f"T(a) read {key!r} = {_show(values)}, without T(b)'s append of "
                    f"{value!r}, which no read shows: it came after",
                )
            if values:
                last = writer.get((key, values[-1]))
                if last is not None:
                    graph.add(
                        last,
                        reader,
                        "wr",
                        f"T(b) read {key!r} = {_show(values)}, which ends with T(a)'s "
                        f"append of {values[-1]!r}",
                    )
            if len(values) < len(longest):
                nxt = order[len(values)]
                if nxt is not None:
                    graph.add(
                        reader,
                        nxt,
                        "rw",
                        f"T(a) read {key!r} = {_show(values)}, without T(b)'s append of "
                        f"{longest[len(values)]!r}, which comes next in the order of {key!r}",
                    )


def _check_read_values(  # noqa: PLR0917
    key: Hashable,
    reader: int,
    values: tuple[Any, ...],
    writer: dict[tuple[Hashable, Any], int],
    final: dict[tuple[Hashable, int], Any],
    txns: dict[int, _Txn],
    anomalies: list[Anomaly],
) -> None:
    if len(set(values)) != len(values):
        dupes = sorted({repr(v) for v in values if values.count(v) > 1})
        anomalies.append(
            Anomaly(
                "duplicate",
                [txns[reader].op],
                why=f"it read {key!r} = {_show(values)}: {', '.join(dupes)} appear twice",
            )
        )
    for v in values:
        w = writer.get((key, v))
        if w is None:
            anomalies.append(
                Anomaly(
                    "unwritten-value",
                    [txns[reader].op],
                    why=f"it read {v!r} in {key!r}, which no transaction appended",
                )
            )
        elif txns[w].status == "aborted":
            anomalies.append(
                Anomaly(
                    "G1a",
                    [txns[w].op, txns[reader].op],
                    why=f"T2 read {key!r} = {_show(values)}, with {v!r} appended by T1, "
                    "which failed (aborted read)",
                )
            )
    if values:
        last = values[-1]
        w = writer.get((key, last))
        if w is not None and w != reader and final.get((key, w)) != last:
            anomalies.append(
                Anomaly(
                    "G1b",
                    [txns[w].op, txns[reader].op],
                    why=f"T2 read {key!r} = {_show(values)}, ending with {last!r}, but T1 "
                    f"appended {final[key, w]!r} after it in the same transaction "
                    "(intermediate read)",
                )
            )


# ----------------------------------------------------------------------
# Inference: read-write registers


def _infer_register(txns: list[_Txn], graph: _Graph, anomalies: list[Anomaly]) -> None:
    by_index = {t.op.index: t for t in txns}
    writer: dict[tuple[Hashable, Any], int] = {}
    final: dict[tuple[Hashable, int], Any] = {}
    for t in txns:
        for f, key, value in t.micro:
            if f == "w":
                if value is None:
                    raise ValueError(f"transaction {t.op.index}: None is the initial value")
                if (key, value) in writer and writer[key, value] != t.op.index:
                    raise ValueError(
                        f"value {value!r} is written to key {key!r} twice "
                        f"(transactions {writer[key, value]} and {t.op.index}): "
                        "registers need unique values per key"
                    )
                writer[key, value] = t.op.index
                final[key, t.op.index] = value
    # External reads; the versions a committed transaction read and then
    # overwrote (its write comes right after them); internal consistency.
    reads: list[tuple[int, Hashable, Any]] = []
    successors: dict[tuple[Hashable, Any], list[tuple[Any, int]]] = collections.defaultdict(list)
    for t in txns:
        if t.status == "aborted":
            continue
        seen: dict[Hashable, Any] = {}
        external: dict[Hashable, Any] = {}
        for f, key, value in t.micro:
            if f == "w":
                seen[key] = value
                continue
            if t.status != "committed":
                continue  # an unknown transaction's reads are unknown
            if key in seen:
                if value != seen[key]:
                    anomalies.append(
                        Anomaly(
                            "internal",
                            [t.op],
                            why=f"it read {key!r} = {value!r}, but its own earlier "
                            f"operations on it say {seen[key]!r}",
                        )
                    )
                continue
            seen[key] = value
            external[key] = value
            reads.append((t.op.index, key, value))
        if t.status == "committed":
            for key, value in external.items():
                if (key, t.op.index) in final:
                    successors[key, value].append((final[key, t.op.index], t.op.index))
    for reader, key, value in reads:
        if value is None:
            continue
        w = writer.get((key, value))
        if w is None:
            anomalies.append(
                Anomaly(
                    "unwritten-value",
                    [by_index[reader].op],
                    why=f"it read {key!r} = {value!r}, which no transaction wrote",
                )
            )
            continue
        if by_index[w].status == "aborted":
            anomalies.append(
                Anomaly(
                    "G1a",
                    [by_index[w].op, by_index[reader].op],
                    why=f"T2 read {key!r} = {value!r}, written by T1, which failed (aborted read)",
                )
            )
            continue
        if final.get((key, w)) != value and w != reader:
            anomalies.append(
                Anomaly(
                    "G1b",
                    [by_index[w].op, by_index[reader].op],
                    why=f"T2 read {key!r} = {value!r}, which T1 overwrote with "
                    f"{final[key, w]!r} in the same transaction (intermediate read)",
                )
            )
        graph.add(w, reader, "wr", f"T(b) read {key!r} = {value!r}, which T(a) wrote")
    # Lost updates: two committed transactions read one version and both wrote.
    for (key, value), after in successors.items():
        if len(after) > 1:
            (v1, t1), (v2, t2) = after[0], after[1]
            anomalies.append(
                Anomaly(
                    "lost-update",
                    [by_index[t1].op, by_index[t2].op],
                    why=f"both read {key!r} = {value!r} and wrote it ({v1!r}, {v2!r}): "
                    "whichever came second did not see the first's write",
                )
            )
    # Edges from the known version order.
    for (key, value), after in successors.items():
        previous = writer.get((key, value)) if value is not None else None
        for new, w in after:
            if previous is not None:
                graph.add(
                    previous,
                    w,
                    "ww",
                    f"T(b) read {key!r} = {value!r} (T(a)'s write) and then wrote {new!r}",
                )
            for reader, rkey, rvalue in reads:
                if rkey == key and rvalue == value and reader != w:
                    graph.add(
                        reader,
                        w,
                        "rw",
                        f"T(a) read {key!r} = {value!r}, which T(b) read and overwrote with "
                        f"{new!r}",
                    )
    # The initial version precedes every write of a key.
    writers_of: dict[Hashable, list[tuple[int, Any]]] = collections.defaultdict(list)
    for (key, value), w in writer.items():
        if by_index[w].status != "aborted":
            writers_of[key].append((w, value))
    for reader, key, value in reads:
        if value is None:
            for w, written in writers_of.get(key, ()):
                graph.add(
                    reader,
                    w,
                    "rw",
                    f"T(a) read {key!r} = None (never written), so it came before T(b)'s "
                    f"write of {written!r}",
                )


# ----------------------------------------------------------------------
# Real time


def _realtime(txns: list[_Txn], graph: _Graph) -> None:
    """T1 -> T2 when T1 completed before T2 began: each transaction gets edges
    from the frontier of those completed before it (a transitive reduction)."""
    events = []
    for t in txns:
        if t.status != "committed" or t.op.completed_at is None or t.op.complete_seq is None:
            continue
        events.append((t.op.invoked_at, t.op.invoke_seq, True, t))
        events.append((t.op.completed_at, t.op.complete_seq, False, t))
    events.sort(key=lambda e: (e[0], e[1]))
    frontier: set[int] = set()
    preds: dict[int, set[int]] = {}
    for _, _, invocation, t in events:
        index = t.op.index
        if invocation:
            preds[index] = set(frontier)
            for p in frontier:
                graph.add(p, index, "rt", "T(a) completed before T(b) began")
        else:
            frontier -= preds.get(index, set())
            frontier.add(index)


# ----------------------------------------------------------------------
# Cycles


def _components(graph: _Graph) -> list[list[int]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in sorted(graph.nodes()):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.out.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            advanced = False
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.out.get(w, {})))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _path(
    graph: _Graph, start: int, goal: int, nodes: set[int], types: frozenset[str]
) -> list[Edge] | None:
    """The shortest path from *start* to *goal* inside *nodes* over edges of *types*."""
    if start == goal:
        return []
    previous: dict[int, Edge | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        v = queue.popleft()
        for w, by_type in sorted(graph.out.get(v, {}).items()):
            if w not in nodes or w in previous:
                continue
            edge = next((by_type[t] for t in sorted(by_type) if t in types), None)
            if edge is None:
                continue
            previous[w] = edge
            if w == goal:
                path = []
                node = w
                while (step := previous[node]) is not None:
                    path.append(step)
                    node = step.source
                path.reverse()
                return path
            queue.append(w)
    return None


#: Edges of one kind a component's cycle search starts from, at most (a
#: cycle is found from any edge on it; the shortest among these is shown).
_STARTS = 300


def _cycle_in(graph: _Graph, component: list[int]) -> tuple[str, list[Edge]] | None:
    """The weakest anomaly a component holds: its kind and a short cycle."""
    nodes = set(component)
    base = frozenset({"ww", "rt"})
    no_rw = frozenset({"ww", "wr", "rt"})
    everything = frozenset({"ww", "wr", "rw", "rt"})

    def shortest(first: frozenset[str], rest: frozenset[str]) -> list[Edge] | None:
        """The shortest cycle found that starts with an edge of *first* types
        and returns over *rest* types."""
        best: list[Edge] | None = None
        starts = 0
        for v in component:
            for w, by_type in sorted(graph.out.get(v, {}).items()):
                edge = next((by_type[t] for t in sorted(by_type) if t in first), None)
                if w not in nodes or edge is None:
                    continue
                starts += 1
                back = _path(graph, w, v, nodes, rest)
                if back is not None and (best is None or len(back) + 1 < len(best)):
                    best = [edge, *back]
                if (best is not None and len(best) == 2) or starts >= _STARTS:
                    return best
        return best

    # G0: write-write (and real-time) edges only; G1c: with write-read too.
    found = shortest(base, base)
    if found is not None:
        return "G0", found
    found = shortest(frozenset({"wr"}), no_rw)
    if found is not None:
        return "G1c", found
    # G-single: one anti-dependency, closed by the other kinds; G2: by any.
    found = shortest(frozenset({"rw"}), no_rw)
    if found is not None:
        return "G-single", found
    found = shortest(frozenset({"rw"}), everything)
    if found is not None:
        return "G2", found
    return None


def _cycles(graph: _Graph, txns: dict[int, _Txn], anomalies: list[Anomaly]) -> None:
    for component in _components(graph):
        found = _cycle_in(graph, component)
        if found is None:
            continue
        name, cycle = found
        if any(e.type == "rt" for e in cycle):
            name += "-realtime"
        ops = [txns[e.source].op for e in cycle]
        names = {op.index: f"T{n + 1}" for n, op in enumerate(ops)}
        edges = [
            Edge(
                e.source,
                e.target,
                e.type,
                e.why.replace("T(a)", names[e.source]).replace("T(b)", names[e.target]),
            )
            for e in cycle
        ]
        anomalies.append(Anomaly(name, ops, edges))


# ----------------------------------------------------------------------
# The check


def check_serializable(
    history: History | Iterable[Op], *, kind: Kind | None = None, realtime: bool = False
) -> Serializability:
    """Look for anomalies in a history of transactions (see the module docstring).

    *kind*: ``"list-append"`` or ``"rw-register"`` (None: from the
    micro-operations). *realtime*: also order transactions by real time
    (strict serializability). The result is truthy when no anomaly was found.
    """
    txns = _transactions(history)
    if kind is None:
        kind = _kind_of(txns)
    elif kind not in ("list-append", "rw-register"):
        raise ValueError(f"kind must be 'list-append' or 'rw-register', not {kind!r}")
    graph = _Graph()
    anomalies: list[Anomaly] = []
    if kind == "list-append":
        _infer_append(txns, graph, anomalies)
    else:
        _infer_register(txns, graph, anomalies)
    if realtime:
        _realtime(txns, graph)
    by_index = {t.op.index: t for t in txns}
    _cycles(graph, by_index, anomalies)
    unique: dict[tuple[str, tuple[int, ...], str], Anomaly] = {}
    for anomaly in anomalies:
        unique.setdefault(
            (anomaly.name, tuple(op.index for op in anomaly.txns), anomaly.why), anomaly
        )
    return Serializability(
        kind=kind,
        transactions=len(txns),
        edges=dict(graph.counts),
        anomalies=list(unique.values()),
        realtime=realtime,
    )


__all__ = [
    "Anomaly",
    "Edge",
    "NotSerializable",
    "Serializability",
    "check_serializable",
    "txn_words",
]
