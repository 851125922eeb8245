"""The compiled build's rules: what setup.py compiles, `python_class`, ``__compiled__``.

These run on both builds. CI runs the whole suite once on the mypyc build
with ``TIDELOOP_EXPECT_COMPILED=1`` (and on the pure builds with ``0``), so
that a build that silently fell back to Python cannot pass as compiled.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import os
import sys
import typing
from pathlib import Path

import pytest

import tideloop
from tideloop._core.native import MARK, is_compiled

ROOT = Path(__file__).resolve().parents[2]


def compiled_modules() -> list[str]:
    """The module names in setup.py's COMPILED list."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return [p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py defines no COMPILED list")


COMPILED = compiled_modules()


def test_compiled_list_names_real_modules() -> None:
    assert "tideloop._core.run" in COMPILED
    for name in COMPILED:
        importlib.import_module(name)


def test_all_or_none_of_the_list_is_compiled() -> None:
    states = {name: is_compiled(sys.modules[name].__file__) for name in COMPILED}
    assert len(set(states.values())) == 1, states
    assert tideloop.__compiled__ is states["tideloop._core.run"]


@pytest.mark.skipif(
    "TIDELOOP_EXPECT_COMPILED" not in os.environ, reason="set by CI for each build it tests"
)
def test_the_build_is_the_expected_one() -> None:
    assert tideloop.__compiled__ is (os.environ["TIDELOOP_EXPECT_COMPILED"] == "1")


def _own_classes(module_name: str) -> list[type]:
    module = sys.modules[module_name]
    return [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module_name]


def _exempt(cls: type) -> bool:
    # Protocols and named tuples are compiled as Python classes by mypyc itself.
    return bool(getattr(cls, "_is_protocol", False)) or issubclass(cls, tuple)


def _all_tideloop_classes() -> list[type]:
    found = []
    for name, module in list(sys.modules.items()):
        if name == "tideloop" or name.startswith("tideloop."):
            found += [
                v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name
            ]
    return found


@pytest.mark.parametrize("module_name", COMPILED)
def test_classes_that_must_stay_python_are_marked(module_name: str) -> None:
    # A native class may not extend a class from outside tideloop (other
    # than object), nor be extended by a module mypyc did not compile: those
    # classes carry python_class (see tideloop._core.native).
    importlib.import_module("tideloop.testing")
    everything = _all_tideloop_classes()
    problems = []
    for cls in _own_classes(module_name):
        if _exempt(cls) or vars(cls).get(MARK):
            continue
        foreign = [b for b in cls.__bases__ if b is not object and b is not typing.Generic]
        foreign = [b for b in foreign if not b.__module__.startswith("tideloop.")]
        outside = [
            c.__qualname__
            for c in everything
            if c is not cls and cls in c.__mro__ and c.__module__ not in COMPILED
        ]
        if foreign or outside:
            problems.append(f"{cls.__qualname__}: bases {foreign}, subclassed by {outside}")
    assert not problems


def test_python_class_returns_the_class_marked() -> None:
    from tideloop._core.native import python_class

    class C:
        pass

    assert python_class(C) is C
    assert vars(C)[MARK] is True


# The build backend asks setuptools for its requirements by running setup.py
# before any of them (mypy, hence mypyc) is installed in pip's isolated build
# environment. Here mypyc cannot be imported at all, as there.
_REQUIRES = """
import importlib.abc, json, sys
class NoMypyc(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mypyc" or name.startswith("mypyc."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, NoMypyc())
sys.path.insert(0, "build_support")
import tideloop_build
print(json.dumps(tideloop_build.get_requires_for_build_wheel()))
"""


@pytest.mark.parametrize("compile_flag", ["1", ""])
def test_build_requirements_are_listed_without_mypyc(compile_flag: str) -> None:
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELOOP_")}
    env["TIDELOOP_COMPILE"] = compile_flag
    proc = subprocess.run(
        [sys.executable, "-c", _REQUIRES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    requires = json.loads(proc.stdout.strip().splitlines()[-1])
    has_mypy = any(r.startswith("mypy") for r in requires)
    assert has_mypy == (compile_flag == "1"), requires


@pytest.mark.parametrize("module_name", COMPILED)
def test_compiled_modules_define_no_coroutines(module_name: str) -> None:
    # mypyc compiles a coroutine into something inspect does not call a
    # coroutine function, and that throws into what it awaits with the
    # three-argument throw() (a DeprecationWarning on 3.12 when a timeout
    # cancels it): coroutine methods live in uncompiled modules and are bound
    # as class attributes (_core/shutdown.py, _transports/pipe_connect.py).
    path = ROOT / "src" / (module_name.replace(".", "/") + ".py")
    found = [
        f"{path.name}:{node.lineno} async def {node.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.AsyncFunctionDef)
    ]
    assert not found


def test_coroutine_methods_are_coroutine_functions() -> None:
    import inspect

    loop = tideloop.new_event_loop()
    try:
        for name in (
            "shutdown_asyncgens",
            "shutdown_default_executor",
            "connect_read_pipe",
            "connect_write_pipe",
        ):
            assert inspect.iscoroutinefunction(getattr(loop, name)), name
            assert asyncio.iscoroutinefunction(getattr(loop, name)), name
    finally:
        loop.close()


def calls_in_slice_bounds(source: str) -> list[str]:
    """``x[a:f()]``-style slices whose bounds call something (``len`` is allowed)."""
    return [
        f"{node.lineno}: {ast.unparse(sub)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Slice)
        for bound in (node.lower, node.upper, node.step)
        if bound is not None
        for sub in ast.walk(bound)
        if isinstance(sub, ast.Call)
        and not (isinstance(sub.func, ast.Name) and sub.func.id == "len")
    ]


@pytest.mark.parametrize("module_name", COMPILED)
def test_compiled_modules_call_nothing_in_a_slice_bound(module_name: str) -> None:
    # mypyc 2.4 evaluates a slice bound expression twice (a fast path for
    # short ints, then the generic one): ``view[: sock.recv_into(view)]``
    # read twice into the buffer and lost the first read's data. Bounds are
    # names or side-effect-free expressions.
    path = ROOT / "src" / (module_name.replace(".", "/") + ".py")
    assert not calls_in_slice_bounds(path.read_text())


def test_the_slice_bound_rule_sees_a_call() -> None:
    assert calls_in_slice_bounds("d = bytes(v[: s.recv_into(v)])\n") == ["1: s.recv_into(v)"]
    assert calls_in_slice_bounds("del s[len(s) - n :]\nd = v[:n]\n") == []
