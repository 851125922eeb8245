"""Real libraries, unmodified, inside tideloop.testing.SimNetwork.

Each test is a small distributed program on virtual time: servers built with
a real library run on named hosts (`SimNetwork.spawn`), clients built with a
real library run on the host ``"client"`` (or another named host), and the
test checks what they observe: the responses and bytes, the simulated
addresses each side saw (a server's idea of its peer is the client host's
address and the port the client's socket was given), and, where the latency
is fixed, the exact virtual time a request takes. Nothing in the libraries is
patched or configured for the simulation beyond the host names and ports a
deployment would give them (and ``trust_env=False`` / ``proxy=None``, so that
a proxy set in the environment does not change the route).

Covered: aiohttp's web server and ``ClientSession`` (HTTP and HTTPS, with a
CA from ``tests/certs.py``), websockets' asyncio server and client, an anyio
TCP service and client (anyio's asyncio backend, called from the coroutine
``tideloop.testing.run`` runs), uvicorn serving a Starlette application
queried by ``httpx.AsyncClient``, redis-py's asyncio client against a small
RESP2/RESP3 server written here, and faults under real clients: a partition
that makes an aiohttp request time out on its ``ClientTimeout`` (and httpx's
on its timeout) in virtual time until `SimNetwork.heal`, and a crashed and
restarted host that redis-py's retries reconnect to.

Some libraries create their sockets themselves with ``socket.socket()`` and
hand them to the loop: aiohttp's client (through aiohappyeyeballs), anyio's
``create_tcp_listener``, uvicorn's ``Config.bind_socket`` (for its workers
and gunicorn's). The loop makes them simulated when it is handed them
(`SimNetwork.adopt`). A listening socket of that kind is bound by the
program, in the kernel, before the loop sees it, so those tests listen on
port 0: a fixed port could be taken on the machine before adoption frees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import anyio
import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from aiohttp import web
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve

from tideloop.testing import SimNetwork

from certs import CA
from sim_support import sim_run, stop

Address = tuple[str, int]


def elapsed(loop: asyncio.AbstractEventLoop, since: float) -> float:
    """Virtual seconds since *since*, rounded off float noise."""
    return round(loop.time() - since, 9)


async def start_on(
    net: SimNetwork, host: str, server: Callable[[asyncio.Event], Coroutine[Any, Any, None]]
) -> asyncio.Task[None]:
    """Spawn *server* on *host*; return once it has set its event (it listens)."""
    ready = asyncio.Event()
    task = net.spawn(host, server(ready))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    if not waiter.done():
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        task.result()  # its exception, if it failed
        raise AssertionError(f"the server on {host} returned before it listened")
    return task


@pytest.fixture(scope="module")
def ca() -> CA:
    return CA()


def tls_contexts(ca: CA, host: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context presenting a certificate for *host*, and a client context trusting it."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


# -- aiohttp -----------------------------------------------------------------


def aiohttp_app(seen: list[dict[str, Any]]) -> web.Application:
    """GET /hello/{name}, POST /echo; every request's view of itself goes to *seen*."""

    def record(request: web.Request) -> None:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        seen.append(
            {
                "remote": request.remote,
                "peer": request.transport.get_extra_info("peername") if request.transport else None,
                "host": request.host,
                "scheme": request.scheme,
                "path": request.path,
                "tls": ssl_object.version() if ssl_object else None,
            }
        )

    async def hello(request: web.Request) -> web.Response:
        record(request)
        return web.Response(text=f"hello {request.match_info['name']} from {request.remote}")

    async def echo(request: web.Request) -> web.Response:
        record(request)
        body = await request.json()
        return web.json_response({"got": body, "length": request.content_length})

    app = web.Application()
    app.router.add_get("/hello/{name}", hello)
    app.router.add_post("/echo", echo)
    return app


def aiohttp_server(
    app: web.Application, port: int, **site_kwargs: Any
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    async def serve(ready: asyncio.Event) -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, None, port, **site_kwargs).start()
            ready.set()
            await asyncio.Event().wait()  # until cancelled
        finally:
            await runner.cleanup()

    return serve


