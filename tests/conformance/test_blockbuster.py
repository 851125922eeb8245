"""No blocking call on the loop's thread that asyncio does not make too, under blockbuster.

blockbuster (the checker anyio's and aiohttp's suites run under) fails a blocking
call made on a thread that runs an event loop, unless a frame on its stack is one it
accepts; its defaults accept asyncio's own frames. Each test runs one kind of work
under it, with every module scanned, on the stdlib loop and on tideloop: tideloop
must pass wherever asyncio passes. tideloop's own accepted frames come from
`tideloop.testing._blockbuster` (which the pytest plugin applies to every
BlockBuster); the calls it can make elsewhere (starting a child, a Unix server's
stale-socket check and bind) it makes on helper threads.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

blockbuster = pytest.importorskip("blockbuster")

import tideloop  # noqa: E402
from tideloop.testing import allow_tideloop  # noqa: E402
from tideloop.testing._blockbuster import ALLOWANCES  # noqa: E402

from tls_support import Certs  # noqa: E402

PY = sys.executable


def under_blockbuster(
    loop: asyncio.AbstractEventLoop, main: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Run *main* on *loop* with blockbuster active (every module scanned)."""

    async def guarded() -> None:
        with blockbuster.blockbuster_ctx():
            await main()

    loop.run_until_complete(asyncio.wait_for(guarded(), 30))


@pytest.fixture
def short_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # AF_UNIX paths are short: a directory near the root, not pytest's tmp_path.
    path = Path(os.path.realpath("/tmp")) / f"tl-bb-{os.getpid()}-{id(object())}"
    path.mkdir()
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.readline())
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"ping\n")
    await writer.drain()
    data = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return data


def test_tcp_server_and_client(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        assert await round_trip(*await asyncio.open_connection(host, port)) == b"ping\n"
        # A name to resolve: getaddrinfo runs in the executor.
        assert await round_trip(*await asyncio.open_connection("localhost", port)) == b"ping\n"
        server.close()
        await server.wait_closed()

    under_blockbuster(loop, main)


def test_unix_server_and_client(loop: asyncio.AbstractEventLoop, short_dir: Path) -> None:
    path = str(short_dir / "s.sock")

    async def main() -> None:
        server = await asyncio.start_unix_server(echo, path)
        assert await round_trip(*await asyncio.open_unix_connection(path)) == b"ping\n"
        server.close()  # 3.13+: removes the socket file, on the loop's thread
        await server.wait_closed()

    under_blockbuster(loop, main)


def test_tls_server_and_client(loop: asyncio.AbstractEventLoop, certs: Certs) -> None:
    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=certs.server)
        port = server.sockets[0].getsockname()[1]
        streams = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client, server_hostname="localhost"
        )
        assert await round_trip(*streams) == b"ping\n"
        server.close()
        await server.wait_closed()

    under_blockbuster(loop, main)


