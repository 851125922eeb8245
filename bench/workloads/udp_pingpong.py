"""UDP ping-pong over loopback: 64-byte datagrams, a window of 10 in flight.

Both ends run on the loop under test, in one process: an echo endpoint
(unconnected, ``sendto(data, addr)``) and a pinger connected to it
(``remote_addr``, ``sendto(data)``) that answers every echo with the next
ping, keeping WINDOW datagrams in flight. One op is one datagram delivered
(a round trip is two). The window is small enough that loopback never drops
one; a watchdog re-sends a ping if nothing arrived for a while anyway, so a
lost datagram costs time instead of hanging the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.api import Primitive, Sample

PAYLOAD = bytes(range(64))
WINDOW = 10
WATCHDOG_S = 0.5


class _Echo(asyncio.DatagramProtocol):
    transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.transport.sendto(data, addr)


class _Pinger(asyncio.DatagramProtocol):
    def __init__(self, rounds: int, done: asyncio.Future[None]) -> None:
        self.transport: Any = None
        self.rounds = rounds
        self.received = 0
        self.sent = 0
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def send(self) -> None:
        if self.sent < self.rounds:
            self.sent += 1
            self.transport.sendto(PAYLOAD)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received += 1
        if self.received >= self.rounds:
            if not self.done.done():
                self.done.set_result(None)
            return
        self.send()

    def error_received(self, exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


async def run(n: int) -> Sample:
    loop = asyncio.get_running_loop()
    rounds = max(WINDOW, n // 2)
    done: asyncio.Future[None] = loop.create_future()
    echo_t, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    try:
        addr = echo_t.get_extra_info("sockname")
        ping_t, pinger = await loop.create_datagram_endpoint(
            lambda: _Pinger(rounds, done), remote_addr=addr
        )
        try:
            for _ in range(WINDOW):
                pinger.send()
            last = -1
            while not done.done():
                await asyncio.wait([done], timeout=WATCHDOG_S)
                if not done.done() and pinger.received == last:
                    pinger.sent -= 1  # one was lost: send it again
                    pinger.send()
                last = pinger.received
            done.result()
        finally:
            ping_t.close()
    finally:
        echo_t.close()
    await asyncio.sleep(0)  # let connection_lost run before the loop is torn down
    return Sample(2 * rounds)


WORKLOAD = Primitive(
    name="udp_pingpong",
    title="UDP ping-pong over loopback, 64 B, 10 in flight",
    unit="datagrams",
    run=run,
    quick_n=20_000,
    full_n=100_000,
    needs=("udp",),
)
