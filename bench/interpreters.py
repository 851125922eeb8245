"""The interpreters a loop runs on: the Python running the suite, or PyPy in the Debian root.

A loop name is ``[INTERPRETER/]LOOP``. ``tideloop`` is tideloop on the
host's Python (the one running ``python -m bench``); ``pypy/tideloop`` is
the same source on PyPy, ``pypy/asyncio`` PyPy's stdlib loop. The worker
(``bench/_worker.py``) and `bench.loops.factory` only ever see the plain
name (``tideloop``): which interpreter runs them is the harness's choice,
made here from the prefix.

PyPy is not on the host. It is in the Debian unstable root that ``.ci/sid``
builds (``TIDELOOP_SID_ROOT``, default ``/var/tmp/tideloop-sid``), where
this repository is bind-mounted at ``/src``, with a virtual environment
that has tideloop installed editable (``TIDELOOP_BENCH_PYPY_VENV``, a path
on the host, relative to the repository unless absolute; default
``.ci-venvs/sid-pypy``, the one ``.ci/run`` makes).

Facts that shape how a PyPy worker is started:

- The harness measures the worker process itself: it pins it with
  ``taskset`` and reads its CPU time and RSS from ``/proc/<pid>/stat`` and
  ``status``. So the process the harness starts must *become* the worker:
  ``taskset``, ``chroot``, ``env`` and ``sh -c '... exec'`` all exec their
  successor, keeping the pid and the CPU affinity. (``bash .ci/sid run``
  does not: it is a script whose interpreter stays as the parent.)
- The root shares the host's network and pid namespaces: a server inside
  listens on the host's loopback, where the C echo client and wrk reach it,
  and its pid is the same in ``/proc`` on both sides.
- Only the repository is shared by path, under another name (``/src``): a
  Unix socket both sides reach must be in it, so such temporary files go
  to ``bench/.build/tmp`` (git-ignored) and paths are translated both ways
  (`Chroot.to_inside`, `Chroot.to_host`).
- ``env -i`` starts the worker with a clean environment (``PYTHONPATH``
  for the bench package and tideloop's source, ``PATH``, ``HOME``,
  ``LANG``): nothing of the caller's leaks in, so ``PYTHONASYNCIODEBUG``
  is dropped as the host worker drops it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "PYPY_VENV_ENV",
    "SID_ROOT_ENV",
    "Chroot",
    "Host",
    "Interpreter",
    "interpreter",
    "split",
]

#: The repository, on the host.
REPO = Path(__file__).resolve().parent.parent
#: Where the Debian root is (the same variable and default as ``.ci/sid``).
SID_ROOT_ENV = "TIDELOOP_SID_ROOT"
DEFAULT_SID_ROOT = "/var/tmp/tideloop-sid"
#: The PyPy virtual environment (a host path; relative ones are relative to the repository).
PYPY_VENV_ENV = "TIDELOOP_BENCH_PYPY_VENV"
DEFAULT_PYPY_VENV = ".ci-venvs/sid-pypy"
#: Where the root sees the repository (``.ci/sid`` bind-mounts it there).
INSIDE_REPO = PurePosixPath("/src")
#: Temporary files both sides must reach (Unix sockets): under the repository, git-ignored.
SHARED_TMP = REPO / "bench" / ".build" / "tmp"
#: The PATH of a worker inside the root (``.ci/sid run``'s).
INSIDE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def worker_env() -> dict[str, str]:
    """The environment of a host worker: ours, with the repository on the path, no debug mode."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "src")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("PYTHONASYNCIODEBUG", None)
    return env


@dataclass(frozen=True)
class Host:
    """The Python running the suite (or *python*, another interpreter on the host)."""

    python: str = sys.executable
    name: str = ""
    jit: bool = False

    def command(self, args: Sequence[str]) -> list[str]:
        """The argv that runs this interpreter with *args*, as one process, in the repository."""
        return [self.python, *args]

    def env(self) -> dict[str, str] | None:
        """The environment to start `command` with (None: inherit ours)."""
        return worker_env()

    def scratch_dir(self) -> Path | None:
        """Where temporary files the worker must see go (None: the system's default)."""
        return None

    def to_inside(self, path: Path | str) -> str:
        """The worker's name for host *path*."""
        return str(path)

    def to_host(self, path: str) -> Path:
        """The host's name for the worker's *path*."""
        return Path(path)