def test_datagrams(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        got: asyncio.Future[bytes] = loop.create_future()

        class Sink(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                got.set_result(data)

        server, _ = await loop.create_datagram_endpoint(Sink, local_addr=("127.0.0.1", 0))
        client, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=server.get_extra_info("sockname")
        )
        client.sendto(b"hello")
        assert await got == b"hello"
        client.close()
        server.close()

    under_blockbuster(loop, main)


def test_subprocesses(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-c",
            "import sys; sys.stdout.write(sys.stdin.read().upper())",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert await proc.communicate(b"child") == (b"CHILD", None)
        shell = await asyncio.create_subprocess_shell("exit 3")
        assert await shell.wait() == 3

    under_blockbuster(loop, main)


def test_sendfile(loop: asyncio.AbstractEventLoop, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    path = tmp_path / "data.bin"
    path.write_bytes(data)

    async def main() -> None:
        received: asyncio.Future[bytes] = loop.create_future()

        async def collect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.set_result(await reader.read())
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(collect, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        with path.open("rb") as f:
            assert await loop.sendfile(writer.transport, f) == len(data)
        writer.close()
        await writer.wait_closed()
        assert await received == data
        server.close()
        await server.wait_closed()

    under_blockbuster(loop, main)


def test_executor_threads_and_signals(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        assert await loop.run_in_executor(None, sum, [1, 2]) == 3
        assert await asyncio.to_thread(len, "abc") == 3
        got: asyncio.Future[None] = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got.set_result, None)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            await got
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        await loop.shutdown_default_executor()

    under_blockbuster(loop, main)


def test_pipes(loop: asyncio.AbstractEventLoop) -> None:
    r, w = os.pipe()

    async def main() -> None:
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb", buffering=0)
        )
        wtransport, _ = await loop.connect_write_pipe(
            asyncio.BaseProtocol, os.fdopen(w, "wb", buffering=0)
        )
        wtransport.write(b"through the pipe\n")
        assert await reader.readline() == b"through the pipe\n"
        wtransport.close()
        transport.close()
        await asyncio.sleep(0)

    under_blockbuster(loop, main)


def test_sock_methods(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        client = socket.socket()
        client.setblocking(False)
        with listener, client:
            await loop.sock_connect(client, listener.getsockname())
            conn, _ = await loop.sock_accept(listener)
            with conn:
                conn.setblocking(False)
                await loop.sock_sendall(client, b"raw")
                assert await loop.sock_recv(conn, 3) == b"raw"

    under_blockbuster(loop, main)


def test_sock_methods_that_wait(loop: asyncio.AbstractEventLoop) -> None:
    """The retry after EAGAIN calls the socket's method by name: blockbuster's
    wrappers of socket.socket's methods are named ``wrapper``."""

    async def main() -> None:
        a, b = socket.socketpair()
        u1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b, u1, u2:
            for sock in (a, b, u1, u2):
                sock.setblocking(False)
            u1.bind(("127.0.0.1", 0))
            u2.bind(("127.0.0.1", 0))
            # Nothing to read yet: each call waits for its data.
            pending = loop.create_task(loop.sock_recv(a, 5))
            await asyncio.sleep(0)
            await loop.sock_sendall(b, b"first")
            assert await pending == b"first"
            buf = bytearray(6)
            pending_into = loop.create_task(loop.sock_recv_into(a, buf))
            await asyncio.sleep(0)
            await loop.sock_sendall(b, b"second")
            assert await pending_into == 6 and buf == b"second"
            datagram = loop.create_task(loop.sock_recvfrom(u2, 100))
            await asyncio.sleep(0)
            await loop.sock_sendto(u1, b"dgram", u2.getsockname())
            assert await datagram == (b"dgram", u1.getsockname())
            dbuf = bytearray(10)
            datagram_into = loop.create_task(loop.sock_recvfrom_into(u2, dbuf))
            await asyncio.sleep(0)
            await loop.sock_sendto(u1, b"into", u2.getsockname())
            assert await datagram_into == (4, u1.getsockname()) and dbuf[:4] == b"into"

    under_blockbuster(loop, main)


def test_a_child_started_while_sigchld_is_handled(loop: asyncio.AbstractEventLoop) -> None:
    """With a SIGCHLD handler installed a child starts on the loop's thread (as
    asyncio starts every child): blockbuster accepts it from both loops."""

    async def main() -> None:
        loop.add_signal_handler(signal.SIGCHLD, lambda: None)
        try:
            proc = await asyncio.create_subprocess_exec(PY, "-c", "raise SystemExit(4)")
            assert await proc.wait() == 4
        finally:
            loop.remove_signal_handler(signal.SIGCHLD)

    under_blockbuster(loop, main)


def test_the_allowances_are_what_a_blockbuster_gets() -> None:
    """The plugin (loaded in this session) gives every BlockBuster tideloop's entries;
    allow_tideloop() adds them to one made before."""
    bb = blockbuster.BlockBuster()
    for name, entries in ALLOWANCES.items():
        for filename, callers in entries:
            assert (filename, set(callers)) in bb.functions[name].can_block_functions
    assert getattr(blockbuster.BlockBuster, "_tideloop_allowed", False)
    fresh = blockbuster.BlockBuster.__new__(blockbuster.BlockBuster)
    fresh.functions = {"os.sendfile": blockbuster.BlockBusterFunction(None, "os.sendfile")}
    allow_tideloop(fresh)
    assert fresh.functions["os.sendfile"].can_block_functions == [
        ("tideloop/_transports/sendfile.py", {"_step"})
    ]


def tideloop_frame_probe() -> Callable[..., Any]:
    """A function whose frame counts as tideloop's (its code names a file in the package)."""
    filename = os.path.join(os.path.dirname(tideloop.__file__), "_blockwatch_probe.py")
    namespace: dict[str, Any] = {}
    exec(compile("def probe(f, *args):\n    return f(*args)\n", filename, "exec"), namespace)
    return namespace["probe"]  # type: ignore[no-any-return]


def test_the_suite_mode_fails_the_loops_calls_and_lets_the_tests_own_through(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """``pytest --blockbuster`` (tests/blockwatch.py): a blocking call is the
    loop's when the first frame above it outside the standard library is
    tideloop's; the test's own blocking calls pass."""
    from blockwatch import blockbuster_on_tideloop

    probe = tideloop_frame_probe()
    here = Path(__file__)

    async def main() -> None:
        time.sleep(0)  # the test's own call
        assert here.exists()  # the test's, through pathlib (os.stat)
        with pytest.raises(blockbuster.BlockingError, match=r"time\.sleep"):
            probe(time.sleep, 0)
        with pytest.raises(blockbuster.BlockingError, match=r"os\.stat"):
            probe(here.exists)  # the standard library's frames are looked past

    with blockbuster_on_tideloop():
        loop.run_until_complete(main())
        # No running loop on this thread: nothing is checked.
        probe(time.sleep, 0)
