"""bench.interpreters: loops on PyPy in the Debian root, measured like the host's.

What the harness relies on: the process it starts for ``pypy/tideloop`` is
the worker itself (one pid from ``taskset`` to the interpreter, so the pin
and ``/proc/<pid>`` are the worker's), with a clean environment, given the
plain loop name; paths are translated between the host and the root; and a
PyPy loop that cannot run says why and is not in the default set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from bench_support import quick_config

from bench import harness, interpreters, loops, run

REPO = interpreters.REPO
PYPY = interpreters.OTHERS["pypy"]


@pytest.fixture
def no_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Debian root setting that points nowhere."""
    missing = tmp_path / "no-such-root"
    monkeypatch.setenv(interpreters.SID_ROOT_ENV, str(missing))
    return missing


def cfg(python: str = sys.executable) -> harness.Config:
    return quick_config(warmup=0.5, duration=1.5, server_cpu=0, client_cpu=1, python=python)


# -- names --


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("tideloop", ("", "tideloop")),
        ("asyncio", ("", "asyncio")),
        ("pypy/tideloop", ("pypy", "tideloop")),
        ("pypy/asyncio", ("pypy", "asyncio")),
        ("pypy/tideloop@HEAD", ("pypy", "tideloop@HEAD")),
        ("tideloop@HEAD", ("", "tideloop@HEAD")),
        # Only a known interpreter is a prefix; the rest is a plain (unknown) name.
        ("jython/asyncio", ("", "jython/asyncio")),
        ("pypy/", ("", "pypy/")),
    ],
)
def test_a_loop_name_is_an_interpreter_and_a_plain_name(name: str, parts: tuple[str, str]) -> None:
    assert interpreters.split(name) == parts


def test_the_pypy_loops_follow_the_host_loops() -> None:
    assert loops.LOOPS == (
        "asyncio",
        "uvloop",
        "rloop",
        "tideloop",
        "tideloop-pure",
        "pypy/asyncio",
        "pypy/tideloop",
        # tideloop with an observability feature on (on request only).
        "tideloop+trace",
        "tideloop+console",
    )
    assert loops.LOOPS[: len(loops.HOST_LOOPS)] == loops.HOST_LOOPS


def test_factory_takes_plain_names_only() -> None:
    with pytest.raises(ValueError, match="plain name"):
        loops.factory("pypy/tideloop")


# -- the command --


def test_a_pypy_worker_is_one_exec_chain_pinned_with_a_clean_environment(
    no_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    monkeypatch.setenv(interpreters.PYPY_VENV_ENV, ".ci-venvs/some-pypy")
    monkeypatch.setattr(harness.shutil, "which", lambda name: f"/usr/bin/{name}")
    spec = {"kind": "primitive", "workload": "call_soon", "loop": "pypy/tideloop", "n": 10}

    interp, cmd = harness.worker_command("pypy/tideloop", spec, cfg())

    assert interp is PYPY
    assert interp.env() is None  # the command sets the worker's environment itself
    # taskset, chroot, env and sh each exec the next: the pid started is the worker's.
    assert cmd[:5] == ["taskset", "-c", "0", "chroot", str(no_root)]
    env_i = cmd.index("-i")
    assert cmd[env_i - 1] == "/usr/bin/env"
    sh = cmd.index("/bin/sh")
    assert cmd[sh + 1 : sh + 3] == ["-c", 'cd /src && exec "$0" "$@"']
    assert cmd[sh + 3 : sh + 6] == ["/src/.ci-venvs/some-pypy/bin/python", "-m", "bench._worker"]
    env = dict(arg.split("=", 1) for arg in cmd[env_i + 1 : sh])
    assert env["PYTHONPATH"] == "/src:/src/src"
    assert set(env) == {"PATH", "PYTHONPATH", "HOME", "LANG"}  # no PYTHONASYNCIODEBUG
    # The worker is given the plain name; the interpreter was the harness's choice.
    assert json.loads(cmd[-1]) == {**spec, "loop": "tideloop"}


def test_a_host_worker_runs_the_configured_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    monkeypatch.setattr(harness.shutil, "which", lambda name: f"/usr/bin/{name}")
    spec = {"kind": "primitive", "workload": "call_soon", "loop": "tideloop", "n": 10}

    interp, cmd = harness.worker_command("tideloop", spec, cfg("/opt/python3"))

    assert cmd[:6] == ["taskset", "-c", "0", "/opt/python3", "-m", "bench._worker"]
    assert json.loads(cmd[-1]) == spec
    env = interp.env()
    assert env is not None
    assert "PYTHONASYNCIODEBUG" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(REPO), str(REPO / "src")]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset")
