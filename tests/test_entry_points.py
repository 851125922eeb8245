"""tideloop.run, install, the policy, and ``python -m tideloop``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tideloop
from tideloop._versions import CANT_OPEN_QUOTES_PATH


def run_python(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


# 3.14 deprecates the policy functions; the tests read and restore the policy
# through the non-warning names where they exist.
get_policy: Any = getattr(asyncio.events, "_get_event_loop_policy", None) or (
    asyncio.get_event_loop_policy
)
set_policy: Any = getattr(asyncio.events, "_set_event_loop_policy", None) or (
    asyncio.set_event_loop_policy
)
#: Does this Python deprecate the policy system (3.14+)?
POLICY_DEPRECATED = hasattr(asyncio.events, "_set_event_loop_policy")


@pytest.fixture
def restore_policy() -> Iterator[None]:
    policy = get_policy()
    yield
    set_policy(policy)


def install() -> None:
    """tideloop.install(), which warns on 3.14+ (checked by its own test)."""
    if POLICY_DEPRECATED:
        with pytest.warns(DeprecationWarning, match=r"tideloop.install\(\) sets asyncio's"):
            tideloop.install()
    else:
        tideloop.install()


def test_run_returns_result_on_tideloop() -> None:
    async def main() -> type:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop())

    assert tideloop.run(main()) is tideloop.Loop


def test_run_debug_flag() -> None:
    async def main() -> bool:
        return asyncio.get_running_loop().get_debug()

    assert tideloop.run(main(), debug=True) is True
    assert tideloop.run(main(), debug=False) is False


def test_run_propagates_exceptions() -> None:
    async def main() -> None:
        raise LookupError("from main")

    with pytest.raises(LookupError, match="from main"):
        tideloop.run(main())


def test_run_refuses_nested_call() -> None:
    async def main() -> None:
        coro = asyncio.sleep(0)
        try:
            with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
                tideloop.run(coro)
        finally:
            coro.close()

    tideloop.run(main())


def test_run_cancels_leftover_tasks() -> None:
    cancelled: list[bool] = []

    async def straggler() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        task = asyncio.ensure_future(straggler())
        await asyncio.sleep(0)
        assert not task.done()

    tideloop.run(main())
    assert cancelled == [True]


def test_new_event_loop_poller_choice() -> None:
    loop = tideloop.new_event_loop(poller="poll")
    try:
        assert loop._fds.poller.name == "poll"
    finally:
        loop.close()
    with pytest.raises(ValueError, match="unknown or unavailable poller 'nonsense'"):
        tideloop.new_event_loop(poller="nonsense")
    with pytest.raises(TypeError, match="poller must be a name or a Poller"):
        tideloop.new_event_loop(poller=42)  # type: ignore[arg-type]


def test_install_sets_the_policy(restore_policy: None) -> None:
    install()
    policy = get_policy()
    assert isinstance(policy, tideloop.EventLoopPolicy)
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, tideloop.Loop)
    finally:
        loop.close()

    async def main() -> type:
        return type(asyncio.get_running_loop())

    assert asyncio.run(main()) is tideloop.Loop


def test_install_warns_only_where_the_policy_is_deprecated(restore_policy: None) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tideloop.install()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    if POLICY_DEPRECATED:
        assert len(deprecations) == 1
        assert "loop_factory=tideloop.new_event_loop" in str(deprecations[0].message)
        assert deprecations[0].filename == __file__  # attributed to the caller
    else:
        assert deprecations == []


def test_install_without_a_policy_system(
    restore_policy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where asyncio has no policy system (planned for 3.16), install() says what to use."""
    monkeypatch.delattr(asyncio.events, "_set_event_loop_policy", raising=False)
    monkeypatch.delattr(asyncio, "set_event_loop_policy")
    with pytest.raises(RuntimeError, match=r"loop_factory=tideloop.new_event_loop"):
        tideloop._entry.install_policy()


def test_policy_class_is_an_asyncio_policy() -> None:
    base = getattr(asyncio.events, "_BaseDefaultEventLoopPolicy", None) or (
        asyncio.events.BaseDefaultEventLoopPolicy
    )
    assert issubclass(tideloop.EventLoopPolicy, base)
    assert tideloop.EventLoopPolicy is tideloop.EventLoopPolicy  # built once
    with pytest.raises(AttributeError):
        tideloop.does_not_exist  # type: ignore[attr-defined]  # noqa: B018


