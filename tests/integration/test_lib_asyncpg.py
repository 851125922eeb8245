"""asyncpg and a real PostgreSQL server (the `postgres_server` fixture), on the loop under test.

asyncpg upgrades every TCP connection with ``loop.start_tls()`` after
PostgreSQL's SSLRequest, so TLS here goes through the loop's start_tls.
Each test runs on every loop and over each way in (`kind`):

- ``tls``: TCP, TLS through the loop's own ``start_tls``;
- ``tls-module``: the same, with the loop's ``start_tls`` replaced, on that
  loop object only, by tideloop's TLS module (``tideloop._transports.tls``),
  so the module also runs under asyncpg on the stdlib loop;
- ``unix``: the server's Unix socket, no TLS.

Tested: queries and types (large values included), prepared statements and
transactions, COPY in and out, LISTEN/NOTIFY between two connections,
cancelling a running query (asyncpg sends PostgreSQL's cancel request on a
new connection) and a statement timeout, and a pool under concurrent use.
Every connection and pool is closed at the end of its test.
"""

from __future__ import annotations

import asyncio
import functools
import io
import platform
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

if platform.python_implementation() != "CPython":
    # pyproject's `test` extra installs asyncpg on CPython only: it has no
    # PyPy wheel, and its sdist does not build on PyPy (its C extension uses
    # C API that PyPy lacks). This skip holds even under
    # TIDELOOP_REQUIRE_POSTGRES=1; on CPython a missing asyncpg or
    # PostgreSQL still fails.
    pytest.skip(
        "asyncpg has no PyPy build (no PyPy wheel; its sdist does not build on PyPy)",
        allow_module_level=True,
    )

import asyncpg

from tideloop._transports import tls as tlsmod

PostgresServer = Any  # conftest.PostgresServer (conftest modules are not importable by name)

KINDS = ["tls", "tls-module", "unix"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> str:
    if request.param == "tls-module":
        loop.start_tls = functools.partial(tlsmod.start_tls, loop)  # type: ignore[method-assign]
    return str(request.param)


def connect_kwargs(pg: PostgresServer, kind: str) -> dict[str, Any]:
    common: dict[str, Any] = {"user": pg.user, "database": "postgres", "port": pg.port}
    if kind == "unix":
        return {**common, "host": pg.unix_dir, "ssl": False}
    return {**common, "host": pg.host, "ssl": pg.client_ssl_context()}


@asynccontextmanager
async def connection(pg: PostgresServer, kind: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncio.wait_for(asyncpg.connect(**connect_kwargs(pg, kind)), 20)
    try:
        yield conn
    finally:
        await conn.close(timeout=10)


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 60))


async def check_tls(conn: asyncpg.Connection, kind: str) -> None:
    in_tls = await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    assert in_tls is (kind != "unix")


def test_queries(
    loop: asyncio.AbstractEventLoop, postgres_server: PostgresServer, kind: str
) -> None:
    async def main() -> None:
        async with connection(postgres_server, kind) as conn:
            await check_tls(conn, kind)
            assert await conn.fetchval("SELECT 1 + $1::int", 41) == 42
            row = await conn.fetchrow(
                "SELECT $1::text AS t, $2::bytea AS b, $3::int[] AS a", "héllo", b"\x00\xff", [1, 2]
            )
            assert (row["t"], row["b"], row["a"]) == ("héllo", b"\x00\xff", [1, 2])
            big = bytes(range(256)) * 20000  # 5 MB each way
            assert await conn.fetchval("SELECT $1::bytea", big) == big
            await conn.execute("CREATE TEMP TABLE items (id int PRIMARY KEY, name text)")
            await conn.executemany(
                "INSERT INTO items VALUES ($1, $2)", [(i, f"item {i}") for i in range(500)]
            )
            stmt = await conn.prepare("SELECT name FROM items WHERE id = $1")
            assert await stmt.fetchval(123) == "item 123"
            rows = await conn.fetch("SELECT id FROM items WHERE id % 100 = 0 ORDER BY id")
            assert [r["id"] for r in rows] == [0, 100, 200, 300, 400]
            with pytest.raises(asyncpg.UniqueViolationError):
                async with conn.transaction():
                    await conn.execute("INSERT INTO items VALUES (1000, 'new')")
                    await conn.execute("INSERT INTO items VALUES (1, 'duplicate')")
            assert await conn.fetchval("SELECT count(*) FROM items") == 500
            async with conn.transaction():
                cursor_ids = [
                    r["id"] async for r in conn.cursor("SELECT id FROM items", prefetch=7)
                ]
            assert sorted(cursor_ids) == list(range(500))

    run(loop, main())


