"""Disks per host: SimNetwork.mount gives code on a host a simulated file system.

The file calls are checked against the real ones: one program of ordinary
file work (``open`` in every mode, ``os`` calls, ``pathlib``, ``shutil``,
errors) runs on a real temporary directory and under a mount, and must see
the same results and the same errors. Then what only the simulation has:
per-host namespaces, the crash model (unsynced data lost or torn, names
durable only with their directory, atomic rename), faults (ENOSPC, EIO,
fsyncgate, fault points by seed), threads and async wrappers (to_thread,
executors, aiofiles), determinism, and that everything is put back after
the run. The planted bug is `scenarios.sim_wal`, a log that forgot fsync.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import io
import os
import pathlib
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from test_sim_tapes import wal

from scenarios import sim_wal
from tideloop import testing
from tideloop.testing import SimNetwork
from tideloop.testing.models import KeyValue

REAL_OPEN = builtins.open
REAL_RENAME = os.rename


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """What a call returned, or the error it raised: (type, errno, strerror)."""
    try:
        return ("ok", fn(*args, **kwargs))
    except OSError as exc:
        return (type(exc).__name__, exc.errno, exc.strerror)
    except (ValueError, TypeError, io.UnsupportedOperation) as exc:
        return (type(exc).__name__, str(exc))


def file_work(root: str) -> list[Any]:
    """Ordinary file work under *root*; every result and error, in order."""
    seen: list[Any] = []
    note = seen.append
    j = os.path.join
    os.makedirs(j(root, "a", "b"))
    note(outcome(os.makedirs, j(root, "a", "b")))  # exists
    note(sorted(os.listdir(root)))
    with open(j(root, "a", "t.txt"), "w", encoding="utf-8") as f:
        note(f.write("héllo\nwörld\n"))
        note((f.mode, f.name.endswith("t.txt"), type(f).__name__, type(f.buffer).__name__))
    with open(j(root, "a", "t.txt"), encoding="utf-8") as f:
        note(f.readline())
        note(f.read())
        note(f.tell())
    with open(j(root, "a", "t.txt"), "a", encoding="utf-8") as f:
        f.write("more\n")
    with open(j(root, "a", "t.txt"), "rb") as f:
        note(f.read())
        note(f.seek(-5, os.SEEK_END))
        note(f.read(3))
    with open(j(root, "a", "t.txt"), "r+b") as f:
        f.seek(1)
        f.write(b"E")
        f.truncate(8)
        note(f.seek(0, os.SEEK_END))
    note(pathlib.Path(root, "a", "t.txt").read_bytes())
    with open(j(root, "u.bin"), "wb", buffering=0) as raw:
        note(
            (type(raw).__name__ == "FileIO" or isinstance(raw, io.FileIO), raw.write(b"\x00" * 10))
        )
        note(raw.seek(20))
        raw.write(b"x")
    note(os.path.getsize(j(root, "u.bin")))
    with open(j(root, "u.bin"), "rb") as f:
        note(f.read())
    note(outcome(open, j(root, "u.bin"), "x"))
    note(outcome(open, j(root, "nope", "f"), "w"))
    note(outcome(open, j(root, "missing")))
    note(outcome(open, j(root, "a")))
    note(outcome(open, j(root, "a", "t.txt", "x")))
    note(outcome(open, j(root, "u.bin"), "rw"))
    note(outcome(open, j(root, "u.bin"), "rt", buffering=0))
    # os calls
    fd = os.open(j(root, "o.dat"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    note(os.write(fd, b"0123456789"))
    note(os.lseek(fd, 2, os.SEEK_SET))
    note(os.read(fd, 3))
    note(os.pread(fd, 4, 6))
    note(os.pwrite(fd, b"AB", 8))
    note(os.lseek(fd, 0, os.SEEK_CUR))
    os.ftruncate(fd, 12)
    note(os.fstat(fd).st_size)
    os.fsync(fd)
    os.fdatasync(fd)
    fd2 = os.dup(fd)
    note(os.lseek(fd2, 0, os.SEEK_CUR))  # shares the offset
    os.close(fd2)
    os.close(fd)
    note(outcome(os.close, fd))
    note(outcome(os.open, j(root, "o.dat"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    note(outcome(os.open, j(root, "a"), os.O_WRONLY))
    note(outcome(os.open, j(root, "o.dat"), os.O_RDONLY | os.O_DIRECTORY))
    # names
    os.rename(j(root, "o.dat"), j(root, "a", "o2.dat"))
    note(sorted(os.listdir(j(root, "a"))))
    os.replace(j(root, "u.bin"), j(root, "a", "o2.dat"))
    note(os.path.getsize(j(root, "a", "o2.dat")))
    note(outcome(os.rename, j(root, "missing"), j(root, "x")))
    note(outcome(os.rename, j(root, "a", "o2.dat"), j(root, "a", "b")))
    note(outcome(os.rename, j(root, "a"), j(root, "a", "b", "c")))
    note(outcome(os.rmdir, j(root, "a")))
    note(outcome(os.rmdir, j(root, "a", "o2.dat")))
    note(outcome(os.unlink, j(root, "a", "b")))
    note(outcome(os.remove, j(root, "gone")))
    note(outcome(os.mkdir, j(root, "a")))
    note(outcome(os.listdir, j(root, "a", "t.txt")))
    note([os.path.exists(j(root, p)) for p in ("a", "a/t.txt", "zz")])
    note([os.path.isdir(j(root, "a")), os.path.isfile(j(root, "a")), os.path.islink(j(root, "a"))])
    note(os.access(j(root, "a", "t.txt"), os.R_OK))
    st = os.stat(j(root, "a", "t.txt"))
    note((st.st_size, oct(st.st_mode & 0o170000)))
    note(sorted((e.name, e.is_dir(), e.is_file()) for e in os.scandir(j(root, "a"))))
    note(sorted((d[len(root) :], sorted(dirs), sorted(fs)) for d, dirs, fs in os.walk(root)))
    p = pathlib.Path(root, "p")
    p.mkdir()
    (p / "one.txt").write_text("1")
    (p / "two.txt").write_text("22")
    note(sorted(x.name for x in p.iterdir()))
    note(sorted(x.name for x in p.glob("*.txt")))
    note([x.stat().st_size for x in sorted(p.iterdir())])
    (p / "one.txt").unlink()
    note(outcome((p / "one.txt").unlink))
    shutil.copyfile(j(root, "a", "t.txt"), j(root, "copy.txt"))
    note(pathlib.Path(root, "copy.txt").read_bytes())
    shutil.copytree(j(root, "a"), j(root, "tree"))
    note(sorted(os.listdir(j(root, "tree"))))
    shutil.rmtree(j(root, "tree"))
    note(os.path.exists(j(root, "tree")))
    os.truncate(j(root, "copy.txt"), 3)
    note(pathlib.Path(root, "copy.txt").read_bytes())
    return seen


def test_file_calls_behave_as_on_a_real_disk(tmp_path: Path) -> None:
    real_root = str(tmp_path / "real")
    os.mkdir(real_root)
    expected = file_work(real_root)

    async def main(net: SimNetwork) -> list[Any]:
        net.mount("db", "/srv/data")

        async def on_db() -> list[Any]:
            return file_work("/srv/data")

        return await net.spawn("db", on_db())

    net = SimNetwork()
    got = testing.run(main(net), network=net)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"step {i}: {have!r} on the simulated disk, {want!r} on the real one"
    assert not os.path.exists("/srv/data")  # nothing reached the real disk


def test_each_host_has_its_own_files_and_others_reach_the_real_disk(tmp_path: Path) -> None:
    shared = str(tmp_path / "shared")
    os.mkdir(shared)

    async def main(net: SimNetwork) -> dict[str, Any]:
        net.mount("a", shared)
        net.mount("b", shared)

        def write(text: str) -> None:
            with open(os.path.join(shared, "f.txt"), "w") as f:
                f.write(text)

        def read() -> str:
            with open(os.path.join(shared, "f.txt")) as f:
                return f.read()

        async def on(host: str, text: str) -> str:
            write(text)
            await asyncio.sleep(0.1)
            return read()

        a, b = await asyncio.gather(net.spawn("a", on("a", "A")), net.spawn("b", on("b", "B")))
        write("client")  # the client host has no mount: the real disk
        return {"a": a, "b": b, "client": read()}

    net = SimNetwork()
    assert testing.run(main(net), network=net) == {"a": "A", "b": "B", "client": "client"}
    assert (tmp_path / "shared" / "f.txt").read_text() == "client"


def test_threads_executors_and_aiofiles_reach_the_hosts_disk() -> None:
    pytest.importorskip("aiofiles")
    # What the names hold before the run (under --blockbuster, its wrappers:
    # then aiofiles.os, if first imported here, holds the wrapper too).
    before_open, before_rename = builtins.open, os.rename
    import aiofiles
    import aiofiles.os

    def thread_write(path: str) -> None:
        def body() -> None:
            with open(path, "w") as f:
                f.write("thread")

        thread = threading.Thread(target=body)
        thread.start()
        thread.join()

    async def on_db() -> list[Any]:
        await asyncio.to_thread(os.mkdir, "/d/x")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: pathlib.Path("/d/x/e").write_text("executor"))
        thread_write("/d/x/t")
        async with aiofiles.open("/d/x/a", "w") as f:
            await f.write("aiofiles")
            await f.flush()
            os.fsync(f.fileno())
        await aiofiles.os.rename("/d/x/a", "/d/x/b")
        await aiofiles.os.mkdir("/d/y")
        names = sorted(await aiofiles.os.listdir("/d/x"))
        size = (await aiofiles.os.stat("/d/x/b")).st_size
        async with aiofiles.open("/d/x/b") as f:
            text = await f.read()
        return [names, size, text, await aiofiles.os.path.exists("/d/y")]

    async def main(net: SimNetwork) -> list[Any]:
        net.mount("db", "/d")
        return await net.spawn("db", on_db())

    net = SimNetwork()
    assert testing.run(main(net), network=net) == [["b", "e", "t"], 8, "aiofiles", True]
    # Everything is put back after the run, the references aiofiles took too.
    assert builtins.open is before_open and io.open is before_open
    assert os.rename is before_rename
    import aiofiles.threadpool

    assert aiofiles.threadpool.sync_open in (REAL_OPEN, before_open)
    cells = [c.cell_contents for c in aiofiles.os.rename.__closure__ or ()]
    assert REAL_RENAME in cells or before_rename in cells


_TOOK_MKDIR = """
import asyncio, functools, os

