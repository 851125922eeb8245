"""check_linearizable: histories, models, both searches, and the counterexample.

tideloop.testing's own API (nothing in the stdlib to compare with). The
search is checked against a brute-force oracle (every order of every
subset) on thousands of small random histories, for every model, with
failed, unknown and pending operations; the counterexample is checked to be
a violation that is 1-minimal and that no single other operation rescues.
Speed is not asserted here (``bench/linearizability.py`` measures it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from typing import Any

import pytest

from tideloop import testing
from tideloop.testing import (
    UNKNOWN,
    History,
    NotLinearizable,
    Op,
    check_linearizable,
)
from tideloop.testing.models import KeyValue, Model, Queue, Register, Set


def brute_force(
    ops: list[Op], model: Any, *, late: frozenset[int] = frozenset(), drop: int = -1
) -> bool:
    """Whether some order of the operations respects real time and the model
    (the definition, by enumeration). Failed operations are left out; unknown
    and pending ones, and those in *late* (by index, keeping their results),
    may take effect any time after their invocation or never; the one at
    index *drop* may take effect within its interval, or never."""
    taken = [op for op in ops if op.status != "fail"]

    def is_late(op: Op) -> bool:
        return op.status != "ok" or op.index in late

    def before(a: Op, b: Op) -> bool:
        return not is_late(a) and a.precedes(b)

    maybe = [op for op in taken if is_late(op) or op.index == drop]
    sure = [op for op in taken if op not in maybe]
    for k in range(len(maybe) + 1):
        for extra in itertools.combinations(maybe, k):
            chosen = sure + list(extra)
            for order in itertools.permutations(chosen):
                if any(before(b, a) for x, a in enumerate(order) for b in order[x + 1 :]):
                    continue
                state = model.init()
                for op in order:
                    result = op.result if op.status == "ok" else UNKNOWN
                    legal, state = model.step(state, op.name, op.arg, result)
                    if not legal:
                        break
                else:
                    return True
    return False


def random_history(rng: random.Random, kind: str, n: int) -> History:
    """A small random history: random intervals, random (often wrong) results."""
    history = History()
    values = [1, 2, 3]
    for _ in range(n):
        start = rng.randrange(0, 12)
        end = start + rng.randrange(0, 5)
        client = f"c{rng.randrange(3)}"
        status = rng.choices(["ok", "fail", "unknown", "pending"], [8, 1, 1, 1])[0]
        if kind == "register":
            name = rng.choice(["write", "read", "cas"])
            arg: Any = (
                rng.choice(values)
                if name == "write"
                else None
                if name == "read"
                else (rng.choice([None, *values]), rng.choice(values))
            )
            result: Any = (
                None
                if name == "write"
                else rng.choice([None, *values])
                if name == "read"
                else rng.choice([True, False])
            )
        elif kind == "kv":
            name = rng.choice(["put", "get", "get", "delete"])
            key = rng.choice("xy")
            arg = (key, rng.choice(values)) if name == "put" else key
            result = rng.choice([None, *values]) if name == "get" else None
        elif kind == "set":
            name = rng.choice(["add", "add", "read", "remove"])
            arg = rng.choice(values) if name != "read" else None
            result = frozenset(rng.sample(values, rng.randrange(0, 3))) if name == "read" else None
        else:
            name = rng.choice(["enqueue", "dequeue"])
            arg = rng.choice(values) if name == "enqueue" else None
            result = rng.choice([None, *values]) if name == "dequeue" else None
        history.add(client, name, arg, result, start, end, status)
    # Events must be recorded in time order for sequence numbers to agree with
    # times: add() numbers them in call order, so rebuild in time order.
    return _in_time_order(history)


def _in_time_order(history: History) -> History:
    events = []
    for op in history.ops:
        events.append((op.invoked_at, 0, op))
        if op.status != "pending":
            events.append((op.completed_at, 1, op))
    events.sort(key=lambda e: (e[0], e[1], e[2].index))
    rebuilt = History()
    made: dict[int, Op] = {}
    for at, kind, op in events:
        if kind == 0:
            made[op.index] = rebuilt.invoke(op.client, op.name, op.arg, at=at)
        elif op.status == "ok":
            rebuilt.ok(made[op.index], op.result, at=at)
        elif op.status == "fail":
            rebuilt.fail(made[op.index], at=at)
        else:
            rebuilt.unknown(made[op.index], at=at)
    return rebuilt


MODELS = {"register": Register(), "kv": KeyValue(), "set": Set(), "queue": Queue()}


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_both_searches_agree_with_brute_force(kind: str) -> None:
    model = MODELS[kind]
    rng = random.Random(f"lin:{kind}")
    verdicts = {True: 0, False: 0}
    for _ in range(400):
        history = random_history(rng, kind, rng.randrange(1, 7))
        expected = brute_force(history.ops, model)
        verdicts[expected] += 1
        for options in (
            {"algorithm": "wgl"},
            {"algorithm": "wgl", "partition": False},
            {"algorithm": "wg"},
        ):
            got = check_linearizable(history, model, minimize=False, **options)  # type: ignore[arg-type]
            assert got.ok is expected, (options, history.words(), got.words())
    # The generator makes both kinds (the test would be empty otherwise).
    assert verdicts[True] > 40 and verdicts[False] > 40, verdicts


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_the_counterexample_is_a_minimal_violation(kind: str) -> None:
    model = MODELS[kind]
    rng = random.Random(f"min:{kind}")
    checked = 0
    while checked < 60:
        history = random_history(rng, kind, rng.randrange(2, 7))
        result = check_linearizable(history, model)
        if result.ok:
            continue
        checked += 1
        example = result.counterexample
        assert example is not None and example.minimal
        ops = example.ops
        part = _part_model(model, example)
        late = frozenset(op.index for op in example.in_flight)
        history_ops = [op for op in history.ops if op.name and _in_part(model, example, op)]
        # The operations, by themselves (those still in flight at the
        # violation may have taken effect later, or never), admit no order...
        assert not brute_force(ops, part, late=late), example.words()
        # ...and no other single operation of the history rescues them...
        for other in history_ops:
            if other not in ops:
                assert not brute_force([*ops, other], part, late=late, drop=other.index), (
                    other.index,
                    example.words(),
                )
        # ...and each is needed: without it the rest can be ordered, or
        # another operation would let them be.
        for op in ops:
            if op in example.sources:
                continue  # not needed: where the stuck operation's result came from
            rest = [o for o in ops if o is not op]
            assert brute_force(rest, part, late=late) or any(
                brute_force([*rest, other], part, late=late, drop=other.index)
                for other in history_ops
                if other not in rest
            ), (op.index, example.words())
        # Its furthest order is a legal run of the model, and the stuck
        # operation is one of them.
        assert example.stuck is None or example.stuck in ops
        assert len(example.order) == len(example.states)


def _in_part(model: Any, example: Any, op: Op) -> bool:
    if example.partition is None:
        return True
    return bool(model.key_of(op.name, op.arg) == example.partition)


def _part_model(model: Any, example: Any) -> Any:
    return model.for_partition(example.partition) if example.partition is not None else model


def test_a_stale_read_is_named_with_the_writes_that_make_it_stale() -> None:
    history = History()
    history.add("c1", "put", ("x", 1), None, 0.0, 1.0)
    history.add("c2", "put", ("y", 7), None, 0.5, 1.5)
    history.add("c1", "put", ("x", 2), None, 2.0, 3.0)
    history.add("c3", "get", "y", 7, 3.5, 3.8)
    history.add("c3", "get", "x", 1, 4.0, 5.0)
    result = check_linearizable(history, KeyValue())
    assert not result and result.ok is False
    example = result.counterexample
    assert example is not None and example.partition == "x"
    assert [op.index for op in example.ops] == [0, 2, 4]
    assert [op.index for op in example.order] == [0, 2]
    assert example.stuck is not None and example.stuck.index == 4
    words = str(result)
    assert words.startswith("not linearizable under KeyValue, key 'x': no order of these 3")
    assert "#0 completed before #2 began; #2 completed before #4 began" in words
    source = "[not needed for the violation: where a result came from]"
    assert f"#0 c1: put('x', 1) ok, from 0 to 1 {source}" in words
    assert "then #4 get('x') -> 1 must take effect before it completed at 5, and cannot" in words
    with pytest.raises(NotLinearizable, match="key 'x'"):
        result.assert_ok()
    data = json.loads(json.dumps(result.to_json()))
    assert data["counterexample"]["order"] == [0, 2] and data["counterexample"]["stuck"] == 4
    assert data["counterexample"]["precedes"] == [[0, 2], [2, 4]]
    assert data["counterexample"]["sources"] == [0]


def test_a_concurrent_read_may_see_either_value() -> None:
    history = History()
    history.add("c1", "write", 1, None, 0.0, 1.0)
    history.add("c2", "write", 2, None, 2.0, 4.0)
    history.add("c3", "read", None, 1, 3.0, 3.5)  # overlaps the second write
    history.add("c3", "read", None, 2, 3.6, 5.0)
    result = check_linearizable(history, Register())
    assert result and result.ok is True and result.counterexample is None
    assert str(result).startswith("linearizable under Register: 4 operation(s)")
    result.assert_ok()


def test_unknown_operations_may_or_may_not_have_happened() -> None:
    # A write that timed out: a later read may see it, or not.
    for seen in (1, None):
        history = History()
        op = history.invoke("c1", "write", 1, at=0.0)
        history.unknown(op, TimeoutError("no reply"), at=1.0)
        history.add("c2", "read", None, seen, 5.0, 6.0)
        assert check_linearizable(history, Register())
    # A failed write did not happen: a read cannot see it.
    history = History()
    op = history.invoke("c1", "write", 1, at=0.0)
    history.fail(op, "refused", at=1.0)
    history.add("c2", "read", None, 1, 5.0, 6.0)
    result = check_linearizable(history, Register())
    assert result.ok is False
    assert "#0" not in str(result)  # the failed write is no part of it


def test_queue_and_set_violations_read_in_their_terms() -> None:
    history = History()
    history.add("p", "enqueue", "a", None, 0.0, 1.0)
    history.add("p", "enqueue", "b", None, 2.0, 3.0)
    history.add("c", "dequeue", None, "b", 4.0, 5.0)
    result = check_linearizable(history, Queue())
    assert result.ok is False
    assert "the queue is ['a', 'b'] (head first)" in str(result)

    history = History()
    history.add("w", "add", 1, None, 0.0, 1.0)
    history.add("r", "read", None, {2}, 2.0, 3.0)
    assert check_linearizable(history, Set()).ok is False
    history = History()
    history.add("w", "add", 1, None, 0.0, 1.0)
    history.add("r", "read", None, [1], 2.0, 3.0)
    assert check_linearizable(history, Set())


class Counter(Model):
    """A user-defined model: ``incr`` returns the new value, ``read`` the value."""

    name = "Counter"

    def init(self) -> int:
        return 0

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, int]:
        if name == "incr":
            return result is UNKNOWN or result == state + 1, state + 1
        if name == "read":
            return result is UNKNOWN or result == state, state
        raise ValueError(name)

    def read_only(self, name: str, arg: Any) -> bool:
        return name == "read"


class BareCounter:
    """The same model with only the two required methods (no base class)."""

    def init(self) -> int:
        return 0

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, int]:
        return Counter().step(state, name, arg, result)


@pytest.mark.parametrize("model", [Counter(), BareCounter()], ids=["subclass", "protocol"])
def test_user_defined_models(model: Any) -> None:
    history = History()
    history.add("a", "incr", None, 1, 0.0, 2.0)
    history.add("b", "incr", None, 2, 1.0, 3.0)  # concurrent: either order
    history.add("c", "read", None, 2, 4.0, 5.0)
    assert check_linearizable(history, model)
    history.add("d", "incr", None, 2, 6.0, 7.0)  # after 2 increments: must be 3
    result = check_linearizable(history, model)
    assert result.ok is False
    assert result.counterexample is not None and result.counterexample.stuck is not None
    assert result.counterexample.stuck.index == 3


def test_a_search_past_its_timeout_is_undecided() -> None:
    # Many concurrent writes and reads that no order explains: plain Wing-Gong
    # has to try every order of the writes before it gives up.
    history = History()
    for i in range(14):
        history.add(f"w{i}", "write", i, None, 0.0, 10.0)
    history.add("r", "read", None, 99, 11.0, 12.0)
    result = check_linearizable(history, Register(), algorithm="wg", timeout=0.05)
    assert result.ok is None and not result
    assert "undecided under Register: the search ran past its timeout of 0.05 s" in str(result)
    # WGL's cache decides it (the states merge).
    assert check_linearizable(history, Register()).ok is False


def test_history_records_times_and_order_from_the_running_loop() -> None:
    async def main() -> History:
        history = History()
        first = history.invoke("c1", "put", ("x", 1))
        await asyncio.sleep(0.5)
        history.ok(first)
        second = history.invoke("c2", "get", "x")  # same instant as first's completion
        history.ok(second, 1)
        third = history.invoke("c3", "get", "x")
        await asyncio.sleep(1)
        history.unknown(third, TimeoutError())
        return history

    history = testing.run(main(), virtual_time=True)
    first, second, third = history.ops
    assert (first.invoked_at, first.completed_at, second.invoked_at) == (0.0, 0.5, 0.5)
    assert first.precedes(second) and not second.precedes(first)
    assert not second.precedes(third) or second.completed_at == third.invoked_at
    assert third.status == "unknown" and third.result is UNKNOWN and third.error == "TimeoutError"
    assert "#2 c3: get('x') unknown (may have happened) (TimeoutError), from 0.5 to 1.5" in (
        history.words()
    )
    with pytest.raises(ValueError, match="completed already"):
        history.ok(first)
    loaded = History.from_json(json.loads(json.dumps(history.to_json())))
    assert [op.words() for op in loaded] == [op.words() for op in history]
    assert check_linearizable(loaded, KeyValue())


def test_history_record_classifies_outcomes() -> None:
    async def main() -> list[str]:
        history = History()

        async def value() -> int:
            await asyncio.sleep(0.1)
            return 5

        async def refused() -> int:
            raise PermissionError("read-only replica")

        async def hangs() -> int:
            await asyncio.sleep(10)
            return 0

        assert await history.record("c1", "get", "x", value()) == 5
        with pytest.raises(PermissionError):
            await history.record("c1", "put", ("x", 1), refused(), definite=(PermissionError,))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1):
                await history.record("c1", "put", ("x", 2), hangs())
        return [op.status for op in history]

    assert testing.run(main(), virtual_time=True) == ["ok", "fail", "unknown"]
