"""Signals during heavy I/O, children that die with full pipes, and fork() in a running program.

The promises held (issue 27, "nothing is lost"):

- SIGINT and SIGTERM during heavy I/O: a program (a child interpreter) that
  streams data both ways over loopback connections, protocol-based and
  stream-based, shuts down cleanly when signalled: on SIGINT asyncio's
  Runner cancels the main task and re-raises KeyboardInterrupt (the
  interpreter then kills itself with SIGINT: status -2, on CPython and PyPy
  alike), within 5 s; on SIGTERM a handler added
  with ``add_signal_handler`` cancels the main task and the program exits
  0; the remaining tasks are cancelled by the Runner, every transport gets
  ``connection_lost`` (or is closing), every fd the program opened is
  closed, each side received a prefix of what its peer sent (checked
  chunk by chunk), nothing reaches the exception handler, and stderr holds
  nothing but the KeyboardInterrupt traceback (no "Task was destroyed",
  no "Exception ignored", no warning: the child runs with ``-W error``);
- a child that dies while its stdout and stderr pipes are full: the parent
  gets every byte the child wrote before it died, in order (digests of
  known patterns), whether it was killed mid-write (a prefix: exactly what
  the pipes held) or wrote everything and then exited or killed itself;
  ``process_exited`` comes before the pipes' ``pipe_connection_lost`` while
  the parent is not reading, ``connection_lost`` last; ``communicate()``
  and ``wait()`` give the exit status; no zombie, no fd left;
- a child that exits while the parent's write to its stdin is blocked on a
  full pipe: ``drain()`` raises BrokenPipeError, as on the stdlib loop, and
  then ConnectionResetError; ``communicate(input)`` swallows it;
- ``os.fork()`` in a running program (a child interpreter, which has no
  other thread): in the forked child no loop is running
  (``asyncio.events._get_running_loop()`` is None, ``get_running_loop()``
  raises), the signal wakeup fd is reset to -1 where asyncio resets it
  (3.12+: ``asyncio.events.on_fork``), a new loop runs timers, a
  ``call_soon_threadsafe`` from a thread, a socket pair echo and a signal
  handler, and registers nothing in the parent's epoll instance (checked
  in ``/proc/self/fdinfo``); meanwhile the parent's loop keeps working: a
  wakeup from a thread, a timer, I/O and a signal sent by the child all
  reach it, and where asyncio resets the wakeup fd at fork, a signal the
  child raises before making its loop does not reach the parent's handler.

Each test runs on the stdlib loop, tideloop with every poller, and uvloop
where installed (the children of the first and last items run their own
loop of the same kind). uvloop differs in one place: ``write()`` on a
subprocess's stdin transport once it has closed raises RuntimeError
(asyncio drops the data and ``drain()`` then raises ConnectionResetError).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fault_support import Digest, MiB, Pattern, run

T = TypeVar("T")

PIPE = subprocess.PIPE
HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

#: Whether asyncio resets the running loop and the signal wakeup fd in a
#: forked child (``os.register_at_fork(after_in_child=on_fork)``, 3.12+).
STDLIB_RESETS_AT_FORK = callable(getattr(asyncio.events, "on_fork", None))


#: Text that must never appear in a child's stderr.
BAD_STDERR = (
    "Task was destroyed",
    "Exception ignored",
    "exception was never retrieved",
    "Warning",
    "unclosed",
    "Fatal",
    "Error on",
    "Unhandled",
)

#: How a child interpreter makes the loop named by its first argument.
PRELUDE = """\
import asyncio, functools, gc, hashlib, json, os, signal, socket, sys, threading, time

def loop_factory(name):
    if name == "asyncio":
        return asyncio.SelectorEventLoop
    if name == "uvloop":
        import uvloop
        # libuv opens a process-wide pipe with its first loop and keeps it.
        uvloop.new_event_loop().close()
        return uvloop.new_event_loop
    import tideloop
    return functools.partial(tideloop.new_event_loop, poller=name.removeprefix("tideloop-"))

def open_fds():
    return set(os.listdir("/proc/self/fd"))
