"""HTTPS hello world from the minimal asyncio.Protocol server of ``http_minimal``, under wrk.

The same server started with ``ssl=`` (``_tls.py``: a certificate made at
run time) and driven by wrk over https (keep-alive: wrk's connections
handshake once, at the start of each wrk run).
"""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server
from bench.workloads._tls import server_context
from bench.workloads.http_minimal import HelloProtocol


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    assert isinstance(address, tuple)
    loop = asyncio.get_running_loop()
    return await loop.create_server(HelloProtocol, *address, ssl=server_context(), backlog=1024)


WORKLOAD = Server(
    name="https_minimal",
    title="HTTPS hello world, minimal asyncio.Protocol server",
    client="https",
    family="tcp",
    start=start,
    full=[{"conns": 10}, {"conns": 100}],
    quick=[{"conns": 100}],
    needs=("tls",),
)
