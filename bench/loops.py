"""The loops under comparison, by name: how to build one and what version it is.

``asyncio`` is the stdlib's default loop on this platform (on Linux the
selector loop on epoll), ``uvloop`` is uvloop and ``rloop`` is rloop (a loop
written in Rust; both optional: the ``bench`` extra), and ``tideloop`` is
this project: whatever build ``import tideloop`` gives (its native core
where one is built). ``tideloop-pure`` is the same package with its
pure-Python core: its worker starts with ``TIDELOOP_PURE=1`` in its
environment (`worker_env`), the variable tideloop's import reads.

``tideloop@REF`` is tideloop as it was at git revision REF (``python -m bench
--baseline REF``): its source tree is exported to ``bench/.build/`` and the
worker imports tideloop from there, so a change is measured against what it
changes, interleaved in one run.

``pypy/asyncio`` and ``pypy/tideloop`` are the same loops on PyPy, which runs
in the Debian root of ``.ci/sid`` (see `bench.interpreters`): a name
``INTERPRETER/LOOP`` is loop LOOP on that interpreter. `factory` takes plain
names only (the worker runs on the interpreter the harness chose); the other
functions take either and ask the interpreter about its own loops.
"""

from __future__ import annotations

import asyncio
import compileall
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench import interpreters

__all__ = [
    "HOST_LOOPS",
    "INSTRUMENTED",
    "LOOPS",
    "PURE",
    "PURE_ENV",
    "baseline_name",
    "build",
    "byte_compile",
    "default",
    "export_baseline",
    "factory",
    "is_tideloop",
    "unavailable_reason",
    "version",
    "worker_env",
]

#: The loops on the host's Python, in the suite's canonical order (asyncio first: the baseline).
HOST_LOOPS: tuple[str, ...] = ("asyncio", "uvloop", "rloop", "tideloop", "tideloop-pure")
#: tideloop with an observability feature on, to measure what it costs
#: (``--loops tideloop,tideloop+trace``); never a default. ``tideloop+trace``:
#: every loop recorded and its trace written (to /dev/null: the recorder, the
#: conversion and the writer thread, without a disk) by ``tideloop.trace``.
#: ``tideloop+console``: every loop has a console socket open (as with
#: ``TIDELOOP_CONSOLE``) and nobody attached: what a program pays for being
#: ready to be looked at.
INSTRUMENTED: tuple[str, ...] = ("tideloop+trace", "tideloop+console")
#: Every loop the suite knows: the host's, then each other interpreter's
#: (``pypy/tideloop``), then the instrumented tideloops.
LOOPS: tuple[str, ...] = (
    HOST_LOOPS
    + tuple(
        f"{prefix}/{loop}"
        for prefix, interp in interpreters.OTHERS.items()
        for loop in interp.loops
    )
    + INSTRUMENTED
)

#: Where ``tideloop@REF`` is imported from, set by `export_baseline` and
#: inherited by the worker processes.
BASELINE_ENV = "TIDELOOP_BENCH_BASELINE"
#: tideloop's contract: set to ``1`` before tideloop is imported, it runs its pure-Python core.
PURE_ENV = "TIDELOOP_PURE"
#: The loop that runs tideloop's pure-Python core (its worker has PURE_ENV set).
PURE = "tideloop-pure"
_ROOT = Path(__file__).resolve().parent.parent


def is_tideloop(name: str) -> bool:
    """Whether plain loop *name* is a copy of tideloop (either build, a baseline, or
    tideloop instrumented)."""
    return name in ("tideloop", PURE) or name.startswith("tideloop@") or name in INSTRUMENTED


def worker_env(name: str, interp: interpreters.Interpreter) -> dict[str, str] | None:
    """The environment a worker of loop *name* starts with, on *interp*: ``TIDELOOP_PURE`` or not.

    *interp*'s (`Host.env`), where ``tideloop-pure``'s worker has
    ``TIDELOOP_PURE=1``, set before anything in that process imports
    tideloop, and every other worker has no ``TIDELOOP_PURE``, so that
    ``tideloop`` (and ``tideloop@REF``) is the build ``import tideloop``
    gives, whatever the caller's shell has set. None for an interpreter that
    makes a clean environment of its own (PyPy's ``env -i``).
    """
    env = interp.env()
    if env is None:
        return None
    if interpreters.split(name)[1] == PURE:
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    return env


def build(name: str) -> str | None:
    """Which core tideloop's import gave a worker of plain loop *name*: native or pure.

    Asked after `factory` (of the tideloop the worker imported); None for a
    loop that is not tideloop. ``tideloop.NATIVE`` says it; a tideloop
    without that attribute has no native core, so it is pure.
    """
    module = sys.modules.get("tideloop")
    if not is_tideloop(name) or module is None:
        return None
    return "native" if getattr(module, "NATIVE", False) else "pure"


def baseline_name(ref: str) -> str:
    return f"tideloop@{ref}"


