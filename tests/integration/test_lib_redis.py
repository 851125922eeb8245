"""redis-py's asyncio client (``redis.asyncio``) and a real redis-server, on the loop under test.

The `redis_server` fixture (one per module) starts the ``redis-server``
binary on a free loopback port, and on a Unix socket, with a temporary
working directory and no persistence. It waits until the server reports that
it accepts connections (it prints "Ready to accept connections" on stdout
once all its listening sockets exist; nothing polls or sleeps), and shuts it
down afterwards. Where the binary is missing the tests skip and say how to
install it (Debian: ``apt-get install redis-server``), unless the
environment sets ``TIDELOOP_REQUIRE_REDIS=1`` (CI does): then they fail.

Tested: plain commands of several types and large values, pipelines (with
and without MULTI/EXEC) and WATCH, pub/sub on channels and patterns with a
publisher and a subscriber on separate connections, blocking pops woken by
another client, many concurrent clients sharing a bounded connection pool,
and a client on the Unix socket. Each test runs on the stdlib loop and on
tideloop (every poller); each starts from an empty database.
"""

from __future__ import annotations

import asyncio
import random
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from needs import missing


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int
    unix_path: str

    def client(self, **kwargs: object) -> aioredis.Redis:
        return aioredis.Redis(host=self.host, port=self.port, **kwargs)  # type: ignore[arg-type]