#: What a probe of a chroot interpreter found, by (root, venv): versions and
#: reasons per plain loop name, or the reason the interpreter did not start.
_probes: dict[tuple[str, str], dict[str, Any] | str] = {}

_PROBE = """\
import json
from bench import loops
print(json.dumps({n: [loops.version(n), loops.unavailable_reason(n)] for n in %r}))
"""


@dataclass(frozen=True)
class Chroot:
    """An interpreter in a virtual environment of the Debian root, run through ``chroot``.

    *label* names it in messages (``PyPy``); *venv_env* and *default_venv*
    say where its virtual environment is, *base* the root's interpreter
    that makes one; *loops* are the plain loop names
    worth running on it (uvloop does not support PyPy); *jit* says that it
    compiles as it runs, so that its workers warm up for at least the
    harness's JIT warm-up (``--jit-warmup``) before they are measured.
    """

    name: str
    label: str
    venv_env: str
    default_venv: str
    base: str
    loops: tuple[str, ...]
    jit: bool = False

    # -- settings, read when used (so that a test can change them) --

    def root(self) -> Path:
        return Path(os.environ.get(SID_ROOT_ENV) or DEFAULT_SID_ROOT)

    def venv(self) -> Path:
        """The virtual environment, as a host path."""
        return REPO / (os.environ.get(self.venv_env) or self.default_venv)

    def python(self) -> str:
        """The venv's interpreter, as the root names it."""
        return str(PurePosixPath(self.to_inside(self.venv())) / "bin" / "python")

    # -- paths: the repository is /src inside, the rest of the root is the root's --

    def to_inside(self, path: Path | str) -> str:
        """The root's name for host *path* (in the repository, or in the root's tree)."""
        host = Path(os.path.abspath(path))
        for base, inside in ((REPO, INSIDE_REPO), (self.root(), PurePosixPath("/"))):
            if host.is_relative_to(base):
                return str(inside / host.relative_to(base))
        raise ValueError(f"{host} is neither in the repository nor in the root {self.root()}")

    def to_host(self, path: str) -> Path:
        """The host's name for the root's *path*."""
        inside = PurePosixPath(path)
        if not inside.is_absolute():
            raise ValueError(f"not an absolute path: {path!r}")
        if inside.is_relative_to(INSIDE_REPO):
            return REPO / inside.relative_to(INSIDE_REPO)
        return self.root() / inside.relative_to("/")

    def scratch_dir(self) -> Path:
        SHARED_TMP.mkdir(parents=True, exist_ok=True)
        return SHARED_TMP

    # -- processes --

    def command(self, args: Sequence[str]) -> list[str]:
        """The argv that runs the venv's interpreter with *args* in /src, exec all the way.

        ``chroot`` execs ``env``, which execs ``sh``, which ``cd``s and execs
        the interpreter: one pid from the first exec to the worker, so a
        ``taskset`` in front pins the worker and ``/proc/<pid>`` is its.
        """
        return [
            "chroot",
            str(self.root()),
            "/usr/bin/env",
            "-i",
            f"PATH={INSIDE_PATH}",
            f"PYTHONPATH={INSIDE_REPO}:{INSIDE_REPO / 'src'}",
            "HOME=/root",
            "LANG=C.UTF-8",
            "/bin/sh",
            "-c",
            f'cd {INSIDE_REPO} && exec "$0" "$@"',
            self.python(),
            *args,
        ]

    def env(self) -> dict[str, str] | None:
        return None  # `command` clears the worker's environment itself (env -i)

    def _run(self, code: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(["-c", code]),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _setup_reason(self) -> str | None:
        """Why this interpreter cannot run here, before trying it (None if it may)."""
        root, venv = self.root(), self.venv()
        setup = "`bash .ci/sid setup` builds and mounts it"
        if not (root / "usr" / "bin").is_dir():
            return f"no Debian root at {root} ({SID_ROOT_ENV}; {setup})"
        try:
            self.to_inside(venv)
        except ValueError:
            return (
                f"the {self.label} venv {venv} ({self.venv_env}) is neither in the repository"
                f" nor in the root {root}"
            )
        if not os.path.lexists(venv / "bin" / "python"):
            inside = self.to_inside(venv)
            return (
                f"no {self.label} venv at {venv} ({self.venv_env}; make one with"
                f" `bash .ci/sid run {self.base} -m venv {inside}` and"
                f" `bash .ci/sid run {inside}/bin/python -m pip install -e . aiohttp`)"
            )
        if os.geteuid() != 0:
            return f"{self.label} runs in the Debian root through chroot, which needs root"
        mounted = root / INSIDE_REPO.relative_to("/")
        if not (mounted / "bench" / "_worker.py").exists() or not os.path.samefile(mounted, REPO):
            return f"this repository is not mounted at {mounted} ({setup})"
        return None

    def probe(self) -> dict[str, Any] | str:
        """Versions and availability of this interpreter's loops, asked of it (once); or why not.

        The answer is `bench.loops.version` and `bench.loops.unavailable_reason`
        run by the interpreter itself, for each of its plain loop names.
        """
        key = (str(self.root()), str(self.venv()))
        if key not in _probes:
            _probes[key] = self._setup_reason() or self._ask()
        return _probes[key]

    def _ask(self) -> dict[str, Any] | str:
        try:
            proc = self._run(_PROBE % (self.loops,), timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{self.label} did not start: {exc}"
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            err = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
            why = err[-1][:200] if err else f"exit {proc.returncode}"
            return f"{self.python()} in the root {self.root()} failed: {why}"
        found: dict[str, Any] = json.loads(lines[-1])
        return found

    def unavailable_reason(self, loop: str) -> str | None:
        found = self.probe()
        if isinstance(found, str):
            return found
        if loop not in found:
            return f"{loop} is not run on {self.label} (its loops: {', '.join(self.loops)})"
        reason: str | None = found[loop][1]
        return None if reason is None else f"{reason} (on {self.label}, in {self.venv()})"

    def version(self, loop: str) -> str:
        """As `bench.loops.version` answers inside: PyPy's own for its asyncio."""
        found = self.probe()
        if isinstance(found, str) or loop not in found:
            return "?"
        own: str = found[loop][0]
        interpreter: str = found.get("asyncio", ["?"])[0]
        return own if loop == "asyncio" else f"{own}, {interpreter}"

    def byte_compile(self, loop: str) -> None:
        """`bench.loops.byte_compile`, run by this interpreter (it writes its own caches)."""
        code = f"from bench import loops; loops.byte_compile({loop!r})"
        proc = self._run(code, timeout=300)
        if proc.returncode != 0:
            why = proc.stderr.strip()[-300:]
            raise RuntimeError(f"byte-compiling {loop} on {self.label} failed: {why}")


Interpreter = Host | Chroot

#: The interpreters other than the host's, by prefix.
OTHERS: dict[str, Chroot] = {
    "pypy": Chroot(
        name="pypy",
        label="PyPy",
        venv_env=PYPY_VENV_ENV,
        default_venv=DEFAULT_PYPY_VENV,
        base="pypy3",
        loops=("asyncio", "tideloop"),
        jit=True,
    ),
}


def split(loop: str) -> tuple[str, str]:
    """``pypy/tideloop`` -> ``("pypy", "tideloop")``; ``tideloop`` -> ``("", "tideloop")``.

    Only a known interpreter's name is a prefix: anything else is a plain
    loop name, which `bench.loops` then accepts or refuses.
    """
    prefix, sep, inner = loop.partition("/")
    if sep and prefix in OTHERS and inner:
        return prefix, inner
    return "", loop


def interpreter(prefix: str, host_python: str = sys.executable) -> Interpreter:
    """The interpreter named *prefix* (``""``: the host's, running *host_python*)."""
    if not prefix:
        return Host(host_python)
    return OTHERS[prefix]
