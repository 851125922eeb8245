"""Unix-socket echo, server written with asyncio.Protocol (create_unix_server)."""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server
from bench.workloads._echo import KIB, serve


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    return await serve(address, "protocol")


WORKLOAD = Server(
    name="unix_echo",
    title="Unix-socket echo, asyncio.Protocol",
    client="echo",
    family="unix",
    start=start,
    full=[{"size": size, "conns": 10} for size in (KIB, 10 * KIB, 100 * KIB)],
    quick=[{"size": KIB, "conns": 10}],
    needs=("unix",),
)
