"""websockets (its asyncio implementation) with server and clients on the loop under test.

An echo server takes 120 concurrent clients; each sends several text and
binary messages (with permessage-deflate, the default), a few send large
ones, and every echo is checked in order. Another test connects 100 clients,
waits (on an event, not a sleep) until the server holds all of them,
broadcasts, and checks that each client receives the broadcast and then the
close code and reason the server chose. A third runs the echo over a Unix
socket with ``unix_serve`` and checks ping/pong. The echo also runs over
TLS (``wss://``, a certificate from `certs`).

Each test runs on the stdlib loop and on tideloop (every poller) through the
root conftest's ``loop`` fixture; leaks of fds and tasks fail the test.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.asyncio.server import ServerConnection, broadcast, serve, unix_serve
from websockets.exceptions import ConnectionClosed

N_CLIENTS = 120
N_MESSAGES = 6
BIG = 256 * 1024


async def echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


def messages_for(client: int) -> list[str | bytes]:
    """What client *client* sends: text and binary alternating, a few large ones."""
    rng = random.Random(client)
    out: list[str | bytes] = []
    for i in range(N_MESSAGES):
        size = BIG if client % 40 == 3 and i == 2 else rng.randrange(1, 4000)
        if i % 2:
            out.append(rng.randbytes(size))
        else:
            out.append(f"client {client} message {i} " + "é" * size)
    return out


async def echo_client(
    uri: str, client: int, ssl_context: ssl.SSLContext | None = None
) -> list[str | bytes]:
    received: list[str | bytes] = []
    async with connect(uri, max_size=2 * BIG * 4, ssl=ssl_context) as ws:
        for message in messages_for(client):
            await ws.send(message)
            received.append(await ws.recv())
    return received


def test_many_clients_echo(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve(echo, "127.0.0.1", 0, max_size=2 * BIG * 4) as server:
            port = server.sockets[0].getsockname()[1]
            uri = f"ws://127.0.0.1:{port}"
            results = await asyncio.gather(
                *(echo_client(uri, c) for c in range(N_CLIENTS)), return_exceptions=True
            )
        failures = [r for r in results if isinstance(r, BaseException)]
        assert not failures, f"{len(failures)} clients failed, first: {failures[0]!r}"
        for client, received in enumerate(results):
            sent = messages_for(client)
            assert received == sent, f"client {client} got wrong echoes"
            assert [type(m) for m in received] == [type(m) for m in sent]

    loop.run_until_complete(main())


def test_broadcast_and_close_code(loop: asyncio.AbstractEventLoop) -> None:
    n = 100

    async def main() -> None:
        connected: set[ServerConnection] = set()
        everyone_in = asyncio.Event()
        released = asyncio.Event()

        async def handler(ws: ServerConnection) -> None:
            connected.add(ws)
            if len(connected) == n:
                everyone_in.set()
            await released.wait()
            await ws.close(code=4001, reason="bye from server")

        async def client(uri: str) -> tuple[str | bytes, int | None, str | None]:
            ws: ClientConnection
            async with connect(uri) as ws:
                message = await ws.recv()
                try:
                    await ws.recv()
                except ConnectionClosed as closed:  # 4001 is neither 1000 nor 1001: "Error"
                    assert closed.rcvd is not None
                    return message, closed.rcvd.code, closed.rcvd.reason
                raise AssertionError("the server did not close")

        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            clients = [asyncio.ensure_future(client(f"ws://127.0.0.1:{port}")) for _ in range(n)]
            await everyone_in.wait()
            broadcast(connected, "news for all")
            released.set()
            results = await asyncio.gather(*clients, return_exceptions=True)
        assert results == [("news for all", 4001, "bye from server")] * n

    loop.run_until_complete(main())


def test_unix_socket_echo_and_ping(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sock")

    async def main() -> None:
        async with unix_serve(echo, path), unix_connect(path) as ws:
            pong = await ws.ping(b"are you there")
            latency = await pong
            assert latency >= 0
            for message in messages_for(3):
                await ws.send(message)
                assert await ws.recv() == message

    loop.run_until_complete(main())


def test_echo_over_tls(
    loop: asyncio.AbstractEventLoop,
    server_ssl_context: ssl.SSLContext,
    client_ssl_context: ssl.SSLContext,
) -> None:

    async def main() -> None:
        async with serve(echo, "127.0.0.1", 0, ssl=server_ssl_context) as server:
            port = server.sockets[0].getsockname()[1]
            uri = f"wss://127.0.0.1:{port}"
            results = await asyncio.gather(
                *(echo_client(uri, c, client_ssl_context) for c in range(20)),
                return_exceptions=True,
            )
        assert results == [messages_for(c) for c in range(20)]

    loop.run_until_complete(main())
