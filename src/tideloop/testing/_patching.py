"""Patches: replacing a process-wide function or class for a simulated run, and back.

Layer: testing (below ``_world``, which uses it; of tideloop's, imports
only ``_blockbuster``'s test for blockbuster's wrapper). A simulated run
makes some of the process's shared names simulated: ``time.time``,
``datetime.datetime``, and with a simulated disk
``open`` and ``os``'s file calls (``_world.seeded_globals``). Setting the
module's attribute reaches code that looks the name up when it runs
(``time.time()``, ``os.rename(...)``); code that took its own reference at
import does not see it:

- ``from datetime import datetime`` binds a module global;
- ``sync_open = open`` (aiofiles), ``_stat = os.stat``: the same;
- ``rename = wrap(os.rename)`` (aiofiles.os): a module-level function that
  holds the real one in its closure;
- ``scandir = staticmethod(os.scandir)`` in a class body (``glob``'s
  globber, which ``pathlib.Path.glob`` uses on 3.13);
- any of those holding blockbuster's checking wrapper around the real call,
  taken while some activation of blockbuster was on, even one undone since.

`Patches.everywhere` replaces those too: every module-level global of the
loaded modules bound to a replaced object, the closure cells of their
module-level functions that hold one, and the attributes (plain or static
methods) of the classes they define, except in tideloop's own modules
(which keep the real ones: tideloop reads real time where it needs it) and
in the modules that own the names (patched as attributes). Not reached:
references held in nested classes, default arguments, instances, or taken
after the patch. Where each reference is found is remembered per module
(and looked for again when the module's namespace changes size), so a run
pays a lookup per module, not a scan.

Invariant: `Patches.undo` puts back exactly what was replaced, in reverse
order, and only where the replacement is still in place.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._blockbuster import is_checking_wrapper

#: Modules whose globals are never rewritten: the owners of the patched
#: names (patched as attributes) and tideloop's own.
_OWNERS = frozenset(
    {
        "builtins",
        "io",
        "_io",
        "_pyio",
        "os",
        "posix",
        "nt",
        "time",
        "datetime",
        "_datetime",
        "_pydatetime",
        "sys",
        "threading",
        "concurrent.futures.thread",
    }
)

#: module name -> (id of the module, size of its namespace when scanned,
#: the places found: ("global", name) or ("cell", function name, index)),
#: for the objects of `_SCANNED_FOR` only.
_PLACES: dict[str, tuple[int, int, list[tuple[str, str, int]]]] = {}
_SCANNED_FOR: set[int] = set()


def _checked_call(value: Any) -> Any:
    """What *value* calls, when it is blockbuster's checking wrapper around a
    function; else None.

    blockbuster wraps ``os.mkdir`` afresh at each activation, and a module
    that took ``os.mkdir`` while an earlier activation was on (``aiofiles.os``:
    ``mkdir = wrap(os.mkdir)``) keeps that wrapper after it is undone. It is
    a reference to the real call all the same, and is replaced as one. Only
    blockbuster's wrapper is looked into: other wrappers (``functools.wraps``,
    aiofiles' own coroutine functions) do something of their own.
    """
    if not isinstance(value, types.FunctionType) or not value.__closure__:
        return None
    code = value.__code__
    if not is_checking_wrapper(code) or "func" not in code.co_freevars:
        return None
    try:
        return value.__closure__[code.co_freevars.index("func")].cell_contents
    except ValueError:  # an empty cell
        return None


def _unwrapped(value: Any) -> Iterator[Any]:
    """*value*, then what it calls through blockbuster's wrappers (a few deep)."""
    for _ in range(4):
        yield value
        value = _checked_call(value)
        if value is None:
            return


def _pair_for(value: Any, replacements: Mapping[int, tuple[Any, Any]]) -> tuple[Any, Any] | None:
    """(real, simulated) for *value*: the real object itself, or a blockbuster
    wrapper around it."""
    for held in _unwrapped(value):
        pair = replacements.get(id(held))
        if pair is not None and pair[0] is held:
            return pair
    return None


def _holds_target(value: Any, targets: set[int]) -> bool:
    return any(id(held) in targets for held in _unwrapped(value))


def _own_module(name: str) -> bool:
    return name in _OWNERS or name == "tideloop" or name.startswith("tideloop.")


