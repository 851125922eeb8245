"""sock_sendfile() and loop.sendfile(): os.sendfile() and the read/send fallback."""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from net_support import Recorder, close_client, close_server, no_reader_or_writer, recording_factory

DATA = bytes(range(256)) * 4096 + b"tail"  # ~1 MiB: more than one socket buffer
# loop.sendfile()'s read()+write() fallback through a socket transport, on both
# loops, gets a file of one block (16 KiB): asyncio 3.12+ corrupts a file of more
# when the peer is slower than the file (divergence write-copies-mutable-buffers,
# where tideloop's multi-block fallback is tested).
ONE_BLOCK = DATA[:12000] + b"tail"


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[BinaryIO]:
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    with path.open("rb") as f:
        yield f


async def sink_and_socket(
    loop: asyncio.AbstractEventLoop,
) -> tuple[asyncio.AbstractServer, socket.socket, list[Recorder]]:
    """A server collecting bytes, and a connected non-blocking client socket."""
    factory, protos = recording_factory(loop)

    server = await loop.create_server(factory, "127.0.0.1", 0)
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, server.sockets[0].getsockname())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    while not protos:
        await asyncio.sleep(0)
    return server, sock, protos


async def finish(server: asyncio.AbstractServer, sock: socket.socket, proto: Recorder) -> bytes:
    sock.close()
    await proto.lost
    await close_server(server)
    return bytes(proto.data)


@pytest.mark.parametrize(("offset", "count"), [(0, None), (1000, 2000), (len(DATA) - 4, None)])
def test_sock_sendfile(
    loop: asyncio.AbstractEventLoop, data_file: BinaryIO, offset: int, count: int | None
) -> None:
    async def main() -> None:
        server, sock, protos = await sink_and_socket(loop)
        sent = await loop.sock_sendfile(sock, data_file, offset, count)
        expected = DATA[offset : offset + count] if count else DATA[offset:]
        assert sent == len(expected)
        assert data_file.tell() == offset + sent
        assert no_reader_or_writer(loop, sock.fileno())
        assert await finish(server, sock, protos[0]) == expected

    loop.run_until_complete(main())


def test_sock_sendfile_mixed_with_sendall(
    loop: asyncio.AbstractEventLoop, data_file: BinaryIO
) -> None:
    async def main() -> None:
        server, sock, protos = await sink_and_socket(loop)
        await loop.sock_sendall(sock, b"before")
        await loop.sock_sendfile(sock, data_file)
        await loop.sock_sendall(sock, b"after")
        assert await finish(server, sock, protos[0]) == b"before" + DATA + b"after"

    loop.run_until_complete(main())


