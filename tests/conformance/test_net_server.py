"""Servers: create_server, create_unix_server and the Server object, per Python version."""

from __future__ import annotations

import asyncio
import errno
import os
import resource
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from net_support import (
    Echo,
    Recorder,
    close_client,
    close_server,
    connecting,
    has_ipv6,
    listening,
    recording_factory,
    tcp_pair,
)

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)


def port_of(server: asyncio.AbstractServer) -> int:
    return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]


def test_server_object(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        assert isinstance(server, asyncio.AbstractServer)
        assert server.get_loop() is loop
        assert server.is_serving()
        (sock,) = server.sockets
        assert isinstance(sock, asyncio.trsock.TransportSocket)
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        assert "sockets=" in repr(server)
        server.close()
        assert not server.is_serving()
        assert server.sockets == ()
        server.close()  # twice is fine
        await server.wait_closed()

    loop.run_until_complete(main())


def test_start_serving_false(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        factory, protos = recording_factory(loop)

        server = await loop.create_server(factory, "127.0.0.1", 0, start_serving=False)
        assert not server.is_serving()
        port = port_of(server)
        # Not listening yet: the connection is refused.
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        await server.start_serving()
        assert server.is_serving()
        await server.start_serving()  # a second call does nothing
        transport, client = await loop.create_connection(lambda: Recorder(loop), "127.0.0.1", port)
        while not protos:
            await asyncio.sleep(0)
        await protos[0].made
        transport.close()
        await client.lost
        await protos[0].lost
        await close_server(server)

    loop.run_until_complete(main())


def test_serve_forever_and_cancel(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0, start_serving=False)
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        assert server.is_serving()
        with pytest.raises(RuntimeError, match="is already being awaited on serve_forever"):
            await server.serve_forever()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not server.is_serving()
        assert server.sockets == ()
        with pytest.raises(RuntimeError, match="is closed"):
            await server.serve_forever()

    loop.run_until_complete(main())


def test_serve_forever_ends_when_server_closes(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        server.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        await server.wait_closed()

    loop.run_until_complete(main())


def test_async_with_closes(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        async with server as same:
            assert same is server
            assert server.is_serving()
        assert not server.is_serving()
        assert server.sockets == ()

    loop.run_until_complete(main())


def test_server_close_keeps_connections(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        server.close()
        transport.write(b"still here")
        assert await client.wait_for_bytes(10) == b"still here"
        transport.close()
        await client.lost
        await server.wait_closed()

    loop.run_until_complete(main())


@pytest.mark.skipif(not PY312, reason="3.11's wait_closed() does not wait for connections")
def test_wait_closed_waits_for_connections(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        transport.write(b"x")
        await client.wait_for_bytes(1)  # the server side exists
        waiter = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # not closed yet
        server.close()
        await asyncio.sleep(0.01)
        assert not waiter.done()  # closed, but a connection is open
        transport.close()
        await asyncio.wait_for(waiter, 5)
        await client.lost
        await server.wait_closed()  # at once now

    loop.run_until_complete(main())


@pytest.mark.skipif(PY312, reason="3.12+ wait_closed() waits for connections")
def test_wait_closed_returns_at_once_on_311(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(loop, Echo, lambda: Recorder(loop))
        transport.write(b"x")
        await client.wait_for_bytes(1)
        waiter = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # waits for close()...
        server.close()
        await asyncio.sleep(0.01)
        assert not waiter.done()  # ...and the connections, once waiting
        await asyncio.wait_for(server.wait_closed(), 1)  # closed: returns at once
        transport.close()
        await asyncio.wait_for(waiter, 5)
        await client.lost

    loop.run_until_complete(main())


@pytest.mark.skipif(not PY313, reason="close_clients/abort_clients are new in 3.13")
@pytest.mark.parametrize("method", ["close_clients", "abort_clients"])
def test_close_and_abort_clients(loop: asyncio.AbstractEventLoop, method: str) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        clients = []
        for _ in range(3):
            transport, client = await loop.create_connection(
                lambda: Recorder(loop), "127.0.0.1", port_of(server)
            )
            transport.write(b"x")
            await client.wait_for_bytes(1)
            clients.append((transport, client))
        server.close()
        getattr(server, method)()
        for transport, client in clients:
            await asyncio.wait_for(client.lost, 5)
            transport.close()
        await asyncio.wait_for(server.wait_closed(), 5)

    loop.run_until_complete(main())


@pytest.mark.skipif(PY313, reason="close_clients/abort_clients exist from 3.13 on")
def test_no_close_clients_before_313(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        assert not hasattr(server, "close_clients")
        assert not hasattr(server, "abort_clients")
        await close_server(server)

    loop.run_until_complete(main())


def test_multiple_hosts_bound_once(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(
            Echo, ["127.0.0.1", "127.0.0.1"], 0, family=socket.AF_INET
        )
        assert len(server.sockets) == 1
        await close_server(server)

    loop.run_until_complete(main())


@pytest.mark.skipif(not has_ipv6(), reason="no IPv6 loopback")
def test_server_on_ipv4_and_ipv6(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, ["127.0.0.1", "::1"], 0)
        families = sorted(s.family for s in server.sockets)
        assert families == [socket.AF_INET, socket.AF_INET6]
        for sock in server.sockets:
            if sock.family == socket.AF_INET6:
                # No dual stack: asyncio sets IPV6_V6ONLY.
                assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
            host, port = sock.getsockname()[:2]
            transport, client = await loop.create_connection(lambda: Recorder(loop), host, port)
            transport.write(b"46")
            assert await client.wait_for_bytes(2) == b"46"
            transport.close()
            await client.lost
        await close_server(server)

    loop.run_until_complete(main())


def test_reuse_port(loop: asyncio.AbstractEventLoop) -> None:
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("no SO_REUSEPORT")

    async def main() -> None:
        s1 = await loop.create_server(Echo, "127.0.0.1", 0, reuse_port=True)
        s2 = await loop.create_server(Echo, "127.0.0.1", port_of(s1), reuse_port=True)
        assert port_of(s1) == port_of(s2)
        assert s2.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        await close_server(s1)
        await close_server(s2)

    loop.run_until_complete(main())


def test_address_in_use(loop: asyncio.AbstractEventLoop) -> None:
    with listening() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as excinfo:
            loop.run_until_complete(
                loop.create_server(Echo, "127.0.0.1", port, reuse_address=False)
            )
        assert excinfo.value.errno == errno.EADDRINUSE
        assert str(excinfo.value).startswith(
            f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address "
            f"('127.0.0.1', {port}): "
        )


def test_create_server_with_sock(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))

    async def main() -> None:
        server = await loop.create_server(Echo, sock=sock)
        assert server.sockets[0].fileno() == sock.fileno()
        assert sock.gettimeout() == 0
        transport, client = await loop.create_connection(
            lambda: Recorder(loop), *sock.getsockname()
        )
        await close_client(transport, client, server)
        assert sock.fileno() == -1  # the server closed it

    loop.run_until_complete(main())


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({}, ValueError, "Neither host/port nor sock were specified"),
        ({"port": 0, "ssl": True}, TypeError, "ssl argument must be an SSLContext or None"),
        ({"port": 0, "ssl_handshake_timeout": 1}, ValueError, "ssl_handshake_timeout is only"),
        ({"port": 0, "ssl_shutdown_timeout": 1}, ValueError, "ssl_shutdown_timeout is only"),
    ],
)
def test_create_server_argument_errors(
    loop: asyncio.AbstractEventLoop, kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=message):
        loop.run_until_complete(loop.create_server(Echo, **kwargs))


def test_create_server_sock_errors(loop: asyncio.AbstractEventLoop) -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    with udp, tcp:
        with pytest.raises(ValueError, match="A Stream Socket was expected"):
            loop.run_until_complete(loop.create_server(Echo, sock=udp))
        with pytest.raises(ValueError, match="host/port and sock can not be specified"):
            loop.run_until_complete(loop.create_server(Echo, "127.0.0.1", 0, sock=tcp))


@pytest.mark.skipif(not PY313, reason="keep_alive is new in 3.13")
def test_keep_alive(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0, keep_alive=True)
        assert server.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        await close_server(server)

    loop.run_until_complete(main())


@pytest.mark.skipif(PY313, reason="keep_alive exists from 3.13 on")
def test_keep_alive_unknown_before_313(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="keep_alive"):
        loop.run_until_complete(loop.create_server(Echo, "127.0.0.1", 0, keep_alive=True))


@pytest.fixture
def more_fds() -> Iterator[None]:
    """Raise the soft RLIMIT_NOFILE for this test (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("more_fds")
def test_thousand_concurrent_connections(loop: asyncio.AbstractEventLoop) -> None:
    n = 1000

    async def client(port: int, i: int) -> bytes:
        transport, proto = await loop.create_connection(lambda: Recorder(loop), "127.0.0.1", port)
        try:
            message = b"%06d" % i
            transport.write(message)
            return await proto.wait_for_bytes(6)
        finally:
            transport.close()
            await proto.lost

    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=n)
        port = port_of(server)
        # Open them all before any closes: n live connections at once.
        results = await asyncio.gather(*(client(port, i) for i in range(n)))
        assert results == [b"%06d" % i for i in range(n)]
        await close_server(server)

    loop.run_until_complete(main())


def test_accepts_a_burst(loop: asyncio.AbstractEventLoop) -> None:
    """Many connections queued before the loop looks: all accepted."""

    async def main() -> None:
        factory, accepted = recording_factory(loop)

        server = await loop.create_server(factory, "127.0.0.1", 0, backlog=200)
        socks: list[socket.socket] = []
        try:
            socks = connecting(("127.0.0.1", port_of(server)), 150)
            for _ in range(500):
                if len(accepted) == 150:
                    break
                await asyncio.sleep(0.005)
            assert len(accepted) == 150
        finally:
            for s in socks:
                s.close()
            for proto in accepted:
                await proto.lost
            await close_server(server)

    loop.run_until_complete(main())


# ----------------------------------------------------------------------
# Unix servers


def test_unix_server(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "srv.sock")

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path)
        assert server.sockets[0].getsockname() == path
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), path)
        transport.write(b"u")
        assert await client.wait_for_bytes(1) == b"u"
        await close_client(transport, client, server)

    loop.run_until_complete(main())
    # 3.13 removes the socket file on close (cleanup_socket=True); 3.11/3.12 leave it.
    assert os.path.exists(path) is (not PY313)


def test_unix_server_replaces_stale_socket_file(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = str(tmp_path / "stale.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays: a stale socket from an earlier run
    assert os.path.exists(path)

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path)
        await close_server(server)

    loop.run_until_complete(main())


def test_unix_server_path_is_a_regular_file(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = tmp_path / "regular"
    path.write_text("not a socket")
    with pytest.raises(OSError) as excinfo:
        loop.run_until_complete(loop.create_unix_server(Echo, str(path)))
    assert excinfo.value.errno == errno.EADDRINUSE
    assert (
        str(excinfo.value) == f"[Errno {errno.EADDRINUSE}] Address {str(path)!r} is already in use"
    )
    assert path.read_text() == "not a socket"


def test_unix_server_with_sock(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "sock.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)

    async def main() -> None:
        server = await loop.create_unix_server(Echo, sock=sock)
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), path)
        await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_unix_server_errors(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    tcp = socket.socket()
    with tcp:
        with pytest.raises(ValueError, match="A UNIX Domain Stream Socket was expected"):
            loop.run_until_complete(loop.create_unix_server(Echo, sock=tcp))
        with pytest.raises(ValueError, match="path and sock can not be specified"):
            loop.run_until_complete(loop.create_unix_server(Echo, str(tmp_path / "x"), sock=tcp))
    with pytest.raises(ValueError, match="path was not specified, and no sock specified"):
        loop.run_until_complete(loop.create_unix_server(Echo))
    with pytest.raises(TypeError, match="ssl argument must be an SSLContext or None"):
        loop.run_until_complete(loop.create_unix_server(Echo, str(tmp_path / "y"), ssl=True))


def test_unix_server_abstract_namespace(loop: asyncio.AbstractEventLoop) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("abstract sockets are Linux-only")
    name = f"\0tideloop-test-{os.getpid()}-{id(loop)}"

    async def main() -> None:
        server = await loop.create_unix_server(Echo, name)
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), name)
        transport.write(b"abstract")
        assert await client.wait_for_bytes(8) == b"abstract"
        await close_client(transport, client, server)

    loop.run_until_complete(main())


@pytest.mark.skipif(not PY313, reason="cleanup_socket is new in 3.13")
def test_unix_server_cleanup_socket_false(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "keep.sock")

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path, cleanup_socket=False)
        await close_server(server)

    loop.run_until_complete(main())
    assert os.path.exists(path)


@pytest.mark.skipif(not PY313, reason="cleanup_socket is new in 3.13")
def test_unix_server_cleanup_spares_a_replaced_file(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = str(tmp_path / "replaced.sock")

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path)
        os.unlink(path)
        Path(path).write_text("someone else's")
        await close_server(server)

    loop.run_until_complete(main())
    assert Path(path).read_text() == "someone else's"


@pytest.mark.skipif(PY313, reason="cleanup_socket exists from 3.13 on")
def test_unix_server_cleanup_socket_unknown_before_313(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match="cleanup_socket"):
        loop.run_until_complete(
            loop.create_unix_server(Echo, str(tmp_path / "z"), cleanup_socket=True)  # type: ignore[call-arg]
        )


async def _cancel_serve_forever_with_a_hanging_client(loop: asyncio.AbstractEventLoop) -> bool:
    """Cancel serve_forever() while a client keeps its connection: did the server end?"""
    made = asyncio.Event()

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            made.set()

    server = await loop.create_server(Proto, "127.0.0.1", 0)
    task = asyncio.ensure_future(server.serve_forever())
    await asyncio.sleep(0)
    sock = socket.create_connection(server.sockets[0].getsockname())
    try:
        await made.wait()
        task.cancel()
        try:
            await asyncio.wait_for(server.wait_closed(), 1.0)
        except TimeoutError:
            return False
        with pytest.raises(asyncio.CancelledError):
            await task
        return not server.is_serving()
    finally:
        sock.close()
        if not task.done():
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 1.0)


@pytest.mark.skipif(sys.version_info < (3, 13), reason="servers track their connections from 3.13")
@pytest.mark.divergence("serve-forever-closes-clients")
def test_cancelled_serve_forever_closes_its_clients(loop: asyncio.AbstractEventLoop) -> None:
    assert loop.run_until_complete(_cancel_serve_forever_with_a_hanging_client(loop))