def _scan(module: types.ModuleType, targets: set[int]) -> list[tuple[str, str, int]]:
    places: list[tuple[str, str, int]] = []
    try:
        namespace = vars(module)
    except TypeError:
        return places
    for name, value in list(namespace.items()):
        if _holds_target(value, targets):
            places.append(("global", name, -1))
        elif isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
            for attribute, member in list(vars(value).items()):
                held = member.__func__ if isinstance(member, staticmethod) else member
                if _holds_target(held, targets):
                    places.append(("class", f"{name}.{attribute}", -1))
        elif isinstance(value, types.FunctionType) and value.__closure__:
            for index, cell in enumerate(value.__closure__):
                try:
                    content = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if _holds_target(content, targets):
                    places.append(("cell", name, index))
    return places


class Patches:
    """Replacements made for a run, undone by `undo`."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def attribute(self, owner: Any, name: str, value: Any) -> None:
        """Set *owner*.*name* to *value* until `undo`."""
        saved = getattr(owner, name)
        setattr(owner, name, value)

        def restore() -> None:
            if getattr(owner, name, None) is value:
                setattr(owner, name, saved)

        self._undo.append(restore)

    def on_undo(self, undo: Callable[[], None]) -> None:
        """Call *undo* when `undo` gets to this point (in reverse order)."""
        self._undo.append(undo)

    def everywhere(
        self,
        replacements: Mapping[int, tuple[Any, Any]],
        *,
        skip: Callable[[str], bool] | None = None,
    ) -> int:
        """Replace each real object (by id: (real, simulated)) where loaded
        modules hold it (see the module docstring), except in the modules
        whose name *skip* is true for; returns the count."""
        targets = set(replacements)
        if not targets <= _SCANNED_FOR:
            # New objects to look for: every module is scanned afresh.
            _SCANNED_FOR.update(targets)
            _PLACES.clear()
        every = set(_SCANNED_FOR)
        count = 0
        for module_name, module in list(sys.modules.items()):
            if module is None or _own_module(module_name):
                continue
            if skip is not None and skip(module_name):
                continue
            try:
                size = len(vars(module))
            except TypeError:
                continue
            known = _PLACES.get(module_name)
            if known is None or known[0] != id(module) or known[1] != size:
                known = (id(module), size, _scan(module, every))
                _PLACES[module_name] = known
            for kind, name, index in known[2]:
                count += self._replace(module, kind, name, index, replacements)
        return count

    def _replace(
        self,
        module: types.ModuleType,
        kind: str,
        name: str,
        index: int,
        replacements: Mapping[int, tuple[Any, Any]],
    ) -> int:
        namespace = vars(module)
        if kind == "class":
            return self._replace_member(namespace, name, replacements)
        value = namespace.get(name)
        if kind == "global":
            pair = _pair_for(value, replacements)
            if pair is None:
                return 0
            fake = pair[1]
            namespace[name] = fake

            def restore_global() -> None:
                if namespace.get(name) is fake:
                    namespace[name] = value

            self._undo.append(restore_global)
            return 1
        if not isinstance(value, types.FunctionType) or not value.__closure__:
            return 0
        cells = value.__closure__
        if index >= len(cells):
            return 0
        cell = cells[index]
        try:
            content = cell.cell_contents
        except ValueError:
            return 0
        pair = _pair_for(content, replacements)
        if pair is None:
            return 0
        fake = pair[1]
        cell.cell_contents = fake

        def restore_cell() -> None:
            try:
                if cell.cell_contents is fake:
                    cell.cell_contents = content
            except ValueError:
                pass

        self._undo.append(restore_cell)
        return 1

    def _replace_member(
        self, namespace: dict[str, Any], name: str, replacements: Mapping[int, tuple[Any, Any]]
    ) -> int:
        class_name, _, attribute = name.partition(".")
        cls = namespace.get(class_name)
        if not isinstance(cls, type):
            return 0
        member = vars(cls).get(attribute)
        static = isinstance(member, staticmethod)
        held = member.__func__ if isinstance(member, staticmethod) else member
        pair = _pair_for(held, replacements)
        if pair is None:
            return 0
        # A built-in function is no descriptor; a Python function put in its
        # place would bind to instances: keep it unbound.
        unbound = isinstance(held, types.BuiltinFunctionType) and isinstance(
            pair[1], types.FunctionType
        )
        fake = staticmethod(pair[1]) if static or unbound else pair[1]
        try:
            setattr(cls, attribute, fake)
        except (TypeError, AttributeError):
            return 0  # an immutable (built-in) class

        def restore_member() -> None:
            if vars(cls).get(attribute) is fake:
                setattr(cls, attribute, member)

        self._undo.append(restore_member)
        return 1

    def undo(self) -> None:
        """Put back everything replaced, last first."""
        while self._undo:
            self._undo.pop()()


__all__ = ["Patches"]
