"""Helpers shared by test_datagram, test_pipes, test_pty and test_subprocess (no tests here).

Everything here works on any asyncio loop. The tests that use it are
black-box: they go through asyncio's public API only, so that the same test
passes on the stdlib loop and, once the feature is built, on tideloop.
Until then they are strict expected failures on tideloop, and they must fail
there for the right reason (the loop method raising NotImplementedError), not
hang or leak: hence `run`'s timeout, and file objects (whose close is
idempotent) instead of raw fds, so a test can close everything in a
``finally`` whether or not a transport took ownership.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")

#: Bound on a whole test body: a hang fails fast instead of running into pytest-timeout.
TIMEOUT = 10.0

#: The interpreter running the tests: child programs are ``python -c CODE``.
PY = sys.executable


def run(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], timeout: float = TIMEOUT
) -> T:
    """Run *coro* to completion on *loop*, failing with TimeoutError after *timeout* seconds."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


async def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Let the loop run until *predicate* is true (checked every millisecond)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.001)


async def spin(iterations: int = 10) -> None:
    """Let the loop run a few iterations (poll included) without waiting on anything."""
    for _ in range(iterations):
        await asyncio.sleep(0)


@contextlib.contextmanager
def short_tempdir() -> Iterator[str]:
    """A fresh directory with a short path (AF_UNIX paths are limited to ~108 bytes)."""
    path = tempfile.mkdtemp(prefix="tl-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def closing_all(*objs: IO[Any] | socket.socket) -> Iterator[None]:
    """Close every file object or socket on exit (closing twice is harmless for both)."""
    try:
        yield
    finally:
        for obj in objs:
            obj.close()


@contextlib.contextmanager
def open_pipe() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """`pipe_files`, both ends closed on exit (closing one twice is harmless)."""
    r, w = pipe_files()
    with closing_all(r, w):
        yield r, w


@contextlib.contextmanager
def fifo_files() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """A named pipe (os.mkfifo) in a fresh directory, both ends open, non-blocking and
    unbuffered (read end, write end); closed, and the directory removed, on exit."""
    with short_tempdir() as tmp:
        path = os.path.join(tmp, "fifo")
        os.mkfifo(path)
        r = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0)
        w = os.fdopen(os.open(path, os.O_WRONLY | os.O_NONBLOCK), "wb", buffering=0)
        with closing_all(r, w):
            yield r, w


def pipe_files() -> tuple[IO[bytes], IO[bytes]]:
    """An os.pipe() as unbuffered file objects (read end, write end)."""
    r, w = os.pipe()
    return os.fdopen(r, "rb", buffering=0), os.fdopen(w, "wb", buffering=0)


async def read_nonblocking(f: IO[bytes] | int, n: int | None = None, timeout: float = 5.0) -> bytes:
    """Read *n* bytes (or, if n is None, up to EOF) from a pipe or pty end without blocking the
    loop: the fd is made non-blocking and polled every millisecond. A blocking read could hang
    the test beyond any asyncio timeout if the transport under test misbehaves."""
    fd = f if isinstance(f, int) else f.fileno()
    os.set_blocking(fd, False)
    got = bytearray()
    eof = False

    def ready() -> bool:
        nonlocal eof
        while not eof and (n is None or len(got) < n):
            try:
                chunk = os.read(fd, 1 << 20 if n is None else n - len(got))
            except BlockingIOError:
                return False
            except OSError as exc:  # a pty master after the slave closed: EIO is the end
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                eof = True
            got.extend(chunk)
        return True

    await until(ready, timeout, f"{n if n is not None else 'all'} bytes from fd {fd}")
    return bytes(got)


async def data_then_eof(
    proto: Any, send: Callable[[bytes], object], end: Callable[[], object], *chunks: bytes
) -> None:
    """*chunks*, each sent with *send*, reach *proto* (a `Recorder` of a read transport);
    then *end* (the writer ends its side) brings eof_received and connection_lost(None)."""
    for chunk in chunks:
        send(chunk)
    data = b"".join(chunks)
    assert await proto.wait_for_bytes(len(data)) == data
    end()
    assert await proto.lost is None
    assert proto.events == ["made", "data", "eof", "lost"]


_TP = TypeVar("_TP")


@contextlib.asynccontextmanager
async def closing_transport(
    created: Awaitable[tuple[Any, _TP]], timeout: float = 2.0
) -> AsyncIterator[tuple[Any, _TP]]:
    """``async with closing_transport(loop.connect_read_pipe(...)) as (transport, protocol)``:
    the transport is closed on the way out, even if the test failed, and its protocol's
    ``lost`` future (if it has one) awaited for at most *timeout* seconds, so that a failing
    test neither leaves a registered fd or a running child behind nor hangs."""
    transport, protocol = await created
    try:
        yield transport, protocol
    finally:
        transport.close()
        lost = getattr(protocol, "lost", None)
        if isinstance(lost, asyncio.Future):
            await asyncio.wait([lost], timeout=timeout)
        else:
            await spin()


