"""HTTP hello world from an aiohttp.web application (aiohttp's low-level server), under wrk."""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="Hello, World!")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert isinstance(address, tuple) and runner.server is not None
    loop = asyncio.get_running_loop()
    return await loop.create_server(runner.server, *address, backlog=1024)


WORKLOAD = Server(
    name="http_aiohttp",
    title="HTTP hello world, aiohttp.web",
    client="http",
    family="tcp",
    start=start,
    full=[{"conns": 10}, {"conns": 100}],
    quick=[{"conns": 100}],
    requires=("aiohttp",),
)
