"""Sequential specifications that `check_linearizable` checks a history against.

Layer: testing (imports only ``_history``). A *model* says what one object
does when its operations run one at a time; a history is linearizable
when some order of its operations, consistent with real time, makes every
operation return what the model says.

The models here:

- `Register` (``write`` v, ``read``, ``cas`` (old, new) -> bool);
- `KeyValue` (``put`` (k, v), ``get`` k, ``delete`` k, ``cas`` (k, old, new)
  -> bool), checked key by key (P-compositionality: a map is linearizable
  exactly when each key is);
- `Set` (``add`` v, ``remove`` v, ``read`` -> the elements);
- `Queue`, FIFO (``enqueue`` v, ``dequeue`` -> the head, or *empty*).

A result of `UNKNOWN` (an operation completed with ``history.unknown``)
matches whatever the model would return.

**Your own model** is any object with these methods (subclass `Model` to
get the optional ones):

- ``init() -> state``: the initial state. States must be hashable and
  compare equal when they behave the same (the checker remembers the
  (set of operations done, state) pairs it has tried);
- ``step(state, name, arg, result) -> (legal, new_state)``: whether
  operation *name* with *arg* may return *result* in *state*, and the state
  after it. Never mutate *state*;
- optional ``read_only(name, arg) -> bool``: the operation never changes the
  state (then one whose outcome is unknown is left out of the check);
- optional ``partition(ops) -> {key: [ops]}`` and ``for_partition(key) ->
  model``: split a history into independent parts checked one by one, each
  with its own model (`KeyValue` splits by key);
- optional ``describe_state(state) -> str``, for reports.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ._history import UNKNOWN, Op

__all__ = ["UNKNOWN", "KeyValue", "Model", "Queue", "Register", "Set", "Spec"]


@runtime_checkable
class Spec(Protocol):
    """What `check_linearizable` needs of a model (see the module docstring)."""

    def init(self) -> Hashable: ...

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]: ...


class Model:
    """A base for models: the optional methods, with defaults (no partitions,
    nothing read-only, states described by ``repr``)."""

    #: The model's name in reports.
    name = "model"

    def init(self) -> Hashable:
        raise TypeError(f"{type(self).__name__} must define init()")

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        raise TypeError(f"{type(self).__name__} must define step()")

    def read_only(self, name: str, arg: Any) -> bool:
        return False

    def partition(self, ops: Sequence[Op]) -> Mapping[Hashable, Sequence[Op]] | None:
        return None

    def for_partition(self, key: Hashable) -> Spec:
        return self

    def describe_state(self, state: Any) -> str:
        return repr(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _unsupported(self, name: str) -> ValueError:
        return ValueError(f"{type(self).__name__} has no operation {name!r}")


class Register(Model):
    """One value: ``write`` v (result ignored), ``read`` (returns the value),
    ``cas`` (old, new) (returns whether the value was *old*, and then sets
    *new*). It starts as *initial*."""

    name = "Register"

    def __init__(self, initial: Hashable = None) -> None:
        self.initial = initial

    def init(self) -> Hashable:
        return self.initial

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        if name == "write":
            return True, arg
        if name == "read":
            return result is UNKNOWN or result == state, state
        if name == "cas":
            old, new = arg
            if result is UNKNOWN:
                return True, new if state == old else state
            if result:
                return state == old, new
            return state != old, state
        raise self._unsupported(name)

    def read_only(self, name: str, arg: Any) -> bool:
        return name == "read"

    def describe_state(self, state: Any) -> str:
        return f"the value is {state!r}"

    def __repr__(self) -> str:
        return f"Register(initial={self.initial!r})"


class _Map:
    """An immutable mapping (a `KeyValue` state when checked as a whole)."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: dict[Hashable, Hashable]) -> None:
        self.items = items
        self._hash: int | None = None

    def set(self, key: Hashable, value: Hashable) -> _Map:
        items = dict(self.items)
        items[key] = value
        return _Map(items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Map) and self.items == other.items

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self.items.items()))
        return self._hash

    def __repr__(self) -> str:
        return repr(self.items)


