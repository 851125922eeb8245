"""connect_read_pipe / connect_write_pipe: pipes, FIFOs, sockets, character devices.

Every test runs on the stdlib loop and on tideloop alike.
ptys are in test_pty.py. What these tests pin, in short:

- only FIFOs, sockets and character devices are accepted; a regular file is
  refused with ValueError (two different messages for read and write);
- read side: EOF is eof_received() then connection_lost(None) (the return
  value of eof_received is ignored); close() is connection_lost(None) alone;
- write side: the reader going away is connection_lost(None) if nothing was
  buffered and connection_lost(BrokenPipeError) if something was, or the
  EPIPE of a write (BrokenPipeError, errno EPIPE) -- never the exception
  handler; resume_writing only once the buffer is empty; writes after close
  are dropped, from the 6th on with a warning; write() of a non-bytes object
  fails an ``assert`` (AssertionError), unlike the TypeError of sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import stat
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ipc_support import (
    closing_all,
    closing_transport,
    data_then_eof,
    fifo_files,
    open_pipe,
    pipe_files,
    read_nonblocking,
    run,
    spin,
    until,
)
from net_support import Recorder, captured_asyncio_logs

PIPE_WARNING = "pipe closed by peer or os.write(pipe, data) raised exception."


class WriteRecorder(Recorder):
    """A Recorder that also notes the write buffer size when resume_writing is called."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.size_at_resume: list[int] = []

    def resume_writing(self) -> None:
        self.size_at_resume.append(self.transport.get_write_buffer_size())
        super().resume_writing()


@contextlib.asynccontextmanager
async def read_pipe(
    loop: asyncio.AbstractEventLoop, pipe: Any, *, keep_open_on_eof: bool = False
) -> AsyncIterator[tuple[Any, Recorder]]:
    """A read pipe transport with a Recorder; closed (connection_lost awaited) afterwards."""
    async with closing_transport(
        loop.connect_read_pipe(lambda: Recorder(loop, keep_open_on_eof=keep_open_on_eof), pipe)
    ) as (transport, proto):
        yield transport, proto


def closing_write_pipe(
    loop: asyncio.AbstractEventLoop, pipe: Any
) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
    """A write pipe transport with a WriteRecorder; closed (connection_lost awaited)
    afterwards, as `closing_transport` closes it."""
    return closing_transport(loop.connect_write_pipe(lambda: WriteRecorder(loop), pipe))


