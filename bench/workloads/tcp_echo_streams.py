"""TCP echo over loopback, server written with asyncio streams (start_server, read/write/drain)."""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server
from bench.workloads._echo import ECHO_FULL, serve


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    return await serve(address, "streams")


WORKLOAD = Server(
    name="tcp_echo_streams",
    title="TCP echo, asyncio streams (start_server, read/write/drain)",
    client="echo",
    family="tcp",
    start=start,
    full=ECHO_FULL,
    quick=[{"size": 1024, "conns": 10}],
)