"""


def child_env() -> dict[str, str]:
    """A child interpreter's environment: tideloop's sources, fault_support and its imports."""
    path = [str(SRC), str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


async def python(code: str, *args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """A child interpreter running *code* (with `PRELUDE`) under ``-W error``."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-W", "error", "-c", PRELUDE + code, *args, env=child_env(), **kwargs
    )


def assert_reaped(pid: int) -> None:
    """*pid* is not a child of ours left to wait for: the loop has reaped it."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError(f"child {pid} was not reaped by the loop")


def assert_clean_stderr(err: bytes) -> None:
    text = err.decode(errors="replace")
    for bad in BAD_STDERR:
        assert bad not in text, text


# ----------------------------------------------------------------------
# SIGINT and SIGTERM during heavy I/O

#: The program: 4 protocol connection pairs and 2 stream pairs streaming
#: both ways until a signal; prints "ready", then a JSON summary at exit.
SIGNAL_PROGRAM = r"""
NAME, SIGNAME = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the parent left
FACTORY = loop_factory(NAME)
N_PAIRS, N_STREAMS, CHUNK = 4, 2, 64 * 1024
PERIOD = 65521  # a prime: a lost or repeated 64 KiB chunk shifts the stream
BASE = hashlib.shake_256(b"fault-process").digest(PERIOD)
REP = BASE * (2 + (1 << 20) // PERIOD)
SPAN = len(REP) - PERIOD


def piece(offset, n):
    start = offset % PERIOD
    return REP[start : start + n]


class Record:
    # One side of a connection: what it sent, received, and whether what it
    # received was the start of the peer's stream.
    def __init__(self, role, kind):
        self.role, self.kind = role, kind
        self.sent = self.received = self.bad = 0
        self.key = None
        self.lost = None

    def feed(self, data):
        pos = 0
        while pos < len(data):
            n = min(SPAN, len(data) - pos)
            if data[pos : pos + n] != piece(self.received + pos, n):
                self.bad += 1
            pos += n
        self.received += len(data)

    def summary(self):
        return vars(self)


RECORDS = []
SIDES = []
TASKS = []
STREAM_TRANSPORTS = []
STATE = {"errors": [], "ticks": 0}
ALL_LOST = None


class Side(asyncio.Protocol):
    def __init__(self, role):
        self.rec = Record(role, "protocol")
        self.paused = False

    def connection_made(self, transport):
        self.transport = transport
        name = "sockname" if self.rec.role == "client" else "peername"
        self.rec.key = transport.get_extra_info(name)[1]
        RECORDS.append(self.rec)
        SIDES.append(self)
        self.pump()

    def pump(self):
        while not self.paused and not self.transport.is_closing():
            self.transport.write(piece(self.rec.sent, CHUNK))
            self.rec.sent += CHUNK

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False
        self.pump()

    def data_received(self, data):
        self.rec.feed(data)

    def connection_lost(self, exc):
        self.rec.lost = type(exc).__name__ if exc is not None else "None"
        if all(s.rec.lost is not None for s in SIDES) and len(SIDES) == 2 * N_PAIRS:
            ALL_LOST.set()


async def stream_side(role, reader, writer):
    rec = Record(role, "stream")
    rec.key = writer.get_extra_info("sockname" if role == "client" else "peername")[1]
    RECORDS.append(rec)
    STREAM_TRANSPORTS.append(writer.transport)

    async def send():
        while True:
            writer.write(piece(rec.sent, CHUNK))
            rec.sent += CHUNK
            await writer.drain()

    async def receive():
        while data := await reader.read(256 * 1024):
            rec.feed(data)

    try:
        await asyncio.gather(send(), receive())
    except ConnectionError:
        pass
    finally:
        writer.transport.abort()


async def stream_client(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await stream_side("client", reader, writer)


async def serve_stream(reader, writer):
    # Not ended by the cancellation: on 3.11 the StreamReaderProtocol's
    # done-callback calls task.exception() on the cancelled task (an error).
    try:
        await stream_side("server", reader, writer)
    except asyncio.CancelledError:
        STATE["handlers_cancelled"] = STATE.get("handlers_cancelled", 0) + 1


async def ticker():
    try:
        while True:
            await asyncio.sleep(0.005)
            STATE["ticks"] += 1
    except asyncio.CancelledError:
        STATE["ticker_cancelled"] = True
        raise


async def main():
    global ALL_LOST
    loop = asyncio.get_running_loop()
    STATE["loop"] = loop
    ALL_LOST = asyncio.Event()
    loop.set_exception_handler(
        lambda loop, ctx: STATE["errors"].append(f"{ctx.get('message')}: {ctx.get('exception')!r}")
    )
    me = asyncio.current_task()
    if SIGNAME == "SIGTERM":

        def on_sigterm():
            STATE["sigterm"] = True
            me.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    server = await loop.create_server(lambda: Side("server"), "127.0.0.1", 0)
    stream_server = await asyncio.start_server(serve_stream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for _ in range(N_PAIRS):
        await loop.create_connection(lambda: Side("client"), "127.0.0.1", port)
    stream_port = stream_server.sockets[0].getsockname()[1]
    TASKS.extend(asyncio.ensure_future(stream_client(stream_port)) for _ in range(N_STREAMS))
    TASKS.append(asyncio.ensure_future(ticker()))
    try:
        # Ready once every side of every connection has received 1 MiB.
        while len(RECORDS) < 2 * (N_PAIRS + N_STREAMS) or min(
            r.received for r in RECORDS
        ) < (1 << 20):
            await asyncio.sleep(0.005)
        print("ready", flush=True)
        await asyncio.sleep(30)  # traffic flows until a signal comes
        STATE["not_signalled"] = True
    except asyncio.CancelledError:
        STATE["main_cancelled"] = True
        if not STATE.get("sigterm"):
            raise
    finally:
        STATE["ticks_at_cancel"] = STATE["ticks"]
        # The protocol pairs: the clients go away; their servers learn it
        # from the sockets (a reset or an EOF) and close.
        for side in SIDES:
            if side.rec.role == "client":
                side.transport.abort()
        try:
            await asyncio.wait_for(ALL_LOST.wait(), 5)
        except asyncio.TimeoutError:
            STATE["lost_timeout"] = True
        server.close()
        await server.wait_closed()
        # Its connections are closed by their tasks, which asyncio's Runner
        # cancels after this one.
        stream_server.close()


fds_before = open_fds()
try:
    with asyncio.Runner(loop_factory=FACTORY) as runner:
        runner.run(main())
finally:
    gc.collect()
    loop = STATE.pop("loop", None)
    STATE["loop_closed"] = loop is not None and loop.is_closed()
    STATE["new_fds"] = sorted(open_fds() - fds_before)
    STATE["records"] = [r.summary() for r in RECORDS]
    STATE["streams_closing"] = [t.is_closing() for t in STREAM_TRANSPORTS]
    print(json.dumps(STATE), flush=True)
"""


#: How each side of a protocol pair saw it close (``connection_lost``'s exception).
CLOSED_HOW = {"client": {"None"}, "server": {"ConnectionResetError", "BrokenPipeError", "None"}}


def _check_records(records: list[dict[str, Any]]) -> None:
    """Both sides of every connection got a prefix of what the other sent, 1 MiB at least."""
    by_key: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for rec in records:
        by_key.setdefault((rec["kind"], rec["key"]), {})[rec["role"]] = rec
    assert len(by_key) == 6, by_key.keys()
    for (kind, key), pair in by_key.items():
        assert set(pair) == {"client", "server"}, (kind, key, pair)
        for role, peer in (("client", "server"), ("server", "client")):
            rec = pair[role]
            assert rec["bad"] == 0, (kind, key, pair)
            assert 1 * MiB <= rec["received"] <= pair[peer]["sent"], (kind, key, pair)
            if kind == "protocol":
                # The client aborted; its server saw the reset (or an EOF).
                assert rec["lost"] in CLOSED_HOW[role], (kind, key, pair)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_during_heavy_io_shuts_down_cleanly(
    fault_loop: asyncio.AbstractEventLoop, fault_loop_name: str, signame: str
) -> None:
    sig = getattr(signal, signame)
    outcome: dict[str, Any] = {}

    async def main() -> None:
        proc = await python(SIGNAL_PROGRAM, fault_loop_name, signame, stdout=PIPE, stderr=PIPE)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
            if line != b"ready\n":
                _, err = await proc.communicate()
                pytest.fail(f"child not ready: {line!r}\n{err.decode(errors='replace')}")
            await asyncio.sleep(0.2)  # traffic flows
            t0 = time.monotonic()
            proc.send_signal(sig)
            out, err = await asyncio.wait_for(proc.communicate(), 10)
            outcome["shutdown_s"] = time.monotonic() - t0
            outcome.update(out=out, err=err, returncode=proc.returncode)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    run(fault_loop, main())
    err = outcome["err"].decode(errors="replace")
    lines = outcome["out"].decode().splitlines()
    assert len(lines) == 1, (lines, err)
    summary = json.loads(lines[0])
    assert outcome["shutdown_s"] < 5, outcome
    if signame == "SIGINT":
        assert outcome["returncode"] == -signal.SIGINT, (outcome["returncode"], err)
        assert err.rstrip().splitlines()[-1] == "KeyboardInterrupt", err
        # The Runner raises KeyboardInterrupt while handling the main task's
        # CancelledError: that chain, nothing else.
        raised = [
            line
            for line in err.splitlines()
            if line[:1].strip() and not line.startswith(("Traceback", "During handling"))
        ]
        assert raised == ["asyncio.exceptions.CancelledError", "KeyboardInterrupt"], err
        assert "sigterm" not in summary
    else:
        assert outcome["returncode"] == 0, err
        assert err == "", err
        assert summary["sigterm"] is True
    assert_clean_stderr(outcome["err"])
    assert summary["main_cancelled"] is True, summary
    assert "not_signalled" not in summary
    assert "lost_timeout" not in summary, summary
    assert summary["ticks_at_cancel"] > 0
    assert summary["ticker_cancelled"] is True, summary
    assert summary["errors"] == [], summary["errors"]
    assert summary["loop_closed"] is True
    assert summary["new_fds"] == [], summary
    assert summary["streams_closing"] == [True] * 4, summary
    assert summary["handlers_cancelled"] == 2, summary
    _check_records(summary["records"])


# ----------------------------------------------------------------------
# A child that dies while its pipes are full

#: Writes OUT to stdout and ERR to stderr, a 4 KiB chunk of each in turn,
#: with blocking writes; then ends as its first argument says ("exit":
#: status 3, "sigkill": kills itself, "block": never, the parent kills it).
#: A write of at most PIPE_BUF bytes is all or nothing, to a pipe as to a
#: Unix socket (uvloop's stdio): with a second argument, the fd of a
#: progress pipe, it writes there how many chunks it has written.
WRITER_PROGRAM = r"""
from fault_support import MiB, Pattern

HOW = sys.argv[1]
PROGRESS = int(sys.argv[2]) if len(sys.argv) > 2 else -1
out = Pattern(4 * MiB, chunk=4096, seed=11).chunks()
err = Pattern(4 * MiB, chunk=4096, seed=12).chunks()


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


written = 0
for a, b in zip(out, err):
    for fd, data in ((1, a), (2, b)):
        write_all(fd, data)
        written += 1
        if PROGRESS >= 0:
            os.write(PROGRESS, written.to_bytes(4, "little"))
if HOW == "exit":
    os._exit(3)
elif HOW == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
"""

OUT = Pattern(4 * MiB, chunk=4096, seed=11)
ERR = Pattern(4 * MiB, chunk=4096, seed=12)


def _unread(fd: int) -> int:
    """How many bytes the pipe whose read end is *fd* holds (FIONREAD)."""
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def _state(pid: int) -> str:
    """The state letter of process *pid* (``S``: sleeping, as in a blocked write)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class ChildRecorder(asyncio.SubprocessProtocol):
    """Hashes the child's stdout and stderr; records the callbacks in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.transport: Any = None
        self.got = {1: Digest(), 2: Digest()}
        self.events: list[str] = []
        self.exited: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[BaseException | None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.events.append("made")
        for fd in (1, 2):
            self.transport.get_pipe_transport(fd).pause_reading()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.got[fd].update(data)
        event = f"data {fd}"
        if self.events[-1] != event:
            self.events.append(event)

    def pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        self.events.append(f"pipe_lost {fd} {exc!r}")

    def process_exited(self) -> None:
        self.events.append("exited")
        self.exited.set_result(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)


def test_child_killed_mid_write_with_full_pipes(fault_loop: asyncio.AbstractEventLoop) -> None:
    """Not read, the child blocks on a full pipe and is killed: what it wrote all arrives,
    after process_exited; then pipe_connection_lost for both pipes, connection_lost last."""
    loop = fault_loop

    async def main() -> None:
        progress, progress_w = os.pipe()
        try:
            await killed_mid_write(progress, progress_w)
        finally:
            os.close(progress)

    async def killed_mid_write(progress: int, progress_w: int) -> None:
        try:
            transport, rec = await loop.subprocess_exec(
                lambda: ChildRecorder(loop),
                sys.executable,
                "-W",
                "error",
                "-c",
                PRELUDE + WRITER_PROGRAM,
                "block",
                str(progress_w),
                stdin=subprocess.DEVNULL,
                stdout=PIPE,
                stderr=PIPE,
                pass_fds=(progress_w,),
                env=child_env(),
            )
        finally:
            os.close(progress_w)
        pid = transport.get_pid()
        try:
            # Wait until the child is blocked: asleep, and no progress for 60 ms.
            seen: list[int] = []
            deadline = time.monotonic() + 10
            while len(seen) < 4 or seen[-1] != seen[-4] or not seen[-1] or _state(pid) != "S":
                assert time.monotonic() < deadline, (seen[-4:], _state(pid))
                await asyncio.sleep(0.02)
                seen.append(_unread(progress))
            chunks = int.from_bytes(os.read(progress, 65536)[-4:], "little")
            expected = {1: (chunks + 1) // 2 * 4096, 2: chunks // 2 * 4096}
            rec_before_kill = rec.got[1].count + rec.got[2].count
            assert "exited" not in rec.events
            transport.kill()
            await asyncio.wait_for(rec.exited, 5)
            assert not any(e.startswith("pipe_lost") for e in rec.events), rec.events
            for fd in (1, 2):
                # Any: uvloop's pipe transports are not asyncio.ReadTransport instances.
                reader: Any = transport.get_pipe_transport(fd)
                reader.resume_reading()
            assert await asyncio.wait_for(rec.lost, 5) is None
            for fd in (1, 2):
                pipe = transport.get_pipe_transport(fd)
                assert pipe is None or pipe.is_closing(), (fd, pipe)
        finally:
            transport.close()
        assert transport.get_returncode() == -signal.SIGKILL
        assert_reaped(pid)
        assert rec.got[1].hexdigest() == OUT.prefix_digest(expected[1])
        assert rec.got[2].hexdigest() == ERR.prefix_digest(expected[2])
        # The child wrote more than the parent had read: full pipes stopped it.
        assert expected[1] + expected[2] > rec_before_kill + 64 * 1024, (expected, rec_before_kill)
        # The order: exited while the pipes were paused; each pipe's data
        # before its pipe_connection_lost; connection_lost last.
        events = rec.events
        assert events[0] == "made" and events[-1] == "lost", events
        assert sorted(events[-3:-1]) == ["pipe_lost 1 None", "pipe_lost 2 None"], events
        exited = events.index("exited")
        assert set(events[1:exited]) <= {"data 1", "data 2"}, events
        assert set(events[exited + 1 : -3]) <= {"data 1", "data 2"}, events

    run(loop, main())


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_child_dies_after_filling_its_pipes(
    fault_loop: asyncio.AbstractEventLoop, how: str
) -> None:
    """4 MiB to each pipe, read late, then the child exits or kills itself: communicate() gets
    it all, wait() the status."""
    status = 3 if how == "exit" else -signal.SIGKILL

    async def main() -> None:
        proc = await python(WRITER_PROGRAM, how, stdin=subprocess.DEVNULL, stdout=PIPE, stderr=PIPE)
        try:
            await asyncio.sleep(0.3)  # not read: the child blocks on a full pipe
            running = proc.returncode is None  # (an assert would narrow returncode for good)
            assert running
            out, err = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == status
        assert await asyncio.wait_for(proc.wait(), 5) == status
        assert_reaped(proc.pid)
        assert proc.stdout is not None and proc.stdout.at_eof()
        got_out, got_err = Digest(), Digest()
        got_out.update(out)
        got_err.update(err)
        assert got_out.hexdigest() == OUT.digest
        assert got_err.hexdigest() == ERR.digest

    run(fault_loop, main())


#: Says "up", never reads its stdin, and exits 0 when sent SIGUSR1.
NO_READER_PROGRAM = r"""
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
print("up", flush=True)
while signal.SIGUSR1 not in signal.sigpending():  # (sigwait would unblock it meanwhile)
    time.sleep(0.01)
"""


def _blocks_sigusr1(pid: int) -> bool:
    """Whether process *pid* has SIGUSR1 blocked (``SigBlk`` in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigBlk:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    raise AssertionError(f"no SigBlk for {pid}")


async def _blocked_until_child_exits(
    proc: asyncio.subprocess.Process, blocked: asyncio.Future[T]
) -> T:
    """*blocked* is still waiting 0.1 s after *proc* is up: make *proc* exit; what *blocked*
    gives, in 5 s."""
    try:
        deadline = time.monotonic() + 10
        while not _blocks_sigusr1(proc.pid):
            assert time.monotonic() < deadline, "the child did not start"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert not blocked.done(), "not blocked: the child reads nothing"
        proc.send_signal(signal.SIGUSR1)
        return await asyncio.wait_for(blocked, 5)
    finally:
        blocked.cancel()


async def _blocked_drain_when_child_exits(
    then: Callable[[asyncio.subprocess.Process], Awaitable[None]],
) -> None:
    """drain() blocked on a full stdin pipe when the child exits raises BrokenPipeError;
    then *then*, and the child's status is 0."""
    proc = await python(NO_READER_PROGRAM, stdin=PIPE, stdout=PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"up\n"
        proc.stdin.write(b"x" * (4 * MiB))
        drain = asyncio.ensure_future(proc.stdin.drain())
        with pytest.raises(BrokenPipeError):
            await _blocked_until_child_exits(proc, drain)
        assert proc.stdin.is_closing()
        await then(proc)
        assert await asyncio.wait_for(proc.stdout.read(), 5) == b""
        assert await asyncio.wait_for(proc.wait(), 5) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert_reaped(proc.pid)


def test_drain_raises_when_child_exits_with_stdin_full(
    fault_loop: asyncio.AbstractEventLoop,
) -> None:
    """The parent is blocked in drain() on a full stdin pipe; the child exits: drain() raises."""

    async def nothing(proc: asyncio.subprocess.Process) -> None:
        pass

    run(fault_loop, _blocked_drain_when_child_exits(nothing))


@pytest.mark.fault_xfail(
    "uvloop", reason="uvloop's write() on a closed pipe transport raises RuntimeError"
)
def test_write_after_stdin_broke(fault_loop: asyncio.AbstractEventLoop) -> None:
    """After that, a write() is dropped silently and drain() raises ConnectionResetError."""

    async def write_again(proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None
        proc.stdin.write(b"more")
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(proc.stdin.drain(), 5)

    run(fault_loop, _blocked_drain_when_child_exits(write_again))


def test_communicate_input_to_child_that_exits(fault_loop: asyncio.AbstractEventLoop) -> None:
    """communicate(4 MiB) to a child that exits without reading: output and status, no error."""

    async def main() -> None:
        proc = await python(NO_READER_PROGRAM, stdin=PIPE, stdout=PIPE, stderr=PIPE)
        try:
            assert proc.stdout is not None
            communicate = asyncio.ensure_future(proc.communicate(b"x" * (4 * MiB)))
            out, err = await _blocked_until_child_exits(proc, communicate)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert (out, err, proc.returncode) == (b"up\n", b"", 0)
        assert_reaped(proc.pid)

    run(fault_loop, main())


# ----------------------------------------------------------------------
# fork() in a running program

#: Forks inside a coroutine on the loop named by its argument (no other
#: thread is alive then). The forked child checks the running-loop state,
#: runs a small program on a new loop, signals the parent (SIGUSR2) and
#: reports through a pipe; the parent keeps using its loop meanwhile.
#: Prints the parent's and the child's reports as one JSON object.
FORK_PROGRAM = r"""
NAME = sys.argv[1]
FACTORY = loop_factory(NAME)


def epoll_targets():
    # fd -> the inode numbers (hex) registered in it, for every epoll fd we hold.
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as f:
                info = f.read()
        except OSError:
            continue
        found[fd] = [
            part.split(":", 1)[1]
            for line in info.splitlines() if line.startswith("tfd:")
            for part in line.split() if part.startswith("ino:")
        ]
    return found


def inodes():
    # fd -> the inode number (hex) of every pipe and socket we hold.
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("pipe:[", "socket:[")):
            found[fd] = format(int(target.split("[")[1].rstrip("]")), "x")
    return found


async def child_program(report, inherited_epolls, inherited_inodes):
    loop = asyncio.get_running_loop()
    order = []
    for delay in (0.03, 0.01, 0.02):
        loop.call_later(delay, order.append, delay)
    await asyncio.sleep(0.05)
    report["timers"] = order

    woken = loop.create_future()

    def from_thread():
        time.sleep(0.02)
        loop.call_soon_threadsafe(woken.set_result, "woken")

    thread = threading.Thread(target=from_thread)
    thread.start()
    report["threadsafe"] = await asyncio.wait_for(woken, 5)
    thread.join()

    signalled = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, lambda: signalled.done() or signalled.set_result(1))
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    with a, b:
        got = []
        loop.add_reader(b.fileno(), lambda: got.append(b.recv(100)))
        await loop.sock_sendall(a, b"ping")
        for _ in range(200):
            if got:
                break
            await asyncio.sleep(0.005)
        # What the kernel's epoll instances watch, while the reader and the
        # signal handler are installed.
        targets = epoll_targets()
        loop.remove_reader(b.fileno())
        report["echo"] = b"".join(got).decode()
        ino = format(os.fstat(b.fileno()).st_ino, "x")
    watched = {i for fd, v in targets.items() if fd not in inherited_epolls for i in v}
    report["in_inherited_epoll"] = any(ino in targets[fd] for fd in inherited_epolls)
    report["in_new_epoll"] = ino in watched
    report["watches_inherited"] = sorted(watched & inherited_inodes)

    signal.raise_signal(signal.SIGUSR1)
    report["signal"] = await asyncio.wait_for(signalled, 5)
    loop.remove_signal_handler(signal.SIGUSR1)


def forked_child(wfd):
    report = {}
    status = 1
    try:
        report["running_loop"] = repr(asyncio.events._get_running_loop())
        try:
            asyncio.get_running_loop()
            report["get_running_loop"] = "returned"
        except RuntimeError:
            report["get_running_loop"] = "RuntimeError"
        # A signal before the child has a loop of its own: its handler is the
        # parent's loop's, and so is the wakeup fd unless asyncio reset it.
        signal.raise_signal(signal.SIGUSR1)
        report["wakeup_fd"] = signal.set_wakeup_fd(-1)
        inherited_epolls = set(epoll_targets())
        inherited_inodes = set(inodes().values())
        with asyncio.Runner(loop_factory=FACTORY) as runner:
            runner.run(child_program(report, inherited_epolls, inherited_inodes))
        os.kill(os.getppid(), signal.SIGUSR2)
        status = 0
    except BaseException as exc:
        report["error"] = repr(exc)
    finally:
        with open(wfd, "w") as f:
            json.dump(report, f)
        os._exit(status)


async def main():
    loop = asyncio.get_running_loop()
    counts = {"SIGUSR1": 0, "SIGUSR2": 0}
    usr2 = loop.create_future()

    def on_signal(name):
        counts[name] += 1
        if name == "SIGUSR2" and not usr2.done():
            usr2.set_result(None)

    loop.add_signal_handler(signal.SIGUSR1, on_signal, "SIGUSR1")
    loop.add_signal_handler(signal.SIGUSR2, on_signal, "SIGUSR2")
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    await loop.sock_sendall(a, b"before")
    result = {"before": (await loop.sock_recv(b, 100)).decode()}
    timer = loop.create_future()
    loop.call_later(0.05, timer.set_result, "timer")
    rfd, wfd = os.pipe()
    result["threads_at_fork"] = threading.active_count()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        forked_child(wfd)
    os.close(wfd)

    woken = loop.create_future()
    thread = threading.Thread(
        target=lambda: (time.sleep(0.02), loop.call_soon_threadsafe(woken.set_result, "woken"))
    )
    thread.start()
    result["threadsafe"] = await asyncio.wait_for(woken, 5)
    thread.join()
    result["timer"] = await asyncio.wait_for(timer, 5)

    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(rfd, "rb")
    )
    try:
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        transport.close()
    result["child"] = json.loads(data) if data else None
    _, wait_status = os.waitpid(pid, 0)
    result["child_status"] = os.waitstatus_to_exitcode(wait_status)
    if result["child_status"] == 0:
        await asyncio.wait_for(usr2, 5)
    for _ in range(3):
        await asyncio.sleep(0)
    result["signals"] = counts
    await loop.sock_sendall(a, b"after")
    result["after"] = (await loop.sock_recv(b, 100)).decode()
    a.close()
    b.close()
    return result


with asyncio.Runner(loop_factory=FACTORY) as runner:
    print(json.dumps(runner.run(main())), flush=True)
"""

#: The loops that wait on an epoll instance (the others register nowhere in the kernel).
EPOLL_LOOPS = ("asyncio", "tideloop-epoll", "uvloop")


def test_fork_in_running_program(
    fault_loop: asyncio.AbstractEventLoop, fault_loop_name: str
) -> None:
    async def main() -> tuple[bytes, bytes, int | None]:
        proc = await python(FORK_PROGRAM, fault_loop_name, stdout=PIPE, stderr=PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 15)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return out, err, proc.returncode

    out, err, returncode = run(fault_loop, main())
    assert (returncode, err) == (0, b""), err.decode(errors="replace")
    result = json.loads(out)
    child = result.pop("child")
    assert result.pop("threads_at_fork") == 1
    assert child is not None and "error" not in child, (child, result)
    assert result["child_status"] == 0, result
    # The parent's loop kept working through the fork.
    assert result["before"] == "before" and result["after"] == "after", result
    assert (result["threadsafe"], result["timer"]) == ("woken", "timer"), result
    # The child's signal reached the parent's handler; the one the child
    # raised before it had a loop did not, where asyncio resets the wakeup fd.
    assert result["signals"]["SIGUSR2"] == 1, result
    assert result["signals"]["SIGUSR1"] == (0 if STDLIB_RESETS_AT_FORK else 1), result
    # In the child: no running loop; the wakeup fd reset where asyncio does it.
    assert child["running_loop"] == "None", child
    assert child["get_running_loop"] == "RuntimeError", child
    if STDLIB_RESETS_AT_FORK:
        assert child["wakeup_fd"] == -1, child
    else:
        assert child["wakeup_fd"] != -1, child
    # The child's own loop worked and used its own kernel objects.
    assert child["timers"] == [0.01, 0.02, 0.03], child
    assert child["threadsafe"] == "woken", child
    assert child["echo"] == "ping", child
    assert child["signal"] == 1, child
    assert child["in_inherited_epoll"] is False, child
    assert child["watches_inherited"] == [], child  # not the parent's self-pipe or signal pipe
    assert child["in_new_epoll"] is (fault_loop_name in EPOLL_LOOPS), child