def test_import_emits_no_warnings() -> None:
    out = run_python("-W", "error", "-c", "import tideloop, tideloop.__main__")
    assert out.returncode == 0, out.stderr


def test_version_flag() -> None:
    out = run_python("-m", "tideloop", "--version")
    assert out.returncode == 0
    core = "native core" if tideloop.NATIVE else "pure-Python core: "
    assert out.stdout.startswith(f"tideloop {tideloop.__version__} ({core}")


def test_help_and_bad_usage() -> None:
    assert run_python("-m", "tideloop", "--help").stdout.startswith("usage:")
    out = run_python("-m", "tideloop")
    assert out.returncode == 2 and out.stdout.startswith("usage:")
    out = run_python("-m", "tideloop", "--bogus")
    assert out.returncode == 2 and "unknown option --bogus" in out.stderr


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, os

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.001)
        return type(loop).__module__ + "." + type(loop).__name__

    print(asyncio.run(main()))
    print(sys.argv)
    print(__name__)
    print(os.path.basename(sys.path[0]))
    loop = asyncio.new_event_loop()
    print(type(loop).__name__)
    loop.close()
    """
)


def test_dash_m_tideloop_runs_unmodified_script(tmp_path: Path) -> None:
    script_dir = tmp_path / "scripts"
    script_dir.mkdir()
    script = script_dir / "prog.py"
    script.write_text(SCRIPT)
    out = run_python("-m", "tideloop", str(script), "a", "--flag", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "tideloop._loop.Loop"
    assert lines[1] == repr([str(script), "a", "--flag"])
    assert lines[2] == "__main__"
    assert lines[3] == "scripts"
    assert lines[4] == "Loop"


def test_dash_m_tideloop_runs_module(tmp_path: Path) -> None:
    (tmp_path / "progmod.py").write_text(SCRIPT)
    out = run_python("-m", "tideloop", "-m", "progmod", "x", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "tideloop._loop.Loop"
    assert lines[2] == "__main__"


def test_script_exit_code_and_exceptions(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    assert run_python("-m", "tideloop", str(tmp_path / "exits.py")).returncode == 3
    (tmp_path / "raises.py").write_text("raise ValueError('boom')\n")
    out = run_python("-m", "tideloop", str(tmp_path / "raises.py"))
    assert out.returncode == 1
    assert "ValueError: boom" in out.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs SIGINT")
def test_ctrl_c_cancels_main_task(tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys
            import tideloop

            async def main():
                print("ready", flush=True)
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    print("cancelled", flush=True)
                    raise

            try:
                tideloop.run(main())
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(7)
            """
        )
    )
    # A shell runs background jobs with SIGINT ignored, an exec keeps that,
    # and Python then installs no KeyboardInterrupt handler: the child is
    # started through a launcher that restores the default first.
    launcher = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, sys.argv[1]])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 7, err
    assert out.split() == ["cancelled", "interrupted"]


def test_loop_is_an_abstract_event_loop() -> None:
    loop = tideloop.new_event_loop()
    try:
        assert isinstance(loop, asyncio.AbstractEventLoop)
        assert os.path.basename(tideloop.__file__) == "__init__.py"
    finally:
        loop.close()


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="3.14 removed child watchers")
def test_policy_has_the_child_watcher_api(restore_policy: None) -> None:
    install()
    policy = get_policy()
    # It is asyncio's own Unix default policy, with tideloop loops.
    assert isinstance(policy, asyncio.DefaultEventLoopPolicy)
    watcher = asyncio.ThreadedChildWatcher()  # type: ignore[attr-defined,unused-ignore]
    if sys.version_info >= (3, 12):
        with pytest.warns(DeprecationWarning):
            asyncio.set_child_watcher(watcher)  # type: ignore[attr-defined,unused-ignore]
        with pytest.warns(DeprecationWarning):
            assert asyncio.get_child_watcher() is watcher  # type: ignore[attr-defined,unused-ignore]
    else:
        asyncio.set_child_watcher(watcher)
        assert asyncio.get_child_watcher() is watcher