class _KeyRegister(Model):
    """One key of a `KeyValue`: its operations on that key, as a register."""

    def __init__(self, kv: KeyValue, key: Hashable) -> None:
        self.kv = kv
        self.key = key
        self.name = f"KeyValue, key {key!r}"

    def init(self) -> Hashable:
        return self.kv.initial

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        return self.kv.step_value(state, name, arg, result)

    def read_only(self, name: str, arg: Any) -> bool:
        return self.kv.read_only(name, arg)

    def describe_state(self, state: Any) -> str:
        return f"{self.key!r} is {state!r}"


class KeyValue(Model):
    """A map: ``put`` (k, v), ``get`` k (returns the value, *initial* for a key
    never put), ``delete`` k (back to *initial*), ``cas`` (k, old, new)
    (returns whether the value was *old*, and then sets *new*). Checked key
    by key: each key's operations are a register's."""

    name = "KeyValue"

    def __init__(self, initial: Hashable = None) -> None:
        self.initial = initial

    @staticmethod
    def key_of(name: str, arg: Any) -> Hashable:
        if name in ("get", "delete"):
            return arg  # type: ignore[no-any-return]
        if name in ("put", "cas"):
            return arg[0]  # type: ignore[no-any-return]
        raise ValueError(f"KeyValue has no operation {name!r}")

    def step_value(self, value: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        """An operation on one key whose value is *value*."""
        if name == "put":
            return True, arg[1]
        if name == "get":
            return result is UNKNOWN or result == value, value
        if name == "delete":
            return True, self.initial
        if name == "cas":
            _, old, new = arg
            if result is UNKNOWN:
                return True, new if value == old else value
            if result:
                return value == old, new
            return value != old, value
        raise self._unsupported(name)

    def init(self) -> Hashable:
        return _Map({})

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        key = self.key_of(name, arg)
        value = state.items.get(key, self.initial)
        legal, new = self.step_value(value, name, arg, result)
        if not legal or new == value:
            return legal, state
        return True, state.set(key, new)

    def read_only(self, name: str, arg: Any) -> bool:
        return name == "get"

    def partition(self, ops: Sequence[Op]) -> Mapping[Hashable, Sequence[Op]]:
        parts: dict[Hashable, list[Op]] = {}
        for op in ops:
            parts.setdefault(self.key_of(op.name, op.arg), []).append(op)
        return parts

    def for_partition(self, key: Hashable) -> Spec:
        return _KeyRegister(self, key)

    def describe_state(self, state: Any) -> str:
        return f"the map is {state!r}"

    def __repr__(self) -> str:
        return f"KeyValue(initial={self.initial!r})"


class Set(Model):
    """A set: ``add`` v, ``remove`` v (results ignored), ``read`` (returns the
    elements, as any iterable: compared as a set)."""

    name = "Set"

    def init(self) -> Hashable:
        return frozenset()

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        if name == "add":
            return True, state | {arg}
        if name == "remove":
            return True, state - {arg}
        if name == "read":
            return result is UNKNOWN or frozenset(result) == state, state
        raise self._unsupported(name)

    def read_only(self, name: str, arg: Any) -> bool:
        return name == "read"

    def describe_state(self, state: Any) -> str:
        return "the set is {" + ", ".join(sorted(map(repr, state))) + "}"


class Queue(Model):
    """A FIFO queue: ``enqueue`` v (result ignored), ``dequeue`` (returns the
    oldest element and removes it; *empty* when there is none)."""

    name = "Queue"

    def __init__(self, empty: Hashable = None) -> None:
        self.empty = empty

    def init(self) -> Hashable:
        return ()

    def step(self, state: Any, name: str, arg: Any, result: Any) -> tuple[bool, Hashable]:
        if name == "enqueue":
            return True, (*state, arg)
        if name == "dequeue":
            if not state:
                return result is UNKNOWN or result == self.empty, state
            return result is UNKNOWN or result == state[0], state[1:]
        raise self._unsupported(name)

    def describe_state(self, state: Any) -> str:
        return "the queue is [" + ", ".join(map(repr, state)) + "] (head first)"

    def __repr__(self) -> str:
        return f"Queue(empty={self.empty!r})"
