"""tideloop's build: the optional native core, the long description and the license field.

Everything else is in pyproject.toml.

- The native core is a C extension against the CPython C API, and optional:
  where it cannot be built (no C compiler or no Python headers) the install
  goes on without it and the pure-Python loop runs; on PyPy it is not built
  at all (PyPy runs the pure-Python loop, faster there than C API
  emulation). Either way the build says which in one line, and ``python -m
  tideloop --version`` says which core runs.
- The long description is README.md with its relative links made absolute
  GitHub URLs (``docs/hooks.py``), since a package index has no repository
  to resolve them against.
- The license is the ``License: MIT`` core metadata field, which every pip
  shows (pip 23 reads no other), and the LICENSE file (``license-files``).
  It is not also a PEP 639 ``License-Expression``: the two are exclusive,
  and a package index disregards ``License`` beside it.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def say(line: str) -> None:
    print(f"tideloop: {line}", file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed native build into one line and a pure install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all: distutils errors, OSError
            say(f"no native core ({type(exc).__name__}: {exc}); the pure-Python loop will run")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            say(f"no native core ({type(exc).__name__}: {exc}); the pure-Python loop will run")
        else:
            say(f"built the native core ({ext.name})")


ext_modules = []
if platform.python_implementation() != "CPython":
    say(f"{platform.python_implementation()} runs the pure-Python loop (no native core to build)")
elif os.environ.get("TIDELOOP_NO_NATIVE", "") not in ("", "0"):
    say("TIDELOOP_NO_NATIVE is set: the pure-Python loop only")
else:
    flags = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
    ext_modules.append(
        Extension(
            "tideloop._core._native",
            ["src/tideloop/_core/_native.c"],
            optional=True,
            extra_compile_args=flags,
            include_dirs=["src/tideloop"],  # _native_common.h
            depends=["src/tideloop/_native_common.h"],
        )
    )
    # The transports' per-message paths; used only with the core above.
    ext_modules.append(
        Extension(
            "tideloop._transports._native",
            ["src/tideloop/_transports/_native.c"],
            optional=True,
            extra_compile_args=flags,
            include_dirs=["src/tideloop"],
            depends=["src/tideloop/_native_common.h"],
        )
    )


def long_description() -> str:
    """README.md with absolute links (docs/hooks.py, loaded by path: it is not a package)."""
    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("tideloop_doc_links", here / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    links = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(links)
    readme = (here / "README.md").read_text(encoding="utf-8")
    text: str = links.absolute_links(readme, "README.md", root=here)
    return text


if __name__ == "__main__":  # the build backend runs this file as __main__
    setup(
        license="MIT",
        long_description=long_description(),
        long_description_content_type="text/markdown",
        ext_modules=ext_modules,
        cmdclass={"build_ext": OptionalBuildExt},
    )