@pytest.mark.skipif(
    sys.version_info >= (3, 14),
    reason="3.14's C tasks read the running loop from the thread state: with the Python "
    "functions swapped in, no loop (the stdlib's included) can step a task",
)
def test_running_loop_functions_are_looked_up_at_call_time() -> None:
    """Code (and CPython's tests) may swap asyncio.events' running-loop functions."""
    events = asyncio.events
    saved = (events._set_running_loop, events._get_running_loop, events.get_running_loop)
    events._set_running_loop = events._py__set_running_loop  # type: ignore[attr-defined]
    events._get_running_loop = events._py__get_running_loop  # type: ignore[attr-defined]
    events.get_running_loop = events._py_get_running_loop  # type: ignore[attr-defined]
    loop = tideloop.new_event_loop()
    try:

        async def main() -> object:
            return events.get_running_loop()

        assert loop.run_until_complete(main()) is loop
        assert events._get_running_loop() is None
    finally:
        loop.close()
        events._set_running_loop, events._get_running_loop, events.get_running_loop = saved


STATS_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time

    async def slowpoke():
        await asyncio.sleep(0.001)
        time.sleep(0.12)  # blocks the loop
        await asyncio.sleep(0)

    async def main():
        await asyncio.gather(
            asyncio.create_task(slowpoke(), name="slowpoke"), asyncio.sleep(0.03)
        )

    asyncio.run(main())
    print("done")
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


