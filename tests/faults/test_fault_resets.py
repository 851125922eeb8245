"""A peer that resets the connection (RST, SO_LINGER 0) in the middle of a transfer.

The promise held (issue 27, "nothing is lost"): when the peer goes away with
a reset, the loop tells the protocol exactly as the stdlib loop does, with
``connection_lost(ConnectionResetError)`` (or the StreamReader's read
raising it), never through the loop's exception handler; every byte the
reader got before the reset is the sender's stream in order (a prefix of
it, by digest); a reset connection that nobody reads costs no CPU; and no
fd, registration, task or thread is left behind. Each test runs on the
stdlib loop, tideloop with every poller, and uvloop where installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from fault_support import Digest, DigestProtocol, MiB, Pattern, reset, run

T = TypeVar("T")


async def _connect_to_plain_listener(
    loop: asyncio.AbstractEventLoop, connect: Callable[[Any], Awaitable[T]]
) -> tuple[T, socket.socket]:
    """``connect(address)`` through the loop to a plain listening socket.

    Returns what *connect* returned and the accepted peer (non-blocking); the
    listener is closed.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        result = await connect(listener.getsockname())
        peer, _ = await loop.sock_accept(listener)
    finally:
        listener.close()
    peer.setblocking(False)
    return result, peer


async def _recv_some(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> Digest:
    """Read at least *n* bytes from *sock* (through the loop), hashing them."""
    got = Digest()
    while got.count < n:
        data = await loop.sock_recv(sock, 256 * 1024)
        assert data, "EOF before the reset"
        got.update(data)
    return got


@pytest.mark.parametrize("writer_side", ["server", "client"])
def test_peer_reset_mid_write(fault_loop: asyncio.AbstractEventLoop, writer_side: str) -> None:
    """The writer has megabytes buffered when the peer resets: connection_lost(reset)."""
    loop = fault_loop
    pattern = Pattern(32 * MiB)

    async def main() -> None:
        writer = DigestProtocol(loop)
        if writer_side == "server":
            server = await loop.create_server(lambda: writer, "127.0.0.1", 0)
            peer = socket.socket()
            peer.setblocking(False)
            await loop.sock_connect(peer, server.sockets[0].getsockname())
        else:
            _, peer = await _connect_to_plain_listener(
                loop, lambda addr: loop.create_connection(lambda: writer, *addr)
            )
        await writer.made
        transport = writer.transport
        assert transport is not None
        for chunk in pattern.chunks():
            transport.write(chunk)
        # The peer reads a little, so the stream is under way; then resets.
        got = await _recv_some(loop, peer, 1 * MiB)
        assert got.hexdigest() == pattern.prefix_digest(got.count)
        buffered = transport.get_write_buffer_size()
        assert buffered > 0, "nothing left buffered: not a reset mid-write"
        reset(peer)
        exc = await writer.lost
        # What the stdlib loop reports: the reset, as a ConnectionResetError.
        assert type(exc) is ConnectionResetError, repr(exc)
        assert writer.events == ["made", "lost"]
        assert transport.is_closing()
        transport.close()  # a no-op now
        if writer_side == "server":
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_peer_reset_mid_read_while_paused(fault_loop: asyncio.AbstractEventLoop) -> None:
    """RST arrives while the reader is paused: no CPU spent, then data and the reset."""
    loop = fault_loop
    pattern = Pattern(64 * MiB)

    async def main() -> None:
        reader = DigestProtocol(loop)
        (transport, _), peer = await _connect_to_plain_listener(
            loop, lambda addr: loop.create_connection(lambda: reader, *addr)
        )
        transport.pause_reading()
        # The peer sends until both kernels' buffers are full, then resets.
        sent = 0
        for chunk in pattern.chunks():
            try:
                n = peer.send(chunk)
            except BlockingIOError:
                break
            sent += n
            if n < len(chunk):
                break
        else:
            pytest.fail("the whole stream fitted into the socket buffers")
        await asyncio.sleep(0.05)
        reset(peer)
        # Paused over a reset socket: the loop must not spin on it, nor tell anyone.
        cpu0 = time.process_time()
        await asyncio.sleep(0.5)
        idle_cpu = time.process_time() - cpu0
        assert idle_cpu < 0.2, f"{idle_cpu:.3f} s of CPU in 0.5 s paused over a reset socket"
        assert reader.events == ["made"]
        transport.resume_reading()
        exc = await reader.lost
        assert type(exc) is ConnectionResetError, repr(exc)
        assert reader.received.count <= sent
        assert reader.received.hexdigest() == pattern.prefix_digest(reader.received.count)
        assert reader.events == ["made", "lost"]

    run(loop, main())


def test_peer_reset_mid_read_stream_reader(fault_loop: asyncio.AbstractEventLoop) -> None:
    """A StreamReader reading a stream that ends with a RST: its read() raises the reset."""
    loop = fault_loop
    pattern = Pattern(16 * MiB)

    async def main() -> None:
        (reader, writer), peer = await _connect_to_plain_listener(
            loop, lambda addr: asyncio.open_connection(*addr)
        )

        async def send_then_reset() -> None:
            for chunk in pattern.chunks():
                await loop.sock_sendall(peer, chunk)
            reset(peer)

        sender = asyncio.ensure_future(send_then_reset())
        got = Digest()
        with pytest.raises(ConnectionResetError):
            while True:
                data = await reader.read(256 * 1024)
                assert data, "EOF instead of the reset"
                got.update(data)
        await sender
        assert got.hexdigest() == pattern.prefix_digest(got.count)
        assert got.count > 0
        writer.close()
        with contextlib.suppress(ConnectionResetError):
            await writer.wait_closed()

    run(loop, main())