@contextlib.asynccontextmanager
async def child(
    created: Awaitable[asyncio.subprocess.Process], timeout: float = 5.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``async with child(asyncio.create_subprocess_exec(...)) as proc``: on the way out, a
    child still running (the test failed) is killed, and waited for (bounded)."""
    proc = await created
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await asyncio.wait([asyncio.ensure_future(proc.wait())], timeout=timeout)


# ----------------------------------------------------------------------
# Datagram endpoints


class DatagramRecorder(asyncio.DatagramProtocol):
    """Records every callback of a datagram endpoint."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Any = None
        self.events: list[str] = []
        self.datagrams: list[tuple[bytes, Any]] = []
        self.errors: list[Exception] = []
        self.made: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[Exception | None] = loop.create_future()
        self.lost_calls = 0
        self.paused = 0
        self.resumed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")
        self.transport = transport
        self.made.set_result(None)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        assert type(data) is bytes, type(data)
        self.events.append("datagram")
        self.datagrams.append((data, addr))

    def error_received(self, exc: Exception) -> None:
        self.events.append("error")
        self.errors.append(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost_calls += 1
        if not self.lost.done():
            self.lost.set_result(exc)

    def pause_writing(self) -> None:
        self.events.append("pause")
        self.paused += 1

    def resume_writing(self) -> None:
        self.events.append("resume")
        self.resumed += 1

    async def wait_datagrams(self, n: int, timeout: float = 5.0) -> list[tuple[bytes, Any]]:
        await until(lambda: len(self.datagrams) >= n, timeout, f"{n} datagrams")
        return self.datagrams

    async def wait_errors(self, n: int, timeout: float = 5.0) -> list[Exception]:
        await until(lambda: len(self.errors) >= n, timeout, f"{n} errors")
        return self.errors


# ----------------------------------------------------------------------
# Subprocesses


def py(code: str) -> tuple[str, str, str]:
    """The argv of a child that runs *code* with this interpreter."""
    return (PY, "-c", code)


class SubprocessRecorder(asyncio.SubprocessProtocol):
    """Records every SubprocessProtocol callback in order, with the data per fd."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Any = None
        self.events: list[tuple[Any, ...]] = []
        self.data: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.exited: asyncio.Future[int | None] = loop.create_future()
        self.lost: asyncio.Future[Exception | None] = loop.create_future()
        self.paused = 0
        self.resumed = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append(("made",))
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        if self.events[-1] != ("data", fd):
            self.events.append(("data", fd))
        self.data[fd] += data

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.events.append(("pipe_lost", fd, exc))

    def process_exited(self) -> None:
        self.events.append(("exited",))
        self.exited.set_result(self.transport.get_returncode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", exc))
        self.lost.set_result(exc)

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        self.resumed += 1

    def names(self) -> list[str]:
        """The events without their arguments, e.g. ['made', 'data', 'pipe_lost', ...]."""
        return [str(e[0]) for e in self.events]


def assert_reaped(pid: int) -> None:
    """*pid* is not a zombie child of ours: the loop has already waited for it."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError(f"child {pid} was not reaped by the loop")


def zombie_children() -> list[int]:
    """Our children that have exited and nobody has waited for (Linux /proc)."""
    me = os.getpid()
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may contain spaces, so split after ')'.
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" and int(fields[1]) == me:
                found.append(int(entry))
    return found


def wait_until_zombie(pid: int, timeout: float = 10.0) -> None:
    """Block until child *pid* has exited, without reaping it (it stays a zombie).

    ``os.waitid(WEXITED | WNOWAIT)`` where this Python has it; PyPy has no
    ``os.waitid``, so there this polls the child's state in /proc/PID/stat.
    """
    if hasattr(os, "waitid"):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return
    import time

    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/stat") as f:
            # pid (comm) state ...: comm may contain spaces, so split after ')'.
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"child {pid} did not exit within {timeout} s")
        time.sleep(0.002)


_PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Make this process the reaper of orphaned descendants (Linux), so that a test can
    wait for a grandchild whose parent exited; yields False where that is not possible."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc_name is None:
        yield False
        return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        yield False
        return
    try:
        yield True
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def reap_orphan(pid: int, timeout: float = 5.0) -> None:
    """Wait (blocking, bounded) for an orphaned grandchild adopted through `subreaper`."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not ours (no subreaper) or already gone
        if done:
            return
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"grandchild {pid} did not exit")
        time.sleep(0.005)


__all__ = [
    "PY",
    "TIMEOUT",
    "DatagramRecorder",
    "SubprocessRecorder",
    "assert_reaped",
    "child",
    "closing_all",
    "closing_transport",
    "pipe_files",
    "py",
    "read_nonblocking",
    "reap_orphan",
    "run",
    "short_tempdir",
    "spin",
    "subreaper",
    "until",
    "zombie_children",
]