@contextlib.asynccontextmanager
async def aiohttp_web(
    net: SimNetwork, seen: list[dict[str, Any]], total: float
) -> AsyncIterator[aiohttp.ClientSession]:
    """`aiohttp_app` on host "web", port 8080, 10 ms from the client, and a client session
    for it whose requests time out after *total* s; the server is stopped afterwards."""
    net.set_latency("client", "web", 0.01)
    server = await start_on(net, "web", aiohttp_server(aiohttp_app(seen), 8080))
    try:
        timeout = aiohttp.ClientTimeout(total=total)
        async with aiohttp.ClientSession("http://web:8080", timeout=timeout) as session:
            yield session
    finally:
        await stop(server)


def test_aiohttp_server_and_client_over_http() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        seen: list[dict[str, Any]] = []
        async with aiohttp_web(net, seen, 10) as session:
            t0 = loop.time()
            async with session.get("/hello/ada") as resp:
                assert resp.status == 200
                first = await resp.text()
            fresh = elapsed(loop, t0)  # connect + request
            t0 = loop.time()
            async with session.post("/echo", json={"n": [1, 2, 3]}) as resp:
                assert resp.status == 200
                echoed = await resp.json()
            reused = elapsed(loop, t0)  # the kept-alive connection: request only
        return [first, echoed, fresh, reused, seen]

    net = SimNetwork()
    first, echoed, fresh, reused, seen = sim_run(net, main)
    client = net.address("client")
    assert first == f"hello ada from {client}"
    assert echoed == {"got": {"n": [1, 2, 3]}, "length": len(json.dumps({"n": [1, 2, 3]}))}
    # SYN, SYN-ACK, request, response: four latencies; on the kept connection, two.
    assert (fresh, reused) == (0.04, 0.02)
    assert [s["remote"] for s in seen] == [client, client]
    assert seen[0]["peer"] == seen[1]["peer"] and seen[0]["peer"][0] == client
    assert [s["host"] for s in seen] == ["web:8080", "web:8080"]
    assert [s["path"] for s in seen] == ["/hello/ada", "/echo"]


def test_aiohttp_over_https(ca: CA) -> None:
    server_ctx, client_ctx = tls_contexts(ca, "web")

    async def main(net: SimNetwork) -> list[Any]:
        seen: list[dict[str, Any]] = []
        app = aiohttp_app(seen)
        server = await start_on(net, "web", aiohttp_server(app, 8443, ssl_context=server_ctx))
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get("https://web:8443/hello/bob", ssl=client_ctx) as resp:
                text = await resp.text()
            # A client that does not trust the CA refuses the server.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get("https://web:8443/hello/eve")
        await stop(server)
        return [text, seen]

    net = SimNetwork()
    text, seen = sim_run(net, main)
    assert text == f"hello bob from {net.address('client')}"
    # The untrusting client's request never reached the application.
    assert [(s["scheme"], s["tls"], s["remote"]) for s in seen] == [
        ("https", "TLSv1.3", net.address("client"))
    ]


# -- websockets ----------------------------------------------------------------


