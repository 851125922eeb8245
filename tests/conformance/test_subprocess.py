"""Subprocesses: asyncio.create_subprocess_exec/shell, loop.subprocess_exec/shell.

Every test runs on the stdlib loop and on tideloop alike.
Children are ``python -c CODE`` (or ``true``/``cat``); every test waits for
its children, and many check that none is left a zombie. What these tests
pin that is easy to get wrong:

- ``await loop.subprocess_exec(...)`` returns after connection_made; data,
  pipe_connection_lost and process_exited come later, connection_lost last,
  once the process has exited *and* every pipe is closed;
- ``Process.wait()`` started before the child exits completes only when the
  transport finishes, i.e. after the pipes close too (a grandchild holding
  stdout keeps it waiting); started after the exit, it returns at once;
- closing the transport of a running child kills it (SIGKILL, returncode -9)
  and closes the pipes first: pipe_connection_lost 0, 1, 2, process_exited,
  connection_lost;
- after the transport finished, kill/terminate/send_signal raise
  ProcessLookupError; between exit and finish they are no-ops;
- ``communicate()`` without input closes stdin from 3.12 on; on 3.11 it
  leaves stdin open (a child reading stdin never sees EOF);
- argument errors are ValueError with asyncio's messages, raised before any
  child is started.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest

from ipc_support import (
    PY,
    SubprocessRecorder,
    assert_reaped,
    child,
    closing_all,
    closing_transport,
    open_pipe,
    pipe_files,
    py,
    read_nonblocking,
    reap_orphan,
    run,
    short_tempdir,
    spin,
    subreaper,
    until,
    zombie_children,
)

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL


@pytest.fixture(autouse=True)
def restore_signal_state() -> Iterator[None]:
    saved = signal.getsignal(signal.SIGUSR1)
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    signal.signal(signal.SIGUSR1, saved)
    signal.set_wakeup_fd(wakeup)


@pytest.fixture(autouse=True)
def no_zombies() -> Iterator[None]:
    before = set(zombie_children())
    yield
    assert set(zombie_children()) <= before, "a child was left a zombie"


# ----------------------------------------------------------------------
# Process (asyncio.create_subprocess_*)


def test_exec_communicate_output_and_returncode(loop: asyncio.AbstractEventLoop) -> None:
    """communicate() collects stdout and stderr; returncode is the exit status; the child is
    reaped by the loop."""

    async def main() -> None:
        code = "import sys; sys.stdout.write('out'); sys.stderr.write('err'); sys.exit(3)"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdout=PIPE, stderr=PIPE)
        ) as proc:
            assert isinstance(proc, asyncio.subprocess.Process)
            assert proc.pid > 0
            assert await proc.communicate() == (b"out", b"err")
            assert proc.returncode == 3
            assert await proc.wait() == 3
            assert_reaped(proc.pid)

    run(loop, main())


def test_process_streams_and_returncode_while_running(loop: asyncio.AbstractEventLoop) -> None:
    """stdin is a StreamWriter, stdout/stderr StreamReaders; returncode is None until exit."""

    async def main() -> None:
        code = "import sys; line = sys.stdin.readline(); print(line.strip()[::-1])"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdin=PIPE, stdout=PIPE, stderr=PIPE)
        ) as proc:
            assert isinstance(proc.stdin, asyncio.StreamWriter)
            assert isinstance(proc.stdout, asyncio.StreamReader)
            assert isinstance(proc.stderr, asyncio.StreamReader)
            assert proc.returncode is None
            proc.stdin.write(b"hello\n")
            await proc.stdin.drain()
            assert await proc.stdout.readline() == b"olleh\n"
            assert await proc.wait() == 0
            assert proc.returncode == 0
            assert await proc.stdout.read() == b""
            assert await proc.stderr.read() == b""

    run(loop, main())


def test_shell(loop: asyncio.AbstractEventLoop) -> None:
    """create_subprocess_shell runs the command through /bin/sh; str and bytes commands."""

    async def main() -> None:
        async with child(
            asyncio.create_subprocess_shell(
                "echo $((6 * 7)); echo oops >&2; exit 4", stdout=PIPE, stderr=PIPE
            )
        ) as proc:
            assert await proc.communicate() == (b"42\n", b"oops\n")
            assert proc.returncode == 4
        async with child(
            asyncio.create_subprocess_shell(b"printf '%s' bytes", stdout=PIPE)
        ) as proc2:
            assert await proc2.communicate() == (b"bytes", None)
            assert proc2.returncode == 0

    run(loop, main())


def test_communicate_with_input(loop: asyncio.AbstractEventLoop) -> None:
    """communicate(input) writes it, closes stdin, and reads until EOF."""

    async def main() -> None:
        code = "import sys; data = sys.stdin.buffer.read(); sys.stdout.buffer.write(data.upper())"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert await proc.communicate(b"shout " * 1000) == (b"SHOUT " * 1000, None)
            assert proc.returncode == 0

    run(loop, main())


def test_communicate_without_input(loop: asyncio.AbstractEventLoop) -> None:
    """communicate() with no input closes stdin from 3.12 on (the child sees EOF); on 3.11 it
    leaves stdin open, so a child reading it waits until stdin is closed by hand."""

    async def main() -> None:
        code = "import sys; print(len(sys.stdin.read()))"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            if sys.version_info >= (3, 12):
                assert await proc.communicate() == (b"0\n", None)
                assert proc.stdin.is_closing()
            else:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(proc.communicate(), 0.3)
                assert not proc.stdin.is_closing()
                proc.stdin.close()
                assert await proc.stdout.read() == b"0\n"
            assert await proc.wait() == 0

    run(loop, main())


def test_communicate_with_a_child_that_does_not_read(loop: asyncio.AbstractEventLoop) -> None:
    """communicate(input) to a child that exits without reading stdin does not raise (the
    broken pipe is swallowed)."""

    async def main() -> None:
        async with child(
            asyncio.create_subprocess_exec(*py("print('bye')"), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert await proc.communicate(b"x" * (4 << 20)) == (b"bye\n", None)
            assert proc.returncode == 0

    run(loop, main())


def test_drain_after_the_child_exited(loop: asyncio.AbstractEventLoop) -> None:
    """Once the child is gone (and with it stdin's reader), write() is dropped and drain()
    raises ConnectionResetError('Connection lost')."""

    async def main() -> None:
        async with child(
            asyncio.create_subprocess_exec(*py("pass"), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert proc.stdin is not None
            stdin = proc.stdin
            assert await proc.wait() == 0
            assert stdin.transport.is_closing()
            stdin.write(b"x" * (1 << 20))
            with pytest.raises(ConnectionResetError) as info:
                await stdin.drain()
            assert str(info.value) == "Connection lost"

    run(loop, main())


def test_large_data_through_cat(loop: asyncio.AbstractEventLoop) -> None:
    """50 MB through a child's stdin and back from its stdout without deadlock.

    10 MB on PyPy: there the stdlib loop's pipe transport copies all of its
    unsent buffer on every write (a bytearray that PyPy's os.write copies),
    so 50 MB take it some 20 s, 10 MB under a second.
    """
    data = os.urandom(1 << 20) * (10 if sys.implementation.name == "pypy" else 50)

    async def main() -> None:
        async with child(asyncio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)) as proc:
            out, err = await proc.communicate(data)
            assert err is None
            assert len(out) == len(data) and out == data
            assert proc.returncode == 0

    run(loop, main(), timeout=30)


def test_stdin_stdout_streaming(loop: asyncio.AbstractEventLoop) -> None:
    """write/drain into stdin while reading stdout concurrently: flow control both ways."""
    chunk = bytes(range(256)) * 256  # 64 KiB

    async def main() -> None:
        async with child(asyncio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            stdin = proc.stdin

            async def feed() -> None:
                for _ in range(80):
                    stdin.write(chunk)
                    await stdin.drain()
                stdin.close()
                await stdin.wait_closed()

            feeder = asyncio.ensure_future(feed())
            received = await proc.stdout.read()
            await feeder
            assert received == chunk * 80
            assert await proc.wait() == 0

    run(loop, main())


# ----------------------------------------------------------------------
# Signals and return codes


@pytest.mark.parametrize(
    ("method", "signum"),
    [("kill", signal.SIGKILL), ("terminate", signal.SIGTERM), ("send_signal", signal.SIGUSR1)],
)
def test_signalled_child_has_negative_returncode(
    loop: asyncio.AbstractEventLoop, method: str, signum: int
) -> None:
    """kill/terminate/send_signal: a child killed by signal N has returncode -N."""

    async def main() -> None:
        code = "import sys; print('ready', flush=True); sys.stdin.read()"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert proc.stdout is not None
            assert await proc.stdout.readline() == b"ready\n"
            if method == "send_signal":
                proc.send_signal(signum)
            else:
                getattr(proc, method)()
            assert await proc.wait() == -signum
            assert proc.returncode == -signum

    run(loop, main())


def test_child_that_kills_itself(loop: asyncio.AbstractEventLoop) -> None:
    """A child that dies of a signal on its own: returncode -signal."""

    async def main() -> None:
        code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
        async with child(asyncio.create_subprocess_exec(*py(code))) as proc:
            assert await proc.wait() == -signal.SIGTERM

    run(loop, main())


def test_signal_caught_by_the_child(loop: asyncio.AbstractEventLoop) -> None:
    """send_signal delivers a signal the child handles; it keeps running and exits normally."""

    async def main() -> None:
        code = (
            # os.write, not print: the signal may arrive while print('ready')
            # is still flushing, and 3.14's buffered writer refuses reentry.
            "import os, signal, sys\n"
            "signal.signal(signal.SIGUSR1, lambda *a: os.write(1, b'got usr1\\n'))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "sys.stdin.readline()\n"
        )
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdin=PIPE, stdout=PIPE)
        ) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            assert await proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGUSR1)
            assert await proc.stdout.readline() == b"got usr1\n"
            proc.stdin.write(b"\n\n")
            assert await proc.wait() == 0

    run(loop, main())


def test_signals_after_the_process_finished(loop: asyncio.AbstractEventLoop) -> None:
    """Once the transport has finished (connection_lost: exited, pipes closed),
    kill/terminate/send_signal raise ProcessLookupError. (wait() may return
    before that, at the exit: then they do nothing.)"""

    class Finished(asyncio.SubprocessProtocol):
        def __init__(self) -> None:
            self.lost = loop.create_future()

        def connection_lost(self, exc: BaseException | None) -> None:
            self.lost.set_result(exc)

    async def main() -> None:
        transport, protocol = await loop.subprocess_exec(Finished, *py("pass"), stdout=PIPE)
        try:
            assert await protocol.lost is None
            assert transport.get_returncode() == 0
            with pytest.raises(ProcessLookupError):
                transport.kill()
            with pytest.raises(ProcessLookupError):
                transport.terminate()
            with pytest.raises(ProcessLookupError):
                transport.send_signal(signal.SIGUSR1)
        finally:
            transport.close()

    run(loop, main())


def test_several_waiters(loop: asyncio.AbstractEventLoop) -> None:
    """Several concurrent wait() calls all get the return code."""

    async def main() -> None:
        async with child(
            asyncio.create_subprocess_exec(*py("import time; time.sleep(0.1)"))
        ) as proc:
            assert await asyncio.gather(proc.wait(), proc.wait(), proc.wait()) == [0, 0, 0]

    run(loop, main())


def test_signal_handler_and_children(loop: asyncio.AbstractEventLoop) -> None:
    """add_signal_handler(SIGUSR1) keeps working while children run and exit, and children
    are still reaped: each child signals the parent, every signal is handled."""

    async def main() -> None:
        got: list[int] = []
        loop.add_signal_handler(signal.SIGUSR1, got.append, 1)
        try:
            code = "import os, signal; os.kill(os.getppid(), signal.SIGUSR1)"
            for i in range(5):
                async with child(asyncio.create_subprocess_exec(*py(code))) as proc:
                    assert await proc.wait() == 0
                    await until(lambda i=i: len(got) > i, what="SIGUSR1 handled")
            assert got == [1] * 5
            procs = [await asyncio.create_subprocess_exec("true") for _ in range(5)]
            os.kill(os.getpid(), signal.SIGUSR1)
            assert await asyncio.gather(*(p.wait() for p in procs)) == [0] * 5
            await until(lambda: len(got) == 6, what="the sixth SIGUSR1")
        finally:
            assert loop.remove_signal_handler(signal.SIGUSR1)

    run(loop, main())


def test_many_concurrent_children(loop: asyncio.AbstractEventLoop) -> None:
    """50 children started and gathered at once: every exit is seen, none left a zombie."""

    async def main() -> None:
        procs = await asyncio.gather(
            *(asyncio.create_subprocess_exec("true", stdout=PIPE) for _ in range(25)),
            *(asyncio.create_subprocess_exec("false") for _ in range(25)),
        )
        codes = await asyncio.gather(*(p.wait() for p in procs))
        assert codes == [0] * 25 + [1] * 25
        for p in procs:
            assert_reaped(p.pid)

    run(loop, main(), timeout=30)


# ----------------------------------------------------------------------
# stdin / stdout / stderr


def test_devnull_and_stderr_to_stdout(loop: asyncio.AbstractEventLoop) -> None:
    """stdin=DEVNULL reads nothing; stderr=STDOUT merges into stdout (proc.stderr is None)."""

    async def main() -> None:
        code = (
            "import sys; sys.stdout.write('in=%r;' % sys.stdin.read()); sys.stdout.flush();"
            " sys.stderr.write('err')"
        )
        async with child(
            asyncio.create_subprocess_exec(
                *py(code), stdin=DEVNULL, stdout=PIPE, stderr=subprocess.STDOUT
            )
        ) as proc:
            assert proc.stdin is None and proc.stderr is None
            assert await proc.communicate() == (b"in='';err", None)

    run(loop, main())


def test_fd_and_file_objects_as_stdio(loop: asyncio.AbstractEventLoop, tmp_path: Any) -> None:
    """stdout as a raw fd, stdin as a file object, stderr as a file object: no pipe transport
    for them, the child uses them directly."""
    with open_pipe() as (r, w):

        async def main() -> None:
            src = tmp_path / "in.txt"
            src.write_bytes(b"from a file")
            with open(src, "rb") as fin, open(tmp_path / "err.txt", "wb") as ferr:
                code = (
                    "import sys; sys.stdout.write(sys.stdin.read().upper());"
                    " sys.stderr.write('to a file')"
                )
                async with child(
                    asyncio.create_subprocess_exec(
                        *py(code), stdin=fin, stdout=w.fileno(), stderr=ferr
                    )
                ) as proc:
                    assert proc.stdin is None and proc.stdout is None and proc.stderr is None
                    assert await proc.wait() == 0
            w.close()
            assert await read_nonblocking(r) == b"FROM A FILE"
            assert (tmp_path / "err.txt").read_bytes() == b"to a file"

        run(loop, main())


# ----------------------------------------------------------------------
# Arguments passed through to Popen


def test_popen_arguments(loop: asyncio.AbstractEventLoop, tmp_path: Any) -> None:
    """cwd, env, pass_fds, close_fds, start_new_session, process_group, preexec_fn, umask and
    executable all reach the child."""
    r, w = pipe_files()
    inherited_r, inherited_w = pipe_files()
    with closing_all(r, w, inherited_r, inherited_w):

        async def main() -> None:
            os.set_inheritable(inherited_w.fileno(), True)
            report = (
                "import json, os, signal, sys\n"
                "try:\n"
                f"    os.write({w.fileno()}, b'via pass_fds')\n"
                "except OSError:\n"
                "    pass\n"
                "def is_open(fd):\n"
                "    try:\n"
                "        os.fstat(fd)\n"
                "        return True\n"
                "    except OSError:\n"
                "        return False\n"
                # PyPy's signal.getsignal() reports SIG_DFL for a signal the
                # child inherited as ignored: ask the kernel (Linux) instead.
                "def usr1_ignored():\n"
                "    try:\n"
                "        with open('/proc/self/status') as f:\n"
                "            masks = [ln.split()[1] for ln in f if ln.startswith('SigIgn:')]\n"
                "        return bool(int(masks[0], 16) >> (signal.SIGUSR1 - 1) & 1)\n"
                "    except OSError:\n"
                "        return signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN\n"
                "print(json.dumps({\n"
                "    'cwd': os.getcwd(),\n"
                "    'env': os.environ.get('TIDELOOP_VAR'),\n"
                "    'home': os.environ.get('HOME'),\n"
                "    'sid_is_pid': os.getsid(0) == os.getpid(),\n"
                "    'pgid_is_pid': os.getpgid(0) == os.getpid(),\n"
                "    'usr1_ignored': usr1_ignored(),\n"
                "    'umask': os.umask(0),\n"
                f"    'inherited_open': is_open({inherited_w.fileno()}),\n"
                "}))\n"
            )

            def preexec() -> None:
                signal.signal(signal.SIGUSR1, signal.SIG_IGN)

            async def report_of(**kwargs: Any) -> dict[str, Any]:
                async with child(
                    asyncio.create_subprocess_exec(*py(report), stdout=PIPE, **kwargs)
                ) as proc:
                    out, _ = await proc.communicate()
                    assert proc.returncode == 0
                    result: dict[str, Any] = json.loads(out)
                    return result

            got = await report_of(
                cwd=tmp_path,
                env={"TIDELOOP_VAR": "set"},
                pass_fds=(w.fileno(),),
                start_new_session=True,
                preexec_fn=preexec,
                umask=0o027,
            )
            assert got == {
                "cwd": str(tmp_path),
                "env": "set",
                "home": None,
                "sid_is_pid": True,
                "pgid_is_pid": True,
                "usr1_ignored": True,
                "umask": 0o027,
                "inherited_open": False,  # close_fds=True by default
            }
            w.close()
            assert await read_nonblocking(r) == b"via pass_fds"

            got = await report_of(close_fds=False, process_group=0)
            assert got["inherited_open"] is True
            assert got["pgid_is_pid"] is True
            assert got["sid_is_pid"] is False
            assert got["usr1_ignored"] is False
            assert got["cwd"] == os.getcwd()

            async with child(
                asyncio.create_subprocess_exec(
                    "argv0-name", "-c", "echo $0", executable="/bin/sh", stdout=PIPE
                )
            ) as proc:
                assert await proc.communicate() == (b"argv0-name\n", None)

        run(loop, main())


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_restore_signals(loop: asyncio.AbstractEventLoop) -> None:
    """restore_signals (default True) resets the SIGPIPE/SIGXFSZ that Python ignores; with
    restore_signals=False the child inherits them ignored."""

    async def ignored_mask(**kwargs: Any) -> int:
        async with child(
            asyncio.create_subprocess_exec("cat", "/proc/self/status", stdout=PIPE, **kwargs)
        ) as proc:
            out, _ = await proc.communicate()
            [line] = [line for line in out.splitlines() if line.startswith(b"SigIgn:")]
            return int(line.split()[1], 16)

    async def main() -> None:
        sigpipe = 1 << (signal.SIGPIPE - 1)
        assert not await ignored_mask() & sigpipe
        assert await ignored_mask(restore_signals=False) & sigpipe

    run(loop, main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_GETPIPE_SZ is Linux")
def test_pipesize(loop: asyncio.AbstractEventLoop) -> None:
    """pipesize sets the capacity of the pipes asyncio creates."""

    async def main() -> None:
        code = "import fcntl; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ))"
        async with child(
            asyncio.create_subprocess_exec(*py(code), stdout=PIPE, pipesize=1 << 17)
        ) as proc:
            assert await proc.communicate() == (b"131072\n", None)

    run(loop, main())


# ----------------------------------------------------------------------
# Bad input


def test_missing_executable(loop: asyncio.AbstractEventLoop) -> None:
    """A program that does not exist (path or PATH lookup): FileNotFoundError naming it."""

    async def main() -> None:
        for program in ("/nonexistent/program", "tideloop-no-such-program"):
            with pytest.raises(FileNotFoundError) as info:
                await asyncio.create_subprocess_exec(program, stdin=PIPE, stdout=PIPE, stderr=PIPE)
            assert info.value.filename == program
        with pytest.raises(FileNotFoundError) as info:
            await asyncio.create_subprocess_exec(PY, executable="/nonexistent/exe", stdout=PIPE)
        assert info.value.filename == "/nonexistent/exe"

    run(loop, main())


def test_not_executable(loop: asyncio.AbstractEventLoop) -> None:
    """A file without execute permission, or a directory: PermissionError naming it."""

    async def main() -> None:
        with short_tempdir() as tmp:
            script = os.path.join(tmp, "script.sh")
            with open(script, "w") as f:
                f.write("#!/bin/sh\necho hi\n")
            os.chmod(script, 0o644)
            for program in (script, tmp):
                with pytest.raises(PermissionError) as info:
                    await asyncio.create_subprocess_exec(program, stdout=PIPE, stderr=PIPE)
                assert info.value.filename == program

    run(loop, main())


def test_missing_cwd(loop: asyncio.AbstractEventLoop) -> None:
    """A cwd that does not exist: FileNotFoundError naming the directory."""

    async def main() -> None:
        with pytest.raises(FileNotFoundError) as info:
            await asyncio.create_subprocess_exec(
                *py("pass"), cwd="/nonexistent/dir", stdin=PIPE, stdout=PIPE, stderr=PIPE
            )
        assert info.value.filename == "/nonexistent/dir"

    run(loop, main())


BAD_EXEC_ARGUMENTS = [
    ({"universal_newlines": True}, "universal_newlines must be False"),
    ({"text": True}, "text must be False"),
    ({"encoding": "utf-8"}, "encoding must be None"),
    ({"errors": "strict"}, "errors must be None"),
    ({"bufsize": 1}, "bufsize must be 0"),
    ({"bufsize": -1}, "bufsize must be 0"),
    ({"shell": True}, "shell must be False"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_EXEC_ARGUMENTS)
def test_exec_argument_errors(
    loop: asyncio.AbstractEventLoop, kwargs: dict[str, Any], message: str
) -> None:
    """Arguments asyncio refuses for exec, through both APIs: ValueError (exact message), no
    child started, the protocol factory not called."""

    async def main() -> None:
        with pytest.raises(ValueError) as info:
            await asyncio.create_subprocess_exec(*py("pass"), **kwargs)
        assert str(info.value) == message
        made: list[SubprocessRecorder] = []

        def factory() -> SubprocessRecorder:
            made.append(SubprocessRecorder(loop))
            return made[-1]

        with pytest.raises(ValueError) as info:
            await loop.subprocess_exec(factory, *py("pass"), **kwargs)
        assert str(info.value) == message
        assert made == []

    run(loop, main())


@pytest.mark.parametrize(
    ("cmd", "kwargs", "message"),
    [
        (["echo", "x"], {}, "cmd must be a string"),
        (None, {}, "cmd must be a string"),
        ("true", {"shell": False}, "shell must be True"),
        ("true", {"universal_newlines": True}, "universal_newlines must be False"),
        ("true", {"text": True}, "text must be False"),
        ("true", {"encoding": "utf-8"}, "encoding must be None"),
        ("true", {"errors": "strict"}, "errors must be None"),
        ("true", {"bufsize": 4096}, "bufsize must be 0"),
    ],
)
def test_shell_argument_errors(
    loop: asyncio.AbstractEventLoop, cmd: Any, kwargs: dict[str, Any], message: str
) -> None:
    """Arguments asyncio refuses for shell: ValueError (exact message), no child started."""

    async def main() -> None:
        with pytest.raises(ValueError) as info:
            await asyncio.create_subprocess_shell(cmd, **kwargs)
        assert str(info.value) == message
        with pytest.raises(ValueError) as info:
            await loop.subprocess_shell(lambda: SubprocessRecorder(loop), cmd, **kwargs)
        assert str(info.value) == message

    run(loop, main())


def test_default_valued_arguments_are_accepted(loop: asyncio.AbstractEventLoop) -> None:
    """The refused arguments at their harmless values are fine: text=False,
    universal_newlines=False, encoding=None, errors=None, bufsize=0, shell=False."""

    async def main() -> None:
        async with child(
            asyncio.create_subprocess_exec(
                *py("print('ok')"),
                stdout=PIPE,
                text=False,
                universal_newlines=False,
                encoding=None,
                errors=None,
                bufsize=0,
                shell=False,
            )
        ) as proc:
            assert await proc.communicate() == (b"ok\n", None)

    run(loop, main())


def test_unknown_popen_argument(loop: asyncio.AbstractEventLoop) -> None:
    """An argument Popen does not know: Popen's TypeError, no child, no fd leaked."""

    async def main() -> None:
        with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
            await asyncio.create_subprocess_exec(
                *py("pass"), stdin=PIPE, stdout=PIPE, stderr=PIPE, no_such_argument=1
            )

    run(loop, main())


# ----------------------------------------------------------------------
# SubprocessProtocol and the transport


def test_protocol_callbacks_and_transport(loop: asyncio.AbstractEventLoop) -> None:
    """loop.subprocess_exec: returns after connection_made; pipe_data_received(fd, bytes) per
    stream; each pipe's data comes before its pipe_connection_lost(fd, None); connection_lost
    (None) last, after process_exited. The transport's pid, returncode, pipe transports and
    extra info 'subprocess' (the Popen object)."""

    async def main() -> None:
        code = (
            "import sys; sys.stdout.write('out'); sys.stdout.flush();"
            " sys.stderr.write('err'); sys.exit(5)"
        )
        async with closing_transport(
            loop.subprocess_exec(lambda: SubprocessRecorder(loop), *py(code))
        ) as (transport, proto):
            # connection_made came first; the child's first bytes may already
            # have been read in the iterations subprocess_exec took to return
            # (seen on the stdlib loop, on a loaded machine).
            assert proto.events[0] == ("made",)
            assert proto.transport is transport
            assert isinstance(transport, asyncio.SubprocessTransport)
            assert transport.get_protocol() is proto
            pid = transport.get_pid()
            assert isinstance(pid, int) and pid > 0
            popen = transport.get_extra_info("subprocess")
            assert isinstance(popen, subprocess.Popen)
            assert popen.pid == pid
            assert isinstance(transport.get_pipe_transport(0), asyncio.WriteTransport)
            assert isinstance(transport.get_pipe_transport(1), asyncio.ReadTransport)
            assert isinstance(transport.get_pipe_transport(2), asyncio.ReadTransport)
            assert transport.get_pipe_transport(3) is None
            assert await proto.lost is None
            assert transport.get_returncode() == 5
            assert proto.exited.result() == 5
            assert bytes(proto.data[1]) == b"out" and bytes(proto.data[2]) == b"err"
            events = proto.events
            assert events[0] == ("made",) and events[-1] == ("lost", None)
            lost = {e[1]: i for i, e in enumerate(events) if e[0] == "pipe_lost"}
            assert sorted(lost) == [0, 1, 2]
            assert all(e[2] is None for e in events if e[0] == "pipe_lost")
            assert events.index(("data", 1)) < lost[1]
            assert events.index(("data", 2)) < lost[2]
            assert events.count(("exited",)) == 1
            assert not transport.is_closing()
            transport.close()
            assert transport.is_closing()
            assert_reaped(pid)

    run(loop, main())


def test_subprocess_shell_protocol(loop: asyncio.AbstractEventLoop) -> None:
    """loop.subprocess_shell with DEVNULL stdin: no pipe transport for fd 0."""

    async def main() -> None:
        async with closing_transport(
            loop.subprocess_shell(lambda: SubprocessRecorder(loop), "echo shell", stdin=DEVNULL)
        ) as (transport, proto):
            try:
                assert transport.get_pipe_transport(0) is None
                await proto.lost
                assert bytes(proto.data[1]) == b"shell\n"
                assert transport.get_returncode() == 0
                assert sorted(e[1] for e in proto.events if e[0] == "pipe_lost") == [1, 2]
            finally:
                transport.close()

    run(loop, main())


def test_writing_through_the_stdin_pipe_transport(loop: asyncio.AbstractEventLoop) -> None:
    """get_pipe_transport(0) writes to the child; closing it is the child's EOF; pausing the
    stdout pipe transport holds its data back."""

    async def main() -> None:
        code = "import sys; sys.stdout.write(sys.stdin.read()[::-1])"
        async with closing_transport(
            loop.subprocess_exec(lambda: SubprocessRecorder(loop), *py(code))
        ) as (transport, proto):
            try:
                stdout: Any = transport.get_pipe_transport(1)
                stdout.pause_reading()
                stdin: Any = transport.get_pipe_transport(0)
                stdin.write(b"abc")
                stdin.write(b"def")
                stdin.close()
                assert await proto.exited == 0
                await asyncio.sleep(0.05)
                assert bytes(proto.data[1]) == b""
                stdout.resume_reading()
                assert await proto.lost is None
                assert bytes(proto.data[1]) == b"fedcba"
            finally:
                transport.close()

    run(loop, main())


def test_pipes_closing_before_exit(loop: asyncio.AbstractEventLoop) -> None:
    """A child that closes stdin, stdout and stderr and keeps running: pipe_connection_lost for
    all three while get_returncode() is still None; process_exited and connection_lost come
    when it exits."""
    with open_pipe() as (r, w):

        async def main() -> None:
            code = f"import os; os.close(0); os.close(1); os.close(2); os.read({r.fileno()}, 1)"
            async with closing_transport(
                loop.subprocess_exec(
                    lambda: SubprocessRecorder(loop), *py(code), pass_fds=(r.fileno(),)
                )
            ) as (transport, proto):
                try:
                    r.close()
                    await until(lambda: len([e for e in proto.events if e[0] == "pipe_lost"]) == 3)
                    await asyncio.sleep(0.05)
                    assert transport.get_returncode() is None
                    assert ("exited",) not in proto.events
                    w.close()  # the child's read returns: it exits
                    assert await proto.lost is None
                    names = proto.names()
                    assert names == [
                        "made",
                        "pipe_lost",
                        "pipe_lost",
                        "pipe_lost",
                        "exited",
                        "lost",
                    ]
                    assert transport.get_returncode() == 0
                finally:
                    transport.close()

        run(loop, main())


GRANDCHILD = (
    "import subprocess, sys\n"
    "gc = subprocess.Popen([sys.executable, '-c', 'import os; os.read({fd}, 1)'],"
    " pass_fds=[{fd}])\n"
    "print(gc.pid, flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_exit_while_a_grandchild_holds_the_pipes(loop: asyncio.AbstractEventLoop) -> None:
    """The child exits while a grandchild still holds its stdin/stdout: process_exited comes
    first (returncode known), the pipes and connection_lost only when the grandchild exits."""
    with open_pipe() as (r, w), subreaper():

        async def main() -> None:
            async with closing_transport(
                loop.subprocess_exec(
                    lambda: SubprocessRecorder(loop),
                    *py(GRANDCHILD.format(fd=r.fileno())),
                    stderr=DEVNULL,
                    pass_fds=(r.fileno(),),
                )
            ) as (transport, proto):
                gpid = 0
                try:
                    r.close()
                    await until(lambda: proto.data[1].endswith(b"\n"), what="grandchild pid")
                    gpid = int(proto.data[1])
                    stdin: Any = transport.get_pipe_transport(0)
                    stdin.write(b"exit now\n")
                    assert await proto.exited == 0
                    await asyncio.sleep(0.1)
                    assert proto.names() == ["made", "data", "exited"]
                    w.close()  # the grandchild exits, closing the pipes
                    assert await proto.lost is None
                    assert proto.names()[2:] == ["exited", "pipe_lost", "pipe_lost", "lost"]
                finally:
                    transport.close()
                    w.close()
                    if gpid:
                        reap_orphan(gpid)

        run(loop, main())


@pytest.mark.divergence("wait-returns-at-exit")
def test_wait_with_a_grandchild_holding_the_pipes(loop: asyncio.AbstractEventLoop) -> None:
    """Process.wait() started before the child exits returns at the exit, while a grandchild
    still holds the pipes (gh-119710); returncode is set then; wait() started after the exit
    returns at once; signals after the exit are no-ops; the pipes end when the grandchild
    lets go."""
    with open_pipe() as (r, w), subreaper():

        async def main() -> None:
            async with child(
                asyncio.create_subprocess_exec(
                    *py(GRANDCHILD.format(fd=r.fileno())),
                    stdin=PIPE,
                    stdout=PIPE,
                    stderr=DEVNULL,
                    pass_fds=(r.fileno(),),
                )
            ) as proc:
                assert proc.stdin is not None and proc.stdout is not None
                gpid = 0
                try:
                    r.close()
                    gpid = int(await proc.stdout.readline())
                    early = asyncio.ensure_future(proc.wait())
                    await spin()
                    assert not early.done()
                    proc.stdin.write(b"exit now\n")
                    assert await asyncio.wait_for(early, 5.0) == 0
                    assert proc.returncode == 0
                    assert await asyncio.wait_for(proc.wait(), 1.0) == 0
                    proc.send_signal(signal.SIGUSR1)
                    proc.terminate()
                    await asyncio.sleep(0.1)
                    assert not proc.stdout.at_eof()  # the grandchild still holds it
                    w.close()
                    assert await proc.stdout.read() == b""
                finally:
                    w.close()
                    if gpid:
                        reap_orphan(gpid)

        run(loop, main())


def test_close_kills_a_running_child(loop: asyncio.AbstractEventLoop) -> None:
    """transport.close() on a running child closes the pipes and kills it: pipe_connection_lost
    0, 1, 2, then process_exited with returncode -SIGKILL, then connection_lost(None)."""

    async def main() -> None:
        async with closing_transport(
            loop.subprocess_exec(
                lambda: SubprocessRecorder(loop), *py("import time; time.sleep(60)")
            )
        ) as (transport, proto):
            pid = transport.get_pid()
            transport.close()
            assert transport.is_closing()
            assert await proto.lost is None
            assert proto.events == [
                ("made",),
                ("pipe_lost", 0, None),
                ("pipe_lost", 1, None),
                ("pipe_lost", 2, None),
                ("exited",),
                ("lost", None),
            ]
            assert transport.get_returncode() == -signal.SIGKILL
            assert_reaped(pid)
            with pytest.raises(ProcessLookupError):
                transport.kill()

    run(loop, main())


def test_close_after_exit_does_not_kill(loop: asyncio.AbstractEventLoop) -> None:
    """close() after the child exited keeps its real return code."""

    async def main() -> None:
        async with closing_transport(
            loop.subprocess_exec(
                lambda: SubprocessRecorder(loop), *py("import sys; sys.exit(9)"), stdin=DEVNULL
            )
        ) as (transport, proto):
            assert await proto.exited == 9
            transport.close()
            await proto.lost
            assert transport.get_returncode() == 9

    run(loop, main())


def test_bad_input_through_the_protocol_api(loop: asyncio.AbstractEventLoop) -> None:
    """loop.subprocess_exec with a missing program: FileNotFoundError, no callback called."""

    async def main() -> None:
        made: list[SubprocessRecorder] = []

        def factory() -> SubprocessRecorder:
            made.append(SubprocessRecorder(loop))
            return made[-1]

        with pytest.raises(FileNotFoundError):
            await loop.subprocess_exec(factory, "/nonexistent/program")
        await spin()
        assert all(p.events == [] for p in made)

    run(loop, main())


# ----------------------------------------------------------------------
# The child starts on a thread of its own (divergence child-starts-off-loop)


class GatedPopen:
    """subprocess.Popen behind a gate that only a callback of the loop opens: a Popen
    that blocks the loop's thread waits in vain (at most *patience* seconds)."""

    def __init__(self, patience: float = 10.0) -> None:
        self.gate = threading.Event()
        self.patience = patience
        self.opened: list[bool] = []
        self.started: list[subprocess.Popen[bytes]] = []
        self.thread_ids: list[int] = []
        self._real = subprocess.Popen

    def __call__(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        self.thread_ids.append(threading.get_ident())
        self.opened.append(self.gate.wait(self.patience))
        proc = self._real(*args, **kwargs)
        self.started.append(proc)
        return proc


@pytest.mark.divergence("child-starts-off-loop")
def test_the_loop_runs_while_a_child_starts(loop: asyncio.AbstractEventLoop) -> None:
    gated = GatedPopen()

    async def main() -> None:
        loop.call_soon(gated.gate.set)
        with mock.patch("subprocess.Popen", gated):
            proc = await asyncio.create_subprocess_exec(*py("print('ran')"), stdout=PIPE)
        assert await proc.communicate() == (b"ran\n", None)
        assert gated.opened == [True]
        assert gated.thread_ids != [threading.get_ident()]

    run(loop, main())


def test_errors_of_a_child_started_off_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Popen's own exceptions (raised in tideloop's spawn thread) reach the caller as
    they are on the stdlib loop."""

    async def main() -> None:
        with pytest.raises(FileNotFoundError) as missing:
            await asyncio.create_subprocess_exec("/nonexistent/program")
        assert missing.value.filename == "/nonexistent/program"
        with pytest.raises(FileNotFoundError) as bad_cwd:
            await asyncio.create_subprocess_exec(*py("pass"), cwd="/nonexistent/dir")
        assert bad_cwd.value.filename == "/nonexistent/dir"
        with pytest.raises(PermissionError):
            await asyncio.create_subprocess_exec("/")

    run(loop, main())


@pytest.mark.divergence("child-starts-off-loop")
def test_a_spawn_cancelled_meanwhile_kills_and_reaps_its_child(
    loop: asyncio.AbstractEventLoop,
) -> None:
    gated = GatedPopen()

    async def main() -> None:
        with mock.patch("subprocess.Popen", gated):
            task = asyncio.ensure_future(
                asyncio.create_subprocess_exec(*py("import time; time.sleep(60)"), stdout=PIPE)
            )
            await until(lambda: bool(gated.thread_ids), what="the spawn thread")
            task.cancel()
            await spin()
            assert not task.done()  # it waits for the spawn, as asyncio's Popen would
            gated.gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task
        # As on the stdlib loop, the cancelled call returns once its child is
        # killed and reaped.
        proc = gated.started[0]
        assert proc.returncode == -signal.SIGKILL
        assert proc.stdout is not None and proc.stdout.closed
        assert_reaped(proc.pid)

    run(loop, main())


@pytest.mark.divergence("child-starts-off-loop")
def test_a_spawn_that_outlives_its_loop_kills_and_reaps_its_child(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    gated = GatedPopen()
    own = loop_factory()
    with mock.patch("subprocess.Popen", gated):
        task = own.create_task(asyncio.create_subprocess_exec(*py("import time; time.sleep(60)")))
        own.run_until_complete(until(lambda: bool(gated.thread_ids), what="the spawn thread"))
        # The loop stops and closes with the spawn under way (its task is
        # dropped on purpose: asyncio would log it as destroyed while pending).
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        own.close()
        gated.gate.set()
        spawner = next(t for t in threading.enumerate() if t.name == "tideloop-spawn")
        spawner.join(10)
    assert not spawner.is_alive()
    proc = gated.started[0]
    assert proc.returncode == -signal.SIGKILL  # killed and waited for by the thread


@pytest.mark.divergence("child-starts-off-loop")
def test_with_a_sigchld_handler_the_child_starts_on_the_loop(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A SIGCHLD handler may reap every child (asyncio's FastChildWatcher does): then the
    child starts on the loop's thread and is watched before such a handler can run."""
    gated = GatedPopen(patience=0)

    async def main() -> None:
        loop.add_signal_handler(signal.SIGCHLD, lambda: None)
        try:
            with mock.patch("subprocess.Popen", gated):
                proc = await asyncio.create_subprocess_exec(*py("raise SystemExit(7)"))
            assert await proc.wait() == 7
        finally:
            loop.remove_signal_handler(signal.SIGCHLD)
        assert gated.thread_ids == [threading.get_ident()]

    run(loop, main())
