"""Review aid for `not_applicable.py`: what stdlib internals each upstream test touches.

    python tests/stdlib/audit.py [--python PY] MODULE [CLASS]

Parses the target Python's ``test_asyncio/MODULE.py`` (no import) and prints,
per test method, the stdlib internals it reaches for: ``mock.patch`` targets
under ``asyncio``, private attributes read or set on loop-like objects
(``self.loop._ready``, ``loop._selector``), and stdlib loop or transport
classes it constructs. It only points at candidates: every entry in the
not-applicable list is decided by reading the test, and a test that merely
*mentions* an internal may still be a valid test of behaviour.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

FIND_TESTS = "import os, test.test_asyncio as t; print(os.path.dirname(t.__file__))"

#: Constructors of stdlib loops and stdlib implementation classes.
STDLIB_NAMES = (
    "BaseEventLoop",
    "SelectorEventLoop",
    "BaseSelectorEventLoop",
    "_UnixSelectorEventLoop",
    "ProactorEventLoop",
    "TestLoop",
    "_SelectorSocketTransport",
    "_SelectorDatagramTransport",
    "_SelectorTransport",
    "_UnixReadPipeTransport",
    "_UnixWritePipeTransport",
    "BaseSubprocessTransport",
    "SSLProtocol",
)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return "?"


def findings(func: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name.endswith(("patch", "patch.object", "patch.dict")) and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    if first.value.startswith("asyncio"):
                        found.append(f"patch {first.value}")
                else:
                    found.append(f"patch.object {_dotted(first)}")
            last = name.rsplit(".", 1)[-1]
            if last in STDLIB_NAMES:
                found.append(f"builds {name}")
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            if attr.startswith("_") and not attr.startswith("__"):
                owner = _dotted(node.value)
                # ``self._helper`` is the test's own; loops and transports are ours.
                if "loop" in owner.lower() or owner in ("transport", "tr", "policy"):
                    found.append(f"private {owner}.{attr}")
    return sorted(set(found))


def audit(path: Path, only_class: str | None) -> dict[str, dict[str, list[str]]]:
    tree = ast.parse(path.read_text())
    report: dict[str, dict[str, list[str]]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        if only_class and cls.name != only_class:
            continue
        methods: dict[str, list[str]] = {}
        setup = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "setUp"]
        if setup:
            methods["(setUp)"] = findings(setup[0])
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                decorators = [f for d in item.decorator_list for f in findings(d)]
                # Module-level helpers such as ``@patch_socket`` hide the target.
                decorators += [
                    f"decorated @{_dotted(d)}"
                    for d in item.decorator_list
                    if isinstance(d, (ast.Name, ast.Attribute)) and "patch" in _dotted(d)
                ]
                methods[item.name] = sorted(set(findings(item) + decorators))
        report[cls.name] = methods
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module")
    parser.add_argument("cls", nargs="?")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    test_dir = subprocess.run(
        [args.python, "-c", FIND_TESTS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    result = audit(Path(test_dir) / f"{args.module}.py", args.cls)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for cls, methods in result.items():
        print(f"{args.module}.{cls}")
        for name, found in methods.items():
            print(f"  {name:<50} {'; '.join(found) if found else '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
