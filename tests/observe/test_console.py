"""The live console: ``python -m tideloop console TARGET`` against real programs.

A program (`PROGRAM`) runs in a child process with a console socket: a
server with a client connected, a task that spins on ``sleep(0)``, one that
blocks the loop, one that sleeps, a child process, a task that fails and is
never retrieved, a coroutine never awaited. The console reads it with
``--once --json`` and ``--once``, and live under tmux (its screen refreshes,
``q`` quits). The socket is the program's user's only (its mode, its
directory, SO_PEERCRED), and attaching changes nothing the program does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tideloop
from children import SRC, python_env, run_python
from needs import missing
from tideloop._console import serve
from tideloop._console.client import Client
from tideloop._console.server import ConsoleError, ConsoleServer
from tideloop._core import quiet
from tideloop._versions import REMOTE_EXEC

PROGRAM = textwrap.dedent(
    """
    import asyncio, gc, os, signal, sys, time
    import tideloop

    # The test stops it with SIGINT, which a harness started in the
    # background (a shell's `&`) leaves ignored: Python then never raises
    # KeyboardInterrupt, and asyncio's runner never installs its handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    async def spin():
        while True:
            await asyncio.sleep(0)  # marker: spin

    async def sleeper():
        await asyncio.sleep(3600)  # marker: sleeper

    async def blocker():
        while True:
            await asyncio.sleep(0.2)
            time.sleep(0.15)  # blocks the loop

    async def handle(reader, writer):
        while data := await reader.read(100):  # marker: handler
            writer.write(data)
            await writer.drain()
        writer.close()

    async def fail():
        raise ValueError("lost")

    async def never():
        pass

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"hello")
        assert await r.read(5) == b"hello"
        tasks = [
            asyncio.create_task(spin(), name="spinner"),
            asyncio.create_task(sleeper(), name="sleeper"),
            asyncio.create_task(blocker(), name="blocker"),
        ]
        t = asyncio.create_task(fail(), name="failing")
        await asyncio.sleep(0.01)
        del t
        never()
        gc.collect()  # PyPy: both are reported when collected
        proc = await asyncio.create_subprocess_exec(
            "sleep", "30", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        print("ready", port, proc.pid, flush=True)
        try:
            await asyncio.sleep(3600)
        finally:
            proc.kill()
            await proc.wait()
            for task in tasks:
                task.cancel()
            w.close()
            server.close()
            print("done", flush=True)

    if os.environ.get("TIDELOOP_CONSOLE"):
        asyncio.run(main())  # python -m tideloop: the policy's loop
    else:
        tideloop.run(main(), console=sys.argv[1])
    """
)


def env() -> dict[str, str]:
    return python_env(PYTHONUNBUFFERED="1")


class Program:
    def __init__(self, proc: subprocess.Popen[str], path: str, line: str) -> None:
        self.proc = proc
        self.path = path
        _, port, child = line.split()
        self.port = int(port)
        self.child = int(child)

    def stop(self) -> tuple[str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=20)
        return out, err


@contextlib.contextmanager
def program(tmp_path: Path, *, via_environment: bool = False) -> Iterator[Program]:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    path = str(tmp_path / "console.sock")
    if via_environment:
        argv = [sys.executable, "-m", "tideloop", str(script)]
        environment = {**env(), "TIDELOOP_CONSOLE": path}
    else:
        argv = [sys.executable, str(script), path]
        environment = env()
    proc = subprocess.Popen(
        argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
        yield Program(proc, path, line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=20)


def console(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "tideloop", "console", *args, env=env(), timeout=timeout)


def line_in_program(marker: str) -> int:
    for number, text in enumerate(PROGRAM.splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(marker)


def test_once_json_shows_the_program_in_its_own_terms(tmp_path: Path) -> None:
    with program(tmp_path) as prog:
        mode = os.stat(prog.path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        done = console("--once", "--json", "--interval", "0.8", prog.path)
        assert done.returncode == 0, done.stderr
        snapshot = json.loads(done.stdout)
        out, err = prog.stop()
    assert snapshot["pid"] == prog.proc.pid
    (loop,) = snapshot["loops"]
    assert loop["running"] and loop["loop"] == 1
    tasks = {t["name"]: t for t in loop["tasks"]}
    assert {"spinner", "sleeper", "blocker"} <= set(tasks)
    spin = tasks["spinner"]
    assert spin["steps"] > 100 and spin["self_wakes"] >= spin["steps"] - 1
    assert spin["awaiting"][0] == f"prog.py:{line_in_program('marker: spin')} in spin"
    assert tasks["sleeper"]["state"] == "waiting"
    assert tasks["sleeper"]["awaiting"][-1].endswith("in sleep")
    assert tasks["blocker"]["busy"] >= 0.1
    handler = [
        t
        for t in loop["tasks"]
        if t["awaiting"][:1] == [f"prog.py:{line_in_program('marker: handler')} in handle"]
    ]
    assert len(handler) == 1
    kinds = {w["kind"] for w in loop["warnings"]}
    assert {"blocking", "self-waking", "never awaited", "never retrieved"} <= kinds, kinds
    blocking = [w for w in loop["warnings"] if w["kind"] == "blocking"]
    assert any("blocker" in w["text"] for w in blocking)
    retrieved = [w for w in loop["warnings"] if w["kind"] == "never retrieved"]
    assert "failing" in retrieved[0]["text"] and "lost" in retrieved[0]["text"]
    peers = {t["peer"] for t in loop["transports"]}
    assert f"127.0.0.1:{prog.port}" in peers
    assert all(t["buffered"] == 0 and t["reading_paused"] is False for t in loop["transports"])
    assert [s["addresses"] for s in loop["servers"]] == [[f"127.0.0.1:{prog.port}"]]
    assert loop["servers"][0]["connections"] == 1
    assert [(c["pid"], c["program"], c["returncode"]) for c in loop["subprocesses"]] == [
        (prog.child, "sleep", None)
    ]
    m = loop["metrics"]
    assert 0 < m["utilisation"] <= 1 and m["iterations_per_s"] > 0 and m["callbacks_per_s"] > 0
    # Attaching changed nothing the program does: it ran to its end, and the
    # reports asyncio makes went out as always.
    assert out.splitlines()[-1] == "done"
    assert "Task exception was never retrieved" in err
    assert "coroutine 'never' was never awaited" in err
    assert not os.path.exists(prog.path)  # removed when the run ended


def test_once_text_and_the_environment_variable_and_a_pid_target(tmp_path: Path) -> None:
    with program(tmp_path, via_environment=True) as prog:
        by_path = console("--once", "--interval", "0.3", prog.path)
        by_pid = console("--once", "--interval", "0.3", str(prog.proc.pid))
        prog.stop()
    for done in (by_path, by_pid):
        assert done.returncode == 0, done.stderr
        text = done.stdout
        assert f"pid {prog.proc.pid}" in text.splitlines()[0]
        for section in (
            "loop 1: utilisation",
            "warnings (",
            "tasks (",
            "transports (2):",
            "servers (1):",
            "subprocesses (1):",
        ):
            assert section in text, (section, text)
        assert "spinner" in text and "keeps waking itself" in text
    assert not os.path.exists(prog.path)  # removed at exit


def test_the_live_screen_under_tmux(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        missing("tmux is not installed (.ci/run installs it)", "TIDELOOP_REQUIRE_TMUX")
    session = f"tideloop-console-{os.getpid()}"
    with program(tmp_path) as prog:
        command = (
            f"env PYTHONPATH={SRC} {sys.executable} -m tideloop console {prog.path}; "
            f"echo exited $? > {tmp_path / 'exited'}; sleep 30"
        )
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "180", "-y", "50", command],
            check=True,
        )
        try:

            def screen() -> str:
                return subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout

            deadline = time.monotonic() + 15
            first = screen()
            while "spinner" not in first and time.monotonic() < deadline:
                time.sleep(0.2)
                first = screen()
            assert "tideloop console" in first and "loop 1: utilisation" in first, first
            assert "spinner" in first and "q: quit" in first
            # It refreshes: the header's clock moves within a couple of seconds.
            header = first.splitlines()[0]
            deadline = time.monotonic() + 5
            second = screen()
            while second.splitlines()[0] == header and time.monotonic() < deadline:
                time.sleep(0.2)
                second = screen()
            assert second.splitlines()[0] != header
            subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
            deadline = time.monotonic() + 10
            while not (tmp_path / "exited").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert (tmp_path / "exited").read_text().strip() == "exited 0"
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        out, _ = prog.stop()
    assert out.splitlines()[-1] == "done"


# ----------------------------------------------------------------------
# In-process: attaching, costs, blocking, security


async def idle_until(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.01)


def run_in_thread(loop: tideloop.Loop, coro: Any) -> threading.Thread:
    thread = threading.Thread(target=loop.run_until_complete, args=(coro,))
    thread.start()
    return thread


def test_nothing_is_attached_until_a_client_is_and_after_it_left(tmp_path: Path) -> None:
    loop = tideloop.new_event_loop()
    stop = threading.Event()
    path = str(tmp_path / "c.sock")
    server = serve(loop, path)
    thread = run_in_thread(loop, idle_until(stop))
    try:
        time.sleep(0.05)
        assert not loop._instruments.timed and loop._instruments.recorder is None
        with Client(path) as client:
            first = client.snapshot()
            assert loop._instruments.recorder is not None and loop._instruments.timed
            time.sleep(0.05)
            second = client.snapshot()
        assert first["loops"][0]["running"] and second["loops"][0]["tasks"][0]["steps"] > 0
        deadline = time.monotonic() + 5
        while loop._instruments.recorder is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop._instruments.recorder is None and not loop._instruments.timed
    finally:
        stop.set()
        thread.join(10)
        server.close()
        loop.close()
    assert "call_exception_handler" not in vars(loop)
    assert not os.path.exists(path)


def _quiet_becomes(expected: int) -> bool:
    deadline = time.monotonic() + 5
    while quiet.count != expected and time.monotonic() < deadline:
        time.sleep(0.005)
    return quiet.count == expected


def test_the_console_thread_is_quiet_while_nobody_is_attached(tmp_path: Path) -> None:
    """With nobody attached the console's thread is quiet (_core/quiet.py):
    loops go on skipping their zero-timeout polls as with no thread; while a
    client is attached it is not, and it leaves nothing counted once closed."""
    before = quiet.count  # a console another test left open is its own
    loop = tideloop.new_event_loop()
    path = str(tmp_path / "c.sock")
    server = serve(loop, path)
    try:
        assert _quiet_becomes(before + 1)
        with Client(path) as client:
            assert client.snapshot()["loops"]
            assert quiet.count == before
        assert _quiet_becomes(before + 1)
    finally:
        server.close()
        loop.close()
    assert _quiet_becomes(before)


def test_a_blocked_loop_is_reported_blocked(tmp_path: Path) -> None:
    loop = tideloop.new_event_loop()
    path = str(tmp_path / "c.sock")
    server = serve(loop, path)
    started = threading.Event()

    async def main() -> None:
        started.set()
        time.sleep(1.6)  # blocks the loop

    thread = run_in_thread(loop, main())
    try:
        started.wait(5)
        with Client(path) as client:
            snapshot = client.snapshot()
        (entry,) = snapshot["loops"]
        assert entry["blocked"] and entry["running"]
        assert entry["metrics"]["iterations"] >= 1
    finally:
        thread.join(10)
        server.close()
        loop.close()


def test_requests_other_than_snapshots_get_errors(tmp_path: Path) -> None:
    loop = tideloop.new_event_loop()
    path = str(tmp_path / "c.sock")
    server = serve(loop, path)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            sock.sendall(b'not json\n{"op": "exec"}\n{"op": "snapshot"}\n')
            data = b""
            while data.count(b"\n") < 3:
                data += sock.recv(65536)
        replies = [json.loads(line) for line in data.splitlines()]
        assert replies[0] == {"error": "not JSON"}
        assert "unknown request" in replies[1]["error"]
        assert replies[2]["loops"][0]["running"] is False
    finally:
        server.close()
        loop.close()


def test_the_socket_is_made_only_where_nobody_else_can_write(tmp_path: Path) -> None:
    loop = tideloop.new_event_loop()
    try:
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o775)
        with pytest.raises(ConsoleError, match="writable by other users"):
            serve(loop, str(shared / "c.sock"))
        with pytest.raises(ConsoleError, match="No such file"):
            serve(loop, str(tmp_path / "missing" / "c.sock"))
        taken = tmp_path / "taken"
        taken.write_text("not ours to replace")
        with pytest.raises(ConsoleError, match="the path exists"):
            serve(loop, str(taken))
        assert taken.read_text() == "not ours to replace"
        if os.getuid() == 0:
            theirs = tmp_path / "theirs"
            theirs.mkdir()
            os.chown(theirs, 65534, 65534)
            with pytest.raises(ConsoleError, match="belongs to uid 65534"):
                serve(loop, str(theirs / "c.sock"))
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["shared", "taken"] + (["theirs"] if os.getuid() == 0 else [])
        )  # no temporary directory left behind
    finally:
        loop.close()


@pytest.mark.skipif(os.getuid() != 0, reason="connecting as another user needs root")
def test_a_client_of_another_user_is_refused() -> None:
    loop = tideloop.new_event_loop()
    # A directory the other user can reach (pytest's are its owner's only).
    directory = tempfile.mkdtemp(prefix="tideloop-console-test-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "c.sock")
    server = serve(loop, path)
    try:
        os.chmod(path, 0o666)  # even with the file open to all, SO_PEERCRED refuses
        code = textwrap.dedent(
            f"""
            import os, socket
            os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX)
            s.connect({path!r})
            print(s.recv(1000).decode().strip())  # told at once, before asking anything
            print(repr(s.recv(1000)))
            """
        )
        done = run_python("-c", code, timeout=30)
        assert done.returncode == 0, done.stderr
        refusal, rest = done.stdout.splitlines()
        assert json.loads(refusal) == {"error": "refused: not the program's user"}
        assert rest == "b''"  # and disconnected
        assert server.refused == 1 and loop._instruments.recorder is None
    finally:
        server.close()
        loop.close()
        os.rmdir(directory)


def test_the_command_line_refuses_bad_usage(tmp_path: Path) -> None:
    assert console().returncode == 2
    assert "--json needs --once" in console("--json", "x").stderr
    assert "unknown option" in console("--nope", "x").stderr
    missing = console("--once", str(tmp_path / "none.sock"))
    assert missing.returncode == 2 and "cannot connect" in missing.stderr
    assert console("--help").stdout.startswith("usage: python -m tideloop console")


@pytest.mark.skipif(REMOTE_EXEC is None, reason="sys.remote_exec is Python 3.14+")
def test_attaching_by_pid_through_remote_exec(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, tideloop
            async def main():
                print("ready 0 0", flush=True)
                await asyncio.sleep(3600)
            tideloop.run(main())
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        done = console("--once", "--json", "--interval", "0.2", str(proc.pid))
        if done.returncode != 0 and "remote" in done.stderr.lower():
            pytest.skip(f"this interpreter refuses remote execution: {done.stderr.strip()}")
        assert done.returncode == 0, done.stderr
        (loop,) = json.loads(done.stdout)["loops"]
        assert [t["name"] for t in loop["tasks"]] == ["Task-1"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def test_console_server_close_is_idempotent(tmp_path: Path) -> None:
    server = ConsoleServer(tmp_path / "c.sock")
    server.close()
    server.close()
    assert not (tmp_path / "c.sock").exists()


def test_run_with_a_console_it_cannot_open_fails_before_running(tmp_path: Path) -> None:
    ran: list[bool] = []

    async def main() -> None:
        ran.append(True)

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    coro = main()
    with pytest.raises(ConsoleError, match="writable by other users"):
        tideloop.run(coro, console=shared / "c.sock")
    assert ran == [] and coro.cr_frame is None  # closed: no "never awaited" warning
    assert list(shared.iterdir()) == []


def test_run_with_a_console_serves_while_it_runs(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    seen: list[dict[str, Any]] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()

        def ask() -> None:
            with Client(str(path)) as client:
                seen.append(client.snapshot())

        await loop.run_in_executor(None, ask)
        return "ok"

    assert tideloop.run(main(), console=path) == "ok"
    assert not path.exists()
    (loop,) = seen[0]["loops"]
    assert loop["running"]
    (task,) = loop["tasks"]
    assert task["coro"].endswith("main") and task["state"] == "waiting"
    assert task["awaiting"][0].startswith("test_console.py:")


def test_a_program_that_exits_under_the_console_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    # `--once` takes a snapshot, waits an interval and takes another: the
    # program ends in between. The console says so in one line, exit 1.
    loop = tideloop.new_event_loop()
    path = str(tmp_path / "c.sock")
    server = serve(loop, path)

    async def until_attached() -> None:
        while loop._instruments.recorder is None:
            await asyncio.sleep(0.01)

    thread = run_in_thread(loop, until_attached())
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tideloop", "console", "--once", "--interval", "2", path],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        thread.join(20)
        server.close()  # the program ends: its console with it
        out, err = proc.communicate(timeout=20)
    finally:
        thread.join(10)
        server.close()
        loop.close()
    assert proc.returncode == 1, (out, err)
    assert out == "" and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert line.startswith("python -m tideloop console: "), line
    assert "closed the console connection" in line, line
