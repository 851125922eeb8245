"""Helpers shared by the simulated-network tests (``test_network*.py``; no tests here).

A test's program runs on a `SimNetwork` in virtual time (`sim_run`). A
simulated host that serves is a task made with ``net.spawn``; its body is
often `serve` (a stream server until cancelled; `echo_lines` its default
handler) or `open_for` (open a server or an endpoint, keep it for a while,
close it), and `cancelled` or `stop` ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tideloop import testing
from tideloop.testing import SimNetwork


def sim_run(net: SimNetwork, main: Callable[[SimNetwork], Awaitable[Any]]) -> Any:
    """Run ``main(net)`` on a loop with *net* (virtual time); its result."""

    async def wrapper() -> Any:
        return await main(net)

    return testing.run(wrapper(), network=net)


async def echo_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A stream handler that answers each line with ``echo `` and the line, until EOF."""
    try:
        while line := await reader.readline():
            writer.write(b"echo " + line)
            await writer.drain()
    finally:
        writer.close()


async def serve(port: int, handler: Any = echo_lines, **kwargs: Any) -> None:
    """A serving host's body: `asyncio.start_server` (*kwargs* passed on) on *port*
    of the host's addresses with *handler*, serving until cancelled."""
    server = await asyncio.start_server(handler, None, port, **kwargs)
    async with server:
        await server.serve_forever()


async def open_for(opening: Awaitable[Any], seconds: float = 3600) -> None:
    """A serving host's body: await *opening* (a server, or an endpoint's transport
    and protocol), keep it open for *seconds* or until cancelled, then close it."""
    opened = await opening
    closable = opened[0] if isinstance(opened, tuple) else opened
    try:
        await asyncio.sleep(seconds)
    finally:
        closable.close()


async def cancelled(*tasks: asyncio.Task[Any]) -> None:
    """Cancel host tasks and wait until they have ended."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def stop(*tasks: asyncio.Task[Any]) -> None:
    """Cancel server tasks once what is in flight has arrived (the FINs of closed
    clients, closing handshakes): a virtual second first."""
    await asyncio.sleep(1)
    await cancelled(*tasks)
