"""create_connection (happy eyeballs), create_unix_connection, connect_accepted_socket."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from net_support import (
    Echo,
    Recorder,
    blackhole,
    cancelled_after,
    close_client,
    close_server,
    free_port,
    free_ports,
    has_ipv6,
    listening,
    refused_exception_holders,
    tcp_pair,
    tcp_session,
)


def fake_resolver(loop: asyncio.AbstractEventLoop, infos: list[tuple[Any, ...]]) -> None:
    """Make loop.getaddrinfo() answer *infos* for any name (both loops call it)."""

    async def getaddrinfo(*args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return infos

    loop.getaddrinfo = getaddrinfo  # type: ignore[method-assign]


def info(host: str, port: int) -> tuple[Any, ...]:
    if ":" in host:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))


def test_create_connection_basic(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with tcp_session(loop, Echo, lambda: Recorder(loop)) as (transport, client):
            assert isinstance(client, Recorder)
            assert client.events[0] == "made"  # connection_made ran before we got it
            transport.write(b"ping")
            assert await client.wait_for_bytes(4) == b"ping"

    loop.run_until_complete(main())


def test_create_connection_by_name(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server, transport, client = await tcp_pair(
            loop, Echo, lambda: Recorder(loop), "localhost", family=socket.AF_INET
        )
        await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_create_connection_with_sock(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        sock = socket.create_connection(server.sockets[0].getsockname())  # blocking
        transport, client = await loop.create_connection(lambda: Recorder(loop), sock=sock)
        assert sock.gettimeout() == 0  # made non-blocking
        transport.write(b"s")
        assert await client.wait_for_bytes(1) == b"s"
        transport.close()
        await client.lost
        assert sock.fileno() == -1  # the transport closed it
        await close_server(server)

    loop.run_until_complete(main())


def test_create_connection_local_addr(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        local_port = free_port()
        server, transport, client = await tcp_pair(
            loop, Echo, lambda: Recorder(loop), local_addr=("127.0.0.1", local_port)
        )
        assert transport.get_extra_info("sockname") == ("127.0.0.1", local_port)
        await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_create_connection_local_addr_in_use(loop: asyncio.AbstractEventLoop) -> None:
    with listening() as taken:

        async def main() -> None:
            server = await loop.create_server(Echo, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            try:
                with pytest.raises(OSError) as info:
                    await loop.create_connection(
                        asyncio.Protocol, "127.0.0.1", port, local_addr=taken.getsockname()
                    )
                assert "error while attempting to bind on address" in str(info.value)
                assert str(taken.getsockname()) in str(info.value)
            finally:
                await close_server(server)

        loop.run_until_complete(main())


def test_create_connection_local_addr_other_family(loop: asyncio.AbstractEventLoop) -> None:
    fake_resolver(loop, [info("127.0.0.1", free_port())])

    async def main() -> None:
        with pytest.raises(OSError, match="no matching local address with family="):
            await loop.create_connection(
                asyncio.Protocol,
                "name.invalid",
                80,
                local_addr=("::1", 0),  # resolved by the fake: AF_INET only
            )

    # local_addr ::1 goes through the literal-address fast path: AF_INET6.
    loop.run_until_complete(main())


def test_create_connection_refused(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(ConnectionRefusedError):
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, "127.0.0.1", free_port()))


def test_create_connection_all_refused_same_message(loop: asyncio.AbstractEventLoop) -> None:
    port = free_port()
    fake_resolver(loop, [info("127.0.0.1", port), info("127.0.0.1", port)])
    with pytest.raises(ConnectionRefusedError):  # identical messages: the first one
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, "name.invalid", 80))


def test_create_connection_all_refused_multiple_exceptions(
    loop: asyncio.AbstractEventLoop,
) -> None:
    p1, p2 = free_ports(2)
    fake_resolver(loop, [info("127.0.0.1", p1), info("127.0.0.1", p2)])
    with pytest.raises(OSError) as excinfo:
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, "name.invalid", 80))
    assert type(excinfo.value) is OSError
    message = str(excinfo.value)
    assert message.startswith("Multiple exceptions: ")
    assert message.index(str(p1)) < message.index(str(p2))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="all_errors is new in 3.12")
def test_create_connection_all_errors(loop: asyncio.AbstractEventLoop) -> None:
    p1, p2 = free_ports(2)
    fake_resolver(loop, [info("127.0.0.1", p1), info("127.0.0.1", p2)])
    with pytest.raises(ExceptionGroup) as excinfo:
        loop.run_until_complete(
            loop.create_connection(asyncio.Protocol, "name.invalid", 80, all_errors=True)
        )
    assert excinfo.value.message == "create_connection failed"
    assert len(excinfo.value.exceptions) == 2
    assert all(isinstance(e, ConnectionRefusedError) for e in excinfo.value.exceptions)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="all_errors exists from 3.12 on")
def test_create_connection_all_errors_unknown_before_312(loop: asyncio.AbstractEventLoop) -> None:
    with pytest.raises(TypeError, match="all_errors"):
        loop.run_until_complete(
            loop.create_connection(asyncio.Protocol, "127.0.0.1", 1, all_errors=True)  # type: ignore[call-arg]
        )


def test_create_connection_empty_resolution(loop: asyncio.AbstractEventLoop) -> None:
    fake_resolver(loop, [])
    with pytest.raises(OSError, match="getaddrinfo\\(\\) returned empty list"):
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, "name.invalid", 80))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": "h", "port": 1, "server_hostname": "h"}, "server_hostname is only meaningful"),
        ({"port": 1, "ssl": True}, "You must set server_hostname when using ssl without a host"),
        ({"host": "h", "port": 1, "ssl_handshake_timeout": 1}, "ssl_handshake_timeout is only"),
        ({"host": "h", "port": 1, "ssl_shutdown_timeout": 1}, "ssl_shutdown_timeout is only"),
        ({}, "host and port was not specified and no sock specified"),
    ],
)
def test_create_connection_argument_errors(
    loop: asyncio.AbstractEventLoop, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, **kwargs))


def test_create_connection_sock_and_host(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket()
    with sock, pytest.raises(ValueError, match="host/port and sock can not be specified"):
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, "127.0.0.1", 1, sock=sock))


def test_create_connection_datagram_sock_refused(loop: asyncio.AbstractEventLoop) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock, pytest.raises(ValueError, match="A Stream Socket was expected"):
        loop.run_until_complete(loop.create_connection(asyncio.Protocol, sock=sock))


def test_cancelled_create_connection(loop: asyncio.AbstractEventLoop) -> None:
    with blackhole() as addr:

        async def main() -> None:
            task = asyncio.ensure_future(loop.create_connection(asyncio.Protocol, *addr))
            if not await cancelled_after(task, 0.05):  # pragma: no cover - accepted after all
                transport, _ = task.result()
                transport.close()
                await asyncio.sleep(0)

        loop.run_until_complete(main())
    # The no-leak fixture checks that the attempt's socket was closed.


def test_happy_eyeballs_second_address_wins(loop: asyncio.AbstractEventLoop) -> None:
    async def main(hole: tuple[str, int]) -> float:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        good = server.sockets[0].getsockname()
        fake_resolver(loop, [info(*hole), info(*good)])
        start = time.monotonic()
        transport, client = await loop.create_connection(
            lambda: Recorder(loop), "name.invalid", 80, happy_eyeballs_delay=0.05
        )
        elapsed = time.monotonic() - start
        assert transport.get_extra_info("peername") == good
        await close_client(transport, client, server)
        return elapsed

    with blackhole() as hole:
        elapsed = loop.run_until_complete(main(hole))
    assert elapsed < 2.0  # did not wait for the first attempt's timeout


def test_happy_eyeballs_failure_starts_next_at_once(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> float:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        good = server.sockets[0].getsockname()
        fake_resolver(loop, [info("127.0.0.1", free_port()), info(*good)])
        start = time.monotonic()
        transport, client = await loop.create_connection(
            lambda: Recorder(loop), "name.invalid", 80, happy_eyeballs_delay=10.0
        )
        elapsed = time.monotonic() - start
        await close_client(transport, client, server)
        return elapsed

    assert loop.run_until_complete(main()) < 5.0  # refused: no 10 s wait


def test_happy_eyeballs_all_fail(loop: asyncio.AbstractEventLoop) -> None:
    p1, p2 = free_ports(2)
    fake_resolver(loop, [info("127.0.0.1", p1), info("127.0.0.1", p2)])
    with pytest.raises(OSError, match="Multiple exceptions"):
        loop.run_until_complete(
            loop.create_connection(asyncio.Protocol, "name.invalid", 80, happy_eyeballs_delay=0.01)
        )


def test_happy_eyeballs_cancelled(loop: asyncio.AbstractEventLoop) -> None:
    with blackhole() as h1:

        async def main() -> None:
            fake_resolver(loop, [info(*h1), info(*h1), info(*h1)])
            task = asyncio.ensure_future(
                loop.create_connection(
                    asyncio.Protocol, "name.invalid", 80, happy_eyeballs_delay=0.01
                )
            )
            # After 0.1 s all three attempts are in flight.
            if not await cancelled_after(task, 0.1):  # pragma: no cover
                task.result()[0].close()
                await asyncio.sleep(0)

        loop.run_until_complete(main())


@pytest.mark.skipif(not has_ipv6(), reason="no IPv6 loopback")
def test_interleave_orders_attempts_by_family(loop: asyncio.AbstractEventLoop) -> None:
    a, b, c = free_ports(3)
    fake_resolver(loop, [info("127.0.0.1", a), info("127.0.0.1", b), info("::1", c)])
    with pytest.raises(OSError) as excinfo:
        loop.run_until_complete(
            loop.create_connection(asyncio.Protocol, "name.invalid", 80, interleave=1)
        )
    message = str(excinfo.value)
    # Families alternate: 127.0.0.1:a, ::1:c, 127.0.0.1:b.
    assert message.index(f", {a})") < message.index(f", {c}, 0, 0)") < message.index(f", {b})")


@pytest.mark.skipif(not has_ipv6(), reason="no IPv6 loopback")
def test_create_connection_ipv6(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await loop.create_server(Echo, "::1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, client = await loop.create_connection(lambda: Recorder(loop), "::1", port)
        assert transport.get_extra_info("socket").family == socket.AF_INET6
        transport.write(b"six")
        assert await client.wait_for_bytes(3) == b"six"
        await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_create_unix_connection(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = tmp_path / "u.sock"

    async def main() -> None:
        server = await loop.create_unix_server(Echo, path)  # a PathLike works
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), path)
        transport.write(b"unix")
        assert await client.wait_for_bytes(4) == b"unix"
        transport.close()
        await client.lost
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(path))
        transport, client = await loop.create_unix_connection(lambda: Recorder(loop), sock=sock)
        await close_client(transport, client, server)

    loop.run_until_complete(main())


def test_create_unix_connection_errors(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "missing.sock")
    with pytest.raises(FileNotFoundError):
        loop.run_until_complete(loop.create_unix_connection(asyncio.Protocol, path))
    with pytest.raises(ValueError, match="no path and sock were specified"):
        loop.run_until_complete(loop.create_unix_connection(asyncio.Protocol))
    with pytest.raises(ValueError, match="server_hostname is only meaningful with ssl"):
        loop.run_until_complete(
            loop.create_unix_connection(asyncio.Protocol, path, server_hostname="x")
        )
    with pytest.raises(ValueError, match="you have to pass server_hostname when using ssl"):
        loop.run_until_complete(loop.create_unix_connection(asyncio.Protocol, path, ssl=True))
    tcp = socket.socket()
    with tcp:
        with pytest.raises(ValueError, match="A UNIX Domain Stream Socket was expected"):
            loop.run_until_complete(loop.create_unix_connection(asyncio.Protocol, sock=tcp))
        with pytest.raises(ValueError, match="path and sock can not be specified"):
            loop.run_until_complete(loop.create_unix_connection(asyncio.Protocol, path, sock=tcp))


def test_connect_accepted_socket(loop: asyncio.AbstractEventLoop) -> None:
    a, b = socket.socketpair()
    with b:

        async def main() -> None:
            transport, proto = await loop.connect_accepted_socket(lambda: Recorder(loop), a)
            assert proto.events == ["made"]
            b.sendall(b"accepted")
            assert await proto.wait_for_bytes(8) == b"accepted"
            transport.write(b"back")
            await asyncio.sleep(0.01)
            assert b.recv(10) == b"back"
            transport.close()
            await proto.lost

        loop.run_until_complete(main())


def test_connect_accepted_socket_errors(loop: asyncio.AbstractEventLoop) -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a, b = socket.socketpair()
    with udp, a, b:
        with pytest.raises(ValueError, match="A Stream Socket was expected"):
            loop.run_until_complete(loop.connect_accepted_socket(asyncio.Protocol, udp))
        with pytest.raises(ValueError, match="ssl_handshake_timeout is only meaningful"):
            loop.run_until_complete(
                loop.connect_accepted_socket(asyncio.Protocol, a, ssl_handshake_timeout=1)
            )


def test_protocol_factory_error_closes_socket(loop: asyncio.AbstractEventLoop) -> None:
    a, b = socket.socketpair()
    with b:

        def factory() -> asyncio.Protocol:
            raise KeyError("factory")

        with pytest.raises(KeyError):
            loop.run_until_complete(loop.connect_accepted_socket(factory, a))
        a.close()


def test_connect_failure_leaves_no_reference_cycles(loop: asyncio.AbstractEventLoop) -> None:
    """A refused connection's exception is freed by reference counting alone."""
    assert refused_exception_holders(loop, None) == []


