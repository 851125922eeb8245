"""Helpers shared by the fault tests (this module has no tests).

Everything here works on any asyncio loop. The streams the tests send are
made of distinct chunks (`Pattern`), so a lost, repeated or reordered chunk
changes the digest the receiver computes (`Digest`); `reset()` makes a peer
leave with a TCP RST (SO_LINGER 0) instead of a FIN.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import os
import socket
import struct
import sys
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from loopwatch import FACTORIES, LoopFactory

T = TypeVar("T")

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _uvloop_factory() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


#: The loops the fault tests run on: the root conftest's, and uvloop where installed.
FAULT_FACTORIES: dict[str, LoopFactory] = dict(FACTORIES)
if HAVE_UVLOOP:
    FAULT_FACTORIES["uvloop"] = _uvloop_factory

#: Bound on any single run of a test's main coroutine: a hang fails fast.
WAIT = 30.0

MiB = 1024 * 1024


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
    """Run *coro* on *loop*, failing (TimeoutError) after *timeout* seconds."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def run_measured(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, None],
    figures: Mapping[str, float],
    *socks: socket.socket,
    timeout: float = WAIT,
) -> None:
    """`run` a test that measures: close *socks* (raw sockets of the test's own)
    whatever happens, then print the *figures* it measured with the loop's module
    (the numbers docs/reliability.md quotes; ``pytest -s`` shows them)."""
    try:
        run(loop, coro, timeout)
    finally:
        for sock in socks:
            sock.close()
    print(f"\n{loop.__class__.__module__}: {figures}")


class Pattern:
    """A deterministic stream of *total* bytes, as chunks that all differ.

    Chunk *i* is a window of a random base block at an offset that moves by
    a prime for each chunk (a stride coprime with the block's length), so no
    two of the first million chunks are equal.
    """

    BLOCK = 1 * MiB

    def __init__(self, total: int, chunk: int = 256 * 1024, seed: int = 0) -> None:
        assert chunk <= self.BLOCK
        self.total = total
        self.chunk = chunk
        base = hashlib.shake_256(b"tideloop-faults-%d" % seed).digest(self.BLOCK)
        self._base = base + base[:chunk]

    def chunks(self) -> Iterator[bytes]:
        sent = 0
        i = 0
        while sent < self.total:
            n = min(self.chunk, self.total - sent)
            off = (i * 4099) % self.BLOCK
            yield self._base[off : off + n]
            sent += n
            i += 1

    def data(self) -> bytes:
        """The whole stream (for the smaller ones)."""
        return b"".join(self.chunks())

    @functools.cached_property
    def digest(self) -> str:
        d = Digest()
        for c in self.chunks():
            d.update(c)
        return d.hexdigest()

    def prefix_digest(self, n: int) -> str:
        """The digest of the first *n* bytes of the stream."""
        d = Digest()
        left = n
        for c in self.chunks():
            if left <= 0:
                break
            d.update(c[:left])
            left -= len(c)
        return d.hexdigest()


class Digest:
    """A running digest of a byte stream, and its length."""

    def __init__(self) -> None:
        self._h = hashlib.sha1(usedforsecurity=False)
        self.count = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)
        self.count += len(data)

    def hexdigest(self) -> str:
        return f"{self.count}:{self._h.hexdigest()}"


class DigestProtocol(asyncio.Protocol):
    """Hashes what it receives (keeping none of it); futures for made, eof and lost."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, keep_open_on_eof: bool = True) -> None:
        self.loop = loop
        # Any: uvloop's transports are not asyncio.Transport instances.
        self.transport: Any = None
        self.received = Digest()
        self.keep_open_on_eof = keep_open_on_eof
        self.made: asyncio.Future[None] = loop.create_future()
        self.eof: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[BaseException | None] = loop.create_future()
        self.events: list[str] = []

    def _happened(self, event: str, future: asyncio.Future[Any], result: Any = None) -> None:
        # set_result raises if a callback comes twice: the test then fails.
        self.events.append(event)
        future.set_result(result)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._happened("made", self.made)

    def data_received(self, data: bytes) -> None:
        self.received.update(data)

    def eof_received(self) -> bool:
        self._happened("eof", self.eof)
        return self.keep_open_on_eof

    def connection_lost(self, exc: BaseException | None) -> None:
        self._happened("lost", self.lost, exc)


def reset(sock: socket.socket) -> None:
    """Close *sock* with SO_LINGER 0: the peer gets a RST, unsent data is dropped."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


#: Whether RSS tells retained objects apart: on CPython, whose reference
#: counting frees them at once. PyPy's GC (8.0 in Debian's root) lets RSS
#: grow by hundreds of MiB between major collections in these tests, on the
#: stdlib loop as on tideloop: a bound on RSS there measures its collector,
#: not a leak. The tests still measure and print it there.
RSS_TELLS_LEAKS = sys.implementation.name == "cpython"


def rss_bytes() -> int:
    """This process's resident set size (Linux: /proc/self/statm)."""
    with open("/proc/self/statm", "rb") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def exception_types(contexts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(message, exception type) of each exception-handler context, for comparisons."""
    return [(str(ctx.get("message")), type(ctx.get("exception")).__name__) for ctx in contexts]