def export_baseline(ref: str) -> str:
    """Export tideloop's source at git *ref*; return the loop name that runs it."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short=12", ref],
        cwd=_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dest = _ROOT / "bench" / ".build" / f"baseline-{sha}"
    if not (dest / "tideloop" / "__init__.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", sha, "src/tideloop"], cwd=_ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(
            ["tar", "-x", "--strip-components=1", "-C", str(dest)], input=archive, check=True
        )
    os.environ[BASELINE_ENV] = str(dest)
    return baseline_name(ref)


def _import_from(path: str) -> Callable[[], asyncio.AbstractEventLoop]:
    sys.path.insert(0, path)
    for mod in [m for m in sys.modules if m == "tideloop" or m.startswith("tideloop.")]:
        del sys.modules[mod]
    import tideloop

    assert tideloop.__file__ is not None and tideloop.__file__.startswith(path)
    return tideloop.new_event_loop


def byte_compile(name: str) -> None:
    """Write the bytecode cache of loop *name*'s tideloop source, if it has one.

    Every loop under comparison must start from ``.pyc`` files: a worker that
    compiles tideloop's source as it imports it (an exported baseline, a
    freshly edited module, or any tree when ``PYTHONDONTWRITEBYTECODE`` is
    set) starts with a heap that compilation grew by about 1.4 MiB, and an
    A/A run of one tree against itself measured that copy faster and its
    memory per connection as zero. `compileall` writes the caches whatever
    that variable says; it rewrites only stale ones. A loop on another
    interpreter is compiled by that interpreter (PyPy's caches are its own
    files, ``*.pypy311.pyc``).
    """
    prefix, inner = interpreters.split(name)
    if prefix:
        if inner.startswith("tideloop"):
            interpreters.OTHERS[prefix].byte_compile(inner)
        return
    if name in ("tideloop", PURE, *INSTRUMENTED):
        spec = importlib.util.find_spec("tideloop")
        if spec is None or not spec.submodule_search_locations:
            return
        path = next(iter(spec.submodule_search_locations))
    elif name.startswith("tideloop@"):
        path = os.environ[BASELINE_ENV]
    else:
        return
    compileall.compile_dir(path, quiet=1)


def factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop factory for *name* (imports the loop's package)."""
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "rloop":
        import rloop

        return rloop.new_event_loop
    if name == "tideloop":
        import tideloop

        return tideloop.new_event_loop
    if name == PURE:
        return _pure()
    if name in INSTRUMENTED:
        return _instrumented(name)
    if name.startswith("tideloop@"):
        return _import_from(os.environ[BASELINE_ENV])
    if interpreters.split(name)[0]:
        # The harness runs the worker on that interpreter, with the plain name.
        raise ValueError(f"{name!r} names its interpreter: factory() takes the loop's plain name")
    raise ValueError(f"unknown loop {name!r} (known: {', '.join(HOST_LOOPS)})")


#: The instrumented loop's instrument, once per worker process.
_instrument: object = None


def _instrumented(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """tideloop's factory, with *name*'s feature on for every loop it makes."""
    global _instrument
    import tideloop

    if _instrument is None and name == "tideloop+trace":
        # Every loop new_event_loop makes is recorded from now on; the trace
        # ends with the worker process.
        _instrument = tideloop.trace(os.devnull)
    elif _instrument is None and name == "tideloop+console":
        import tempfile

        from tideloop import _console

        # TIDELOOP_CONSOLE's way: the socket opens with the first loop and
        # is removed when the worker exits.
        os.environ[_console.ENVIRONMENT_VARIABLE] = os.path.join(
            tempfile.mkdtemp(prefix="tideloop-bench-"), "console.sock"
        )
        _console.install_from_environment()
        _instrument = True
    return tideloop.new_event_loop


def _pure() -> Callable[[], asyncio.AbstractEventLoop]:
    """tideloop's factory, checked to be its pure core (`worker_env` set ``TIDELOOP_PURE``)."""
    if os.environ.get(PURE_ENV) != "1":
        raise RuntimeError(
            f"{PURE} needs {PURE_ENV}=1 in its environment from the start of its process"
            " (bench.loops.worker_env)"
        )
    import tideloop

    if getattr(tideloop, "NATIVE", False):
        raise RuntimeError(
            f"{PURE}: tideloop runs its native core although {PURE_ENV}=1"
            " (was it imported before the variable was set?)"
        )
    return tideloop.new_event_loop


def default(name: str) -> bool:
    """Whether ``python -m bench`` runs loop *name* when ``--loops`` does not say.

    The host's loops always (one that cannot be imported is reported as
    skipped); another interpreter's loops when they can run here; the
    instrumented tideloops never (they measure a feature's cost, on request).
    """
    if name in INSTRUMENTED:
        return False
    prefix, _ = interpreters.split(name)
    return not prefix or unavailable_reason(name) is None


def unavailable_reason(name: str) -> str | None:
    """None if loop *name* can be imported here (or on its interpreter), else why not."""
    prefix, inner = interpreters.split(name)
    if prefix:
        return interpreters.OTHERS[prefix].unavailable_reason(inner)
    if name == "asyncio":
        return None
    if name.startswith("tideloop@"):
        return None if os.environ.get(BASELINE_ENV) else "no baseline exported"
    if name == PURE or name in INSTRUMENTED:
        name = "tideloop"
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed (pip install -e '.[bench]')"
    return None


def python_version() -> str:
    """``Python 3.11.9``; on PyPy ``PyPy 8.0.1 (Python 3.11.17)`` (its own and its language's)."""
    pypy = getattr(sys, "pypy_version_info", None)
    if pypy is not None:
        return f"PyPy {pypy.major}.{pypy.minor}.{pypy.micro} (Python {platform.python_version()})"
    return f"Python {platform.python_version()}"


def version(name: str) -> str:
    """The version of loop *name*: the interpreter's for asyncio, the package's otherwise.

    A loop on another interpreter is asked of it: ``pypy/asyncio`` is ``PyPy
    8.0.1 (Python 3.11.17)``, ``pypy/tideloop`` ``0.1.0, PyPy 8.0.1 (Python
    3.11.17)``.
    """
    prefix, inner = interpreters.split(name)
    if prefix:
        return interpreters.OTHERS[prefix].version(inner)
    if name == "asyncio":
        return python_version()
    if name.startswith("tideloop@"):
        return name.partition("@")[2]
    if name == PURE or name in INSTRUMENTED:
        name = "tideloop"
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"
