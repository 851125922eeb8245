"""``connect_read_pipe`` and ``connect_write_pipe``: the coroutine methods of `PipeMethods`.

Layer: transports. `PipeMethods` (``pipes.py``) binds these functions as its
methods. They live outside ``pipes.py`` because that module is compiled in
the mypyc build and this one is not: a coroutine compiled by mypyc is not a
coroutine function to ``inspect``, and it throws into what it awaits with
the three-argument ``throw()`` that 3.12 deprecates (see
``_core/shutdown.py``). Nothing here keeps state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tideloop._core.errors import logger

if TYPE_CHECKING:
    from .pipes import PipeMethods, ReadPipeTransport, WritePipeTransport

_PipeT = TypeVar("_PipeT", "ReadPipeTransport", "WritePipeTransport")


async def connect_read_pipe(
    self: PipeMethods, protocol_factory: Callable[[], asyncio.BaseProtocol], pipe: Any
) -> tuple[asyncio.ReadTransport, asyncio.BaseProtocol]:
    """Wrap the read end *pipe* in a transport feeding a protocol from *protocol_factory*."""
    return await _connect_pipe(self, self._make_read_pipe_transport, protocol_factory, pipe)


async def connect_write_pipe(
    self: PipeMethods, protocol_factory: Callable[[], asyncio.BaseProtocol], pipe: Any
) -> tuple[asyncio.WriteTransport, asyncio.BaseProtocol]:
    """Wrap the write end *pipe* in a transport driven by a protocol from *protocol_factory*."""
    return await _connect_pipe(self, self._make_write_pipe_transport, protocol_factory, pipe)


async def _connect_pipe(
    self: PipeMethods,
    make: Callable[..., _PipeT],
    protocol_factory: Callable[[], asyncio.BaseProtocol],
    pipe: Any,
) -> tuple[_PipeT, asyncio.BaseProtocol]:
    protocol = protocol_factory()
    waiter: asyncio.Future[None] = self.create_future()
    transport = make(pipe, protocol, waiter)
    try:
        await waiter
    except BaseException:
        transport.close()
        raise
    if self._debug:
        kind = "Write" if isinstance(transport, asyncio.WriteTransport) else "Read"
        logger.debug("%s pipe %r connected: (%r, %r)", kind, pipe.fileno(), transport, protocol)
    return transport, protocol
