"""tideloop's build: the optional native core, a C extension against the CPython C API.

Everything else is in pyproject.toml. The extension is optional: where it
cannot be built (no C compiler or no Python headers) the install goes on
without it and the pure-Python loop runs; on PyPy it is not built at all
(PyPy runs the pure-Python loop, faster there than C API emulation). Either
way the build says which in one line, and ``python -m tideloop --version``
says which core runs.
"""

from __future__ import annotations

import os
import platform
import sys
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
        )
    )
    # The transports' per-message paths; used only with the core above.
    ext_modules.append(
        Extension(
            "tideloop._transports._native",
            ["src/tideloop/_transports/_native.c"],
            optional=True,
            extra_compile_args=flags,
        )
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
