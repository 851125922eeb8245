"""A stream's bytes keep their order when its segments are due at the same instant.

Segments of one connection direction may be due at one virtual instant (a
fixed latency, several sends in one step, a send split in pieces), and a
schedule may run timers with one deadline in either order (a tie, a
decision point). TCP delivers in order whatever: a run where the second
piece overtook the first would be a failure no real network produces (a
false alarm). Found by the failover example of docs/testing.md under
``--tideloop-seeds``: a reply ``db1\\n`` split in two read back as ``db\\n``.
"""

from __future__ import annotations

import asyncio

from tideloop import testing
from tideloop.testing import SimNetwork


async def echo_in_pieces(net: SimNetwork) -> bytes:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(30))
        writer.close()

    async def serve() -> None:
        async with await asyncio.start_server(handle, None, 7):
            await asyncio.sleep(10)

    server = net.spawn("echo", serve())
    net.set_link("client", "echo", latency=0.01, split=1.0)  # one latency, every send split
    reader, writer = await asyncio.open_connection("echo", 7)
    for chunk in (b"0123456789", b"abcdefghij", b"ABCDEFGHIJ"):  # three sends, one instant
        writer.write(chunk)
    received = await reader.read()
    writer.close()
    await writer.wait_closed()
    await server
    return received


def test_segments_due_at_one_instant_arrive_in_order_under_every_schedule() -> None:
    ties = 0
    for seed in range(60):
        net = SimNetwork(seed=seed)
        log = testing.DecisionLog(testing.RandomStrategy(seed))
        received = testing.run(echo_in_pieces(net), network=net, strategy=log)
        assert received == b"0123456789abcdefghijABCDEFGHIJ", seed
        ties += sum(1 for d in log.deviations if d[0] == "tie")
    assert ties  # the schedules did run tied timers out of order
