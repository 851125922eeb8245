"""Pipe transports on pseudo-terminals (os.openpty): master and slave, read and write.

Every test runs on the stdlib loop and on tideloop alike.

What asyncio does at the end of a pty is the surprising part: when the slave
side is closed, reading the master fails with EIO, and asyncio's read pipe
transport reports that as connection_lost(OSError(EIO)) -- without
eof_received and without calling the exception handler (EIO is the one
errno it keeps quiet about). Over streams, the StreamReader therefore ends
with that OSError, not with EOF. Everything written before the slave closed
is delivered first. The slave side, when the master closes, sees a plain EOF.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import subprocess
import tty
from typing import IO

import pytest

from ipc_support import (
    assert_reaped,
    child,
    closing_all,
    closing_transport,
    data_then_eof,
    py,
    read_nonblocking,
    run,
    until,
)
from net_support import Recorder

pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="no ptys")


def open_pty(*, raw: bool = True) -> tuple[IO[bytes], IO[bytes]]:
    """A pty as unbuffered file objects (master, slave); raw mode: no echo, no CR/LF mapping."""
    master, slave = os.openpty()
    if raw:
        tty.setraw(slave)
    return os.fdopen(master, "rb+", buffering=0), os.fdopen(slave, "rb+", buffering=0)


def test_master_read_ends_with_eio_as_connection_lost(loop: asyncio.AbstractEventLoop) -> None:
    """Reading a pty master: data, then when the slave closes, connection_lost(OSError(EIO))
    with no eof_received and no exception-handler call; all data written before the slave
    closed arrives first."""
    master, slave = open_pty()
    payload = b"0123456789abcdef" * 4096  # more than one read
    with closing_all(master, slave):

        async def main() -> None:
            assert stat.S_ISCHR(os.fstat(master.fileno()).st_mode)
            async with closing_transport(
                loop.connect_read_pipe(lambda: Recorder(loop), master)
            ) as (transport, proto):
                slave.write(b"first")
                assert await proto.wait_for_bytes(5) == b"first"
                os.set_blocking(slave.fileno(), False)
                written = 0
                while written < len(payload):  # the pty holds only so much: let the loop read
                    try:
                        n = os.write(slave.fileno(), payload[written:])
                    except BlockingIOError:
                        await asyncio.sleep(0.001)
                    else:
                        written += n
                slave.close()
                exc = await proto.lost
                assert isinstance(exc, OSError)
                assert exc.errno == errno.EIO
                assert proto.data == b"first" + payload
                assert proto.events == ["made", "data", "lost"]
                assert transport.is_closing()
                assert master.closed

        run(loop, main())


def test_master_read_of_cooked_output(loop: asyncio.AbstractEventLoop) -> None:
    """In cooked mode the line discipline maps \\n to \\r\\n; written and closed before the
    loop ever reads, the data still comes before the EIO."""
    master, slave = open_pty(raw=False)
    with closing_all(master, slave):

        async def main() -> None:
            slave.write(b"hello\n" * 100)
            slave.close()
            async with closing_transport(
                loop.connect_read_pipe(lambda: Recorder(loop), master)
            ) as (transport, proto):
                exc = await proto.lost
                assert isinstance(exc, OSError) and exc.errno == errno.EIO
                assert proto.data == b"hello\r\n" * 100
                assert "eof" not in proto.events
                assert transport.is_closing()

        run(loop, main())


def test_master_stream_reader_ends_with_eio(loop: asyncio.AbstractEventLoop) -> None:
    """A StreamReader over a pty master: lines arrive; after the slave closes, reading
    raises OSError(EIO) (connection_lost with an exception), it is not EOF."""
    master, slave = open_pty()
    with closing_all(master, slave):

        async def main() -> None:
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), master)
            slave.write(b"line one\nline two\n")
            assert await reader.readline() == b"line one\n"
            assert await reader.readline() == b"line two\n"
            slave.close()
            with pytest.raises(OSError) as info:
                await reader.read()
            assert info.value.errno == errno.EIO
            assert not reader.at_eof()

        run(loop, main())


def test_slave_read_sees_eof_when_master_closes(loop: asyncio.AbstractEventLoop) -> None:
    """Reading a pty slave (a character device): data written to the master, then a plain EOF
    (eof_received, connection_lost(None)) when the master closes."""
    master, slave = open_pty()
    with closing_all(master, slave):

        async def main() -> None:
            assert stat.S_ISCHR(os.fstat(slave.fileno()).st_mode)
            async with closing_transport(loop.connect_read_pipe(lambda: Recorder(loop), slave)) as (
                transport,
                proto,
            ):
                await data_then_eof(proto, master.write, master.close, b"to the slave")
                assert transport.is_closing()

        run(loop, main())


def test_master_write_pipe_buffers_and_closes(loop: asyncio.AbstractEventLoop) -> None:
    """A write pipe on a pty master: a large write is partly buffered (pause_writing), the
    slave reads it all, write_eof closes the master and the slave then reads EOF."""
    master, slave = open_pty()
    payload = bytes(range(256)) * 1024  # 256 KiB: more than the pty holds
    with closing_all(master, slave):

        async def main() -> None:
            async with closing_transport(
                loop.connect_write_pipe(lambda: Recorder(loop), master)
            ) as (transport, proto):
                assert transport.can_write_eof()
                transport.write(payload)
                assert transport.get_write_buffer_size() > 0
                assert proto.paused == 1
                assert await read_nonblocking(slave, len(payload)) == payload
                await until(lambda: transport.get_write_buffer_size() == 0)
                assert proto.resumed == 1
                transport.write_eof()
                assert await proto.lost is None
                assert master.closed
                assert await read_nonblocking(slave) == b""

        run(loop, main())


def test_slave_write_pipe(loop: asyncio.AbstractEventLoop) -> None:
    """A write pipe on a pty slave: what is written is read from the master."""
    master, slave = open_pty()
    with closing_all(master, slave):

        async def main() -> None:
            async with closing_transport(
                loop.connect_write_pipe(lambda: Recorder(loop), slave)
            ) as (transport, proto):
                transport.write(b"from the slave side")
                assert await read_nonblocking(master, 19) == b"from the slave side"
                transport.close()
                assert await proto.lost is None
                assert slave.closed

        run(loop, main())


def test_child_process_on_a_pty(loop: asyncio.AbstractEventLoop) -> None:
    """A child whose stdin/stdout/stderr are a pty slave, read through the master: its output
    arrives, and when it exits (the last slave fd closes) the transport ends with
    connection_lost(OSError(EIO))."""
    master, slave = open_pty(raw=False)
    with closing_all(master, slave):

        async def main() -> None:
            async with closing_transport(
                loop.connect_read_pipe(lambda: Recorder(loop), master)
            ) as (transport, proto):
                code = "import os, sys; print('isatty', os.isatty(1), sys.stdin.isatty())"
                async with child(
                    asyncio.create_subprocess_exec(
                        *py(code), stdin=slave, stdout=slave, stderr=slave
                    )
                ) as proc:
                    slave.close()
                    assert await proc.wait() == 0
                    exc = await proto.lost
                    assert isinstance(exc, OSError) and exc.errno == errno.EIO
                    assert proto.data == b"isatty True True\r\n"
                    assert transport.is_closing()
                    assert_reaped(proc.pid)

        run(loop, main())


def test_write_to_child_through_a_pty(loop: asyncio.AbstractEventLoop) -> None:
    """The other direction: a write pipe on the master feeds a child reading its pty stdin;
    its stdout is a normal pipe."""
    master, slave = open_pty()
    with closing_all(master, slave):

        async def main() -> None:
            code = "import sys; print(sys.stdin.readline().strip().upper())"
            async with child(
                asyncio.create_subprocess_exec(*py(code), stdin=slave, stdout=subprocess.PIPE)
            ) as proc:
                slave.close()
                async with closing_transport(
                    loop.connect_write_pipe(lambda: Recorder(loop), master)
                ) as (transport, proto):
                    transport.write(b"shout\n")
                    assert proc.stdout is not None
                    assert await proc.stdout.read() == b"SHOUT\n"
                    assert await proc.wait() == 0
                    transport.close()
                    await proto.lost
                    assert_reaped(proc.pid)

        run(loop, main())
