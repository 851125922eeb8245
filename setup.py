"""setuptools entry: the pure-Python build, or with TIDELOOP_COMPILE=1 the mypyc build.

The metadata lives in pyproject.toml. This file only decides whether the hot
modules listed in COMPILED are compiled to C extensions with mypyc (the same
source, which is kept ``mypy --strict`` clean for this). A compiled module's
extension is installed beside its ``.py`` file; Python imports the
extension. ``tideloop.__compiled__`` says which build is running.
"""

from __future__ import annotations

import os

from setuptools import setup

#: The modules compiled in the mypyc build: the ones a callback, a timer or a
#: readiness event runs through. Modules with ``async def`` APIs stay Python
#: (a compiled coroutine function is not a coroutine function to inspect).
COMPILED = [
    "src/tideloop/_core/run.py",
    "src/tideloop/_core/timers.py",
    "src/tideloop/_core/metrics.py",
    "src/tideloop/_core/clock.py",
    "src/tideloop/_fdio/registry.py",
    "src/tideloop/_transports/base.py",
    "src/tideloop/_transports/stream.py",
    "src/tideloop/_transports/datagram.py",
    "src/tideloop/_transports/pipes.py",
]

# TIDELOOP_BUILD_REQUIRES_ONLY: the build backend (build_support/tideloop_build.py)
# is only asking for build requirements; mypy is not installed yet.
if os.environ.get("TIDELOOP_COMPILE") == "1" and not os.environ.get("TIDELOOP_BUILD_REQUIRES_ONLY"):
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(COMPILED, opt_level="3"))
else:
    setup()
