"""bench.loops: every tideloop copy under comparison starts from bytecode caches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench import loops


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
