"""Echo servers shared by the TCP and Unix echo workloads (Protocol, BufferedProtocol, streams)."""

from __future__ import annotations

import asyncio
from typing import cast

from bench.api import Address, Params

__all__ = ["ECHO_FULL", "EchoBufferedProtocol", "EchoProtocol", "echo_stream", "serve"]

KIB = 1024
#: The message sizes and connection counts every echo workload runs.
ECHO_FULL: list[Params] = [
    {"size": size, "conns": conns} for size in (KIB, 10 * KIB, 100 * KIB) for conns in (10, 100)
]


class EchoProtocol(asyncio.Protocol):
    """Writes back whatever it receives."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class EchoBufferedProtocol(asyncio.BufferedProtocol):
    """Receives into one preallocated buffer and writes back a copy of what arrived."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.buffer = bytearray(64 * KIB)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance.
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.transport.write(self.buffer[:nbytes])


async def echo_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The streams echo: read what is there, write it back, wait for drain."""
    try:
        while data := await reader.read(64 * KIB):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(address: Address, style: str) -> asyncio.AbstractServer:
    """Start an echo server of *style* (``protocol``, ``buffered``, ``streams``) at *address*."""
    loop = asyncio.get_running_loop()
    if style == "streams":
        if isinstance(address, str):
            return await asyncio.start_unix_server(echo_stream, address, backlog=1024)
        return await asyncio.start_server(echo_stream, *address, backlog=1024)
    factory = EchoProtocol if style == "protocol" else EchoBufferedProtocol
    if isinstance(address, str):
        return await loop.create_unix_server(factory, address, backlog=1024)
    return await loop.create_server(factory, *address, backlog=1024)
