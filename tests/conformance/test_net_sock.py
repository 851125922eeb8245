"""The sock_* coroutines: recv, recv_into, recvfrom(_into), sendall, sendto, connect, accept."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from net_support import (
    blackhole,
    cancelled_after,
    free_port,
    has_ipv6,
    listening,
    no_reader_or_writer,
    nonblocking_pair,
)


def test_recv_and_sendall(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a, b:

        async def main() -> bytes:
            recv = asyncio.ensure_future(loop.sock_recv(a, 100))
            await asyncio.sleep(0.01)
            assert not recv.done()  # waits for data
            await loop.sock_sendall(b, b"hello")
            return await recv

        assert loop.run_until_complete(main()) == b"hello"
        assert no_reader_or_writer(loop, a.fileno())


def test_recv_ready_data_needs_no_registration(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a, b:
        b.send(b"ready")
        assert loop.run_until_complete(loop.sock_recv(a, 100)) == b"ready"
        assert no_reader_or_writer(loop, a.fileno())


def test_recv_into(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a, b:
        buf = bytearray(10)

        async def main() -> int:
            recv = asyncio.ensure_future(loop.sock_recv_into(a, memoryview(buf)[2:]))
            await asyncio.sleep(0.01)
            b.send(b"abc")
            return await recv

        assert loop.run_until_complete(main()) == 3
        assert buf[:5] == b"\0\0abc"


def test_recv_eof_returns_empty(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a:

        async def main() -> bytes:
            recv = asyncio.ensure_future(loop.sock_recv(a, 100))
            await asyncio.sleep(0.01)
            b.close()
            return await recv

        assert loop.run_until_complete(main()) == b""


def test_sendall_large_payload_with_slow_reader(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    payload = bytes(range(256)) * (4 * 4096)  # 4 MiB: far more than the socket buffers
    with a, b:

        async def reader() -> bytes:
            chunks = []
            total = 0
            while total < len(payload):
                chunk = await loop.sock_recv(b, 65536)
                assert chunk
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks)

        async def main() -> bytes:
            task = asyncio.ensure_future(reader())
            await loop.sock_sendall(a, payload)
            return await task

        assert loop.run_until_complete(main()) == payload
        assert no_reader_or_writer(loop, a.fileno())
        assert no_reader_or_writer(loop, b.fileno())


def test_sendall_accepts_memoryview_and_bytearray(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a, b:
        loop.run_until_complete(loop.sock_sendall(a, bytearray(b"ab")))
        loop.run_until_complete(loop.sock_sendall(a, memoryview(b"cd")))
        assert loop.run_until_complete(loop.sock_recv(b, 10)) == b"abcd"


def test_sendall_error_propagates(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a:
        b.close()
        with pytest.raises(BrokenPipeError):
            loop.run_until_complete(loop.sock_sendall(a, b"x" * 1000))


def test_recvfrom_and_sendto(loop: asyncio.AbstractEventLoop) -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.setblocking(False)
        tx.setblocking(False)
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))

        async def main() -> None:
            recv = asyncio.ensure_future(loop.sock_recvfrom(rx, 100))
            await asyncio.sleep(0.01)
            assert await loop.sock_sendto(tx, b"ping", rx.getsockname()) == 4
            data, addr = await recv
            assert (data, addr) == (b"ping", tx.getsockname())
            buf = bytearray(10)
            recv2 = asyncio.ensure_future(loop.sock_recvfrom_into(rx, buf))
            await asyncio.sleep(0.01)
            await loop.sock_sendto(tx, b"pong!", rx.getsockname())
            assert await recv2 == (5, tx.getsockname())
            assert buf[:5] == b"pong!"
            # nbytes limits the read.
            await loop.sock_sendto(tx, b"123456", rx.getsockname())
            assert await loop.sock_recvfrom_into(rx, buf, 3) == (3, tx.getsockname())

        loop.run_until_complete(main())
        assert no_reader_or_writer(loop, rx.fileno())


def test_connect_and_accept(loop: asyncio.AbstractEventLoop) -> None:
    with listening() as listener, socket.socket() as client:
        listener.setblocking(False)
        client.setblocking(False)

        async def main() -> None:
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await asyncio.sleep(0.01)
            assert not accept.done()
            await loop.sock_connect(client, listener.getsockname())
            conn, addr = await accept
            with conn:
                assert conn.gettimeout() == 0  # accepted sockets are non-blocking
                assert addr == client.getsockname()
                await loop.sock_sendall(conn, b"hi")
                assert await loop.sock_recv(client, 10) == b"hi"

        loop.run_until_complete(main())
        assert no_reader_or_writer(loop, listener.fileno())
        assert no_reader_or_writer(loop, client.fileno())


def test_connect_resolves_host_names(loop: asyncio.AbstractEventLoop) -> None:
    with listening() as listener, socket.socket() as client:
        client.setblocking(False)
        port = listener.getsockname()[1]
        loop.run_until_complete(loop.sock_connect(client, ("localhost", port)))
        assert client.getpeername() == ("127.0.0.1", port)


def test_connect_refused(loop: asyncio.AbstractEventLoop) -> None:
    client = socket.socket()
    with client:
        client.setblocking(False)
        with pytest.raises(ConnectionRefusedError):
            loop.run_until_complete(loop.sock_connect(client, ("127.0.0.1", free_port())))
        assert no_reader_or_writer(loop, client.fileno())


@pytest.mark.skipif(not has_ipv6(), reason="no IPv6 loopback")
def test_connect_ipv6(loop: asyncio.AbstractEventLoop) -> None:
    with (
        listening(("::1", 0), socket.AF_INET6) as listener,
        socket.socket(socket.AF_INET6) as client,
    ):
        listener.setblocking(False)
        client.setblocking(False)

        async def main() -> None:
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await loop.sock_connect(client, ("::1", listener.getsockname()[1]))
            conn, _ = await accept
            conn.close()

        loop.run_until_complete(main())


def test_connect_unix(loop: asyncio.AbstractEventLoop, tmp_path: object) -> None:
    path = f"{tmp_path}/s.sock"
    with listening(path, socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX) as client:
        listener.setblocking(False)
        client.setblocking(False)

        async def main() -> None:
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await loop.sock_connect(client, path)
            conn, _ = await accept
            with conn:
                await loop.sock_sendall(client, b"unix")
                assert await loop.sock_recv(conn, 10) == b"unix"

        loop.run_until_complete(main())


@pytest.mark.parametrize("op", ["recv", "recv_into", "recvfrom", "recvfrom_into", "accept"])
def test_cancelled_read_leaves_no_reader(loop: asyncio.AbstractEventLoop, op: str) -> None:
    if op == "accept":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        other = None
    elif op.startswith("recvfrom"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        other = None
    else:
        sock, other = socket.socketpair()
    sock.setblocking(False)
    try:
        buf = bytearray(10)
        coro = {
            "recv": lambda: loop.sock_recv(sock, 10),
            "recv_into": lambda: loop.sock_recv_into(sock, buf),
            "recvfrom": lambda: loop.sock_recvfrom(sock, 10),
            "recvfrom_into": lambda: loop.sock_recvfrom_into(sock, buf),
            "accept": lambda: loop.sock_accept(sock),
        }[op]

        async def main() -> None:
            assert await cancelled_after(asyncio.ensure_future(coro()), 0.01)

        loop.run_until_complete(main())
        assert no_reader_or_writer(loop, sock.fileno())
        # The fd is free for the next user.
        if other is not None:
            other.send(b"after")
            assert loop.run_until_complete(loop.sock_recv(sock, 10)) == b"after"
    finally:
        sock.close()
        if other is not None:
            other.close()


def test_cancelled_sendall_leaves_no_writer(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with a, b:

        async def main() -> None:
            task = asyncio.ensure_future(loop.sock_sendall(a, b"x" * (32 * 1024 * 1024)))
            assert await cancelled_after(task, 0.01)  # nobody reads: it was waiting

        loop.run_until_complete(main())
        assert no_reader_or_writer(loop, a.fileno())


def test_cancelled_connect_leaves_no_writer(loop: asyncio.AbstractEventLoop) -> None:
    # A listener with a full backlog never completes the handshake:
    # connect() stays in progress until cancelled.
    client = socket.socket()
    client.setblocking(False)
    with blackhole() as addr, client:

        async def main() -> None:
            task = asyncio.ensure_future(loop.sock_connect(client, addr))
            if not await cancelled_after(task, 0.05):
                task.result()  # connected after all: nothing to cancel

        loop.run_until_complete(main())
        assert no_reader_or_writer(loop, client.fileno())


def test_blocking_socket_refused_in_debug_mode(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio refuses blocking sockets in debug mode only (and so do we)."""
    loop.set_debug(True)
    a, b = socket.socketpair()
    with a, b:
        for coro in (
            loop.sock_recv(a, 1),
            loop.sock_recv_into(a, bytearray(1)),
            loop.sock_recvfrom(a, 1),
            loop.sock_recvfrom_into(a, bytearray(1)),
            loop.sock_sendall(a, b"x"),
            loop.sock_sendto(a, b"x", ("127.0.0.1", 1)),
            loop.sock_connect(a, ("127.0.0.1", 1)),
            loop.sock_accept(a),
        ):
            with pytest.raises(ValueError, match="the socket must be non-blocking"):
                loop.run_until_complete(coro)


