"""TLS echo over loopback, server written with asyncio.Protocol and ``ssl=``.

The same echo server as ``tcp_echo_protocol``, started with a TLS server
context (``_tls.py``: a certificate made at run time), driven by the echo
client's TLS mode (``echo_client_tls``: OpenSSL, one record per message).
The handshakes happen before the measurement; what is measured is the loop's
TLS layer around the same OpenSSL work (one record decrypted and one
encrypted per message on each side).
"""

from __future__ import annotations

import asyncio

from bench.api import Address, Params, Server
from bench.workloads._echo import EchoProtocol
from bench.workloads._tls import server_context

KIB = 1024


async def start(address: Address, params: Params) -> asyncio.AbstractServer:
    assert isinstance(address, tuple)
    loop = asyncio.get_running_loop()
    return await loop.create_server(EchoProtocol, *address, ssl=server_context(), backlog=1024)


WORKLOAD = Server(
    name="tls_echo_protocol",
    title="TLS echo, asyncio.Protocol",
    client="tls_echo",
    family="tcp",
    start=start,
    full=[{"size": KIB, "conns": 100}, {"size": 16 * KIB, "conns": 100}],
    quick=[{"size": KIB, "conns": 100}, {"size": 16 * KIB, "conns": 100}],
    needs=("tls",),
)
