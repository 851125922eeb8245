"""TCP echo over loopback, server written with asyncio.Protocol."""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server
from bench.workloads._echo import ECHO_FULL, serve


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    return await serve(address, "protocol")


WORKLOAD = Server(
    name="tcp_echo_protocol",
    title="TCP echo, asyncio.Protocol",
    client="echo",
    family="tcp",
    start=start,
    full=ECHO_FULL,
    quick=[{"size": 1024, "conns": 10}],
)