def test_stats_reports_loop_metrics_and_slow_tasks(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(STATS_SCRIPT)
    out = run_python("-m", "tideloop", "--stats", str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"  # the report goes to stderr only
    report = out.stderr
    assert report.startswith("tideloop --stats: 1 loop, ran ")
    for field in ("iterations", "callbacks", "utilisation", "timer lag", "p99", "max"):
        assert field in report, report
    assert "slow callbacks  1 (>= 100 ms)" in report
    # The slow task by name, and where it stopped in the script.
    [line] = [line for line in report.splitlines() if "slowpoke" in line]
    assert f"{script}:7 in slowpoke" in line


def test_stats_threshold_option_and_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(STATS_SCRIPT)
    out = run_python("-m", "tideloop", "--stats", "--slow-threshold", "5", str(script), "4")
    assert out.returncode == 4  # the script's exit code survives; the report still prints
    assert "slow callbacks  0 (>= 5000 ms)" in out.stderr
    assert "slowpoke" not in out.stderr
    out = run_python("-m", "tideloop", "--stats", "--slow-threshold=0.05", str(script))
    assert "slow callbacks  1 (>= 50 ms)" in out.stderr


def test_stats_without_loops_and_bad_options(tmp_path: Path) -> None:
    script = tmp_path / "noloop.py"
    script.write_text("print('hi')\n")
    out = run_python("-m", "tideloop", "--stats", str(script))
    assert out.returncode == 0 and "created no tideloop loop" in out.stderr
    out = run_python("-m", "tideloop", "--slow-threshold", "abc", str(script))
    assert out.returncode == 2 and "not a number: 'abc'" in out.stderr
    out = run_python("-m", "tideloop", "--slow-threshold", "-1", str(script))
    assert out.returncode == 2 and "must be >= 0" in out.stderr
    out = run_python("-m", "tideloop", "--stats")
    assert out.returncode == 2 and "a script or -m MODULE is needed" in out.stderr


# -- python -m tideloop behaves like python ----------------------------------------------------
#
# Each case runs the same program with ``python`` and with ``python -m tideloop``
# and compares what a user sees: exit status, stderr (with python's program
# name replaced by ours), and what the program sees of itself.

PROG = "python -m tideloop"


def both(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], ...]:
    """(python ARGS, python -m tideloop ARGS), run in *cwd*."""
    return run_python(*args, cwd=cwd), run_python("-m", "tideloop", *args, cwd=cwd)


def as_python(err: str) -> str:
    """Our stderr with python's name for the program where we put ours."""
    return err.replace(f"{PROG}: ", f"{sys.executable}: ")


@pytest.mark.parametrize(
    "target",
    ["missing.py", "sub/missing.py", "emptydir", "."],
    ids=["missing-script", "missing-in-subdir", "dir-without-main", "cwd-without-main"],
)
def test_a_target_that_cannot_run_is_one_line_as_in_python(tmp_path: Path, target: str) -> None:
    (tmp_path / "emptydir").mkdir()
    plain, ours = both(target, cwd=tmp_path)
    assert plain.returncode in (1, 2)
    assert ours.returncode == plain.returncode
    assert ours.stdout == "" and len(ours.stderr.splitlines()) == 1, ours.stderr
    assert as_python(ours.stderr) == plain.stderr
    assert ours.stderr.startswith(f"{PROG}: ")


def test_the_console_script_names_itself(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("tideloop")
    if not script.exists():
        pytest.skip("tideloop's console script is not installed beside this interpreter")
    out = subprocess.run(
        [str(script), "missing.py"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert out.returncode == 2
    path = str(tmp_path / "missing.py")
    shown = repr(path) if CANT_OPEN_QUOTES_PATH else path  # as python says it here
    assert out.stderr == f"tideloop: can't open file {shown}: [Errno 2] No such file or directory\n"


@pytest.mark.parametrize("module", ["no_such_module", "pkg", "pkg.missing", "os.path.x"])
def test_a_module_that_cannot_run_is_one_line_as_in_python(tmp_path: Path, module: str) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    plain, ours = both("-m", module, cwd=tmp_path)
    assert plain.returncode == 1
    assert ours.returncode == 1
    assert as_python(ours.stderr) == plain.stderr
    assert len(ours.stderr.splitlines()) == 1


PROGRAMS = {
    "raises": "def f():\n    raise ValueError('boom')\n\nf()\n",
    "chained": (
        "def f():\n    raise ValueError('inner')\n\n"
        "try:\n    f()\nexcept ValueError as e:\n    raise KeyError('outer') from e\n"
    ),
    "syntax-error": "x = 1\ndef (\n",
    "keyboard-interrupt": "raise KeyboardInterrupt\n",
    "exit-message": "import sys\nsys.exit('bye')\n",
    "own-import-error": "import no_such_module_of_the_program\n",
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_programs_exception_reads_as_under_python(tmp_path: Path, name: str) -> None:
    """The same traceback, byte for byte: the program's frames only, the same exit status."""
    (tmp_path / "prog.py").write_text(PROGRAMS[name])
    plain, ours = both("prog.py", cwd=tmp_path)
    assert plain.returncode != 0
    assert (ours.returncode, ours.stdout, ours.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def test_an_exception_inside_the_loop_shows_the_programs_frames(tmp_path: Path) -> None:
    """Inside asyncio.run the loop's own frames stand where the stdlib loop's stand."""
    (tmp_path / "prog.py").write_text(
        "import asyncio\n\nasync def main():\n    raise ValueError('boom')\n\nasyncio.run(main())\n"
    )
    plain, ours = both("prog.py", cwd=tmp_path)
    assert ours.returncode == plain.returncode == 1

    def frames(err: str) -> list[str]:
        return [line.strip() for line in err.splitlines() if line.strip().startswith("File ")]

    prog = str(tmp_path / "prog.py")
    mine = [f for f in frames(plain.stderr) if prog in f]
    assert [f for f in frames(ours.stderr) if prog in f] == mine
    assert frames(ours.stderr)[0] == frames(plain.stderr)[0]  # the script's line first
    assert len(frames(ours.stderr)) == len(frames(plain.stderr))  # one loop frame for another
    assert "runpy" not in ours.stderr and "__main__.py" not in ours.stderr
    assert ours.stderr.endswith("ValueError: boom\n")


def test_a_modules_exception_shows_only_its_frames(tmp_path: Path) -> None:
    (tmp_path / "progmod.py").write_text(PROGRAMS["raises"])
    out = run_python("-m", "tideloop", "-m", "progmod", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines()[1].strip().startswith(f'File "{tmp_path / "progmod.py"}"')
    assert "runpy" not in out.stderr and "tideloop" not in out.stderr


def test_stats_still_reports_when_the_program_fails(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAMS["raises"])
    plain = run_python("prog.py", cwd=tmp_path)
    out = run_python("-m", "tideloop", "--stats", "prog.py", cwd=tmp_path)
    assert out.returncode == 1
    # The report (written as the program ends), then the traceback as python prints it.
    assert out.stderr.startswith("tideloop --stats:")
    assert out.stderr.endswith(plain.stderr)


SELF = textwrap.dedent(
    """
    import pickle, sys

    class Point:
        pass

    loader = type(globals().get("__loader__")).__name__
    print(repr(__file__), sys.argv, sys.path[0], __name__, __spec__ is None, loader)
    print(type(pickle.loads(pickle.dumps(Point()))).__qualname__)
    print(sys.modules["__main__"].__dict__ is globals())
    """
)


@pytest.mark.parametrize("how", ["plain", "symlink", "directory"])
def test_the_program_sees_what_python_shows_it(tmp_path: Path, how: str) -> None:
    """__file__, sys.argv, sys.path[0], __name__, __spec__, the __main__ module."""
    real = tmp_path / "real"
    real.mkdir()
    if how == "directory":
        (real / "__main__.py").write_text(SELF)
        target = "real"
    else:
        (real / "prog.py").write_text(SELF)
        target = "real/prog.py"
        if how == "symlink":
            (tmp_path / "links").mkdir()
            (tmp_path / "links" / "prog.py").symlink_to(real / "prog.py")
            target = "links/prog.py"
    plain, ours = both(target, "arg", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert (ours.returncode, ours.stdout, ours.stderr) == (0, plain.stdout, "")
    assert "Point\nTrue\n" in ours.stdout


# -- dir() and public names ---------------------------------------------------------------------


@pytest.mark.parametrize("module_name", ["tideloop", "tideloop.testing"])
def test_dir_lists_the_public_api_only(module_name: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    names = dir(module)
    public = [n for n in names if not n.startswith("_")]
    assert set(module.__all__) <= set(names)
    # Nothing the module's own code imports: typing helpers, stdlib modules, layers.
    for leaked in ("Any", "TypeVar", "annotations", "asyncio", "contextlib", "functools", "types"):
        assert leaked not in names, leaked
    assert not [n for n in names if n.startswith("_") and not n.endswith("__")]
    for name in public:  # and everything it lists is there
        value = getattr(module, name)
        if isinstance(value, type(module)):
            assert value.__name__ == f"{module_name}.{name}"
        else:
            assert name in module.__all__, name


def test_dir_shows_a_public_submodule_once_imported() -> None:
    out = run_python(
        "-c",
        "import tideloop; a = 'testing' in dir(tideloop); import tideloop.testing; "
        "print(a, 'testing' in dir(tideloop), '_loop' in dir(tideloop))",
    )
    assert out.stdout.split() == ["False", "True", "False"], out.stderr


def test_public_exceptions_have_public_module_paths() -> None:
    import importlib
    import pickle

    from tideloop import testing

    exceptions = [
        getattr(testing, n)
        for n in testing.__all__
        if isinstance(getattr(testing, n), type) and issubclass(getattr(testing, n), BaseException)
    ]
    assert {e.__name__ for e in exceptions} >= {"Deadlock", "PropertyViolation"}
    for exc in exceptions:
        assert exc.__module__ == "tideloop.testing", exc
        assert getattr(importlib.import_module(exc.__module__), exc.__qualname__) is exc
    copy = pickle.loads(pickle.dumps(testing.PropertyViolation("x")))
    assert type(copy) is testing.PropertyViolation and copy.args == ("x",)


def test_a_deadlock_prints_under_its_public_name(tmp_path: Path) -> None:
    (tmp_path / "stuck.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            from tideloop import testing

            async def main():
                await asyncio.Event().wait()

            testing.run(main(), virtual_time=True)
            """
        )
    )
    out = run_python("-m", "tideloop", "stuck.py", cwd=tmp_path)
    assert out.returncode == 1
    assert "\ntideloop.testing.Deadlock: deadlock at virtual time" in out.stderr, out.stderr


# -- python -m tideloop.demo ------------------------------------------------------------------


def test_demo_virtual_time_and_race_parts() -> None:
    """The demo's hour passes in virtual time; its race is found, shrunk to one, replayed."""
    out = run_python("-m", "tideloop.demo", "--part", "time", "--part", "race")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # the demo wraps its lines
    assert "1. Virtual time" in text and "2. A race found, shrunk and replayed" in text
    assert "Speed" not in text
    assert "60 heartbeats, 3,600 s of loop time (1 h) in" in text
    assert "On the stdlib loop: 100 runs, 0 failed." in text
    assert re.search(r"shrunk from \d+ deviation\(s\) to 1 in \d+ reruns", text), text
    assert "1 deviation(s) from the unperturbed schedule:" in text
    assert "Replayed from the tape: it fails again (AssertionError: the server read b'B\\n'" in text
    assert out.stderr == ""


def test_demo_race_program_passes_unperturbed_on_both_loops() -> None:
    from tideloop import demo

    asyncio.run(demo.requests_in_order())
    tideloop.run(demo.requests_in_order())


def test_demo_speed_part_compares_both_loops() -> None:
    out = run_python(
        "-m", "tideloop.demo", "--part", "speed", "--core", "--rounds", "1", "--requests", "3000"
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.strip()}
    assert rows["asyncio"][2] == "1.00x"
    assert rows["tideloop"][2].endswith("x") and float(rows["tideloop"][2][:-1]) > 0
    assert "python -m bench" in out.stdout
