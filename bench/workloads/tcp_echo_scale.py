"""TCP echo with many connections (100 to 10,000): how throughput and memory grow with them.

The same asyncio.Protocol echo as ``tcp_echo_protocol`` (1 KiB messages, one
in flight per connection), driven by the compiled echo client with 100,
1,000 and 10,000 connections. Each loop must keep its per-event cost flat as
the number of registered fds grows, and the harness reports the server's
resident memory per connection beside throughput (``rss_per_conn_kib``:
growth of the server's RSS from "listening" to "all connections busy",
divided by the number of connections).

The server raises its soft fd limit to the hard one (10,000 sockets do not
fit the usual default of 1,024); the echo client raises its own.
"""

from __future__ import annotations

import asyncio
import resource

from bench.api import Address, Params, Server
from bench.workloads._echo import EchoProtocol

KIB = 1024


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = params["conns"] + 64
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise RuntimeError(f"{params['conns']} connections need {need} fds; hard limit {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    loop = asyncio.get_running_loop()
    assert not isinstance(address, str)
    # A deep backlog: the client opens all its connections at once.
    return await loop.create_server(EchoProtocol, *address, backlog=4096)


WORKLOAD = Server(
    name="tcp_echo_scale",
    title="TCP echo, asyncio.Protocol, 1 KiB, 100 to 10,000 connections",
    client="echo",
    family="tcp",
    start=start,
    full=[{"size": KIB, "conns": conns} for conns in (100, 1000, 10000)],
    quick=[{"size": KIB, "conns": 1000}],
)
