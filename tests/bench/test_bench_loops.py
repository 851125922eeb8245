"""bench.loops: the loops under comparison, and how each worker gets its own.

Every tideloop copy starts from bytecode caches; rloop is a host loop;
``tideloop-pure``'s worker, and only its, starts with ``TIDELOOP_PURE=1``,
so that tideloop's import gives its pure core there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
from bench_support import quick_config

from bench import harness, interpreters, loops, run
from bench.workloads import get


def test_byte_compile_writes_the_baseline_tree_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "tideloop"
    (package / "_core").mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    (package / "_core" / "run.py").write_text("Y = 2\n")
    monkeypatch.setenv(loops.BASELINE_ENV, str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1

    loops.byte_compile("tideloop@HEAD")

    for source in (package / "__init__.py", package / "_core" / "run.py"):
        assert Path(importlib.util.cache_from_source(str(source))).is_file()


# -- rloop --


def test_rloop_is_a_host_loop_after_uvloop() -> None:
    assert loops.HOST_LOOPS == ("asyncio", "uvloop", "rloop", "tideloop", "tideloop-pure")
    assert loops.default("rloop")


def test_rloop_runs_and_says_its_version() -> None:
    pytest.importorskip("rloop")
    assert loops.unavailable_reason("rloop") is None
    assert loops.version("rloop") == importlib.metadata.version("rloop")
    # In a worker: rloop 0.5's close() leaves its self-pipe's sockets open.
    result = harness.run_case(get("sleep0"), {"n": 100}, "rloop", quick_config())
    assert result["status"] == "ok", result
    assert result["ops"] >= 100
    assert "build" not in result  # not a tideloop


def test_rloop_not_installed_is_unavailable_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "rloop", None)  # as if not installed: import fails
    assert loops.unavailable_reason("rloop") == (
        "rloop is not installed (pip install -e '.[bench]')"
    )
    # Still a default: the run reports it as skipped with that reason.
    assert loops.default("rloop")


# -- tideloop and tideloop-pure --


def test_tideloop_pure_is_tideloop_as_far_as_availability_and_version_go() -> None:
    assert loops.unavailable_reason("tideloop-pure") is None
    assert loops.version("tideloop-pure") == loops.version("tideloop") != "?"
    assert loops.is_tideloop("tideloop-pure")
    assert loops.is_tideloop("tideloop@HEAD")
    assert not loops.is_tideloop("rloop")


def test_only_a_tideloop_pure_worker_starts_with_tideloop_pure_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = interpreters.Host()
    monkeypatch.setenv(loops.PURE_ENV, "1")  # as if the caller's shell had it
    for name in ("asyncio", "uvloop", "rloop", "tideloop", "tideloop@HEAD"):
        env = loops.worker_env(name, host)
        assert env is not None
        assert loops.PURE_ENV not in env, name
    env = loops.worker_env("tideloop-pure", host)
    assert env is not None
    assert env[loops.PURE_ENV] == "1"
    monkeypatch.delenv(loops.PURE_ENV)
    env = loops.worker_env("tideloop-pure", host)
    assert env is not None
    assert env[loops.PURE_ENV] == "1"
    assert loops.PURE_ENV not in os.environ  # ours is left alone
    # PyPy's worker makes its own clean environment (env -i).
    assert loops.worker_env("pypy/tideloop", interpreters.OTHERS["pypy"]) is None


def test_tideloop_pure_refuses_to_run_without_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(loops.PURE_ENV, raising=False)
    with pytest.raises(RuntimeError, match="tideloop-pure needs TIDELOOP_PURE=1"):
        loops.factory("tideloop-pure")


def test_build_names_the_core_of_the_tideloop_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("tideloop")
    monkeypatch.setitem(sys.modules, "tideloop", fake)
    assert loops.build("tideloop") == "pure"  # no NATIVE attribute: no native core
    fake.NATIVE = True  # type: ignore[attr-defined]
    assert loops.build("tideloop") == "native"
    fake.NATIVE = False  # type: ignore[attr-defined]
    assert loops.build("tideloop-pure") == "pure"
    assert loops.build("asyncio") is None
    assert loops.build("rloop") is None


def fake_tideloop(root: Path, native: str) -> None:
    """A tideloop package at *root* whose NATIVE is the expression *native* at its import."""
    (root / "tideloop").mkdir(parents=True)
    (root / "tideloop" / "__init__.py").write_text(
        f"import asyncio, os\nNATIVE = {native}\nnew_event_loop = asyncio.new_event_loop\n"
    )


@pytest.fixture
def tideloop_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Workers import tideloop from *tmp_path* (before the repository's src/)."""
    host_env = interpreters.worker_env

    def env() -> dict[str, str]:
        found = host_env()
        found["PYTHONPATH"] = os.pathsep.join([str(tmp_path), found["PYTHONPATH"]])
        return found

    monkeypatch.setattr(interpreters, "worker_env", env)
    return tmp_path


@pytest.mark.parametrize(("loop", "build"), [("tideloop", "native"), ("tideloop-pure", "pure")])
def test_a_worker_imports_tideloop_with_the_variable_its_loop_says(
    loop: str, build: str, tideloop_first: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tideloop that keeps the contract: native unless TIDELOOP_PURE=1 at its import.
    fake_tideloop(tideloop_first, "os.environ.get('TIDELOOP_PURE') != '1'")
    monkeypatch.setenv(loops.PURE_ENV, "1")  # the caller's: not what tideloop's worker gets
    result = harness.run_case(get("call_soon"), {"n": 100}, loop, quick_config())
    assert result["status"] == "ok", result
    assert result["build"] == build


def test_tideloop_pure_fails_if_tideloop_still_runs_native(tideloop_first: Path) -> None:
    fake_tideloop(tideloop_first, "True")  # ignores TIDELOOP_PURE
    result = harness.run_case(get("call_soon"), {"n": 100}, "tideloop-pure", quick_config())
    assert result["status"] == "error"
    assert (
        "tideloop-pure: tideloop runs its native core although TIDELOOP_PURE=1"
        in (result["reason"])
    )


def test_the_tideloop_under_test_runs_as_both_builds() -> None:
    # This tree's tideloop, through the real worker: both columns run.
    for loop in ("tideloop", "tideloop-pure"):
        result = harness.run_case(get("call_soon"), {"n": 100}, loop, quick_config())
        assert result["status"] == "ok", result
        assert result["build"] in ("native", "pure")
    assert result["build"] == "pure"  # tideloop-pure's


def test_tideloop_pure_byte_compiles_the_tree_tideloop_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[str] = []
    monkeypatch.setattr(loops.compileall, "compile_dir", lambda path, **kw: compiled.append(path))
    loops.byte_compile("tideloop")
    loops.byte_compile("tideloop-pure")
    loops.byte_compile("rloop")
    spec = importlib.util.find_spec("tideloop")
    assert spec is not None and spec.submodule_search_locations
    assert compiled == [next(iter(spec.submodule_search_locations))] * 2


def test_list_shows_the_loops_with_their_versions_or_why_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    assert run.main(["--list", "--only", "call_soon"]) == 0
    out = capsys.readouterr().out
    listed = {ln.split()[0]: ln for ln in out.split("loops:\n")[1].splitlines()}
    assert list(listed)[: len(loops.HOST_LOOPS)] == list(loops.HOST_LOOPS)
    assert listed["tideloop-pure"].split()[1] == loops.version("tideloop")
    assert "not available: uvloop is not installed" in listed["uvloop"]
    assert "tideloop@REF" in listed
