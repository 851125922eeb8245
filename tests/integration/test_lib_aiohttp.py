"""aiohttp's web server and ClientSession, both running on the loop under test.

An aiohttp application serves bodies derived from the request path (so the
client can recompute every expected byte): fixed-size responses with a
Content-Length, chunked responses written piece by piece with
``StreamResponse``, and an upload endpoint that hashes a (streamed) request
body. A `ClientSession` with a limited connection pool fetches hundreds of
URLs concurrently through ``gather(..., return_exceptions=True)``, a few of
them over 1 MiB, and every status, header and body is checked, as is the
number of connections the pool opened. The same scenario runs over HTTP and
over HTTPS (a certificate from `certs`). A client timeout against a handler that does not
answer checks cancellation through aiohttp's timeouts, and a client that
drops its connection mid-body must get its handler cancelled. Files are
served with ``FileResponse`` (which uses ``loop.sendfile``), whole and in
byte ranges. The same traffic runs over a Unix socket (``UnixSite``,
``UnixConnector``). A resolver that gives ``::1`` then ``127.0.0.1`` checks that
aiohttp's happy eyeballs reaches a server listening on either or both.

Each test runs on the stdlib loop and on tideloop (every poller), through the
root conftest's ``loop`` fixture, which also fails a test that leaves tasks
pending; the autouse leak check fails one that leaves fds open.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import aiohttp.abc
import pytest
from aiohttp import web

from http_support import check_answers, expected, make_body

N_URLS = 300
POOL_LIMIT = 20
CHUNK = 16 * 1024


async def handle_data(request: web.Request) -> web.Response:
    key, size = request.match_info["key"], int(request.match_info["size"])
    request.app[PEERS].add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
    return web.Response(body=make_body(key, size), content_type="application/octet-stream")


async def handle_stream(request: web.Request) -> web.StreamResponse:
    key, size = request.match_info["key"], int(request.match_info["size"])
    request.app[PEERS].add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
    body = make_body(key, size)
    response = web.StreamResponse(headers={"X-Key": key})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for start in range(0, len(body), CHUNK):
        await response.write(body[start : start + CHUNK])
    await response.write_eof()
    return response


async def handle_digest(request: web.Request) -> web.Response:
    digest = hashlib.sha256()
    total = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        digest.update(chunk)
        total += len(chunk)
    return web.json_response({"sha256": digest.hexdigest(), "length": total})


async def handle_stall(request: web.Request) -> web.Response:
    await request.app[RELEASE].wait()
    return web.Response(text="late")


async def handle_file(request: web.Request) -> web.FileResponse:
    return web.FileResponse(request.app[FILES] / request.match_info["name"])


async def handle_endless(request: web.Request) -> web.StreamResponse:
    """Streams until the client goes away; records how the handler ended."""
    response = web.StreamResponse()
    await response.prepare(request)
    try:
        while True:
            await response.write(b"x" * 65536)
    except BaseException as exc:
        request.app[ENDINGS].append(exc)
        raise


async def handle_peer(request: web.Request) -> web.Response:
    peer = request.transport.get_extra_info("peername")  # type: ignore[union-attr]
    return web.Response(text=peer[0])


PEERS = web.AppKey("peers", set)
RELEASE = web.AppKey("release", asyncio.Event)
FILES = web.AppKey("files", Path)
ENDINGS = web.AppKey("endings", list)


class Site:
    """An aiohttp application listening on *host* (127.0.0.1 by default), port 0."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        files: Path = Path(),
        host: str = "127.0.0.1",
    ) -> None:
        self.app = web.Application()
        self.app[PEERS] = set()
        self.app[RELEASE] = asyncio.Event()
        self.app[FILES] = files
        self.app[ENDINGS] = []
        self.app.router.add_get("/data/{key}/{size}", handle_data)
        self.app.router.add_get("/stream/{key}/{size}", handle_stream)
        self.app.router.add_post("/digest", handle_digest)
        self.app.router.add_get("/stall", handle_stall)
        self.app.router.add_get("/file/{name}", handle_file)
        self.app.router.add_get("/endless", handle_endless)
        self.app.router.add_get("/peer", handle_peer)
        # handler_cancellation: a client that goes away cancels its handler.
        self.runner = web.AppRunner(self.app, handle_signals=False, handler_cancellation=True)
        self.ssl_context = ssl_context
        self.host = host
        self.base = ""

    async def __aenter__(self) -> Site:
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, 0, ssl_context=self.ssl_context)
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            raise
        port = self.runner.addresses[0][1]
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host  # the certificate names both
        self.base = f"{scheme}://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.app[RELEASE].set()
        await self.runner.cleanup()


def url_plan(n: int) -> list[tuple[str, str, int]]:
    """(kind, key, size) for *n* requests: mostly small, every 60th over 1 MiB."""
    plan = []
    for i in range(n):
        kind = ("data", "stream", "digest")[i % 3]
        size = 1024 * 1024 + 4099 * i if i % 60 == 7 else (i * 7919) % 20_000
        plan.append((kind, f"k{i}", size))
    return plan


async def fetch(session: aiohttp.ClientSession, base: str, kind: str, key: str, size: int) -> bytes:
    """Do one request of the plan and return what identifies its answer."""
    if kind == "data":
        async with session.get(f"{base}/data/{key}/{size}") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/octet-stream"
            assert resp.content_length == size
            return await resp.read()
    if kind == "stream":
        async with session.get(f"{base}/stream/{key}/{size}") as resp:
            assert resp.status == 200
            assert resp.headers["X-Key"] == key
            assert resp.headers["Transfer-Encoding"] == "chunked"
            parts = [chunk async for chunk in resp.content.iter_chunked(8192)]
            return b"".join(parts)

    body = make_body(key, size)

    async def upload() -> AsyncIterator[bytes]:
        for start in range(0, len(body), CHUNK):
            yield body[start : start + CHUNK]

    async with session.post(f"{base}/digest", data=upload()) as resp:
        assert resp.status == 200
        answer = await resp.json()
        return f"{answer['sha256']}:{answer['length']}".encode()


