"""getaddrinfo / getnameinfo, and the literal-address fast path."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from net_support import has_ipv6


@pytest.mark.parametrize(
    ("host", "port", "kwargs"),
    [
        ("127.0.0.1", 80, {}),
        ("127.0.0.1", "80", {"type": socket.SOCK_STREAM}),
        ("localhost", 8080, {"family": socket.AF_INET}),
        ("127.0.0.1", None, {"proto": socket.IPPROTO_UDP, "type": socket.SOCK_DGRAM}),
        (None, 0, {"flags": socket.AI_PASSIVE}),
        ("localhost", "http", {"type": socket.SOCK_STREAM}),
        (b"127.0.0.1", b"443", {}),
    ],
)
def test_getaddrinfo_matches_socket_module(
    loop: asyncio.AbstractEventLoop, host: object, port: object, kwargs: dict[str, int]
) -> None:
    expected = socket.getaddrinfo(host, port, **kwargs)  # type: ignore[arg-type]
    got = loop.run_until_complete(loop.getaddrinfo(host, port, **kwargs))  # type: ignore[arg-type]
    assert got == expected


@pytest.mark.skipif(not has_ipv6(), reason="no IPv6")
def test_getaddrinfo_ipv6_literal(loop: asyncio.AbstractEventLoop) -> None:
    expected = socket.getaddrinfo("::1", 443, type=socket.SOCK_STREAM)
    assert (
        loop.run_until_complete(loop.getaddrinfo("::1", 443, type=socket.SOCK_STREAM)) == expected
    )


def test_getaddrinfo_error(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(socket.gaierror):
        loop.run_until_complete(loop.getaddrinfo("name.invalid", 80))
    with pytest.raises(socket.gaierror):
        # A literal with an unknown service name goes through the resolver.
        loop.run_until_complete(loop.getaddrinfo("127.0.0.1", "no-such-service-xyz"))


def test_getnameinfo(loop: asyncio.AbstractEventLoop) -> None:
    flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    expected = socket.getnameinfo(("127.0.0.1", 80), flags)
    assert loop.run_until_complete(loop.getnameinfo(("127.0.0.1", 80), flags)) == expected


def test_getaddrinfo_in_debug_mode_logs(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_debug(True)
    from net_support import captured_asyncio_logs

    with captured_asyncio_logs() as records:
        got = loop.run_until_complete(loop.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM))
    assert got == socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    messages = [r.getMessage() for r in records]
    assert any(m.startswith("Get address info localhost:80") for m in messages)
    assert any(m.startswith("Getting address info localhost:80") for m in messages)


@pytest.mark.divergence("getaddrinfo-literal-inline")
def test_literal_addresses_need_no_thread(loop: asyncio.AbstractEventLoop) -> None:
    """No thread hop for numeric hosts: the default executor is never created."""
    before = threading.active_count()

    async def main() -> None:
        assert await loop.getaddrinfo("127.0.0.1", 80) == socket.getaddrinfo("127.0.0.1", 80)
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        sock = socket.socket()
        sock.setblocking(False)
        with sock:
            await loop.sock_connect(sock, ("127.0.0.1", port))
        transport.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    assert loop._default_executor is None  # type: ignore[attr-defined]
    assert threading.active_count() == before
