"""The console's byte counts: the kernel's for TCP, None where nothing counts them.

`transport_bytes` reads them when a snapshot is taken (getsockopt
TCP_INFO), so they cost a program nothing while nobody watches. Checked on
both loops: the counts are the socket's, whatever loop drives it.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from tideloop._console.snapshot import transport_bytes

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="TCP_INFO's byte counts are Linux's"
)


async def _settle(predicate: object, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate() and loop.time() < end:  # type: ignore[operator]
        await asyncio.sleep(0.01)


def test_tcp_counts_are_the_bytes_each_way(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        served: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served.append(writer)
            data = await reader.readexactly(1000)
            writer.write(data * 3)
            await writer.drain()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        reader, writer = await asyncio.open_connection(host, port)
        try:
            assert transport_bytes(writer.transport) == (0, 0)
            writer.write(b"x" * 1000)
            await writer.drain()
            await reader.readexactly(3000)
            # The peer's reply may still be on its way: wait for both counts.
            await _settle(lambda: transport_bytes(writer.transport) == (3000, 1000))
            assert transport_bytes(writer.transport) == (3000, 1000)
            await _settle(lambda: transport_bytes(served[0].transport) == (1000, 3000))
            assert transport_bytes(served[0].transport) == (1000, 3000)
        finally:
            writer.close()
            await writer.wait_closed()
            for w in served:
                w.close()
            server.close()
            await server.wait_closed()

    loop.run_until_complete(main())


def test_unix_and_udp_transports_have_no_counts(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        udp, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        try:
            assert transport_bytes(transport) == (None, None)
            assert transport_bytes(udp) == (None, None)
        finally:
            transport.close()
            udp.close()
            b.close()
            await asyncio.sleep(0)

    loop.run_until_complete(main())