def test_sock_sendfile_empty_file(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")

    async def main() -> None:
        server, sock, protos = await sink_and_socket(loop)
        with path.open("rb") as f:
            assert await loop.sock_sendfile(sock, f) == 0
            assert f.tell() == 0
        assert await finish(server, sock, protos[0]) == b""

    loop.run_until_complete(main())


def test_sock_sendfile_fallback_for_non_files(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, sock, protos = await sink_and_socket(loop)
        f = io.BytesIO(DATA)
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sock_sendfile(sock, f, fallback=False)
        assert await loop.sock_sendfile(sock, f, 10, 100) == 100
        assert f.tell() == 110
        assert await finish(server, sock, protos[0]) == DATA[10:110]

    loop.run_until_complete(main())


@pytest.mark.parametrize(
    ("args", "exc", "message"),
    [
        ((0, 0), ValueError, r"count must be a positive integer \(got 0\)"),
        ((0, -1), ValueError, r"count must be a positive integer \(got -1\)"),
        ((0, 1.5), TypeError, r"count must be a positive integer \(got 1.5\)"),
        ((-1, None), ValueError, r"offset must be a non-negative integer \(got -1\)"),
        (("0", None), TypeError, r"offset must be a non-negative integer \(got '0'\)"),
    ],
)
def test_sock_sendfile_argument_errors(
    loop: asyncio.AbstractEventLoop,
    data_file: BinaryIO,
    args: tuple[Any, Any],
    exc: type[Exception],
    message: str,
) -> None:
    sock = socket.socket()
    sock.setblocking(False)
    with sock, pytest.raises(exc, match=message):
        loop.run_until_complete(loop.sock_sendfile(sock, data_file, *args))


def test_sock_sendfile_text_file_and_datagram_socket(
    loop: asyncio.AbstractEventLoop, tmp_path: Path, data_file: BinaryIO
) -> None:
    path = tmp_path / "text.txt"
    path.write_text("text")
    tcp = socket.socket()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp.setblocking(False)
    udp.setblocking(False)
    with tcp, udp, path.open("r") as text:
        with pytest.raises(ValueError, match="file should be opened in binary mode"):
            loop.run_until_complete(loop.sock_sendfile(tcp, text))
        with pytest.raises(ValueError, match="only SOCK_STREAM type sockets are supported"):
            loop.run_until_complete(loop.sock_sendfile(udp, data_file))


def test_sock_sendfile_cancelled_leaves_no_writer(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"b" * (32 * 1024 * 1024))
    a, b = socket.socketpair()
    a.setblocking(False)

    async def main() -> None:
        with path.open("rb") as f:
            task = asyncio.ensure_future(loop.sock_sendfile(a, f))
            await asyncio.sleep(0.02)
            assert not task.done()  # nobody reads b
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert no_reader_or_writer(loop, a.fileno())

    with a, b:
        loop.run_until_complete(main())


# ----------------------------------------------------------------------
# loop.sendfile(transport, ...)


async def transport_pair(
    loop: asyncio.AbstractEventLoop,
) -> tuple[asyncio.AbstractServer, asyncio.Transport, Recorder, list[Recorder]]:
    factory, protos = recording_factory(loop)

    server = await loop.create_server(factory, "127.0.0.1", 0)
    transport, client = await loop.create_connection(
        lambda: Recorder(loop), *server.sockets[0].getsockname()
    )
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    while not protos:
        await asyncio.sleep(0)
    return server, transport, client, protos


async def finish_transport(
    server: asyncio.AbstractServer, transport: asyncio.Transport, client: Recorder, srv: Recorder
) -> bytes:
    transport.close()
    await client.lost
    await srv.lost
    await close_server(server)
    return bytes(srv.data)


def test_loop_sendfile_native(loop: asyncio.AbstractEventLoop, data_file: BinaryIO) -> None:
    async def main() -> None:
        server, transport, client, protos = await transport_pair(loop)
        transport.write(b"pre" * 100000)  # buffered data goes out first
        sent = await loop.sendfile(transport, data_file)
        assert sent == len(DATA)
        assert data_file.tell() == len(DATA)
        assert transport.is_reading()  # restored
        transport.write(b"post")
        received = await finish_transport(server, transport, client, protos[0])
        assert received == b"pre" * 100000 + DATA + b"post"

    loop.run_until_complete(main())


def test_loop_sendfile_offset_count(loop: asyncio.AbstractEventLoop, data_file: BinaryIO) -> None:
    async def main() -> None:
        server, transport, client, protos = await transport_pair(loop)
        assert await loop.sendfile(transport, data_file, 100, 5000) == 5000
        assert data_file.tell() == 5100
        received = await finish_transport(server, transport, client, protos[0])
        assert received == DATA[100:5100]

    loop.run_until_complete(main())


def test_loop_sendfile_write_refused_meanwhile(
    loop: asyncio.AbstractEventLoop, data_file: BinaryIO
) -> None:
    async def main() -> None:
        server, transport, client, protos = await transport_pair(loop)
        task = asyncio.ensure_future(loop.sendfile(transport, data_file))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if not task.done():
            with pytest.raises(RuntimeError, match="sendfile is in progress"):
                transport.write(b"x")
            with pytest.raises(RuntimeError, match="sendfile is in progress"):
                transport.writelines([b"x"])
        assert await task == len(DATA)
        received = await finish_transport(server, transport, client, protos[0])
        assert received == DATA

    loop.run_until_complete(main())


def test_loop_sendfile_fallback(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client, protos = await transport_pair(loop)
        f = io.BytesIO(ONE_BLOCK)
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sendfile(transport, f, fallback=False)
        assert await loop.sendfile(transport, f) == len(ONE_BLOCK)
        assert f.tell() == len(ONE_BLOCK)
        assert transport.get_protocol() is client  # restored after the fallback
        assert transport.is_reading()
        received = await finish_transport(server, transport, client, protos[0])
        assert received == ONE_BLOCK

    loop.run_until_complete(main())


def test_loop_sendfile_errors(loop: asyncio.AbstractEventLoop, data_file: BinaryIO) -> None:
    class NoSendfile(asyncio.Transport):
        def is_closing(self) -> bool:
            return False

    async def main() -> None:
        with pytest.raises(RuntimeError, match="sendfile is not supported for transport"):
            await loop.sendfile(NoSendfile(), data_file)
        server, transport, client, protos = await transport_pair(loop)
        transport.close()
        with pytest.raises(RuntimeError, match="Transport is closing"):
            await loop.sendfile(transport, data_file)
        await client.lost
        await protos[0].lost
        await close_server(server)

    loop.run_until_complete(main())


def test_loop_sendfile_peer_closes_midway(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"m" * (16 * 1024 * 1024))

    class CloseAfter(Recorder):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if len(self.data) >= 1024:
                self.transport.close()

    async def main() -> None:
        protos: list[CloseAfter] = []

        def factory() -> CloseAfter:
            protos.append(CloseAfter(loop))
            return protos[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        transport, client = await loop.create_connection(
            lambda: Recorder(loop), *server.sockets[0].getsockname()
        )
        with path.open("rb") as f:
            with pytest.raises(ConnectionError):
                await loop.sendfile(transport, f)
            assert 1024 <= f.tell() < 16 * 1024 * 1024
        await close_client(transport, client, server)

    loop.run_until_complete(main())


@pytest.mark.divergence("sendfile-sets-file-position")
def test_sendfile_offset_zero_and_the_file_position(
    loop: asyncio.AbstractEventLoop, data_file: BinaryIO
) -> None:
    """offset=0 means the start of the file, wherever its position is; the position ends
    at offset + sent, also when nothing was sent. Native and fallback paths alike."""

    async def main() -> None:
        # sock_sendfile, native (a regular file) and fallback (BytesIO).
        for f in (data_file, io.BytesIO(DATA)):
            server, sock, protos = await sink_and_socket(loop)
            f.seek(123)
            assert await loop.sock_sendfile(sock, f, 0) == len(DATA)
            assert f.tell() == len(DATA)
            f.seek(5)
            assert await loop.sock_sendfile(sock, f, len(DATA)) == 0  # nothing to send
            assert f.tell() == len(DATA)
            assert await finish(server, sock, protos[0]) == DATA
        # loop.sendfile, native and fallback (one block: see ONE_BLOCK).
        for f, content in ((data_file, DATA), (io.BytesIO(ONE_BLOCK), ONE_BLOCK)):
            server, transport, client, protos = await transport_pair(loop)
            f.seek(123)
            assert await loop.sendfile(transport, f, 0) == len(content)
            assert f.tell() == len(content)
            f.seek(5)
            assert await loop.sendfile(transport, f, len(content)) == 0
            assert f.tell() == len(content)
            assert await finish_transport(server, transport, client, protos[0]) == content

    loop.run_until_complete(main())