def test_ssl_socket_refused(loop: asyncio.AbstractEventLoop) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    sock = ctx.wrap_socket(socket.socket(), do_handshake_on_connect=False)
    with sock, pytest.raises(TypeError, match="Socket cannot be of type SSLSocket"):
        loop.run_until_complete(loop.sock_recv(sock, 1))


def test_fd_owned_by_transport_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    a, b = nonblocking_pair()
    with b:

        async def main() -> None:
            transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
            try:
                with pytest.raises(RuntimeError, match="is used by transport"):
                    await loop.sock_recv(a, 1)
            finally:
                transport.close()
                await asyncio.sleep(0)

        loop.run_until_complete(main())


def test_recv_error_propagates(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket()
    with sock:
        sock.setblocking(False)
        with pytest.raises(OSError):
            loop.run_until_complete(loop.sock_recv(sock, 10))  # not connected


class _CountingSocket(socket.socket):
    """A socket subclass whose recv records each call, as wrappers do."""

    calls: list[str]

    def recv(self, n: int, flags: int = 0) -> bytes:
        self.calls.append("recv")
        return super().recv(n, flags)


def test_retry_calls_the_objects_own_methods(loop: asyncio.AbstractEventLoop) -> None:
    # asyncio calls sock.recv() on whatever object it was given,
    # also when retrying after the fd became ready; so must tideloop.
    a, b = socket.socketpair()
    with b, _CountingSocket(fileno=a.detach()) as wrapped:
        wrapped.calls = []
        wrapped.setblocking(False)
        b.setblocking(False)

        async def main() -> bytes:
            recv = asyncio.ensure_future(loop.sock_recv(wrapped, 100))
            await asyncio.sleep(0.01)  # first attempt would block
            b.send(b"late")
            return await recv

        assert loop.run_until_complete(main()) == b"late"
        assert wrapped.calls == ["recv", "recv"]
        assert no_reader_or_writer(loop, wrapped.fileno())
