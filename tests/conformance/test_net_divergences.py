"""tideloop's side of the networking divergences registered in divergences.py.

Each test runs on tideloop only (``@pytest.mark.divergence``); the registry's
own checks (test_divergences.py) show that the stdlib loop behaves otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import random
import socket

import pytest

from tideloop._fdio.registry import READ_BUFFER_SIZE

from divergence_support import (
    Chunks,
    Starved,
    closed_server,
    drain,
    native_sendfile_to_nobody,
    queue_until_full,
    reads_of_queued_data,
    sendfile_fallback_to_a_slow_peer,
    unix_server_binds_while_the_loop_runs,
    unread_pair,
    until_received,
    writelines_pauses,
)
from net_support import close_server


@pytest.mark.divergence("accept-out-of-resources")
def test_emfile_reported_once_and_retry_cancelled_on_close(
    loop: asyncio.AbstractEventLoop,
) -> None:
    reports: list[dict[str, object]] = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx))
    real = socket.socket()
    starved = Starved(real)
    lp: object = loop
    lp._start_serving(asyncio.Protocol, starved, backlog=5)  # type: ignore[attr-defined]
    lp._accept_connection(asyncio.Protocol, starved, backlog=5)  # type: ignore[attr-defined]
    assert len(reports) == 1
    assert reports[0]["message"] == "socket.accept() out of system resource"
    assert not loop.remove_reader(real.fileno())  # no longer polled
    retries = lp._listeners.retries  # type: ignore[attr-defined]
    timer = retries[starved]
    lp._stop_serving(starved)  # type: ignore[attr-defined]
    assert timer.cancelled()
    assert not retries


@pytest.mark.divergence("accept-without-task")
def test_protocol_factory_runs_in_the_accept_callback(loop: asyncio.AbstractEventLoop) -> None:
    seen: list[object] = []

    class P(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport.write(b"hello")  # type: ignore[attr-defined]
            transport.close()

    def factory() -> asyncio.Protocol:
        seen.append(asyncio.current_task())
        return P()

    async def main() -> None:
        server = await loop.create_server(factory, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        assert await reader.read() == b"hello"
        writer.close()
        await writer.wait_closed()
        await close_server(server)

    loop.run_until_complete(main())
    assert seen == [None]


@pytest.mark.divergence("write-copies-mutable-buffers")
def test_mutating_a_written_buffer_does_not_change_what_is_sent(
    loop: asyncio.AbstractEventLoop,
) -> None:
    a, b = unread_pair()

    async def main() -> bytes:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        buf = bytearray(b"A" * (1024 * 1024))
        transport.write(buf)
        transport.writelines([memoryview(buf)])
        assert transport.get_write_buffer_size() > 0
        buf[:] = b"B" * len(buf)
        data = await drain(loop, b, 2 * len(buf))
        transport.close()
        await asyncio.sleep(0)
        return data

    with b:
        assert loop.run_until_complete(main()) == b"A" * (2 * 1024 * 1024)


@pytest.mark.divergence("write-copies-mutable-buffers")
def test_sendfile_fallback_sends_the_file_as_it_is(loop: asyncio.AbstractEventLoop) -> None:
    """loop.sendfile()'s read()+write() fallback reuses one buffer for every block it
    reads; a peer slower than the file must still get the file's bytes, not a later
    block's (asyncio 3.12+ sends the overwritten ones: its transport keeps a view)."""
    data = random.Random(23).randbytes(1024 * 1024)
    a, b = unread_pair()
    with b:
        assert loop.run_until_complete(sendfile_fallback_to_a_slow_peer(loop, a, b, data)) == data


@pytest.mark.divergence("unix-path-calls-off-loop")
def test_unix_server_path_calls_run_while_the_loop_runs(loop: asyncio.AbstractEventLoop) -> None:
    ran, bound = loop.run_until_complete(unix_server_binds_while_the_loop_runs(loop))
    assert ran == [True]  # the loop ran while the path was bound
    assert bound


@pytest.mark.divergence("writelines-flow-control")
def test_writelines_pauses_the_protocol(loop: asyncio.AbstractEventLoop) -> None:
    a, b = unread_pair()
    with b:
        assert loop.run_until_complete(writelines_pauses(loop, a)) == [True]