def test_the_exec_chain_keeps_the_pid_and_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    # Everything after `chroot ROOT`, run on the host: the repository stands
    # in for /src and this interpreter for PyPy's.
    monkeypatch.setattr(interpreters, "INSIDE_REPO", PurePosixPath(REPO))
    monkeypatch.setattr(interpreters.Chroot, "python", lambda self: sys.executable)
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    code = (
        "import json, os; print(json.dumps([os.getpid(), sorted(os.sched_getaffinity(0)),"
        " os.getcwd(), 'PYTHONASYNCIODEBUG' in os.environ]))"
    )
    chain = PYPY.command(["-c", code])
    assert chain[:2] == ["chroot", str(PYPY.root())]
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.Popen(
        [*harness.pin(cpu), *chain[2:]], stdout=subprocess.PIPE, cwd="/", text=True
    )
    out, _ = proc.communicate(timeout=60)
    pid, affinity, cwd, debug = json.loads(out)
    assert pid == proc.pid
    assert affinity == [cpu]
    assert cwd == str(REPO)
    assert not debug


# -- paths --


def test_paths_translate_between_the_host_and_the_root(no_root: Path) -> None:
    sock = interpreters.SHARED_TMP / "tideloop-bench-x" / "s.sock"
    assert PYPY.to_inside(sock) == "/src/bench/.build/tmp/tideloop-bench-x/s.sock"
    assert PYPY.to_host("/src/bench/.build/tmp/tideloop-bench-x/s.sock") == sock
    assert PYPY.to_inside(REPO) == "/src"
    assert PYPY.to_inside(no_root / "usr" / "bin" / "pypy3") == "/usr/bin/pypy3"
    assert PYPY.to_host("/usr/bin/pypy3") == no_root / "usr" / "bin" / "pypy3"
    with pytest.raises(ValueError, match="neither in the repository"):
        PYPY.to_inside("/elsewhere/s.sock")
    with pytest.raises(ValueError, match="absolute"):
        PYPY.to_host("relative/s.sock")
    host = interpreters.Host()
    assert host.to_inside(sock) == str(sock)
    assert host.to_host(str(sock)) == sock


def test_the_shared_scratch_directory_is_in_the_repository_and_ignored() -> None:
    scratch = PYPY.scratch_dir()
    assert scratch.is_relative_to(REPO)
    assert interpreters.Host().scratch_dir() is None
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git checkout")
    probe = scratch / "tideloop-bench-x" / "s.sock"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(probe)], cwd=REPO, check=False
    ).returncode
    assert ignored == 0, f"{scratch} is not git-ignored"


# -- availability --


def test_without_the_root_a_pypy_loop_says_why_and_is_not_a_default(no_root: Path) -> None:
    reason = loops.unavailable_reason("pypy/tideloop")
    assert reason is not None
    assert f"no Debian root at {no_root}" in reason
    assert interpreters.SID_ROOT_ENV in reason
    assert "bash .ci/sid setup" in reason
    assert loops.version("pypy/tideloop") == "?"
    assert not loops.default("pypy/tideloop")
    assert not loops.default("pypy/asyncio")
    assert loops.default("tideloop")


def test_the_default_loops_leave_out_pypy_when_it_cannot_run(no_root: Path) -> None:
    class Stream:
        text = ""

        def write(self, s: str) -> None:
            self.text += s

    stream = Stream()
    assert run.choose_loops([], stream) == list(loops.HOST_LOOPS)  # type: ignore[arg-type]
    assert "not measuring pypy/asyncio, pypy/tideloop: no Debian root" in stream.text
    # Asked for, they are kept (and reported as skipped with the reason later).
    assert run.choose_loops(["pypy/tideloop", "asyncio"]) == ["asyncio", "pypy/tideloop"]