def test_websockets_server_and_client() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        net.set_latency("client", "chat", 0.01)
        seen: list[Any] = []

        async def shout(ws: ServerConnection) -> None:
            assert ws.request is not None
            seen.append((ws.remote_address, ws.local_address, ws.request.path))
            async for message in ws:
                if isinstance(message, str):
                    await ws.send(message.upper())
                else:
                    await ws.send(message[::-1])

        async def chat_server(ready: asyncio.Event) -> None:
            async with ws_serve(shout, None, 8765) as server:
                ready.set()
                await server.serve_forever()

        server = await start_on(net, "chat", chat_server)
        async with ws_connect("ws://chat:8765/room/1", proxy=None) as ws:
            await ws.send("hello")
            text = await ws.recv()
            await ws.send(b"\x01\x02\x03")
            binary = await ws.recv()
            t0 = loop.time()
            pong = await ws.ping()
            await pong
            ping_time = elapsed(loop, t0)
            addresses = (ws.local_address, ws.remote_address)
        close_code = ws.close_code
        await stop(server)
        return [text, binary, ping_time, addresses, close_code, seen]

    net = SimNetwork()
    text, binary, ping_time, (local, remote), close_code, seen = sim_run(net, main)
    assert (text, binary) == ("HELLO", b"\x03\x02\x01")
    assert ping_time == 0.02  # a ping and its pong: one latency each way
    assert remote == (net.address("chat"), 8765)
    assert local[0] == net.address("client")
    assert close_code == 1000
    # The server saw the client's simulated address and port, on its own address.
    assert seen == [(local, (net.address("chat"), 8765), "/room/1")]


# -- anyio ---------------------------------------------------------------------


def test_anyio_tcp_service_and_clients() -> None:
    """anyio on its asyncio backend, called straight from the coroutine run() runs."""

    async def main(net: SimNetwork) -> list[Any]:
        peers: list[Any] = []
        port: list[int] = []

        async def add_numbers(stream: SocketStream) -> None:
            peers.append(stream.extra(SocketAttribute.remote_address))
            buffered = BufferedByteReceiveStream(stream)
            async with stream:
                while True:
                    try:
                        line = await buffered.receive_until(b"\n", 1024)
                    except anyio.EndOfStream:
                        return
                    await stream.send(b"%d\n" % sum(int(n) for n in line.split()))

        async def service(ready: asyncio.Event) -> None:
            # Port 0: anyio binds its own socket in the kernel, before the loop adopts it.
            listener = await anyio.create_tcp_listener(local_port=0)
            async with listener:
                port.append(listener.extra(SocketAttribute.local_port))
                ready.set()
                await listener.serve(add_numbers)

        server = await start_on(net, "calc", service)
        results: dict[int, list[bytes]] = {}

        async def client(i: int) -> None:
            async with await anyio.connect_tcp("calc", port[0]) as stream:
                assert stream.extra(SocketAttribute.remote_address) == (
                    net.address("calc"),
                    port[0],
                )
                buffered = BufferedByteReceiveStream(stream)
                replies = []
                for n in range(3):
                    await stream.send(b"%d %d %d\n" % (i, n, 10))
                    with anyio.fail_after(1):
                        replies.append(await buffered.receive_until(b"\n", 100))
                results[i] = replies

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(client, i)
        await stop(server)
        return [results, peers]

    net = SimNetwork()
    results, peers = sim_run(net, main)
    assert results == {i: [b"%d" % (i + n + 10) for n in range(3)] for i in range(3)}
    assert sorted(p[0] for p in peers) == [net.address("client")] * 3
    assert len({p[1] for p in peers}) == 3


# -- uvicorn + starlette, queried with httpx --------------------------------------


