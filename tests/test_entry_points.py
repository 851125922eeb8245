"""tideloop.run, install, the policy, and ``python -m tideloop``."""

from __future__ import annotations

import asyncio
import os
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