def test_copy_in_and_out(
    loop: asyncio.AbstractEventLoop, postgres_server: PostgresServer, kind: str
) -> None:
    async def main() -> None:
        async with connection(postgres_server, kind) as conn:
            await conn.execute("CREATE TEMP TABLE t (id int, payload text)")
            records = [(i, "x" * (i % 100)) for i in range(20000)]
            result = await conn.copy_records_to_table("t", records=records)
            assert result == "COPY 20000"
            csv = "".join(f"{i},line {i}\n" for i in range(20000, 21000)).encode()
            await conn.copy_to_table("t", source=io.BytesIO(csv), format="csv")
            out = io.BytesIO()
            await conn.copy_from_table("t", output=out, format="csv")
            lines = out.getvalue().decode().splitlines()
            assert len(lines) == 21000
            assert lines[5] == "5,xxxxx"
            assert lines[-1] == "20999,line 20999"
            query_out = io.BytesIO()
            await conn.copy_from_query(
                "SELECT id FROM t WHERE id < $1 ORDER BY id", 3, output=query_out
            )
            assert query_out.getvalue() == b"0\n1\n2\n"

    run(loop, main())


def test_listen_notify(
    loop: asyncio.AbstractEventLoop, postgres_server: PostgresServer, kind: str
) -> None:
    async def main() -> None:
        received: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

        def listener(conn: Any, pid: int, channel: str, payload: str) -> None:
            received.put_nowait((channel, payload))

        async with (
            connection(postgres_server, kind) as listening,
            connection(postgres_server, kind) as notifying,
        ):
            await listening.add_listener("events", listener)
            for i in range(20):
                await notifying.execute(f"NOTIFY events, 'message {i}'")
            await notifying.execute("SELECT pg_notify('events', $1)", "x" * 7000)
            got = [await asyncio.wait_for(received.get(), 10) for _ in range(21)]
            assert got[:20] == [("events", f"message {i}") for i in range(20)]
            assert got[20] == ("events", "x" * 7000)
            await listening.remove_listener("events", listener)

    run(loop, main())


def test_cancel_a_running_query(
    loop: asyncio.AbstractEventLoop, postgres_server: PostgresServer, kind: str
) -> None:
    async def main() -> None:
        async with connection(postgres_server, kind) as conn:
            query = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.3)
            query.cancel()
            with pytest.raises(asyncio.CancelledError):
                await query
            # asyncpg's cancel request went out on its own connection; this
            # one is usable again.
            assert await conn.fetchval("SELECT 2") == 2
            with pytest.raises(asyncio.TimeoutError):
                await conn.fetchval("SELECT pg_sleep(30)", timeout=0.3)
            assert await conn.fetchval("SELECT 3") == 3
            with pytest.raises(asyncpg.QueryCanceledError):
                await conn.execute("SET statement_timeout = 100; SELECT pg_sleep(30)")

    run(loop, main())


def test_pool(loop: asyncio.AbstractEventLoop, postgres_server: PostgresServer, kind: str) -> None:
    async def main() -> None:
        pool = await asyncio.wait_for(
            asyncpg.create_pool(min_size=2, max_size=6, **connect_kwargs(postgres_server, kind)),
            20,
        )
        assert pool is not None
        try:

            async def work(i: int) -> int:
                async with pool.acquire() as conn:
                    await check_tls(conn, kind)
                    return int(await conn.fetchval("SELECT $1::int * 2 FROM pg_sleep(0.01)", i))

            results = await asyncio.gather(*(work(i) for i in range(100)))
            assert results == [2 * i for i in range(100)]
            assert await pool.fetchval("SELECT 5") == 5
        finally:
            await asyncio.wait_for(pool.close(), 20)

    run(loop, main())