def bulk_pair() -> tuple[socket.socket, socket.socket]:
    """A socketpair whose *b* side can queue a megabyte for *a* to read."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    return a, b


@pytest.mark.divergence("recv-size-adaptive")
def test_reads_grow_to_the_loops_read_buffer_after_a_large_read(
    loop: asyncio.AbstractEventLoop,
) -> None:
    a, b = bulk_pair()
    queued, sizes = loop.run_until_complete(reads_of_queued_data(loop, a, b))
    assert queued > 3 * 64 * 1024
    assert sizes[0] == 64 * 1024
    assert max(sizes) == READ_BUFFER_SIZE  # the loop's read buffer: 120 KiB (PyPy: 256)


@pytest.mark.divergence("recv-size-adaptive")
def test_reads_shrink_back_after_bulk_data(loop: asyncio.AbstractEventLoop) -> None:
    a, b = bulk_pair()
    chunks: list[bytes] = []

    async def main() -> None:
        b.setblocking(False)  # sock_* methods take non-blocking sockets
        transport, _ = await loop.connect_accepted_socket(lambda: Chunks(chunks), a)
        bulk = bytes(range(256)) * 2048  # 512 KiB
        await loop.sock_sendall(b, bulk)
        await until_received(chunks, len(bulk))
        assert b"".join(chunks) == bulk
        assert max(map(len, chunks)) > 64 * 1024
        # Small messages after the burst come as they were sent.
        del chunks[:]
        for i in range(3):
            await loop.sock_sendall(b, b"small %d" % i)
            while not chunks:
                await asyncio.sleep(0.001)
            assert chunks.pop() == b"small %d" % i
        transport.close()
        await asyncio.sleep(0)

    with b:
        loop.run_until_complete(main())


@pytest.mark.divergence("recv-size-adaptive")
def test_stream_reads_stay_at_64k_and_a_plain_protocol_after_them_grows(
    loop: asyncio.AbstractEventLoop,
) -> None:
    a, b = bulk_pair()
    stream_chunks: list[bytes] = []
    chunks: list[bytes] = []

    class Recording(asyncio.StreamReaderProtocol):
        def data_received(self, data: bytes) -> None:
            stream_chunks.append(data)
            super().data_received(data)

    async def main() -> None:
        b.setblocking(False)  # sock_* methods take non-blocking sockets
        reader = asyncio.StreamReader(limit=1 << 20)
        transport, _ = await loop.connect_accepted_socket(lambda: Recording(reader), a)
        bulk = bytes(range(256)) * 2048  # 512 KiB
        await loop.sock_sendall(b, bulk)
        assert await reader.readexactly(len(bulk)) == bulk
        # The same transport, handed to a plain Protocol, reads large again.
        transport.set_protocol(Chunks(chunks))
        await loop.sock_sendall(b, bulk)
        await until_received(chunks, len(bulk))
        assert b"".join(chunks) == bulk
        transport.close()
        await asyncio.sleep(0)

    with b:
        loop.run_until_complete(main())
    assert max(map(len, stream_chunks)) == 64 * 1024
    assert max(map(len, chunks)) == READ_BUFFER_SIZE


@pytest.mark.divergence("recv-size-adaptive")
def test_pipe_reads_are_at_most_64k(loop: asyncio.AbstractEventLoop) -> None:
    import fcntl
    import os

    rfd, wfd = os.pipe()
    f_setpipe_sz = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; 3.11's fcntl lacks it
    try:
        fcntl.fcntl(wfd, f_setpipe_sz, 1 << 20)
    except OSError:
        pytest.skip("the pipe cannot be made larger than 64 KiB here")
    chunks: list[bytes] = []
    os.set_blocking(wfd, False)
    queued = queue_until_full(functools.partial(os.write, wfd), b"p" * 65536)
    os.close(wfd)
    assert queued > 64 * 1024

    async def main() -> None:
        with open(rfd, "rb", buffering=0) as pipe:
            transport, _ = await loop.connect_read_pipe(lambda: Chunks(chunks), pipe)
            await until_received(chunks, queued)
            transport.close()
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert max(map(len, chunks)) == 64 * 1024


@pytest.mark.divergence("sendfile-transport-closed")
def test_closing_the_transport_ends_a_native_sendfile(loop: asyncio.AbstractEventLoop) -> None:
    a, b = unread_pair()

    async def main() -> None:
        async with native_sendfile_to_nobody(loop, a) as (transport, task, f):
            assert not task.done()  # nobody reads: os.sendfile() waits
            transport.close()
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(task, 5)
            assert 0 < f.tell() < 4 * 1024 * 1024  # what went out, as asyncio reports it

    with b:
        loop.run_until_complete(main())


@pytest.mark.divergence("start-serving-after-close")
def test_start_serving_after_close_does_nothing(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await closed_server(loop)
        await server.start_serving()
        assert not server.is_serving()

    loop.run_until_complete(main())