async def fetch_all(site: Site, client_ssl: ssl.SSLContext | bool) -> None:
    plan = url_plan(N_URLS)
    connector = aiohttp.TCPConnector(limit=POOL_LIMIT, ssl=client_ssl)
    async with aiohttp.ClientSession(connector=connector) as session:
        results = await asyncio.gather(
            *(fetch(session, site.base, *item) for item in plan), return_exceptions=True
        )
    check_answers(plan, results)
    assert sum(len(r) for r in results if isinstance(r, bytes)) > 6 * 1024 * 1024
    # The pool was used: never more connections than its limit.
    assert 1 <= len(site.app[PEERS]) <= POOL_LIMIT


def test_concurrent_fetches_over_http(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with Site() as site:
            await fetch_all(site, client_ssl=False)

    loop.run_until_complete(main())


def test_concurrent_fetches_over_https(
    loop: asyncio.AbstractEventLoop,
    server_ssl_context: ssl.SSLContext,
    client_ssl_context: ssl.SSLContext,
) -> None:

    async def main() -> None:
        async with Site(server_ssl_context) as site:
            await fetch_all(site, client_ssl=client_ssl_context)

    loop.run_until_complete(main())


def test_client_timeout_cancels_request(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with Site() as site, aiohttp.ClientSession() as session:
            timeout = aiohttp.ClientTimeout(total=0.2)
            with pytest.raises(asyncio.TimeoutError):
                async with session.get(f"{site.base}/stall", timeout=timeout) as resp:
                    await resp.read()
            # The session still works after the cancelled request.
            async with session.get(f"{site.base}/data/after/10") as resp:
                assert await resp.read() == make_body("after", 10)

    loop.run_until_complete(main())


def test_file_responses_and_ranges(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    """FileResponse sends with loop.sendfile(); full files and byte ranges, concurrently."""
    files = {f"f{i}.bin": make_body(f"file{i}", 3 * 1024 * 1024 + i * 977) for i in range(4)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)

    async def get(session: aiohttp.ClientSession, base: str, name: str, rng: slice | None) -> bool:
        headers = {} if rng is None else {"Range": f"bytes={rng.start}-{rng.stop - 1}"}
        async with session.get(f"{base}/file/{name}", headers=headers) as resp:
            assert resp.status == (200 if rng is None else 206)
            body = await resp.read()
        return body == (files[name] if rng is None else files[name][rng])

    async def main() -> None:
        async with Site(files=tmp_path) as site:
            connector = aiohttp.TCPConnector(limit=8)
            async with aiohttp.ClientSession(connector=connector) as session:
                requests = [
                    get(session, site.base, name, rng)
                    for name in files
                    for rng in (
                        None,
                        slice(0, 1),
                        slice(1000, 1_500_000),
                        slice(2_000_000, 3_000_000),
                    )
                ]
                assert await asyncio.gather(*requests) == [True] * len(requests)

    loop.run_until_complete(main())


def test_client_going_away_cancels_handler(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with Site() as site, aiohttp.ClientSession() as session:
            async with session.get(f"{site.base}/endless") as resp:
                assert len(await resp.content.readexactly(200_000)) == 200_000
                resp.close()  # drop the connection mid-body
            # The session's connection is gone; the server notices and cancels the handler.
            async with session.get(f"{site.base}/data/again/5") as resp:
                assert await resp.read() == make_body("again", 5)
        [ending] = site.app[ENDINGS]
        assert isinstance(ending, asyncio.CancelledError | ConnectionResetError)

    loop.run_until_complete(main())


class DualStackResolver(aiohttp.abc.AbstractResolver):
    """Resolves every name to ::1 then 127.0.0.1 (whatever /etc/hosts says)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        return [
            {"hostname": host, "host": ip, "port": port, "family": fam, "proto": 0, "flags": 0}
            for ip, fam in (("::1", socket.AF_INET6), ("127.0.0.1", socket.AF_INET))
        ]

    async def close(self) -> None:
        pass


def test_happy_eyeballs_falls_back(loop: asyncio.AbstractEventLoop) -> None:
    """A name with two addresses; the client reaches whichever one listens."""

    async def main() -> None:
        # ::1 is tried first: refused when only 127.0.0.1 listens, so the client falls back.
        for host in ("127.0.0.1", "::1"):
            async with Site(host=host) as site:
                port = site.runner.addresses[0][1]
                resolver = DualStackResolver()
                connector = aiohttp.TCPConnector(resolver=resolver, happy_eyeballs_delay=0.25)
                async with (
                    aiohttp.ClientSession(connector=connector) as session,
                    session.get(f"http://dual.test:{port}/peer") as resp,
                ):
                    assert await resp.text() == host

    loop.run_until_complete(main())


def test_unix_site_and_connector(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    """The same kind of traffic over a Unix socket: UnixSite and UnixConnector."""
    path = str(tmp_path / "aiohttp.sock")

    async def main() -> None:
        runner = web.AppRunner(Site().app, handle_signals=False)
        await runner.setup()
        try:
            await web.UnixSite(runner, path).start()
            connector = aiohttp.UnixConnector(path=path, limit=10)
            async with aiohttp.ClientSession(connector=connector) as session:
                plan = url_plan(60)
                results = await asyncio.gather(
                    *(fetch(session, "http://unix", *item) for item in plan)
                )
            assert results == [expected(*item) for item in plan]
        finally:
            await runner.cleanup()

    loop.run_until_complete(main())