def as_int(value: object) -> int:
    """An integer from a redis reply (bytes or str)."""
    assert isinstance(value, bytes | str), value
    return int(value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """Read the server's log until it is ready; return the log so far."""
    assert proc.stdout is not None
    log = b""
    deadline = time.monotonic() + timeout
    while b"Ready to accept connections" not in log:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            break
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        if readable:
            chunk = proc.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            log += chunk
    return log.decode(errors="replace")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing(
            "redis-server binary not found on PATH: install it (Debian/Ubuntu: "
            "apt-get install -y redis-server) to run the redis-py integration tests",
            "TIDELOOP_REQUIRE_REDIS",
        )
    workdir: Path = tmp_path_factory.mktemp("redis")
    log = ""
    for _attempt in range(5):  # the free port may be taken before redis binds it
        port = _free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port", str(port),
                "--unixsocket", str(workdir / "redis.sock"),
                "--bind", "127.0.0.1",
                "--dir", str(workdir),
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--logfile", "",
                "--loglevel", "notice",
                "--databases", "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log = _wait_ready(proc, timeout=20)
        if "Ready to accept connections" in log:
            break
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    else:
        pytest.fail(f"redis-server did not start:\n{log}")
    try:
        yield RedisServer("127.0.0.1", port, str(workdir / "redis.sock"))
    finally:
        proc.terminate()  # SIGTERM: redis shuts down cleanly (nothing to save)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The module's server, with an empty database for this test."""
    with socket.create_connection((redis_server.host, redis_server.port)) as sock:
        sock.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        assert sock.recv(100) == b"+OK\r\n"
    return redis_server


def test_commands(loop: asyncio.AbstractEventLoop, server: RedisServer) -> None:
    async def main() -> None:
        client = server.client()
        try:
            assert await client.ping() is True
            assert await client.set("greeting", "hello") is True
            assert await client.get("greeting") == b"hello"
            assert await client.incrby("counter", 5) == 5
            assert await client.incr("counter") == 6
            assert await client.hset("user:1", mapping={"name": "Ada", "lang": "en"}) == 2
            assert await client.hgetall("user:1") == {b"name": b"Ada", b"lang": b"en"}
            assert await client.rpush("queue", *range(10)) == 10
            assert await client.lrange("queue", 0, -1) == [str(i).encode() for i in range(10)]
            assert await client.sadd("set", "a", "b", "c") == 3
            assert await client.smembers("set") == {b"a", b"b", b"c"}
            assert await client.zadd("scores", {"x": 3, "y": 1, "z": 2}) == 3
            assert await client.zrange("scores", 0, -1, withscores=True) == [
                (b"y", 1.0), (b"z", 2.0), (b"x", 3.0)
            ]  # fmt: skip
            assert await client.expire("greeting", 100) is True
            assert 0 < await client.ttl("greeting") <= 100
            big = random.Random(1).randbytes(3 * 1024 * 1024)
            assert await client.set("big", big) is True
            assert await client.get("big") == big
            assert await client.strlen("big") == len(big)
            assert await client.delete("greeting", "counter", "missing") == 2
            assert await client.exists("greeting") == 0
            assert await client.get("missing") is None
        finally:
            await client.aclose()

    loop.run_until_complete(main())


def test_pipelines_and_watch(loop: asyncio.AbstractEventLoop, server: RedisServer) -> None:
    async def main() -> None:
        client = server.client(decode_responses=True)
        other = server.client(decode_responses=True)
        try:
            async with client.pipeline(transaction=True) as pipe:
                for i in range(500):
                    pipe.set(f"key:{i}", i)
                pipe.incrby("total", 0)
                for i in range(500):
                    pipe.incrby("total", i)
                results = await pipe.execute()
            assert results[:500] == [True] * 500
            assert results[-1] == sum(range(500))

            async with client.pipeline(transaction=False) as pipe:
                for i in range(500):
                    pipe.get(f"key:{i}")
                assert await pipe.execute() == [str(i) for i in range(500)]

            # WATCH: a concurrent write aborts the transaction, and a retry succeeds.
            async with client.pipeline() as pipe:
                await pipe.watch("total")
                value = as_int(await pipe.get("total"))
                await other.incr("total")  # another client changes the key
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.set("total", value * 2)
                with pytest.raises(aioredis.WatchError):
                    await pipe.execute()

            async def double(pipe: aioredis.client.Pipeline) -> None:
                value = as_int(await pipe.get("total"))
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.set("total", value * 2)

            await client.transaction(double, "total")
            assert as_int(await client.get("total")) == 2 * (sum(range(500)) + 1)
        finally:
            await client.aclose()
            await other.aclose()

    loop.run_until_complete(main())


def test_pubsub(loop: asyncio.AbstractEventLoop, server: RedisServer) -> None:
    async def main() -> None:
        subscriber = server.client(decode_responses=True)
        publisher = server.client(decode_responses=True)
        pubsub = subscriber.pubsub()
        try:
            await pubsub.subscribe("news")
            await pubsub.psubscribe("events.*")
            confirmations = [await pubsub.get_message(timeout=10) for _ in range(2)]
            assert [(m["type"], m["channel"]) for m in confirmations if m] == [
                ("subscribe", "news"), ("psubscribe", "events.*")
            ]  # fmt: skip

            async def publish() -> None:
                for i in range(100):
                    assert await publisher.publish("news", f"n{i}") == 1
                    assert await publisher.publish(f"events.{i % 3}", f"e{i}") == 1
                await publisher.publish("news", "stop")

            async def receive() -> list[tuple[str, str, str | None, str]]:
                got: list[tuple[str, str, str | None, str]] = []
                async for message in pubsub.listen():
                    if message["data"] == "stop":
                        break
                    got.append(
                        (message["type"], message["channel"], message["pattern"], message["data"])
                    )
                return got

            receiver = asyncio.ensure_future(receive())
            await publish()
            got = await asyncio.wait_for(receiver, 30)
            expected: list[tuple[str, str, str | None, str]] = []
            for i in range(100):
                expected.append(("message", "news", None, f"n{i}"))
                expected.append(("pmessage", f"events.{i % 3}", "events.*", f"e{i}"))
            assert got == expected
            await pubsub.unsubscribe()
            await pubsub.punsubscribe()
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await subscriber.aclose()
            await publisher.aclose()

    loop.run_until_complete(main())


def test_blocking_pop_woken_by_another_client(
    loop: asyncio.AbstractEventLoop, server: RedisServer
) -> None:
    async def main() -> None:
        waiter = server.client()
        pusher = server.client()
        try:
            pop = asyncio.ensure_future(waiter.blpop(["jobs"], timeout=20))
            # Push only once redis reports the waiter blocked (asking redis, not sleeping).
            async with asyncio.timeout(30):
                while int((await pusher.info("clients"))["blocked_clients"]) == 0:
                    await asyncio.sleep(0)
            await pusher.rpush("jobs", "job-1")
            popped = await asyncio.wait_for(pop, 30)
            assert popped is not None and tuple(popped) == (b"jobs", b"job-1")
        finally:
            await waiter.aclose()
            await pusher.aclose()

    loop.run_until_complete(main())


def test_many_concurrent_clients(loop: asyncio.AbstractEventLoop, server: RedisServer) -> None:
    n_clients, n_ops = 50, 20

    async def main() -> None:
        pool = aioredis.BlockingConnectionPool(
            host=server.host, port=server.port, max_connections=10, timeout=30
        )
        shared = aioredis.Redis(connection_pool=pool)
        own_clients = [server.client() for _ in range(n_clients)]

        async def worker(i: int, client: aioredis.Redis) -> None:
            for j in range(n_ops):
                await client.incr("hits")
                await shared.hincrby("per-worker", str(i), 1)
                await client.set(f"w{i}:{j}", f"{i}-{j}")
            assert await shared.get(f"w{i}:{n_ops - 1}") == f"{i}-{n_ops - 1}".encode()

        try:
            results = await asyncio.gather(
                *(worker(i, c) for i, c in enumerate(own_clients)), return_exceptions=True
            )
            failures = [r for r in results if isinstance(r, BaseException)]
            assert not failures, f"{len(failures)} workers failed, first: {failures[0]!r}"
            assert as_int(await shared.get("hits")) == n_clients * n_ops
            per_worker = await shared.hgetall("per-worker")
            assert per_worker == {str(i).encode(): str(n_ops).encode() for i in range(n_clients)}
            clients = await shared.client_list()
            assert len(clients) >= n_clients  # every client really had its own connection
        finally:
            for client in own_clients:
                await client.aclose()
            await shared.aclose()
            await pool.aclose()

    loop.run_until_complete(main())


def test_unix_socket_connection(loop: asyncio.AbstractEventLoop, server: RedisServer) -> None:
    async def main() -> None:
        client = aioredis.Redis(unix_socket_path=server.unix_path)
        try:
            big = random.Random(2).randbytes(2 * 1024 * 1024)
            async with client.pipeline(transaction=False) as pipe:
                for i in range(200):
                    pipe.set(f"u{i}", big[i * 100 : i * 100 + 100 + i])
                pipe.set("big", big)
                pipe.get("big")
                results = await pipe.execute()
            assert results == [True] * 201 + [big]
            assert await client.mget([f"u{i}" for i in range(200)]) == [
                big[i * 100 : i * 100 + 100 + i] for i in range(200)
            ]
            info = await client.client_info()
            assert "U" in str(info["flags"])  # redis sees a Unix-socket client
        finally:
            await client.aclose()

    loop.run_until_complete(main())