def test_a_missing_venv_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    monkeypatch.setenv(interpreters.SID_ROOT_ENV, str(root))
    monkeypatch.setenv(interpreters.PYPY_VENV_ENV, ".ci-venvs/no-such-venv")
    reason = loops.unavailable_reason("pypy/asyncio")
    assert reason is not None
    assert f"no PyPy venv at {REPO / '.ci-venvs' / 'no-such-venv'}" in reason
    assert interpreters.PYPY_VENV_ENV in reason

    monkeypatch.setenv(interpreters.PYPY_VENV_ENV, str(tmp_path / "outside"))
    reason = loops.unavailable_reason("pypy/asyncio")
    assert reason is not None
    assert "neither in the repository nor in the root" in reason


def test_pypy_loops_are_byte_compiled_by_pypy(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    monkeypatch.setattr(
        interpreters.Chroot, "byte_compile", lambda self, loop: compiled.append(loop)
    )
    loops.byte_compile("pypy/asyncio")  # the stdlib's: nothing of ours to compile
    loops.byte_compile("pypy/tideloop")
    assert compiled == ["tideloop"]


def test_pypy_asyncio_is_versioned_as_pypy(monkeypatch: pytest.MonkeyPatch) -> None:
    class PyPyVersion:
        major, minor, micro = 8, 0, 1

    monkeypatch.setattr(sys, "pypy_version_info", PyPyVersion, raising=False)
    monkeypatch.setattr(loops.platform, "python_version", lambda: "3.11.17")
    assert loops.version("asyncio") == "PyPy 8.0.1 (Python 3.11.17)"


# -- warm-up --


def test_a_jit_interpreter_warms_up_for_at_least_the_jit_warm_up() -> None:
    config = harness.Config(
        quick=False, repeats=1, warmup=1.0, duration=5.0, server_cpu=0, client_cpu=1, jit_warmup=8.0
    )
    assert PYPY.jit
    assert harness.warmup_for(PYPY, config) == 8.0
    assert harness.warmup_for(interpreters.Host(), config) == 1.0
    longer = harness.Config(
        quick=False, repeats=1, warmup=10.0, duration=5.0, server_cpu=0, client_cpu=1, jit_warmup=8
    )
    assert harness.warmup_for(PYPY, longer) == 10.0


@pytest.mark.parametrize(("loop", "warmup"), [("tideloop", 0.5), ("pypy/tideloop", 3.0)])
def test_a_primitive_worker_is_told_its_warm_up_and_it_is_recorded(
    loop: str, warmup: float, no_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.workloads import get

    started: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        started.append(cmd)
        out = {"status": "ok", "ops": 100, "seconds": 0.5, "cpu_user_s": 0.5, "cpu_sys_s": 0.0}
        return subprocess.CompletedProcess(cmd, 0, json.dumps(out) + "\n", "")

    monkeypatch.setattr(harness.subprocess, "run", fake_run)
    config = quick_config(warmup=0.5, duration=1.5, min_seconds=0.2, jit_warmup=3.0)
    result = harness.run_case(get("call_soon"), {"n": 1000}, loop, config)
    assert result["status"] == "ok", result
    assert result["warmup_s"] == warmup
    (cmd,) = started
    assert cmd[0] == ("chroot" if loop.startswith("pypy/") else sys.executable)
    spec = json.loads(cmd[-1])
    assert spec["loop"] == "tideloop"
    assert (spec["warmup"], spec["min_seconds"]) == (warmup, 0.2)


def test_chroot_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to("/usr/bin/pypy3")  # dangling on the host
    monkeypatch.setenv(interpreters.SID_ROOT_ENV, str(root))
    monkeypatch.setenv(interpreters.PYPY_VENV_ENV, str(root / "venv"))
    monkeypatch.setattr(interpreters.os, "geteuid", lambda: 1000)
    assert PYPY.python() == "/venv/bin/python"
    reason = loops.unavailable_reason("pypy/tideloop")
    assert reason is not None
    assert "chroot, which needs root" in reason