@contextlib.asynccontextmanager
async def write_pipe(loop: asyncio.AbstractEventLoop, pipe: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A write pipe transport with a WriteRecorder; aborted (connection_lost awaited) after,
    unless it is closing already (asyncio's abort() fails once connection_lost has run)."""
    transport, proto = await loop.connect_write_pipe(lambda: WriteRecorder(loop), pipe)
    try:
        yield transport, proto
    finally:
        if not transport.is_closing():
            transport.abort()
        await asyncio.wait([proto.lost], timeout=2.0)


# ----------------------------------------------------------------------
# Read pipes


def test_read_pipe_data_then_eof(loop: asyncio.AbstractEventLoop) -> None:
    """A pipe's read end: connection_made before the await returns, data, then on EOF
    eof_received and connection_lost(None); the fd is made non-blocking and the pipe
    object is closed at the end."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with read_pipe(loop, r) as (transport, proto):
                assert proto.events == ["made"]
                assert proto.transport is transport
                assert isinstance(transport, asyncio.ReadTransport)
                assert transport.get_protocol() is proto
                assert transport.get_extra_info("pipe") is r
                assert transport.is_reading()
                assert not transport.is_closing()
                assert not os.get_blocking(r.fileno())
                await data_then_eof(proto, w.write, w.close, b"hello ", b"pipe")
                assert transport.is_closing()
                assert r.closed

        run(loop, main())


def test_read_pipe_eof_received_return_value_is_ignored(loop: asyncio.AbstractEventLoop) -> None:
    """Unlike sockets, a read pipe closes after EOF even if eof_received returns True."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with read_pipe(loop, r, keep_open_on_eof=True) as (transport, proto):
                w.close()
                assert await proto.lost is None
                assert proto.events == ["made", "eof", "lost"]
                assert transport.is_closing()

        run(loop, main())


def test_read_pipe_pause_and_resume(loop: asyncio.AbstractEventLoop) -> None:
    """pause_reading stops data_received (data waits in the pipe), resume_reading delivers it;
    pausing twice or resuming twice is harmless."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with read_pipe(loop, r) as (transport, proto):
                transport.pause_reading()
                transport.pause_reading()
                assert not transport.is_reading()
                w.write(b"waiting")
                await asyncio.sleep(0.05)
                assert proto.data == b""
                transport.resume_reading()
                transport.resume_reading()
                assert transport.is_reading()
                assert await proto.wait_for_bytes(7) == b"waiting"

        run(loop, main())


def test_read_pipe_close(loop: asyncio.AbstractEventLoop) -> None:
    """close(): is_closing and not reading at once; connection_lost(None) later, with no
    eof_received; the read end is closed, so the writer then gets EPIPE."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with read_pipe(loop, r) as (transport, proto):
                transport.close()
                assert transport.is_closing()
                assert not transport.is_reading()
                assert proto.lost_calls == 0
                transport.close()
                assert await proto.lost is None
                await spin()
                assert proto.events == ["made", "lost"]
                assert r.closed
                with pytest.raises(BrokenPipeError):
                    w.write(b"x")

        run(loop, main())


def test_read_pipe_set_protocol(loop: asyncio.AbstractEventLoop) -> None:
    """set_protocol switches where data and EOF go."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with read_pipe(loop, r) as (transport, first):
                w.write(b"one")
                await first.wait_for_bytes(3)
                second = Recorder(loop)
                transport.set_protocol(second)
                assert transport.get_protocol() is second
                w.write(b"two")
                assert await second.wait_for_bytes(3) == b"two"
                w.close()
                await second.lost
                assert first.data == b"one"
                assert second.events == ["data", "eof", "lost"]
                first.lost.set_result(None)  # it was detached: read_pipe awaits it

        run(loop, main())


def test_read_pipe_on_a_fifo(loop: asyncio.AbstractEventLoop) -> None:
    """A named pipe (os.mkfifo) works like a pipe: data, then EOF when the writer closes."""

    async def main() -> None:
        with fifo_files() as (r, w):
            assert stat.S_ISFIFO(os.fstat(r.fileno()).st_mode)
            async with read_pipe(loop, r) as (transport, proto):
                await data_then_eof(proto, w.write, w.close, b"through the fifo")
                assert transport.is_closing()

    run(loop, main())


def test_read_pipe_on_a_socket(loop: asyncio.AbstractEventLoop) -> None:
    """A socket is accepted as a read pipe: data, then EOF on the peer's shutdown(SHUT_WR)."""
    a, b = socket.socketpair()
    with closing_all(a, b):

        async def main() -> None:
            async with read_pipe(loop, a) as (transport, proto):
                assert transport.get_extra_info("pipe") is a
                await data_then_eof(
                    proto, b.sendall, lambda: b.shutdown(socket.SHUT_WR), b"over a socket"
                )
                assert a.fileno() == -1

        run(loop, main())


def test_regular_files_are_refused(loop: asyncio.AbstractEventLoop, tmp_path: Any) -> None:
    """A regular file is not a pipe: ValueError with asyncio's message for each direction; the
    file object is not closed by the failed call."""
    path = tmp_path / "regular"
    path.write_bytes(b"data")

    async def main() -> None:
        with open(path, "rb") as f:
            with pytest.raises(ValueError) as info:
                await loop.connect_read_pipe(lambda: Recorder(loop), f)
            assert str(info.value) == "Pipe transport is for pipes/sockets only."
            assert not f.closed
        with open(path, "ab") as f:
            with pytest.raises(ValueError) as info:
                await loop.connect_write_pipe(lambda: Recorder(loop), f)
            assert (
                str(info.value) == "Pipe transport is only for pipes, sockets and character devices"
            )
            assert not f.closed

    run(loop, main())


# ----------------------------------------------------------------------
# Write pipes


def test_write_pipe_basics(loop: asyncio.AbstractEventLoop) -> None:
    """A pipe's write end: a WriteTransport with can_write_eof, an empty buffer, asyncio's
    default limits; bytes, bytearray, memoryview and writelines all arrive in order."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with write_pipe(loop, w) as (transport, proto):
                assert proto.events == ["made"]
                assert isinstance(transport, asyncio.WriteTransport)
                assert transport.get_protocol() is proto
                assert transport.get_extra_info("pipe") is w
                assert transport.can_write_eof()
                assert not transport.is_closing()
                assert transport.get_write_buffer_size() == 0
                assert transport.get_write_buffer_limits() == (16384, 65536)
                assert not os.get_blocking(w.fileno())
                transport.write(b"bytes,")
                transport.write(bytearray(b"bytearray,"))
                transport.write(memoryview(b"memoryview,"))
                transport.write(b"")
                transport.writelines([b"write", bytearray(b"lines")])
                expected = b"bytes,bytearray,memoryview,writelines"
                assert await read_nonblocking(r, len(expected)) == expected

        run(loop, main())


def test_write_rejects_non_bytes(loop: asyncio.AbstractEventLoop) -> None:
    """write(str) on a write pipe fails asyncio's ``assert isinstance(data, (bytes, ...))``:
    AssertionError whose message is repr(data); the transport stays usable."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with write_pipe(loop, w) as (transport, _):
                with pytest.raises(AssertionError) as info:
                    transport.write("text")
                assert str(info.value) == repr("text")
                transport.write(b"ok")
                assert await read_nonblocking(r, 2) == b"ok"

        run(loop, main())


def test_write_pipe_reading_methods_are_not_implemented(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio's write pipe transport is an asyncio.Transport whose reading methods raise
    NotImplementedError (a subprocess's stdin too); it still sees its reader go away."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with write_pipe(loop, w) as (transport, proto):
                assert isinstance(transport, asyncio.Transport)
                assert isinstance(transport, asyncio.ReadTransport)
                for method in (transport.pause_reading, transport.resume_reading):
                    with pytest.raises(NotImplementedError):
                        method()
                with pytest.raises(NotImplementedError):
                    transport.is_reading()
                r.close()
                await asyncio.wait_for(proto.lost, 5)
                assert transport.is_closing()

        run(loop, main())


def test_write_pipe_buffers_and_flow_control(loop: asyncio.AbstractEventLoop) -> None:
    """A write larger than the pipe: the rest is buffered (get_write_buffer_size), later
    writes queue behind it, pause_writing once over the high mark, resume_writing only when
    the buffer is empty; everything arrives in order."""
    r, w = pipe_files()
    payload = bytes(range(256)) * 4096  # 1 MiB: more than a pipe holds
    with closing_all(r, w):

        async def main() -> None:
            async with (
                write_pipe(loop, w) as (transport, proto),
                read_pipe(loop, r) as (reader, rproto),
            ):
                reader.pause_reading()
                transport.set_write_buffer_limits(high=65536, low=1024)
                transport.write(payload)
                size = transport.get_write_buffer_size()
                assert 0 < size < len(payload)
                assert proto.events == ["made", "pause"]
                transport.write(b"tail")
                assert transport.get_write_buffer_size() == size + 4
                assert proto.paused == 1
                reader.resume_reading()
                expected = payload + b"tail"
                assert await rproto.wait_for_bytes(len(expected)) == expected
                await until(lambda: proto.resumed == 1, what="resume_writing")
                assert proto.size_at_resume == [0]
                assert transport.get_write_buffer_size() == 0
                assert proto.events == ["made", "pause", "resume"]

        run(loop, main())


def test_write_eof_flushes_then_closes(loop: asyncio.AbstractEventLoop) -> None:
    """write_eof with data buffered: is_closing at once, the buffer is still written, then the
    pipe is closed (the reader sees EOF) and connection_lost(None) is called."""
    r, w = pipe_files()
    payload = b"x" * (1 << 20)
    with closing_all(r, w):

        async def main() -> None:
            async with read_pipe(loop, r) as (reader, rproto):
                reader.pause_reading()
                async with closing_write_pipe(loop, w) as (transport, proto):
                    transport.write(payload)
                    assert transport.get_write_buffer_size() > 0
                    transport.write_eof()
                    assert transport.is_closing()
                    transport.write_eof()  # again: no-op
                    await asyncio.sleep(0.02)
                    assert not proto.lost.done()
                    reader.resume_reading()
                    assert await rproto.lost is None
                    assert rproto.data == payload
                    assert rproto.events[-2:] == ["eof", "lost"]
                    assert await proto.lost is None
                    assert w.closed

        run(loop, main())


def test_close_is_write_eof(loop: asyncio.AbstractEventLoop) -> None:
    """close() on a write pipe flushes the buffer before closing, like write_eof()."""
    r, w = pipe_files()
    payload = b"y" * (1 << 20)
    with closing_all(r, w):

        async def main() -> None:
            async with (
                read_pipe(loop, r) as (_, rproto),
                closing_write_pipe(loop, w) as (
                    transport,
                    proto,
                ),
            ):
                transport.write(payload)
                transport.close()
                assert transport.is_closing()
                assert await rproto.lost is None
                assert rproto.data == payload
                assert await proto.lost is None

        run(loop, main())


def test_abort_drops_the_buffer(loop: asyncio.AbstractEventLoop) -> None:
    """abort(): connection_lost(None) without writing the buffer; the reader gets only what the
    pipe already held, then EOF."""
    r, w = pipe_files()
    payload = b"z" * (1 << 20)
    with closing_all(r, w):

        async def main() -> None:
            async with closing_write_pipe(loop, w) as (transport, proto):
                transport.write(payload)
                held = len(payload) - transport.get_write_buffer_size()
                transport.abort()
                assert transport.is_closing()
                assert transport.get_write_buffer_size() == 0
                assert await proto.lost is None
                assert w.closed
                assert proto.events == ["made", "pause", "lost"]
                async with read_pipe(loop, r) as (_, rproto):
                    await rproto.lost
                    assert rproto.data == payload[:held]

        run(loop, main())


def test_writes_after_close_are_dropped(loop: asyncio.AbstractEventLoop) -> None:
    """write() after close() is dropped silently five times, then each one logs a warning."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with closing_write_pipe(loop, w) as (transport, proto):
                transport.close()
                with captured_asyncio_logs() as records:
                    for _ in range(5):
                        transport.write(b"dropped")
                    assert records == []
                    await proto.lost
                    transport.write(b"")  # empty writes do not count
                    transport.write(b"dropped")
                    transport.write(b"dropped")
                assert [(r.levelname, r.getMessage()) for r in records] == [
                    ("WARNING", PIPE_WARNING),
                    ("WARNING", PIPE_WARNING),
                ]
                assert await read_nonblocking(r) == b""  # EOF, nothing written

        run(loop, main())


# ----------------------------------------------------------------------
# The reader goes away


def test_reader_gone_then_write_is_broken_pipe(loop: asyncio.AbstractEventLoop) -> None:
    """The read end closed and the loop has not noticed yet: write() hits EPIPE, which is
    reported as connection_lost(BrokenPipeError(EPIPE)), not to the exception handler."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with closing_write_pipe(loop, w) as (transport, proto):
                r.close()
                transport.write(b"nobody reads this")
                assert transport.is_closing()
                exc = await proto.lost
                assert isinstance(exc, BrokenPipeError)
                assert exc.errno == errno.EPIPE
                assert proto.events == ["made", "lost"]
                assert w.closed

        run(loop, main())


def test_reader_gone_while_idle_is_a_clean_close(loop: asyncio.AbstractEventLoop) -> None:
    """The read end closes while nothing is buffered: the loop notices by itself (the write
    end polls readable) and calls connection_lost(None)."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with closing_write_pipe(loop, w) as (transport, proto):
                r.close()
                assert await proto.lost is None
                assert transport.is_closing()
                assert proto.events == ["made", "lost"]

        run(loop, main())


def test_reader_gone_with_data_buffered(loop: asyncio.AbstractEventLoop) -> None:
    """The read end closes while data is buffered: connection_lost(BrokenPipeError), the
    buffer is dropped; no exception handler call."""
    with open_pipe() as (r, w):

        async def main() -> None:
            async with closing_write_pipe(loop, w) as (transport, proto):
                transport.write(b"b" * (1 << 20))
                assert transport.get_write_buffer_size() > 0
                r.close()
                exc = await proto.lost
                assert isinstance(exc, BrokenPipeError)
                assert transport.get_write_buffer_size() == 0
                assert proto.events == ["made", "pause", "lost"]

        run(loop, main())


def test_fifo_write_pipe_and_reader_gone(loop: asyncio.AbstractEventLoop) -> None:
    """A FIFO's write end: data reaches the reader; when the reader closes, connection_lost."""

    async def main() -> None:
        with fifo_files() as (r, w):
            async with closing_write_pipe(loop, w) as (transport, proto):
                transport.write(b"into the fifo")
                await until(lambda: transport.get_write_buffer_size() == 0)
                assert await read_nonblocking(r, 13) == b"into the fifo"
                r.close()
                assert await proto.lost is None
                assert proto.events == ["made", "lost"]

    run(loop, main())


# ----------------------------------------------------------------------
# Sockets and character devices as write pipes


def test_socket_write_pipe(loop: asyncio.AbstractEventLoop) -> None:
    """A socket as a write pipe: data reaches the peer; the peer closing is
    connection_lost(None)."""
    a, b = socket.socketpair()
    with closing_all(a, b):

        async def main() -> None:
            async with closing_write_pipe(loop, a) as (transport, proto):
                transport.write(b"to the peer")
                b.setblocking(False)
                assert await loop.sock_recv(b, 100) == b"to the peer"
                b.close()
                assert await proto.lost is None
                assert a.fileno() == -1

        run(loop, main())


def test_socket_write_pipe_closes_when_the_peer_sends(loop: asyncio.AbstractEventLoop) -> None:
    """A socket write pipe watches readability only to learn that the reader went away, so
    data *from* the peer also closes it: connection_lost(None), no data_received."""
    a, b = socket.socketpair()
    with closing_all(a, b):

        async def main() -> None:
            async with closing_write_pipe(loop, a) as (transport, proto):
                b.sendall(b"unexpected")
                assert await proto.lost is None
                assert transport.is_closing()
                assert proto.events == ["made", "lost"]

        run(loop, main())


def test_dev_null_write_pipe(loop: asyncio.AbstractEventLoop) -> None:
    """A character device (/dev/null) is accepted as a write pipe; writes never buffer."""
    f = open(os.devnull, "wb", buffering=0)  # noqa: SIM115
    with closing_all(f):

        async def main() -> None:
            assert stat.S_ISCHR(os.fstat(f.fileno()).st_mode)
            async with closing_write_pipe(loop, f) as (transport, proto):
                for _ in range(10):
                    transport.write(b"\0" * (1 << 20))
                assert transport.get_write_buffer_size() == 0
                assert proto.paused == 0
                transport.close()
                assert await proto.lost is None
                assert f.closed

        run(loop, main())


# ----------------------------------------------------------------------
# Streams over pipes


def test_streams_over_pipes(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio's documented pattern: a StreamReader over connect_read_pipe, and a StreamWriter
    over connect_write_pipe; drain() waits for the reader, close()/wait_closed() finish."""
    r, w = pipe_files()
    lines = [b"line %d\n" % i for i in range(20000)]
    with closing_all(r, w):

        async def main() -> None:
            reader = asyncio.StreamReader()
            async with closing_transport(
                loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), r)
            ) as (rtransport, _):
                wproto = asyncio.StreamReaderProtocol(asyncio.StreamReader())
                async with closing_transport(loop.connect_write_pipe(lambda: wproto, w)) as (
                    wtransport,
                    _,
                ):
                    writer = asyncio.StreamWriter(wtransport, wproto, None, loop)

                    async def produce() -> None:
                        for line in lines:
                            writer.write(line)
                            await writer.drain()
                        writer.close()
                        await writer.wait_closed()

                    producer = asyncio.ensure_future(produce())
                    got = [await reader.readline() for _ in lines]
                    assert got == lines
                    assert await reader.read() == b""
                    assert reader.at_eof()
                    await producer
                    rtransport.close()
                    await spin()

        run(loop, main())
