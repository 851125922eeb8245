"""Child processes for the tests: Python, pytest or a tool, run to the end as a user runs them.

Not a test module. A test that must see tideloop as a user's process sees
it (its command lines, its pytest plugin through the ``pytest11`` entry
point, a fresh interpreter's imports, a script's exit status) starts a
child here:

- `run` runs a command to its end, its output captured as text, under a
  time limit (a hung child fails its test, not the whole run); the exit
  status is the test's to check (``check=False`` unless asked);
- `run_python` runs this interpreter;
- `python_env` is this process's environment with ``PYTHONPATH`` set to the
  folders the child imports from, then `SRC`: the tideloop under test, not
  an installed copy;
- `run_pytest` runs pytest on a project folder the way its user would:
  quiet, every outcome listed (``-rA``), no cache written into the
  project, and without this run's ``PYTEST_ADDOPTS`` (options meant for
  the outer run, such as ``-n``, are not the project's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import tideloop

#: The folder that holds the tideloop under test (``src/`` of this checkout).
SRC = str(Path(tideloop.__file__).resolve().parent.parent)

StrPath = str | os.PathLike[str]


def run(
    argv: Sequence[StrPath],
    *,
    cwd: StrPath | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run *argv* to its end: its exit status, stdout and stderr (text)."""
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=check
    )


def run_python(
    *args: StrPath,
    cwd: StrPath | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with this interpreter (`run`)."""
    return run([sys.executable, *args], cwd=cwd, env=env, timeout=timeout, check=check)


def python_env(*path: StrPath, **variables: str) -> dict[str, str]:
    """This process's environment, ``PYTHONPATH`` set to *path* then `SRC`, and *variables* set."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*map(str, path), SRC]),
        **variables,
    }


def run_pytest(
    project: Path, *args: str, path: Sequence[StrPath] = (), timeout: float = 120, **variables: str
) -> subprocess.CompletedProcess[str]:
    """pytest run by a child on the project folder *project*, with *args*.

    The child imports from *path* (relative to *project*) and `SRC`, with
    *variables* set in its environment.
    """
    env = python_env(*path, **variables)
    env.pop("PYTEST_ADDOPTS", None)
    return run_python(
        *("-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args),
        cwd=project,
        env=env,
        timeout=timeout,
    )
