"""A store whose write-ahead log forgot fsync: a planted bug, and its scenario.

Plain asyncio (streams, a line protocol, files through ``asyncio.to_thread``);
the simulator is only the network object the scenario is given
(``SimNetwork``: ``spawn``, ``crash``, ``restart``, and ``mount`` for the
simulated disk). The client records what it asked and what it got in a
``tideloop.testing.History``; ``check_linearizable`` against ``KeyValue``
then says whether an acknowledged write was lost.

- **The store**, on host ``db``, keeps its data in memory and appends every
  ``SET k v`` to a log, ``<data>/wal.log``, one line each with its CRC,
  before it answers ``OK``. At start it replays the log, up to the first
  line whose CRC does not match (a torn tail: a write in flight when the
  host went down).
- **The client**, on host ``app``, sets ``k0``, ``k1``... one after the
  other. At `CRASH_AT` the store's host crashes; it restarts at once, and
  the client reads every key back.
- **The planted bug** (``fsync=False``): the store writes and flushes the
  log line, and answers ``OK``, without ``fsync``: the line is in the page
  cache, not on the disk. Its log file is created without syncing the
  directory either. On a real disk under a test, nothing is lost (the
  process lives on, and so does the kernel's page cache); on the
  simulated disk, a crash loses the unsynced tail, and with it writes the
  client was told were stored.
- **The fix** (``fsync=True``): ``fsync`` the log after each line, and the
  directory after creating the log, before answering.

``python -m scenarios.sim_wal [SEED]`` runs both on tideloop's simulation
and prints the checker's verdict.
"""

from __future__ import annotations

import asyncio
import os
import sys
import zlib
from collections.abc import Coroutine
from typing import Any, Protocol

from tideloop.testing import History

PORT = 7400
#: When the store's host crashes, and how many keys the client sets.
CRASH_AT = 0.5
KEYS = 40


class Network(Protocol):
    """What the scenario needs of a simulated network (``SimNetwork`` has it)."""

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def crash(self, host: str) -> None: ...

    def restart(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...


def _line(key: str, value: str) -> bytes:
    body = f"SET {key} {value}"
    return f"{body} {zlib.crc32(body.encode()):08x}\n".encode()


def _replay(path: str) -> dict[str, str]:
    """The log's records, up to the first torn or corrupt one."""
    data: dict[str, str] = {}
    try:
        with open(path, "rb") as f:
            content = f.read()
    except FileNotFoundError:
        return data
    for raw in content.split(b"\n")[:-1]:  # a last piece without "\n" is torn
        try:
            body, crc = raw.decode().rsplit(" ", 1)
            if int(crc, 16) != zlib.crc32(body.encode()):
                break
            _, key, value = body.split(" ")
        except ValueError:
            break
        data[key] = value
    return data


class Log:
    """The store's write-ahead log (its file calls run in a thread)."""

    def __init__(self, directory: str, fsync: bool) -> None:
        self.path = os.path.join(directory, "wal.log")
        self.directory = directory
        self.fsync = fsync
        self.file: Any = None

    def open(self) -> dict[str, str]:
        os.makedirs(self.directory, exist_ok=True)
        data = _replay(self.path)
        created = not os.path.exists(self.path)
        self.file = open(self.path, "ab")  # noqa: SIM115 (closed by close())
        if created and self.fsync:
            # A new file's name is the directory's: sync it too.
            os.fsync(self.file.fileno())
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return data

    def append(self, key: str, value: str) -> None:
        self.file.write(_line(key, value))
        self.file.flush()
        if self.fsync:
            os.fsync(self.file.fileno())

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


async def store(directory: str, fsync: bool, ready: asyncio.Event) -> None:
    log = Log(directory, fsync)
    data = await asyncio.to_thread(log.open)
    lock = asyncio.Lock()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                words = line.decode().split()
                if words[0] == "SET":
                    async with lock:  # one append at a time, in order
                        await asyncio.to_thread(log.append, words[1], words[2])
                        data[words[1]] = words[2]
                    writer.write(b"OK\n")
                else:
                    writer.write(f"VAL {data.get(words[1], '-')}\n".encode())
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "db", PORT)
    ready.set()
    try:
        await server.serve_forever()
    finally:
        server.close()
        log.close()


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str) -> str:
    writer.write(line.encode() + b"\n")
    reply = await reader.readline()
    if not reply:
        raise ConnectionResetError("the store went away")
    return reply.decode().strip()


async def client(history: History, stop_writing: asyncio.Event) -> None:
    reader, writer = await asyncio.open_connection("db", PORT)
    try:
        for i in range(KEYS):
            if stop_writing.is_set():
                break

            async def put(key: str = f"k{i}", value: str = f"v{i}") -> None:
                if await ask(reader, writer, f"SET {key} {value}") != "OK":
                    raise ConnectionError("refused")

            try:
                await history.record("app", "put", (f"k{i}", f"v{i}"), put())
            except ConnectionError:
                break  # recorded as unknown: it may or may not have been stored
            await asyncio.sleep(0.01)
    finally:
        writer.close()


async def read_back(history: History) -> None:
    reader, writer = await asyncio.open_connection("db", PORT)
    try:
        for i in range(KEYS):

            async def get(key: str = f"k{i}") -> str | None:
                value = (await ask(reader, writer, f"GET {key}")).split()[1]
                return None if value == "-" else value

            await history.record("app", "get", f"k{i}", get())
    finally:
        writer.close()


async def scenario(net: Network, *, fsync: bool, directory: str = "/var/lib/store") -> History:
    """Writes, a crash of the store's host at `CRASH_AT`, a restart, reads."""
    history = History()
    ready = asyncio.Event()
    net.spawn("db", store(directory, fsync, ready))
    await ready.wait()
    stop_writing = asyncio.Event()
    writer = net.spawn("app", client(history, stop_writing))
    await asyncio.sleep(CRASH_AT)
    net.crash("db")
    stop_writing.set()
    await asyncio.gather(writer, return_exceptions=True)
    ready = asyncio.Event()
    restarted = net.restart("db", store(directory, fsync, ready))
    await ready.wait()
    await net.spawn("app", read_back(history))
    restarted.cancel()
    await asyncio.gather(restarted, return_exceptions=True)
    return history


def main(argv: list[str]) -> int:
    from tideloop import testing
    from tideloop.testing.models import KeyValue

    for fsync in (False, True):
        net = testing.SimNetwork(seed=int(argv[0]) if argv else 0)
        net.mount("db", "/var/lib/store")
        history = testing.run(scenario(net, fsync=fsync), network=net)
        print(f"fsync={fsync}: {testing.check_linearizable(history, KeyValue())}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