mkdir = os.mkdir  # a module global, as `from os import mkdir` binds


def wrap(func):  # as aiofiles.os does: the call in a closure
    async def run(*args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(func, *args))

    return run


amkdir = wrap(os.mkdir)
"""


def test_a_blockbuster_wrapper_taken_under_an_earlier_activation_reaches_the_hosts_disk() -> None:
    # A module imported while some blockbuster was on keeps that activation's
    # wrapper around os.mkdir after it is undone (CI's 3.12 stage: aiofiles.os
    # held one that the run did not replace, and created /d/y on the real
    # disk's root). The wrapper calls the real mkdir: it is replaced as it.
    blockbuster = pytest.importorskip("blockbuster")
    import types

    checker = blockbuster.BlockBuster()
    checker.activate()
    try:
        module = types.ModuleType("tideloop_test_took_mkdir")
        exec(_TOOK_MKDIR, vars(module))
        wrapper = os.mkdir
    finally:
        checker.deactivate()
    assert module.mkdir is wrapper and os.mkdir is not wrapper  # the stale one

    async def on_db() -> list[bool]:
        module.mkdir("/d/global")
        await module.amkdir("/d/cell")
        return [os.path.isdir("/d/global"), os.path.isdir("/d/cell")]

    async def main(net: SimNetwork) -> list[bool]:
        net.mount("db", "/d")
        return await net.spawn("db", on_db())

    import sys

    sys.modules[module.__name__] = module
    try:
        net = SimNetwork()
        assert testing.run(main(net), network=net) == [True, True]
    finally:
        del sys.modules[module.__name__]
    assert not os.path.exists("/d/global") and not os.path.exists("/d/cell")
    # Put back as they were: the wrapper, in both places.
    assert module.mkdir is wrapper
    assert module.amkdir.__closure__[0].cell_contents is wrapper


# ----------------------------------------------------------------------
# Crashes


async def write_and_crash(net: SimNetwork, body: Any, after: Any) -> Any:
    """Run *body* on host db, crash it, then *after* on the restarted host."""
    await net.spawn("db", body())
    net.crash("db")
    return await net.restart("db", after())


def run_crash(body: Any, after: Any, *, seed: int = 0, unsynced: str = "lost") -> Any:
    async def main(net: SimNetwork) -> Any:
        net.mount("db", "/d", unsynced=unsynced)  # type: ignore[arg-type]
        return await write_and_crash(net, body, after)

    net = SimNetwork(seed=seed)
    return testing.run(main(net), network=net), net


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def test_only_synced_data_and_synced_names_survive_a_crash() -> None:
    async def body() -> None:
        with open("/d/synced", "wb") as f:
            f.write(b"durable")
            f.flush()
            os.fsync(f.fileno())
            f.write(b" and not")
        with open("/d/unsynced-name", "wb") as f:
            f.write(b"data synced, name not")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir("/d")  # both names so far are durable now
        with open("/d/late", "wb") as f:
            f.write(b"after the directory's fsync")
            f.flush()
            os.fsync(f.fileno())

    async def after() -> Any:
        return {n: read_or_none(f"/d/{n}") for n in ("synced", "unsynced-name", "late")}

    got, net = run_crash(body, after)
    assert got == {"synced": b"durable", "unsynced-name": b"data synced, name not", "late": None}
    crash = [e for e in net.log if e[1] == "disk-crash"]
    assert crash == [
        (
            0.0,
            "disk-crash",
            "db",
            "db",
            "/d: unsynced writes 0 kept, 0 torn, 1 lost; name changes 0 of 1 kept",
        )
    ]


def test_sync_calls_make_everything_durable() -> None:
    async def body() -> None:
        fd = os.open("/d/dsync", os.O_WRONLY | os.O_CREAT | os.O_DSYNC)
        os.write(fd, b"each write")
        os.close(fd)
        with open("/d/plain", "wb") as f:
            f.write(b"plain")
        os.sync()

    async def after() -> Any:
        return read_or_none("/d/dsync"), read_or_none("/d/plain")

    assert run_crash(body, after)[0] == (b"each write", b"plain")


def test_rename_is_atomic_after_a_crash() -> None:
    # The classic safe replace: write a temporary file, fsync it, rename it
    # over the old one; the rename itself is not synced. After a crash the
    # name holds the old content or the new, whole, on every seed.
    async def body() -> None:
        with open("/d/config", "wb") as f:
            f.write(b"old" * 400)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir("/d")
        with open("/d/config.tmp", "wb") as f:
            f.write(b"new" * 500)
            f.flush()
            os.fsync(f.fileno())
        os.replace("/d/config.tmp", "/d/config")

    async def after() -> Any:
        return read_or_none("/d/config")

    seen = set()
    for seed in range(20):
        got, _ = run_crash(body, after, seed=seed, unsynced="torn")
        assert got in (b"old" * 400, b"new" * 500), got[:20]
        seen.add(got[:3])
    assert seen == {b"old", b"new"}  # both fates happen


def test_torn_writes_are_drawn_by_sector_from_the_seed() -> None:
    chunk = bytes(range(256)) * 8  # 2048 bytes: 4 sectors each write

    async def body() -> None:
        with open("/d/f", "wb") as f:
            os.fsync(f.fileno())
        fsync_dir("/d")
        with open("/d/f", "r+b", buffering=0) as f:
            for i in range(6):
                f.write(bytes([i + 1]) * 2048)

    async def after() -> Any:
        return read_or_none("/d/f")

    fates = set()
    for seed in range(12):
        got, _ = run_crash(body, after, seed=seed, unsynced="torn")
        assert got is not None and len(got) % 512 == 0 and len(got) <= 6 * 2048
        again, _ = run_crash(body, after, seed=seed, unsynced="torn")
        assert again == got  # the seed decides
        for i in range(len(got) // 512):
            sector = got[i * 512 : (i + 1) * 512]
            assert len(set(sector)) == 1  # a sector is kept whole or lost
            fates.add(sector[0] == i // 4 + 1)
    assert fates == {True, False}
    del chunk


def test_descriptors_open_at_a_crash_fail() -> None:
    async def main(net: SimNetwork) -> Any:
        net.mount("db", "/d")
        opened: list[Any] = []

        async def body() -> None:
            opened.append(open("/d/f", "wb", buffering=0))  # noqa: SIM115 (closed below)
            await asyncio.sleep(10)

        net.spawn("db", body())
        await asyncio.sleep(1)
        net.crash("db")
        try:
            return outcome(opened[0].write, b"x")
        finally:
            opened[0].close()

    net = SimNetwork()
    assert testing.run(main(net), network=net) == (
        "OSError",
        errno.EBADF,
        "Bad file descriptor (the host crashed since it was opened)",
    )


# ----------------------------------------------------------------------
# Faults


def test_a_full_disk_writes_what_fits_then_fails() -> None:
    async def main(net: SimNetwork) -> Any:
        net.mount("db", "/d", capacity=1000)

        async def body() -> Any:
            fd = os.open("/d/f", os.O_WRONLY | os.O_CREAT)
            first = os.write(fd, b"x" * 800)
            second = os.write(fd, b"y" * 800)  # a short write
            third = outcome(os.write, fd, b"z")
            os.close(fd)
            buffered = outcome(pathlib.Path("/d/g").write_bytes, b"w" * 10)
            return first, second, third, buffered, os.path.getsize("/d/f")

        return await net.spawn("db", body())

    net = SimNetwork()
    first, second, third, buffered, size = testing.run(main(net), network=net)
    assert (first, second, size) == (800, 200, 1000)
    assert third == ("OSError", errno.ENOSPC, "No space left on device")
    assert buffered == ("OSError", errno.ENOSPC, "No space left on device")
    assert ("disk-fault", "db", "db", "ENOSPC on write of /d/f") in [e[1:] for e in net.log]


def test_a_failed_fsync_loses_the_data_even_if_a_later_one_succeeds() -> None:
    # Linux after an fsync error: the pages are marked clean ("fsyncgate").
    async def main(net: SimNetwork) -> Any:
        net.mount("db", "/d", unsynced="lost")
        net.disk_fault("db", "EIO", path="/d/wal", calls=("fsync",))

        async def body() -> Any:
            with open("/d/wal", "wb") as f:
                fsync_dir("/d")
                f.write(b"record")
                f.flush()
                first = outcome(os.fsync, f.fileno())
                second = outcome(os.fsync, f.fileno())
            return first, second, read_or_none("/d/wal")

        before = await net.spawn("db", body())
        net.crash("db")

        async def after() -> Any:
            return read_or_none("/d/wal")

        return before, await net.restart("db", after())

    net = SimNetwork()
    (first, second, readable), after = testing.run(main(net), network=net)
    assert first == ("OSError", errno.EIO, "Input/output error")
    assert second == ("ok", None) and readable == b"record"
    assert after == b""  # the record never reached the disk


def test_fault_points_fire_on_some_seeds_and_replay() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        net.mount("db", "/d", faults=0.3)

        async def body() -> list[Any]:
            results = []
            for i in range(20):
                fd = os.open(f"/d/f{i}", os.O_WRONLY | os.O_CREAT)
                results.append(outcome(os.write, fd, b"data"))
                results.append(outcome(os.fsync, fd))
                os.close(fd)
            return results

        return await net.spawn("db", body())

    runs = {}
    for seed in range(8):
        net = SimNetwork(seed=seed)
        runs[seed] = testing.run(main(net), network=net)
        net = SimNetwork(seed=seed)
        assert testing.run(main(net), network=net) == runs[seed]  # the seed decides
    failures = {r[1] for got in runs.values() for r in got if r[0] != "ok"}
    assert failures == {errno.EIO, errno.ENOSPC}
    # Each seed enables its own sites: which calls fail differs by seed.
    kinds = {
        frozenset((i % 2, r[1]) for i, r in enumerate(got) if r[0] != "ok") for got in runs.values()
    }
    assert len(kinds) >= 3


def test_a_disk_run_is_deterministic_across_processes() -> None:
    testing.check_determinism(crash_scenario, seed=3, fresh_process=True)


async def crash_scenario(net: SimNetwork) -> None:
    """For the determinism check: writes, a crash, and the log of it."""
    net.mount("db", "/d")

    async def body() -> None:
        for i in range(5):
            with open(f"/d/f{i}", "wb") as f:
                f.write(b"x" * (700 * i))
                if i % 2:
                    os.fsync(f.fileno())
            await asyncio.sleep(0.01)

    await net.spawn("db", body())
    net.crash("db")


# ----------------------------------------------------------------------
# The planted bug: a write-ahead log without fsync


def wal_history(fsync: bool, seed: int, *, real_directory: str | None = None) -> Any:
    """The WAL scenario's history: on a mounted disk, or (*real_directory*)
    on the real one."""
    net = SimNetwork(seed=seed)
    directory = real_directory or "/var/lib/store"
    if real_directory is None:
        net.mount("db", directory)
    return testing.run(sim_wal.scenario(net, fsync=fsync, directory=directory), network=net)


@pytest.mark.parametrize("seed", range(3))
def test_the_log_without_fsync_loses_acknowledged_writes(seed: int) -> None:
    result = testing.check_linearizable(wal_history(False, seed), KeyValue())
    assert result.ok is False
    example = result.counterexample
    assert example is not None and example.stuck is not None
    lost = example.stuck
    assert lost.name == "get" and lost.result is None
    assert any(
        op.name == "put" and op.status == "ok" and op.arg[0] == lost.arg for op in example.ops
    )


@pytest.mark.parametrize("seed", range(5))
def test_the_log_with_fsync_keeps_them(seed: int) -> None:
    assert testing.check_linearizable(wal_history(True, seed), KeyValue())


def test_on_a_real_disk_the_missing_fsync_goes_unseen(tmp_path: Path) -> None:
    # What a test without the simulated disk sees: the crash kills the host's
    # tasks, but the page cache lives on, so nothing is lost.
    history = wal_history(False, 0, real_directory=str(tmp_path))
    assert testing.check_linearizable(history, KeyValue())


def test_explore_finds_the_lost_write_and_replays_it() -> None:
    # test_sim_tapes.wal: the log without fsync, on a mounted disk, checked.
    found = testing.explore(wal, network=True, schedules=3)
    assert found.tape is not None and "NotLinearizable" in found.tape.failure
    with pytest.raises(testing.NotLinearizable):
        testing.replay(wal, found.tape)
