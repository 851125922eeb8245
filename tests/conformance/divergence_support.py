"""What both sides of a divergence run (``divergences.py``; this module has no tests).

A registered divergence has two tests: its check in ``test_divergences.py``
(on the stdlib loop: asyncio still behaves otherwise) and tideloop's side
(``test_io_divergences.py``, ``test_net_divergences.py``, ...: the behaviour
tideloop chose). Where the two do the same thing, the doing is here, once:
each scenario runs on whatever loop it is given and returns what it saw;
the assertions stay with the callers, each side its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import socket
import tempfile
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, Any


def stdlib_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop()


# ----------------------------------------------------------------------
# Timers


def equal_deadline_order(loop: asyncio.AbstractEventLoop) -> list[int]:
    """The order in which 20 callbacks scheduled for one deadline run."""
    order: list[int] = []
    when = loop.time() + 0.005
    for i in range(20):
        loop.call_at(when, order.append, i)
    loop.call_at(when + 0.005, loop.stop)
    loop.run_forever()
    return order


# ----------------------------------------------------------------------
# Sockets and stream transports


def unread_pair() -> tuple[socket.socket, socket.socket]:
    """A socketpair with small buffers: what *a* writes waits until *b* is read."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    b.setblocking(False)
    return a, b


async def drain(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    """Read *n* bytes from the non-blocking *sock*."""
    out = bytearray()
    while len(out) < n:
        out += await loop.sock_recv(sock, 65536)
    return bytes(out)


class Starved:
    """A listening socket's stand-in whose accept() always fails with EMFILE."""

    def __init__(self, real: socket.socket) -> None:
        self.real = real

    def fileno(self) -> int:
        return self.real.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        raise OSError(errno.EMFILE, "Too many open files")

    def getsockname(self) -> object:
        return self.real.getsockname()

    def close(self) -> None:
        self.real.close()


async def sendfile_fallback_to_a_slow_peer(
    loop: asyncio.AbstractEventLoop, a: socket.socket, b: socket.socket, data: bytes
) -> bytes:
    """loop.sendfile() of *data* (a file without fileno: the fallback) over *a*, to a
    peer *b* slower than the file; what *b* received."""
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
    task = asyncio.ensure_future(loop.sendfile(transport, io.BytesIO(data)))
    # Several blocks are read while the first is still unsent: over the
    # high-water mark, the fallback waits for the peer.
    while transport.get_write_buffer_size() <= 65536 and not task.done():
        await asyncio.sleep(0.001)
    received = await drain(loop, b, len(data))
    assert await task == len(data)
    transport.close()
    await asyncio.sleep(0)
    return received


async def writelines_pauses(loop: asyncio.AbstractEventLoop, a: socket.socket) -> list[bool]:
    """A megabyte through writelines() to a peer that reads nothing: the
    pause_writing() calls the protocol got."""
    paused: list[bool] = []

    class P(asyncio.Protocol):
        def pause_writing(self) -> None:
            paused.append(True)

    transport, _ = await loop.connect_accepted_socket(P, a)
    transport.writelines([b"w" * (1024 * 1024)])
    assert transport.get_write_buffer_size() > 64 * 1024
    transport.abort()
    await asyncio.sleep(0)
    return paused


class Chunks(asyncio.Protocol):
    """Appends every chunk data_received() gets to the caller's list."""

    def __init__(self, got: list[bytes]) -> None:
        self.got = got

    def data_received(self, data: bytes) -> None:
        self.got.append(data)


def queue_until_full(write: Callable[[bytes], int], chunk: bytes) -> int:
    """Write *chunk* with the non-blocking *write* until it takes no more; return the total."""
    queued = 0
    try:
        while True:
            queued += write(chunk)
    except BlockingIOError:
        pass
    return queued


async def until_received(chunks: list[bytes], nbytes: int) -> None:
    """Wait until *chunks* (filled by a `Chunks` protocol) add up to *nbytes*."""
    while sum(map(len, chunks)) < nbytes:
        await asyncio.sleep(0.001)


async def reads_of_queued_data(
    loop: asyncio.AbstractEventLoop, a: socket.socket, b: socket.socket
) -> tuple[int, list[int]]:
    """Fill *a*'s receive queue from *b* (then close *b*) before a transport on *a*
    reads: how much was queued, and the sizes data_received() got."""
    chunks: list[bytes] = []
    b.setblocking(False)
    queued = queue_until_full(b.send, b"r" * 65536)
    b.close()
    transport, _ = await loop.connect_accepted_socket(lambda: Chunks(chunks), a)
    await until_received(chunks, queued)
    transport.close()
    await asyncio.sleep(0)
    return queued, [len(c) for c in chunks]


@contextlib.asynccontextmanager
async def native_sendfile_to_nobody(
    loop: asyncio.AbstractEventLoop, a: socket.socket
) -> AsyncIterator[tuple[asyncio.Transport, asyncio.Future[int], IO[bytes]]]:
    """A loop.sendfile() of a 4 MiB file over *a*, whose peer reads nothing, 50 ms in:
    (transport, the sendfile task, the file)."""
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
    with tempfile.TemporaryFile() as f:
        f.write(b"f" * (4 * 1024 * 1024))
        f.flush()
        f.seek(0)
        task = asyncio.ensure_future(loop.sendfile(transport, f))
        await asyncio.sleep(0.05)
        yield transport, task, f


async def closed_server(loop: asyncio.AbstractEventLoop) -> asyncio.Server:
    """A server, closed and waited for."""
    server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
    server.close()
    await server.wait_closed()
    return server


async def unix_server_binds_while_the_loop_runs(
    loop: asyncio.AbstractEventLoop,
) -> tuple[list[bool], bool]:
    """create_unix_server() with a callback queued before it: whether that callback
    had run when it returned, and whether the path existed then."""
    ran: list[bool] = []
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        path = os.path.join(folder, "s")
        loop.call_soon(ran.append, True)
        server = await loop.create_unix_server(asyncio.Protocol, path, start_serving=False)
        seen = (list(ran), os.path.exists(path))
        server.close()
        await server.wait_closed()
    return seen


# ----------------------------------------------------------------------
# Datagrams


async def datagrams_after_an_empty_one(loop: asyncio.AbstractEventLoop) -> list[bytes]:
    """Send b"" then b"after" to a UDP socket: the datagrams it received, up to b"after"."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setblocking(False)
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=receiver.getsockname()
        )
        transport.sendto(b"")
        transport.sendto(b"after")
        got: list[bytes] = []
        while b"after" not in got:
            got.append(await asyncio.wait_for(loop.sock_recv(receiver, 100), 5))
        transport.close()
        await asyncio.sleep(0)
    return got


async def udp_endpoint_transport(loop: asyncio.AbstractEventLoop) -> asyncio.BaseTransport:
    """The transport of a UDP endpoint on 127.0.0.1 (closed before it is returned)."""
    transport, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
    )
    transport.close()
    await asyncio.sleep(0)
    return transport


async def unix_datagram_buffer_sizes(
    loop: asyncio.AbstractEventLoop, folder: str | Path
) -> tuple[int, int]:
    """50 datagrams of 1000 bytes through a small send buffer to a peer that reads
    them all: the transport's write buffer size after the sends, and once the
    peer has them."""
    path = str(Path(folder) / "peer")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as peer:
        peer.bind(path)
        peer.setblocking(False)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.connect(path)
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=sock)
        for _ in range(50):
            transport.sendto(b"x" * 1000)
        queued = transport.get_write_buffer_size()
        received = 0
        while received < 50:
            await asyncio.sleep(0.005)
            try:
                while True:
                    assert peer.recv(2000) == b"x" * 1000
                    received += 1
            except BlockingIOError:
                pass
        await asyncio.sleep(0.01)
        size = transport.get_write_buffer_size()
        transport.close()
        await asyncio.sleep(0)
    return queued, size


# ----------------------------------------------------------------------
# Subprocesses


@contextlib.contextmanager
def recording_policy_watcher() -> Iterator[list[int]]:
    """The policy's child watcher (3.11-3.13) replaced by one that records the pids it
    is asked to watch (and watches them); the list of those pids."""
    from asyncio import unix_events

    used: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Recording(unix_events.ThreadedChildWatcher):
            def add_child_handler(self, pid: int, callback: Callable[..., object], *a: Any) -> None:
                used.append(pid)
                super().add_child_handler(pid, callback, *a)

        policy = asyncio.get_event_loop_policy()
        old = policy._watcher  # type: ignore[attr-defined]
        policy._watcher = Recording()  # type: ignore[attr-defined]
    try:
        yield used
    finally:
        policy._watcher = old  # type: ignore[attr-defined]


async def spawn_with_failing_read_pipe(loop: asyncio.AbstractEventLoop) -> None:
    """A subprocess with stdout=PIPE on *loop*, whose connect_read_pipe fails."""

    async def failing(*args: object, **kwargs: object) -> None:
        raise OSError("planted failure")

    loop.connect_read_pipe = failing  # type: ignore[method-assign,assignment]
    await asyncio.create_subprocess_exec("sleep", "30", stdout=asyncio.subprocess.PIPE)
