"""PEP 517 build backend: setuptools', plus mypy when the compiled build is asked for.

Layer: packaging (not part of the installed package). ``pip install .`` builds
the pure-Python wheel and needs setuptools only. With ``TIDELOOP_COMPILE=1``
in the environment, ``setup.py`` compiles the hot modules with mypyc, so the
isolated build environment also needs mypy (which ships mypyc); this backend
adds it to the build requirements then, and only then.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: The mypy whose mypyc the compiled build is tested with (CI, bench).
MYPYC_REQUIREMENT = "mypy>=1.18"


#: Set while setuptools runs setup.py only to list build requirements: mypy
#: (and so mypyc) is not installed yet then, so setup.py must not compile.
REQUIRES_ONLY = "TIDELOOP_BUILD_REQUIRES_ONLY"


def _requires(ask: Callable[[], list[str]]) -> list[str]:
    if os.environ.get("TIDELOOP_COMPILE") != "1":
        return ask()
    os.environ[REQUIRES_ONLY] = "1"
    try:
        return [*ask(), MYPYC_REQUIREMENT]
    finally:
        del os.environ[REQUIRES_ONLY]


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    return _requires(lambda: _setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(
    config_settings: dict[str, object] | None = None,
) -> list[str]:
    return _requires(lambda: _setuptools.get_requires_for_build_editable(config_settings))
