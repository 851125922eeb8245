"""HTTP hello world from a minimal asyncio.Protocol server (keep-alive, no parser), under wrk.

The server only finds the end of each request head and answers it with a
fixed response, so almost all of its time is the loop and the transport.
"""

from __future__ import annotations

import asyncio
from typing import cast

from bench.api import Address, Params, Server

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!"
END = b"\r\n\r\n"


class HelloProtocol(asyncio.Protocol):
    transport: asyncio.Transport

    def __init__(self) -> None:
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        count = buf.count(END)
        if count:
            self.transport.write(RESPONSE * count)
            buf = buf[buf.rfind(END) + len(END) :]
        self.pending = buf


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    assert isinstance(address, tuple)
    loop = asyncio.get_running_loop()
    return await loop.create_server(HelloProtocol, *address, backlog=1024)


WORKLOAD = Server(
    name="http_minimal",
    title="HTTP hello world, minimal asyncio.Protocol server",
    client="http",
    family="tcp",
    start=start,
    full=[{"conns": 10}, {"conns": 100}],
    quick=[{"conns": 100}],
)
