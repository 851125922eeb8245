"""Imports flow one way: pollers <- core <- fd I/O <- transports <- net <- the Loop.

Checked on the source (AST), so a violation fails CI before it can become a
cycle. Each package may import only the packages listed for it; the top
level (`_loop`, `_runner`, `__init__`, `__main__`, `demo`, `testing`) may
import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tideloop

SRC = Path(tideloop.__file__).parent

ALLOWED: dict[str, set[str]] = {
    "_pollers": set(),
    "_core": {"_pollers"},
    "_fdio": {"_core", "_pollers"},
    "_signals": {"_fdio", "_core", "_pollers"},
    "_transports": {"_fdio", "_core", "_pollers"},
    "_net": {"_transports", "_fdio", "_core", "_pollers"},
}
TOP = {"_loop", "_runner", "__init__", "__main__", "demo", "testing", "_version"}


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


def test_the_checker_sees_relative_imports() -> None:
    # A guard against the check silently passing: the core's run module does
    # import the pollers, relatively or not.
    assert "_pollers" in imported_layers(SRC / "_core" / "run.py")
    assert "_core" in imported_layers(SRC / "_fdio" / "registry.py")