def starlette_app(events: list[str]) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    async def whoami(request: Request) -> Response:
        client = request.client
        assert client is not None
        return JSONResponse({"client": [client.host, client.port], "host": request.headers["host"]})

    async def square(request: Request) -> Response:
        n = request.path_params["n"]
        await asyncio.sleep(n)  # virtual time: a slow endpoint costs nothing
        return JSONResponse({"n": n, "square": n * n})

    async def upload(request: Request) -> Response:
        body = await request.body()
        return Response(f"{len(body)} bytes".encode(), media_type="text/plain")

    return Starlette(
        routes=[
            Route("/whoami", whoami),
            Route("/square/{n:int}", square),
            Route("/upload", upload, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


async def start_uvicorn(
    net: SimNetwork, host: str, server: uvicorn.Server, sockets: list[socket.socket] | None = None
) -> asyncio.Task[None]:
    """Run ``server.serve()`` on *host* (as a deployment would); return once it listens."""
    task = net.spawn(host, server.serve(sockets))
    while not server.started:
        if task.done():
            task.result()
            raise AssertionError("uvicorn exited before it started")
        await asyncio.sleep(0.01)
    return task


def test_uvicorn_starlette_app_queried_with_httpx() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        events: list[str] = []
        net.set_latency("client", "api", 0.01)
        config = uvicorn.Config(
            starlette_app(events), host="0.0.0.0", port=8000, log_config=None, lifespan="on"
        )
        server = uvicorn.Server(config)
        task = await start_uvicorn(net, "api", server)
        listening = [s.getsockname() for s in server.servers[0].sockets]
        async with httpx.AsyncClient(base_url="http://api:8000", trust_env=False) as client:
            who = (await client.get("/whoami")).json()
            t0 = loop.time()
            squares = await asyncio.gather(*(client.get(f"/square/{n}") for n in (3, 1, 2)))
            slowest = elapsed(loop, t0)
            upload = await client.post("/upload", content=b"x" * 300_000)
        server.should_exit = True
        await task
        return [
            listening,
            who,
            [r.json() for r in squares],
            slowest,
            (upload.status_code, upload.text),
            events,
        ]

    net = SimNetwork()
    listening, who, squares, slowest, upload, events = sim_run(net, main)
    assert listening == [("0.0.0.0", 8000)]
    assert who["host"] == "api:8000"
    assert who["client"][0] == net.address("client")
    assert squares == [{"n": n, "square": n * n} for n in (3, 1, 2)]
    # Concurrent requests: the slowest endpoint's 3 s, its request and response
    # (0.02), and a connect (0.02) if the pool gave it a new connection.
    assert slowest in (3.02, 3.04)
    assert upload == (200, "300000 bytes")
    assert events == ["startup", "shutdown"]


def test_uvicorn_serving_a_socket_it_bound_itself() -> None:
    """``serve(sockets=[config.bind_socket()])``: how uvicorn's supervisors (workers,
    reload) and gunicorn's worker hand it a socket bound beforehand."""

    async def main(net: SimNetwork) -> list[Any]:
        # Port 0: bind_socket() binds in the kernel, before the loop adopts it.
        config = uvicorn.Config(starlette_app([]), host="0.0.0.0", port=0, log_config=None)
        sock = config.bind_socket()
        port = sock.getsockname()[1]
        assert sock.getsockname() == ("0.0.0.0", port)
        server = uvicorn.Server(config)
        task = await start_uvicorn(net, "api", server, [sock])
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                who = (await client.get(f"http://api:{port}/whoami")).json()
        finally:
            server.should_exit = True
            await task
            sock.close()
        return [port, who]

    net = SimNetwork()
    port, who = sim_run(net, main)
    assert who == {"client": [net.address("client"), who["client"][1]], "host": f"api:{port}"}


# -- redis-py's asyncio client ---------------------------------------------------


class MiniRedis:
    """A few commands of a Redis server, enough for redis-py's asyncio client.

    It speaks RESP2 until a client says ``HELLO 3`` (redis-py 8's default,
    sent first on every connection), RESP3 after. It answers ``CLIENT
    SETINFO`` / ``SETNAME`` with OK and ``CLIENT MAINT_NOTIFICATIONS`` (which
    redis-py 8 tries on RESP3 connections) as a Redis 7 server does, with an
    unknown-subcommand error. Every command received is kept in `commands`,
    every client's address in `peers`.
    """

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.commands: list[list[bytes]] = []
        self.peers: list[Address] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername"))
        resp3 = False
        try:
            while (command := await self.read_command(reader)) is not None:
                self.commands.append(command)
                reply, resp3 = self.execute(command, resp3)
                writer.write(reply)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    @staticmethod
    async def read_command(reader: asyncio.StreamReader) -> list[bytes] | None:
        header = await reader.readline()
        if not header:
            return None
        assert header.startswith(b"*"), header
        args = []
        for _ in range(int(header[1:])):
            length = await reader.readline()
            assert length.startswith(b"$"), length
            args.append((await reader.readexactly(int(length[1:]) + 2))[:-2])
        return args

    def execute(self, command: list[bytes], resp3: bool) -> tuple[bytes, bool]:
        name = command[0].upper()
        args = command[1:]
        null = b"_\r\n" if resp3 else b"$-1\r\n"
        if name == b"HELLO":
            version = int(args[0]) if args else 2
            if version not in (2, 3):
                return b"-NOPROTO unsupported protocol version\r\n", resp3
            resp3 = version == 3
            fields: list[tuple[bytes, bytes]] = [
                (b"server", bulk(b"redis")),
                (b"version", bulk(b"7.4.0")),
                (b"proto", b":%d\r\n" % version),
                (b"id", b":%d\r\n" % len(self.peers)),
                (b"mode", bulk(b"standalone")),
                (b"role", bulk(b"master")),
                (b"modules", b"*0\r\n"),
            ]
            head = b"%%%d\r\n" % len(fields) if resp3 else b"*%d\r\n" % (2 * len(fields))
            return head + b"".join(bulk(k) + v for k, v in fields), resp3
        if name == b"CLIENT":
            sub = args[0].upper() if args else b""
            if sub in (b"SETINFO", b"SETNAME"):
                return b"+OK\r\n", resp3
            what = args[0].decode() if args else ""
            return f"-ERR unknown subcommand '{what}'. Try CLIENT HELP.\r\n".encode(), resp3
        if name == b"PING":
            return (bulk(args[0]) if args else b"+PONG\r\n"), resp3
        if name == b"SET":
            self.data[args[0]] = args[1]
            return b"+OK\r\n", resp3
        if name == b"GET":
            value = self.data.get(args[0])
            return (null if value is None else bulk(value)), resp3
        if name in (b"INCR", b"INCRBY"):
            try:
                number = int(self.data.get(args[0], b"0")) + int(args[1] if args[1:] else 1)
            except ValueError:
                return b"-ERR value is not an integer or out of range\r\n", resp3
            self.data[args[0]] = b"%d" % number
            return b":%d\r\n" % number, resp3
        if name == b"DEL":
            return b":%d\r\n" % sum(self.data.pop(k, None) is not None for k in args), resp3
        return f"-ERR unknown command '{command[0].decode()}'\r\n".encode(), resp3


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def serve_streams(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]], port: int
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    async def serve(ready: asyncio.Event) -> None:
        server = await asyncio.start_server(handler, None, port)
        async with server:
            ready.set()
            await server.serve_forever()

    return serve


def test_redis_asyncio_client_against_a_resp_server() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        fake = MiniRedis()
        server = await start_on(net, "cache", serve_streams(fake.handle, 6379))
        r = aioredis.Redis(host="cache", port=6379)
        try:
            results: list[Any] = [
                await r.ping(),
                await r.set("greeting", "hello"),
                await r.get("greeting"),
                await r.get("missing"),
                await r.incr("hits"),
                await r.incr("hits"),
            ]
            async with r.pipeline(transaction=False) as pipe:
                pipe.incr("hits")
                pipe.get("hits")
                pipe.delete("greeting")
                results.append(await pipe.execute())
        finally:
            await r.aclose()
        await stop(server)
        return [results, fake.commands, fake.peers]

    net = SimNetwork()
    results, commands, peers = sim_run(net, main)
    assert results == [True, True, b"hello", None, 1, 2, [3, b"3", 1]]
    # One connection (from the pool), which began with redis-py's handshake.
    assert len(peers) == 1 and peers[0][0] == net.address("client")
    names = [b" ".join(c[:2]).upper() for c in commands]
    assert commands[0] == [b"HELLO", b"3"]
    # redis-py 8 classifies the endpoint from the peer address it connected to:
    # the simulated 10.0.0.x is a private address.
    maint = [b"CLIENT", b"MAINT_NOTIFICATIONS", b"ON", b"moving-endpoint-type", b"internal-fqdn"]
    assert maint in commands
    assert [b"CLIENT", b"SETINFO", b"LIB-NAME", b"redis-py"] in commands
    assert names.count(b"CLIENT SETINFO") == 2  # LIB-NAME and LIB-VER
    assert names[-5:] == [
        b"INCRBY HITS",
        b"INCRBY HITS",
        b"INCRBY HITS",
        b"GET HITS",
        b"DEL GREETING",
    ]


def test_redis_reconnects_to_a_restarted_host() -> None:
    """A crash resets the client's connection and leaves its host silent; redis-py's
    retries and connect timeout run out in virtual time; once the host is back,
    the next command reconnects."""

    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        net.set_latency("client", "cache", 0.01)
        first, second = MiniRedis(), MiniRedis()
        await start_on(net, "cache", serve_streams(first.handle, 6379))
        r = aioredis.Redis(
            host="cache",
            port=6379,
            socket_connect_timeout=1,
            retry=Retry(ConstantBackoff(0.25), 1),
        )
        try:
            await r.set("k", "before")
            net.crash("cache")
            t0 = loop.time()
            with pytest.raises(RedisTimeoutError, match="Timeout connecting"):
                await r.get("k")
            gave_up_after = elapsed(loop, t0)
            restarted = net.restart("cache", serve_streams(second.handle, 6379)(asyncio.Event()))
            await asyncio.sleep(0)
            # The new server's data is empty: the client reconnected to it.
            after = [await r.get("k"), await r.set("k", "after"), await r.get("k")]
        finally:
            await r.aclose()
        await stop(restarted)
        return [gave_up_after, after, len(first.peers), len(second.peers)]

    # The reset arrives (0.01 s), a backoff (0.25), the one retry's connect
    # times out (1): the SYN to a crashed host is never answered.
    assert sim_run(SimNetwork(), main) == [1.26, [None, True, b"after"], 1, 1]


# -- faults under real clients ---------------------------------------------------


def test_a_partition_times_an_aiohttp_request_out_then_heal_and_retry() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        seen: list[dict[str, Any]] = []
        async with aiohttp_web(net, seen, 2.5) as session:
            async with session.get("/hello/one") as resp:
                first = await resp.text()
            net.partition("client", "web")
            t0 = loop.time()
            with pytest.raises(TimeoutError):
                async with session.get("/hello/two") as resp:
                    await resp.text()
            timed_out_after = elapsed(loop, t0)
            net.heal()
            t0 = loop.time()
            async with session.get("/hello/three") as resp:
                third = await resp.text()
            retry_took = elapsed(loop, t0)
        return [first, timed_out_after, third, retry_took, [s["path"] for s in seen]]

    net = SimNetwork()
    first, timed_out_after, third, retry_took, paths = sim_run(net, main)
    client = net.address("client")
    assert (first, third) == (f"hello one from {client}", f"hello three from {client}")
    assert timed_out_after == 2.5
    # The timed-out request's connection was closed: the retry connects anew.
    assert retry_took == 0.04
    # The held request reached the server after heal, too (TCP retransmits).
    assert sorted(paths) == ["/hello/one", "/hello/three", "/hello/two"]


def test_a_partition_times_an_httpx_request_out_then_heal_and_retry() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        net.set_latency("client", "api", 0.01)
        config = uvicorn.Config(starlette_app([]), host="0.0.0.0", port=80, log_config=None)
        server = uvicorn.Server(config)
        task = await start_uvicorn(net, "api", server)
        async with httpx.AsyncClient(base_url="http://api", trust_env=False, timeout=2.0) as client:
            net.partition("client", "api")
            t0 = loop.time()
            with pytest.raises(httpx.ConnectTimeout):
                await client.get("/whoami")
            timed_out_after = elapsed(loop, t0)
            net.heal()
            t0 = loop.time()
            who = (await client.get("/whoami")).json()
            retry_took = elapsed(loop, t0)
        server.should_exit = True
        await task
        return [timed_out_after, who["client"][0], retry_took]

    net = SimNetwork()
    assert sim_run(net, main) == [2.0, net.address("client"), 0.04]
