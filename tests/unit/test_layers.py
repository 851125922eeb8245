"""The layering rules of ``docs/architecture.md``, checked on the source.

1. Imports flow one way: pollers <- core <- fd I/O <- signals, transports <-
   net <- the top (`_loop`, `_runner`, ...). Each package may import only the
   packages listed for it in `ALLOWED`.
2. No upward calls through ``self``: `Loop` is `CoreLoop` plus stateless
   method groups. Every attribute a group (or the core) uses on ``self``
   must be defined by the class itself, by one of its bases, or be a public
   asyncio method implemented in a layer it may import. A lower layer that
   calls up (``self._make_socket_transport()`` from the fd layer, say) fails
   here even though no import shows it.
3. No hooks: no two classes of Loop's MRO define the same name (an override
   would be a hook for a higher layer), no group has ``__init__`` or assigns
   instance state, and no ``raise NotImplementedError`` stands in for a
   method some higher layer provides.
4. The MRO is the one `_loop.py`'s docstring documents.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import tideloop
from tideloop._core.run import CoreLoop

SRC = Path(tideloop.__file__).parent

ALLOWED: dict[str, set[str]] = {
    "_pollers": set(),
    "_core": {"_pollers"},
    "_fdio": {"_core", "_pollers"},
    "_signals": {"_fdio", "_core", "_pollers"},
    "_transports": {"_fdio", "_core", "_pollers"},
    "_net": {"_transports", "_fdio", "_core", "_pollers"},
}
TOP = {"_loop", "_runner", "__init__", "__main__", "demo", "testing", "_version", "_stats"}

#: ``raise NotImplementedError`` sites allowed in src, by module: features of
#: asyncio's API that are not built yet. The list only shrinks.
NOT_BUILT_YET: dict[str, int] = {}
#: ... and where asyncio's own API raises it, so we do too.
ASYNCIO_RAISES: dict[str, int] = {
    "_transports/tls.py": 1,  # write_eof(): TLS transports refuse half-close
    # A write pipe's pause_reading/resume_reading/is_reading, as asyncio's
    # (its write pipe transport is a ReadTransport that does not read).
    "_transports/pipes.py": 3,
}


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(("tideloop", *path.relative_to(SRC).parent.parts))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                names = [".".join([*base, node.module] if node.module else base)]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tideloop" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_module_is_in_a_known_layer() -> None:
    for path in SRC.rglob("*.py"):
        layer = layer_of(path)
        assert layer in ALLOWED or layer in TOP, f"{path}: unknown layer {layer!r}"


def test_imports_flow_downward() -> None:
    violations = [
        f"{path.relative_to(SRC)} imports {target}"
        for path in sorted(SRC.rglob("*.py"))
        if layer_of(path) not in TOP
        for target in imported_layers(path) - {layer_of(path)}
        if target not in ALLOWED[layer_of(path)]
    ]
    assert not violations, "\n".join(violations)


def test_the_import_checker_sees_relative_imports() -> None:
    # A guard against the check silently passing: these modules do import
    # lower layers, relatively or not.
    assert "_core" in imported_layers(SRC / "_fdio" / "registry.py")
    assert "_fdio" in imported_layers(SRC / "_transports" / "stream.py")


# ----------------------------------------------------------------------
# The Loop's classes


def loop_classes() -> list[type]:
    """Loop's MRO, tideloop's classes only (asyncio's bases and object excluded)."""
    return [c for c in tideloop.Loop.__mro__ if c.__module__.startswith("tideloop.")]


def layer_of_class(cls: type) -> str:
    parts = cls.__module__.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def may_use(user: str, provider: str) -> bool:
    """May code in layer *user* depend on code in layer *provider*?"""
    if user in TOP or user == provider:
        return True
    return provider in ALLOWED.get(user, set())


def defines(cls: type, name: str) -> bool:
    return name in vars(cls) or name in vars(cls).get("__annotations__", {})


def self_attributes(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(name, line, is_store) for every ``self.<name>`` in *tree*."""
    return [
        (node.attr, node.lineno, isinstance(node.ctx, ast.Store))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ]


def source_of(cls: type, method: str | None = None) -> str:
    """The source of *cls* (or of its *method*)."""
    return inspect.getsource(cls if method is None else vars(cls)[method])


def core_instance_attributes() -> set[str]:
    tree = ast.parse(textwrap.dedent(source_of(CoreLoop, "__init__")))
    return {name for name, _, store in self_attributes(tree) if store}


PUBLIC_API = {name for name in vars(asyncio.AbstractEventLoop) if not name.startswith("_")}


def upward_uses(cls: type, tree: ast.AST, mro: list[type]) -> list[str]:
    """The ``self.X`` uses in *cls*'s source *tree* that break rule 2."""
    problems = []
    layer = layer_of_class(cls)
    own_bases = [c for c in cls.__mro__ if c.__module__.startswith("tideloop.")]
    core_attrs = core_instance_attributes()
    for name, line, store in self_attributes(tree):
        if store and cls is not CoreLoop and cls is not tideloop.Loop:
            problems.append(f"{cls.__name__}:{line} assigns self.{name}: groups hold no state")
            continue
        if any(defines(c, name) for c in own_bases) or name in core_attrs:
            continue
        if name in PUBLIC_API or name in vars(asyncio.AbstractEventLoop):
            provider = next((c for c in mro if name in vars(c)), None)
            if provider is None or may_use(layer, layer_of_class(provider)):
                continue
            problems.append(
                f"{cls.__name__}:{line} calls self.{name}, provided by "
                f"{provider.__name__} ({layer_of_class(provider)}), above {layer}"
            )
            continue
        if hasattr(object, name) or name in vars(asyncio.AbstractEventLoop):
            continue
        provider = next((c for c in mro if defines(c, name)), None)
        where = f"{provider.__name__} ({layer_of_class(provider)})" if provider else "nobody"
        problems.append(
            f"{cls.__name__}:{line} uses self.{name}, defined by {where}, "
            f"which is not {cls.__name__} or one of its bases"
        )
    return problems


def class_tree(cls: type) -> ast.AST:
    return ast.parse(textwrap.dedent(source_of(cls)))


def test_the_mro_is_the_documented_one() -> None:
    doc = tideloop._loop.__doc__ or ""
    block = doc[doc.index("    Loop ") : doc.index("`CoreLoop` is the only")]
    documented = re.findall(r"^    (\w+)\s", block, re.MULTILINE)
    assert documented == [c.__name__ for c in loop_classes()]


def test_only_core_and_loop_have_init() -> None:
    with_init = [c.__name__ for c in loop_classes() if "__init__" in vars(c)]
    assert with_init == ["Loop", "CoreLoop"]


def test_no_class_of_the_loop_overrides_another() -> None:
    seen: dict[str, str] = {}
    clashes = []
    for cls in loop_classes():
        for name, value in vars(cls).items():
            if name.startswith("__") and name.endswith("__"):
                continue
            if not callable(value) and not isinstance(value, (property, staticmethod)):
                continue
            if name in seen:
                clashes.append(f"{name}: {seen[name]} and {cls.__name__}")
            seen[name] = cls.__name__
    assert not clashes, "\n".join(clashes)


def test_no_upward_calls_through_self() -> None:
    mro = list(tideloop.Loop.__mro__)
    problems = [
        problem
        for cls in loop_classes()
        if cls is not tideloop.Loop
        for problem in upward_uses(cls, class_tree(cls), mro)
    ]
    assert not problems, "\n".join(problems)


PLANTED = """
class SockMethods:
    async def sock_recv(self, sock, n):
        # an fd-layer method calling up into the net layer's servers
        self.create_server(None)
        return self._start_serving(None, sock)
"""


def test_a_planted_upward_call_is_caught() -> None:
    from tideloop._fdio.sock import SockMethods

    problems = upward_uses(SockMethods, ast.parse(PLANTED), list(tideloop.Loop.__mro__))
    assert len(problems) == 2, problems
    assert "calls self.create_server, provided by ServerMethods (_net), above _fdio" in problems[0]
    assert "uses self._start_serving, defined by ServerMethods (_net)" in problems[1]


def test_a_planted_stateful_group_is_caught() -> None:
    from tideloop._net.server import ServerMethods

    planted = "class ServerMethods:\n    def f(self):\n        self._cache = {}\n"
    problems = upward_uses(ServerMethods, ast.parse(planted), list(tideloop.Loop.__mro__))
    assert problems == ["ServerMethods:3 assigns self._cache: groups hold no state"]


# ----------------------------------------------------------------------
# No stand-ins for code that lives elsewhere


def not_implemented_raises(path: Path) -> int:
    tree = ast.parse(path.read_text(), str(path))
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                count += 1
    return count


def test_not_implemented_only_for_features_not_built_yet() -> None:
    found = {
        str(path.relative_to(SRC)): n
        for path in sorted(SRC.rglob("*.py"))
        if (n := not_implemented_raises(path))
    }
    allowed = {**NOT_BUILT_YET, **ASYNCIO_RAISES}
    assert found == {path: n for path, n in allowed.items() if (SRC / path).exists()}


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_any_typed_loop_references(path: Path) -> None:
    """A component or transport names the loop by a real type, never ``Any``."""
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        target: ast.expr | None = None
        annotation: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, annotation = node.target, node.annotation
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotation = node.annotation
            target = ast.Name(id=node.arg)
        if target is None or annotation is None:
            continue
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("loop", "_loop") and ast.unparse(annotation) in ("Any", "typing.Any"):
            bad.append(f"line {node.lineno}: {name}: Any")
    assert not bad, bad
