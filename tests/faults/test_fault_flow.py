"""Half-close under load, and a peer that stops reading, on real loopback sockets.

The promises held (issue 27, "nothing is lost"):

- half-close in both directions under load: a side that has sent 20 MB and
  called write_eof() still receives the 20 MB its peer keeps sending, and
  the peer, having seen EOF, still gets its own stream out; both streams
  arrive whole and in order (digests match) and both sides see EOF;
- a peer that stops reading: a writer that respects drain() (the protocol's
  pause_writing) keeps its buffer bounded, ``get_write_buffer_size()`` never
  exceeds the high-water mark plus one chunk, and the process's RSS grows by
  less than 64 MiB while it offers 1 GiB (about 3 s per loop here);
  once the peer reads again every byte arrives, in order.

No exception-handler call, fd, task or thread may be left (the conftests
check). Each test runs on the stdlib loop, tideloop with every poller, and
uvloop where installed.
"""

from __future__ import annotations

import asyncio
import time

from fault_support import (
    RSS_TELLS_LEAKS,
    Digest,
    DigestProtocol,
    MiB,
    Pattern,
    rss_bytes,
    run,
    run_measured,
)


def test_half_close_both_directions_under_load(fault_loop: asyncio.AbstractEventLoop) -> None:
    loop = fault_loop
    up = Pattern(20 * MiB, seed=1)  # client -> server
    down = Pattern(20 * MiB, seed=2)  # server -> client
    server_got: list[str] = []
    # Before 3.12, Server.wait_closed() does not wait for the handlers: the
    # client waits for this one, which may still be hashing its last bytes.
    served = loop.create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = Digest()

        async def read_all() -> None:
            while data := await reader.read(256 * 1024):
                got.update(data)
            assert reader.at_eof()

        async def write_all() -> None:
            for chunk in down.chunks():
                writer.write(chunk)
                await writer.drain()
            assert writer.can_write_eof()
            writer.write_eof()

        await asyncio.gather(read_all(), write_all())
        server_got.append(got.hexdigest())
        writer.close()
        await writer.wait_closed()
        served.set_result(None)

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        got = Digest()

        async def write_all() -> None:
            for chunk in up.chunks():
                writer.write(chunk)
                await writer.drain()
            writer.write_eof()  # half-close while the server is still sending

        async def read_all() -> None:
            while data := await reader.read(256 * 1024):
                got.update(data)

        await asyncio.gather(write_all(), read_all())
        await served
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        assert got.hexdigest() == down.digest
        assert server_got == [up.digest]

    run(loop, main())


def test_peer_stops_reading(fault_loop: asyncio.AbstractEventLoop) -> None:
    loop = fault_loop
    total = 1024 * MiB
    chunk = 256 * 1024
    pattern = Pattern(total, chunk=chunk, seed=3)
    expected = pattern.digest  # computed before measuring RSS
    figures: dict[str, float] = {}

    async def main() -> None:
        peer = DigestProtocol(loop)
        server = await loop.create_server(lambda: peer, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        await peer.made
        assert peer.transport is not None
        peer.transport.pause_reading()  # the peer stops reading
        transport = writer.transport
        _low, high = transport.get_write_buffer_limits()
        rss0 = rss_bytes()
        max_rss = rss0
        max_buffered = 0
        stalled = asyncio.Event()
        offered = 0

        async def offer() -> None:
            nonlocal max_buffered, max_rss, offered
            for i, data in enumerate(pattern.chunks()):
                writer.write(data)
                offered += len(data)
                max_buffered = max(max_buffered, transport.get_write_buffer_size())
                if i % 64 == 0:
                    max_rss = max(max_rss, rss_bytes())
                drain = asyncio.ensure_future(writer.drain())
                done, _ = await asyncio.wait([drain], timeout=0.3)
                if not done:
                    stalled.set()  # blocked in drain() while the peer does not read
                    await drain

        writing = asyncio.ensure_future(offer())
        await asyncio.wait_for(stalled.wait(), 10)
        # Stalled: more offers would only wait; the buffers are what they are.
        max_rss = max(max_rss, rss_bytes())
        figures["offered_at_stall"] = offered
        figures["buffered_at_stall"] = transport.get_write_buffer_size()
        assert offered < 64 * MiB, "the writer kept going while the peer did not read"
        t0 = time.monotonic()
        peer.transport.resume_reading()
        await writing
        writer.write_eof()
        await peer.eof
        figures["transfer_s"] = time.monotonic() - t0
        figures["rss_growth_mib"] = (max_rss - rss0) / MiB
        figures["max_buffered"] = max_buffered
        writer.close()
        await writer.wait_closed()
        peer.transport.close()
        await peer.lost
        server.close()
        await server.wait_closed()
        # The figures docs/reliability.md quotes (pytest -s shows them).
        print(f"\npaused reader, {type(loop).__module__}: {figures}")
        assert reader.at_eof() or not reader._buffer  # type: ignore[attr-defined]
        assert max_buffered <= high + chunk, (max_buffered, high)
        assert figures["rss_growth_mib"] < 64 or not RSS_TELLS_LEAKS, figures
        assert peer.received.hexdigest() == expected

    run_measured(loop, main(), figures, timeout=60)
