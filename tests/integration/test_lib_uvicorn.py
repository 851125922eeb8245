"""uvicorn serving an ASGI application on the loop under test, under concurrent requests.

uvicorn runs the way a user would run it, ``uvicorn.Server(config).run()``, in
a thread of its own, with ``Config(loop=<factory>)``: uvicorn accepts a loop
factory in its ``loop`` setting (a name from its table, an import string such
as ``"tideloop:new_event_loop"``, or the callable itself, which is what the
test passes so that every poller can be chosen) and runs ``serve()`` under
``asyncio.Runner(loop_factory=...)``. The listening socket is bound and put in
listening state by the test before the thread starts, so clients may connect
at once (the backlog holds them until uvicorn accepts): no waiting for
"started". Stopping is uvicorn's own ``should_exit`` flag, then a join.

The application is plain ASGI (lifespan and http, no framework): bodies
derived from the path, answered in one piece or streamed in several
``http.response.body`` messages, and an upload endpoint that hashes the
request body it receives in pieces. An aiohttp client on the same kind of
loop sends 200 concurrent requests through a limited pool, and a raw stream
client pipelines requests on one connection; every answer is checked, and the
lifespan startup and shutdown events must both have run.

Each test runs with the stdlib loop and with tideloop (every poller) on both
sides: uvicorn's server loop and the client's loop are the same kind, and the
application checks which loop class it ran on. One more test names the loop
the way users do, ``loop="tideloop:new_event_loop"`` (``--loop`` on the
command line), with a plain blocking-socket client.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
import uvicorn

import tideloop

from http_support import check_answers, make_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]

N_REQUESTS = 200
CHUNK = 16 * 1024


class App:
    """A plain ASGI application; records its lifespan events."""

    def __init__(self) -> None:
        self.lifespan: list[str] = []
        self.loop_class: type[asyncio.AbstractEventLoop] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self.loop_class = type(asyncio.get_running_loop())
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        parts = scope["path"].strip("/").split("/")
        if parts[0] == "digest":
            digest, total, more = hashlib.sha256(), 0, True
            while more:
                message = await receive()
                digest.update(message.get("body", b""))
                total += len(message.get("body", b""))
                more = message.get("more_body", False)
            await self.answer(send, f"{digest.hexdigest()}:{total}".encode())
            return
        kind, key, size = parts[0], parts[1], int(parts[2])
        body = make_body(key, size)
        if kind == "data":
            await self.answer(send, body)
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"x-key", key.encode())]}
        )
        for start in range(0, len(body), CHUNK):
            chunk = body[start : start + CHUNK]
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def answer(send: Send, body: bytes) -> None:
        headers = [
            (b"content-type", b"application/octet-stream"),
            (b"content-length", b"%d" % len(body)),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class UvicornThread:
    """uvicorn's Server.run() on a loop from *loop_factory*, in a thread."""

    def __init__(self, app: App, loop_factory: LoopFactory | str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            loop=loop_factory,  # type: ignore[arg-type]  # a factory is accepted as well
            http="h11",
            ws="none",
            lifespan="on",
            log_config=None,
            log_level="warning",
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="uvicorn-under-test")

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"
        if self.error is not None:
            raise self.error


def request_plan() -> list[tuple[str, str, int]]:
    plan = []
    for i in range(N_REQUESTS):
        kind = ("data", "stream", "digest")[i % 3]
        size = 1024 * 1024 + i if i % 50 == 4 else (i * 7919) % 30_000
        plan.append((kind, f"k{i}", size))
    return plan


async def fetch(session: aiohttp.ClientSession, base: str, kind: str, key: str, size: int) -> bytes:
    if kind == "digest":
        body = io.BytesIO(make_body(key, size))  # raw bytes over 1 MiB make aiohttp warn
        async with session.post(f"{base}/digest", data=body) as resp:
            assert resp.status == 200
            return await resp.read()
    async with session.get(f"{base}/{kind}/{key}/{size}") as resp:
        assert resp.status == 200
        if kind == "stream":
            assert resp.headers["x-key"] == key
            assert resp.headers["transfer-encoding"] == "chunked"
        else:
            assert resp.content_length == size
        return await resp.read()


def test_concurrent_requests(loop: asyncio.AbstractEventLoop, loop_factory: LoopFactory) -> None:
    app = App()

    async def client(port: int) -> None:
        plan = request_plan()
        connector = aiohttp.TCPConnector(limit=25)
        timeout = aiohttp.ClientTimeout(total=30)
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            results = await asyncio.gather(
                *(fetch(session, base, *item) for item in plan), return_exceptions=True
            )
        check_answers(plan, results)

    with UvicornThread(app, loop_factory) as server:
        loop.run_until_complete(client(server.port))
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]
    assert app.loop_class is type(loop)  # uvicorn ran on a loop from our factory


def test_pipelined_requests_on_one_connection(
    loop: asyncio.AbstractEventLoop, loop_factory: LoopFactory
) -> None:
    app = App()

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        keys = [f"p{i}" for i in range(20)]
        writer.write(
            b"".join(
                b"GET /data/%s/%d HTTP/1.1\r\nHost: test\r\n\r\n" % (k.encode(), 100 + i)
                for i, k in enumerate(keys)
            )
        )
        await writer.drain()
        for i, key in enumerate(keys):
            status = await reader.readline()
            assert status == b"HTTP/1.1 200 OK\r\n"
            headers = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
            assert f"content-length: {100 + i}\r\n" in headers
            assert await reader.readexactly(100 + i) == make_body(key, 100 + i)
        writer.write(b"GET /data/last/5 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        rest = await reader.read()  # the server closes after answering
        assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(make_body("last", 5))
        writer.close()
        await writer.wait_closed()

    with UvicornThread(app, loop_factory) as server:
        loop.run_until_complete(client(server.port))
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]
    assert app.loop_class is type(loop)  # uvicorn ran on a loop from our factory


def test_loop_setting_as_import_string() -> None:
    """The way a user names tideloop in uvicorn's configuration (or --loop on the command line)."""
    app = App()
    with UvicornThread(app, "tideloop:new_event_loop") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /data/cli/64 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert answer.endswith(b"\r\n\r\n" + make_body("cli", 64))
    assert app.loop_class is tideloop.Loop
