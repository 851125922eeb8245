"""asyncio streams (open_connection, start_server, StreamWriter) on the loop's transports."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

_running: set[asyncio.Task[None]] = set()


async def all_handlers_done() -> None:
    """3.11's Server.wait_closed() does not wait for handlers; we do."""
    while pending := [t for t in _running if not t.done()]:
        await asyncio.gather(*pending, return_exceptions=True)
    _running.clear()


async def close_streams(writer: asyncio.StreamWriter, server: asyncio.Server) -> None:
    """Close the client side, then the server, then wait for every handler."""
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    await all_handlers_done()


async def echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    assert task is not None
    _running.add(task)
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    finally:
        writer.close()
        await writer.wait_closed()


def test_open_connection_and_start_server(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"line one\nline two\n")
        await writer.drain()
        assert await reader.readline() == b"line one\n"
        assert await reader.readuntil(b"two\n") == b"line two\n"
        writer.write(b"exact")
        assert await reader.readexactly(5) == b"exact"
        assert writer.get_extra_info("peername") == (host, port)
        assert isinstance(writer.transport, asyncio.Transport)
        writer.write_eof()
        assert await reader.read() == b""
        assert reader.at_eof()
        await close_streams(writer, server)

    loop.run_until_complete(main())


@pytest.mark.parametrize("size", [1, 1024, 1024 * 1024, 10 * 1024 * 1024])
def test_streams_echo_with_drain(loop: asyncio.AbstractEventLoop, size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + b"!" * (size % 256)

    async def main() -> None:
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())

        async def send() -> None:
            for i in range(0, len(payload), 100000):
                writer.write(payload[i : i + 100000])
                await writer.drain()  # flow control: waits while the buffer is full
            writer.write_eof()

        sender = asyncio.ensure_future(send())
        received = await reader.readexactly(len(payload))
        await sender
        assert received == payload
        assert await reader.read() == b""
        await close_streams(writer, server)

    loop.run_until_complete(main())


def test_incomplete_read(loop: asyncio.AbstractEventLoop) -> None:
    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"abc")
        writer.close()
        await writer.wait_closed()

    async def main() -> None:
        server = await asyncio.start_server(short, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        with pytest.raises(asyncio.IncompleteReadError) as excinfo:
            await reader.readexactly(10)
        assert excinfo.value.partial == b"abc"
        await close_streams(writer, server)

    loop.run_until_complete(main())


def test_unix_streams(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "streams.sock")

    async def main() -> None:
        server = await asyncio.start_unix_server(echo_handler, path)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.writelines([b"un", b"ix\n"])
        await writer.drain()
        assert await reader.readline() == b"unix\n"
        await close_streams(writer, server)

    loop.run_until_complete(main())


def test_server_serve_forever_with_streams(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0, start_serving=False)
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)  # serve_forever() starts serving in its first step
        assert server.is_serving()
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(b"ping\n")
        assert await reader.readline() == b"ping\n"
        writer.close()
        await writer.wait_closed()
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert not server.is_serving()
        await all_handlers_done()

    loop.run_until_complete(main())


def test_writer_close_while_peer_reads_slowly(loop: asyncio.AbstractEventLoop) -> None:
    """close() flushes the buffer; wait_closed() returns once the transport is gone."""
    got = bytearray()
    done = asyncio.Event()

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(4096):
            got.extend(chunk)
            await asyncio.sleep(0)
        writer.close()
        await writer.wait_closed()
        done.set()

    async def main() -> None:
        server = await asyncio.start_server(slow_reader, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        writer.write(b"w" * (4 * 1024 * 1024))
        writer.close()
        await writer.wait_closed()
        await done.wait()
        assert len(got) == 4 * 1024 * 1024
        server.close()
        await server.wait_closed()
        await all_handlers_done()

    loop.run_until_complete(main())
