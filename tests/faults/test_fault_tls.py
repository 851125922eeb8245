"""TLS clients that vanish mid-handshake or send garbage, then a good one.

The promise held (issue 27, "nothing is lost"): a TLS server survives peers
that break the handshake, a raw TCP client that sends part of a ClientHello
and then closes (FIN) or resets (RST), or one that sends bytes that are not
TLS records: no exception-handler call (the stdlib loop makes none: these
are OSErrors, reported at debug level only), no leaked fd, registration,
task or thread, the handler for connections never runs for them, and the
next, well-behaved TLS client is served: a 4 MiB echo arrives whole and in
order (digest). Runs on the stdlib loop, tideloop with every poller, and
uvloop where installed.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from fault_support import Digest, MiB, Pattern, reset, run


def client_hello() -> bytes:
    """The first flight of a real TLS client (its ClientHello record)."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("bad_peer", ["hello-prefix-fin", "hello-prefix-rst", "garbage"])
def test_tls_server_survives_broken_handshakes(
    fault_loop: asyncio.AbstractEventLoop,
    fault_tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    bad_peer: str,
) -> None:
    loop = fault_loop
    server_ctx, client_ctx = fault_tls_contexts
    pattern = Pattern(4 * MiB, seed=4)
    handled = 0

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal handled
        handled += 1
        while data := await reader.read(256 * 1024):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        addr = server.sockets[0].getsockname()[:2]
        hello = client_hello()
        for _ in range(3):
            raw = socket.socket()
            raw.setblocking(False)
            try:
                await loop.sock_connect(raw, addr)
                if bad_peer == "garbage":
                    await loop.sock_sendall(raw, b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 8)
                else:
                    await loop.sock_sendall(raw, hello[: len(hello) // 2])
                if bad_peer == "hello-prefix-rst":
                    reset(raw)
                    continue
                if bad_peer == "hello-prefix-fin":
                    raw.shutdown(socket.SHUT_WR)
                # The server gives up on this peer: an alert perhaps, then EOF.
                while await asyncio.wait_for(loop.sock_recv(raw, 4096), 5):
                    pass
            except ConnectionResetError:
                pass
            finally:
                raw.close()
        await asyncio.sleep(0.1)  # the server has seen the resets too
        assert handled == 0
        # A good client is served in full.
        reader, writer = await asyncio.open_connection(
            *addr, ssl=client_ctx, server_hostname="127.0.0.1"
        )
        got = Digest()

        async def send() -> None:
            for chunk in pattern.chunks():
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        async def receive() -> None:
            while got.count < pattern.total:
                data = await reader.read(256 * 1024)
                assert data, "EOF before the whole echo"
                got.update(data)

        await asyncio.gather(send(), receive())
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, ssl.SSLError):
            pass
        server.close()
        await server.wait_closed()
        assert got.hexdigest() == pattern.digest
        assert handled == 1

    run(loop, main())
