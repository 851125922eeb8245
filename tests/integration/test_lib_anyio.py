"""anyio's asyncio backend, run on the loop under test through its ``loop_factory`` option.

Every test is ``anyio.run(main, backend="asyncio", backend_options={"loop_factory":
...})`` (the option anyio 4 passes to ``asyncio.Runner``), once per loop of the
root conftest: the stdlib loop and tideloop with each poller.

* TCP: ``create_tcp_listener`` serving concurrent ``connect_tcp`` clients that
  stream data, half-close and read the echo back to EOF.
* TLS: the same through ``TLSListener`` / ``connect_tcp(tls=True)``. anyio does
  TLS itself (``TLSStream``: an ``ssl.MemoryBIO`` over a plain socket stream)
  and never asks the loop for a TLS transport, so this runs on tideloop
  before tideloop has TLS; it is not an expected failure.
* Unix stream and datagram sockets (anyio drives these with ``wait_readable``
  on raw sockets, i.e. the loop's ``add_reader``).
* UDP: ``create_udp_socket`` / ``create_connected_udp_socket`` (the loop's
  ``create_datagram_endpoint``): a strict expected failure on tideloop.
* Subprocesses: ``run_process`` / ``open_process`` (the loop's
  ``subprocess_exec``): a strict expected failure on tideloop.
* ``to_thread.run_sync`` with a capacity limiter, ``from_thread`` calls back
  into the loop, and a worker thread abandoned on cancellation; a blocking
  portal (the loop in a thread of its own, driven by synchronous code).
* Cancel scopes: ``fail_after``, ``move_on_after``, nesting, shielding,
  deadlines, and cancelling a task group from outside.
* Task groups: ``start`` with a startup value, sibling cancellation when a
  child fails, memory object streams between tasks.

Timeouts here are the subject of the test, never a way to wait for
something: tasks are coordinated with events and streams.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream, SocketAttribute, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSAttribute, TLSListener

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def run(main: Callable[[], Awaitable[Any]], loop_factory: LoopFactory) -> Any:
    """anyio.run() on a loop from *loop_factory*, checking that anyio really used it."""
    probe = loop_factory()
    expected_class = type(probe)
    probe.close()

    async def checked() -> Any:
        assert type(asyncio.get_running_loop()) is expected_class
        return await main()

    return anyio.run(checked, backend="asyncio", backend_options={"loop_factory": loop_factory})


def payload(client: int) -> list[bytes]:
    return [f"client {client} part {i};".encode() * (1 + (client * 31 + i) % 500) for i in range(4)]


async def echo_until_eof(stream: ByteStream) -> None:
    async with stream:
        async for chunk in stream:
            await stream.send(chunk)
        await stream.send_eof()


async def talk(stream: ByteStream, client: int) -> bytes:
    async with stream:
        for part in payload(client):
            await stream.send(part)
        await stream.send_eof()
        return b"".join([chunk async for chunk in stream])


async def serve_clients(
    listener: Any,
    handler: Callable[[ByteStream], Awaitable[None]],
    client: Callable[[int], Awaitable[None]],
    n: int,
) -> None:
    """*listener* serves *handler* while clients 0..n-1 run concurrently; then it stops."""
    async with listener, anyio.create_task_group() as server_tg:
        server_tg.start_soon(listener.serve, handler)
        async with anyio.create_task_group() as clients:
            for i in range(n):
                clients.start_soon(client, i)
        server_tg.cancel_scope.cancel()


def test_tcp_listener_and_clients(loop_factory: LoopFactory) -> None:
    async def main() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(SocketAttribute.local_port)
        results: dict[int, bytes] = {}

        async def client(i: int) -> None:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            assert stream.extra(SocketAttribute.remote_port) == port
            results[i] = await talk(stream, i)

        await serve_clients(listener, echo_until_eof, client, 60)
        assert results == {i: b"".join(payload(i)) for i in range(60)}

    run(main, loop_factory)


def test_tls_listener_and_clients(
    loop_factory: LoopFactory,
    server_ssl_context: ssl.SSLContext,
    client_ssl_context: ssl.SSLContext,
) -> None:
    async def main() -> None:
        tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = tcp.extra(SocketAttribute.local_port)
        listener = TLSListener(tcp, server_ssl_context, standard_compatible=True)
        results: dict[int, bytes] = {}

        async def client(i: int) -> None:
            stream = await anyio.connect_tcp(
                "127.0.0.1", port, tls=True, ssl_context=client_ssl_context
            )
            assert stream.extra(TLSAttribute.server_side) is False
            assert stream.extra(TLSAttribute.tls_version).startswith("TLS")
            async with stream:
                for part in payload(i):
                    await stream.send(part)
                expected = b"".join(payload(i))
                received = b""
                while len(received) < len(expected):
                    received += await stream.receive()
                results[i] = received

        async def echo(stream: ByteStream) -> None:
            async with stream:
                try:
                    async for chunk in stream:
                        await stream.send(chunk)
                except anyio.BrokenResourceError:
                    pass  # the client closed its side first

        await serve_clients(listener, echo, client, 20)
        assert results == {i: b"".join(payload(i)) for i in range(20)}

    run(main, loop_factory)


def test_unix_stream_and_datagram_sockets(loop_factory: LoopFactory, tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "stream.sock"
        async with (
            await anyio.create_unix_listener(path) as listener,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(listener.serve, echo_until_eof)
            for i in range(5):
                stream = await anyio.connect_unix(path)
                assert await talk(stream, i) == b"".join(payload(i))
            tg.cancel_scope.cancel()

        a_path, b_path = tmp_path / "a.sock", tmp_path / "b.sock"
        async with (
            await anyio.create_unix_datagram_socket(local_path=a_path) as a,
            await anyio.create_unix_datagram_socket(local_path=b_path) as b,
        ):
            for i in range(10):
                await a.sendto(b"ping %d" % i, str(b_path))
                data, sender = await b.receive()
                assert (data, sender) == (b"ping %d" % i, str(a_path))

    run(main, loop_factory)


def test_udp_sockets(loop_factory: LoopFactory) -> None:

    async def main() -> None:
        async with await anyio.create_udp_socket(local_host="127.0.0.1") as server:
            port = server.extra(SocketAttribute.local_port)
            async with await anyio.create_connected_udp_socket(
                "127.0.0.1", port, local_host="127.0.0.1"
            ) as client:
                for i in range(20):
                    await client.send(b"datagram %d" % i)
                    data, addr = await server.receive()
                    assert data == b"datagram %d" % i
                    await server.sendto(data.upper(), *addr)
                    assert await client.receive() == b"DATAGRAM %d" % i

    run(main, loop_factory)


def test_subprocesses(loop_factory: LoopFactory) -> None:
    upper = "import sys; sys.stdout.write(sys.stdin.read().upper())"
    lines = "import sys\nfor line in sys.stdin: print(len(line.strip()), flush=True)"

    async def main() -> None:
        done = await anyio.run_process([sys.executable, "-c", upper], input=b"hello anyio")
        assert (done.returncode, done.stdout) == (0, b"HELLO ANYIO")

        failed = await anyio.run_process([sys.executable, "-c", "raise SystemExit(3)"], check=False)
        assert failed.returncode == 3

        async with await anyio.open_process([sys.executable, "-c", lines]) as process:
            assert process.stdin is not None and process.stdout is not None
            stdout = BufferedByteReceiveStream(process.stdout)  # a pipe may split a line
            for word in (b"a", b"bb", b"ccc"):
                await process.stdin.send(word + b"\n")
                assert await stdout.receive_until(b"\n", 100) == b"%d" % len(word)
            await process.stdin.aclose()
            assert await process.wait() == 0

    run(main, loop_factory)


def test_to_thread_and_back(loop_factory: LoopFactory) -> None:
    async def main() -> None:
        limiter = anyio.CapacityLimiter(4)
        lock = threading.Lock()
        busy = 0
        peak = 0
        barrier = threading.Barrier(4, timeout=10)
        loop_thread = threading.get_ident()

        def work(i: int) -> tuple[int, int]:
            nonlocal busy, peak
            with lock:
                busy += 1
                peak = max(peak, busy)
            if i < 4:
                barrier.wait()  # the first four really do run at the same time
            with lock:
                busy -= 1
            return i * i, threading.get_ident()

        results: dict[int, tuple[int, int]] = {}

        async def one(i: int) -> None:
            results[i] = await anyio.to_thread.run_sync(work, i, limiter=limiter)

        async with anyio.create_task_group() as tg:
            for i in range(24):
                tg.start_soon(one, i)
        assert {i: r[0] for i, r in results.items()} == {i: i * i for i in range(24)}
        assert loop_thread not in {r[1] for r in results.values()}
        assert peak == 4

        # From a worker thread back into the loop.
        async def double(x: int) -> int:
            await anyio.sleep(0)
            return 2 * x

        def call_back() -> tuple[int, int]:
            return anyio.from_thread.run(double, 21), anyio.from_thread.run_sync(lambda: 7)

        assert await anyio.to_thread.run_sync(call_back) == (42, 7)

        # A cancelled wait abandons the thread, which finishes on its own.
        started, release = threading.Event(), threading.Event()

        def blocked() -> None:
            started.set()
            release.wait(10)

        with anyio.move_on_after(0.05) as scope:
            await anyio.to_thread.run_sync(blocked, abandon_on_cancel=True)
        assert scope.cancelled_caught
        assert started.is_set()
        release.set()

    run(main, loop_factory)


def test_cancel_scopes_and_timeouts(loop_factory: LoopFactory) -> None:
    async def main() -> None:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.05):
                await anyio.sleep_forever()
        assert time.monotonic() - start >= 0.05

        with anyio.move_on_after(0.05) as scope:
            assert scope.deadline == pytest.approx(anyio.current_time() + 0.05, abs=0.02)
            assert anyio.current_effective_deadline() == scope.deadline
            await anyio.sleep_forever()
        assert scope.cancelled_caught

        # Nested: the inner, earlier deadline fires; the outer scope is untouched.
        with anyio.move_on_after(30) as outer:
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.02):
                    await anyio.Event().wait()
            await anyio.sleep(0)
        assert not outer.cancelled_caught and not outer.cancel_called

        # A shielded scope finishes its work inside a cancelled one.
        finished = False
        with anyio.CancelScope() as cancelled:
            cancelled.cancel()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)
                finished = True
            await anyio.sleep_forever()
        assert finished and cancelled.cancelled_caught

        # Cancelling a task group from outside cancels every child.
        cancelled_children: list[int] = []

        async def child(i: int, task_status: TaskStatus[None]) -> None:
            task_status.started()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled_children.append(i)
                raise

        async with anyio.create_task_group() as tg:
            for i in range(10):
                await tg.start(child, i)
            tg.cancel_scope.cancel()
        assert sorted(cancelled_children) == list(range(10))

    run(main, loop_factory)


def test_task_groups(loop_factory: LoopFactory) -> None:
    async def main() -> None:
        async def server(task_status: TaskStatus[int]) -> None:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            async with listener:
                task_status.started(listener.extra(SocketAttribute.local_port))
                await listener.serve(echo_until_eof)

        async with anyio.create_task_group() as tg:
            port = await tg.start(server)
            assert await talk(await anyio.connect_tcp("127.0.0.1", port), 1) == b"".join(payload(1))
            tg.cancel_scope.cancel()

        # A failing child cancels its siblings; the error comes out in a group.
        sibling_cancelled = anyio.Event()
        send, receive = anyio.create_memory_object_stream[int](0)

        async def sibling() -> None:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                sibling_cancelled.set()
                raise

        async def producer() -> None:
            async with send:
                for i in range(5):
                    await send.send(i)
            raise ValueError("boom")

        got: list[int] = []

        async def consumer() -> None:
            async with receive:
                async for item in receive:
                    got.append(item)  # noqa: PERF401  # kept item by item: the task is cancelled

        with pytest.raises(ExceptionGroup) as info:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sibling)
                tg.start_soon(consumer)
                tg.start_soon(producer)
        assert info.group_contains(ValueError, match="boom")
        assert sibling_cancelled.is_set()
        assert got == [0, 1, 2, 3, 4]

    run(main, loop_factory)


def test_blocking_portal(loop_factory: LoopFactory) -> None:
    """Synchronous code driving the loop in a portal thread (from_thread.start_blocking_portal)."""
    options = {"loop_factory": loop_factory}
    with anyio.from_thread.start_blocking_portal("asyncio", options) as portal:

        async def loop_class() -> type[asyncio.AbstractEventLoop]:
            return type(asyncio.get_running_loop())

        probe = loop_factory()
        try:
            assert portal.call(loop_class) is type(probe)
        finally:
            probe.close()

        async def echo_server(task_status: TaskStatus[int]) -> None:
            async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
                task_status.started(listener.extra(SocketAttribute.local_port))
                await listener.serve(echo_until_eof)

        future, port = portal.start_task(echo_server)

        async def client(i: int) -> bytes:
            return await talk(await anyio.connect_tcp("127.0.0.1", port), i)

        futures = [portal.start_task_soon(client, i) for i in range(10)]
        assert [f.result(timeout=30) for f in futures] == [b"".join(payload(i)) for i in range(10)]
        future.cancel()