@pytest.mark.divergence("happy-eyeballs-no-refcycles")
def test_happy_eyeballs_failure_leaves_no_reference_cycles(
    loop: asyncio.AbstractEventLoop,
) -> None:
    assert refused_exception_holders(loop, 0.25) == []


@pytest.mark.divergence("socket-closed-without-transport")
def test_socket_closed_when_no_transport_is_made(loop: asyncio.AbstractEventLoop) -> None:
    """A protocol factory that raises: the error reaches the caller, and the socket (the
    caller's own, or the one create_connection made) is closed, not leaked."""

    def factory() -> asyncio.Protocol:
        raise ZeroDivisionError

    async def main() -> None:
        a, b = socket.socketpair()
        try:
            with pytest.raises(ZeroDivisionError):
                await loop.create_connection(factory, sock=a)
            assert a.fileno() == -1
            with pytest.raises(ZeroDivisionError):
                await loop.connect_accepted_socket(factory, b)
            assert b.fileno() == -1
        finally:
            a.close()
            b.close()
        # A listener that never accepts: the kernel queues the connection, so
        # the only new fd would be create_connection's own socket.
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            before = set(os.listdir("/proc/self/fd"))
            with pytest.raises(ZeroDivisionError):
                await loop.create_connection(factory, *listener.getsockname())
            assert set(os.listdir("/proc/self/fd")) <= before

    loop.run_until_complete(main())
