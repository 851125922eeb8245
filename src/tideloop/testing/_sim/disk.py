"""Disks per host: the file system a simulated host sees under a mount, and its crashes.

Layer: testing (the simulation; below ``network``, which owns one
`Disks`; imports nothing of tideloop's). ``SimNetwork.mount(host, path)``
makes every file and directory under *path* simulated for code on *host*:
the same path on another host is another file system, and nothing under a
mount touches the real disk. The system calls (`Disks.open`, `read`,
`write`, `fsync`, `rename`...) behave as Linux's do on a local file
system, with Linux's errors; ``tideloop.testing._files`` puts them behind
``open``, ``os`` and ``os.path`` for code on the host during a simulated
run.

The crash model (facts / what this means for us), POSIX's guarantees and
no more:

- A write lands in the *page cache*: reads see it at once; it is
  *durable* (survives a crash) only after ``fsync(fd)`` or
  ``fdatasync(fd)`` of that file (``O_SYNC``/``O_DSYNC`` files: at each
  write), or ``os.sync()``. Truncation is data too.
- A file's name is metadata of its *directory*: creating, removing or
  renaming a file (or a directory) is durable only once the directory is
  synced: ``fsync`` of a descriptor of the directory makes every name
  change made before it durable (as a journaling file system commits its
  journal in order). ``fsync`` of a file does not make its new name durable
  (ext4 happens to; POSIX does not promise it). ``rename`` is atomic: after
  a crash the name points to the old file or the new one, never to neither
  or to a mix.
- **A crash** (``SimNetwork.crash(host)``) throws the page cache away.
  With ``unsynced="torn"`` (the default), each unsynced write is, drawn
  from the seed, lost, kept, or *torn*: each of its 512-byte sectors kept
  or lost on its own (pages reach the disk in no particular order); an
  unsynced truncation is kept or lost; of the unsynced name changes, the
  first *k* survive, *k* drawn from the seed (the journal commits them in
  order). With ``unsynced="lost"``, nothing unsynced survives. What no
  surviving name points to is gone. Descriptors open before the crash fail
  with ``EBADF`` (their process is gone; a thread may live on).
- **Faults.** *capacity* bytes: a write past it writes what fits and then
  fails with ``ENOSPC``. ``SimNetwork.disk_fault(host, "EIO" | "ENOSPC",
  path=, calls=, count=)`` fails the next *count* matching calls.
  ``mount(..., faults=p)`` makes each write a fault point that fails with
  ``EIO`` or ``ENOSPC``, and each ``fsync`` one that fails with ``EIO``
  (enabled per seed and site, as ``tideloop.testing.sometimes``). A failed
  ``fsync`` does what Linux does: the file's unsynced writes stay readable
  but are marked clean, so they are lost at the next crash even if a later
  ``fsync`` succeeds ("fsyncgate").
- **The seed decides** every tear, loss and fault point; the same run
  makes the same draws.

Not simulated: symbolic and hard links, permissions and owners (``chmod``
succeeds and changes nothing), ``mmap``, file locks, extended attributes,
``O_DIRECT``, ``O_TMPFILE``, sparse-file accounting (a hole costs its
bytes of capacity), access times, ``os.chdir`` into a mount.

Invariants:
- Every call runs under one lock: executor threads and the loop's thread
  see each call happen at once.
- A descriptor's number is a real, never-read placeholder fd (an eventfd,
  or a pipe's read end), so no other file in the process gets its number
  while it is open; closing the simulated file closes it.
"""

from __future__ import annotations

import errno
import os
import random
import stat as stat_module
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

#: The unit a torn write is kept or lost in.
SECTOR: Final = 512
#: The access-mode bits of open(2)'s flags (PyPy's os has no O_ACCMODE).
_ACCMODE: Final = getattr(os, "O_ACCMODE", os.O_RDONLY | os.O_WRONLY | os.O_RDWR)

Unsynced = Literal["torn", "lost"]

# The real calls, bound now: while a run patches ``os``, the model still
# needs the kernel's own for its placeholder descriptors.
_real_pipe = os.pipe
_real_close = os.close
_eventfd = getattr(os, "eventfd", None)  # Linux; PyPy has none


def _placeholder() -> int:
    """A new real descriptor number for a simulated file (see the invariants):
    an eventfd, or a pipe's read end (no file is opened; nothing blocks)."""
    if _eventfd is not None:
        return int(_eventfd(0, getattr(os, "EFD_CLOEXEC", 0o2000000)))
    read, write = _real_pipe()
    _real_close(write)
    return read


def error(code: int, path: str | None = None) -> OSError:
    """The OSError Linux's call would raise (its subclass, by errno)."""
    if path is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), path)


@dataclass(eq=False, slots=True)
class Inode:
    """A file or directory: what reads see now, and what survives a crash."""

    number: int
    kind: Literal["file", "dir"]
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    #: Unsynced data operations, in order: ("write", offset, bytes) or
    #: ("truncate", size).
    pending: list[tuple[Any, ...]] = field(default_factory=list)
    mtime: float = 0.0
    ctime: float = 0.0


@dataclass(eq=False, slots=True)
class Description:
    """An open file description (what ``os.dup`` shares)."""

    mount: Mount
    inode: Inode
    path: str
    readable: bool
    writable: bool
    append: bool
    sync: bool
    position: int = 0
    references: int = 1
    #: The host crashed since it was opened: every call fails.
    stale: bool = False


class Mount:
    """One simulated file system: a host's files under *root*."""

    def __init__(
        self,
        host: str,
        root: str,
        *,
        capacity: int | None,
        unsynced: Unsynced,
        faults: float,
        device: int,
    ) -> None:
        self.host = host
        self.root = root
        self.capacity = capacity
        self.unsynced: Unsynced = unsynced
        self.faults = faults
        self.device = device
        self._next = 2
        root_inode = Inode(1, "dir")
        self.inodes: dict[int, Inode] = {1: root_inode}
        #: Path under the root ("" for the root) -> inode, now and durably.
        self.names: dict[str, int] = {"": 1}
        self.durable_names: dict[str, int] = {"": 1}
        #: Unsynced name changes, in order: (op, path, other) with op
        #: "link" (path -> inode number), "unlink", "rename" (path -> other).
        self.changes: list[tuple[str, str, Any]] = []

    def new_inode(self, kind: Literal["file", "dir"], now: float) -> Inode:
        inode = Inode(self._next, kind, mtime=now, ctime=now)
        self._next += 1
        self.inodes[inode.number] = inode
        return inode

    def used(self) -> int:
        return sum(len(i.data) for i in self.inodes.values())

    def absolute(self, relative: str) -> str:
        return self.root if not relative else f"{self.root.rstrip('/')}/{relative}"


def _write_op(data: bytearray, op: tuple[Any, ...]) -> None:
    """Apply one data operation (a write or a truncation) to *data*."""
    if op[0] == "truncate":
        size = op[1]
        if size < len(data):
            del data[size:]
        else:
            data.extend(bytes(size - len(data)))
        return
    _, start, chunk = op
    if start > len(data):
        data.extend(bytes(start - len(data)))
    data[start : start + len(chunk)] = chunk


def _parent(relative: str) -> str:
    return relative.rpartition("/")[0]


def _touches(change: tuple[str, str, Any]) -> set[str]:
    op, path, other = change
    if op == "rename":
        return {_parent(path), _parent(other)}
    return {_parent(path)}


def _apply(names: dict[str, int], change: tuple[str, str, Any]) -> None:
    """Apply one name change to a namespace."""
    op, path, other = change
    if op == "link":
        names[path] = other
    elif op == "unlink":
        names.pop(path, None)
        prefix = path + "/"
        for name in [n for n in names if n.startswith(prefix)]:
            del names[name]
    else:  # rename path -> other, with everything under it
        moved = {n: i for n, i in names.items() if n == path or n.startswith(path + "/")}
        for name in [n for n in names if n == other or n.startswith(other + "/")]:
            del names[name]
        for name in moved:
            del names[name]
        for name, number in moved.items():
            names[other + name[len(path) :]] = number


@dataclass
class _Fault:
    host: str
    code: int
    path: str | None
    calls: frozenset[str]
    count: int


class Disks:
    """Every host's simulated file systems (see the module docstring).

    *seed* seeds the draws of tears and losses (one generator per host);
    *record* writes an event to the network's log; *sometimes* is the
    network's fault point (``SimNetwork.sometimes_fires``); *wall* gives a
    host's wall-clock time (for file times).
    """

    def __init__(
        self,
        seed: int,
        record: Callable[[str, str, str, str], None],
        sometimes: Callable[[str, float], bool],
        wall: Callable[[str], float],
    ) -> None:
        self._seed = seed
        self._record = record
        self._sometimes = sometimes
        self._wall = wall
        self.lock = threading.RLock()
        self._mounts: dict[str, list[Mount]] = {}
        self._rngs: dict[str, random.Random] = {}
        #: Simulated descriptors: placeholder fd -> its description.
        self.files: dict[int, Description] = {}
        self._faults: list[_Fault] = []
        self._listeners: list[Callable[[], None]] = []

    # -- mounts ---------------------------------------------------------------

    def mount(
        self,
        host: str,
        path: str,
        *,
        capacity: int | None = None,
        unsynced: Unsynced = "torn",
        faults: float = 0.0,
    ) -> Mount:
        if unsynced not in ("torn", "lost"):
            raise ValueError(f"unsynced must be 'torn' or 'lost', not {unsynced!r}")
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, not {capacity!r}")
        if not 0.0 <= faults <= 1.0:
            raise ValueError(f"faults must be a probability, not {faults!r}")
        root = os.path.normpath(os.fsdecode(path))
        if not os.path.isabs(root):
            raise ValueError(f"a mount point is an absolute path, not {path!r}")
        with self.lock:
            mounts = self._mounts.setdefault(host, [])
            if any(m.root == root for m in mounts):
                raise ValueError(f"{root!r} is mounted on host {host!r} already")
            device = 0x7D00 + sum(len(m) for m in self._mounts.values())
            mount = Mount(
                host, root, capacity=capacity, unsynced=unsynced, faults=faults, device=device
            )
            mounts.append(mount)
            mounts.sort(key=lambda m: len(m.root), reverse=True)
            listeners = list(self._listeners)
        self._record("mount", host, host, root)
        for listener in listeners:
            listener()
        return mount

    def when_mounted(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call *listener* after every mount (from now); returns the way to stop."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def __bool__(self) -> bool:
        return bool(self._mounts)

    def find(self, host: str, path: str) -> tuple[Mount, str] | None:
        """The mount an absolute, normalized *path* is under on *host*, and the
        path under its root (None: not simulated)."""
        for mount in self._mounts.get(host, ()):
            root = mount.root
            if path == root:
                return mount, ""
            if path.startswith(root) and (root == "/" or path[len(root)] == "/"):
                return mount, path[len(root) :].lstrip("/")
        return None

    def _rng(self, host: str) -> random.Random:
        rng = self._rngs.get(host)
        if rng is None:
            rng = self._rngs[host] = random.Random(f"tideloop:{self._seed}:disk:{host}")
        return rng

    # -- lookups --------------------------------------------------------------

    def _lookup(self, mount: Mount, relative: str, absolute: str) -> Inode | None:
        """The inode at *relative*, None if it does not exist; ENOTDIR when a
        component on the way is a file."""
        number = mount.names.get(relative)
        if number is not None:
            return mount.inodes[number]
        parts = relative.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            above = mount.names.get(prefix)
            if above is None:
                return None
            if mount.inodes[above].kind != "dir":
                raise error(errno.ENOTDIR, absolute)
        return None

    def _directory(self, mount: Mount, relative: str, absolute: str) -> Inode:
        """The directory that holds *relative* (ENOENT, ENOTDIR otherwise)."""
        parent = _parent(relative)
        inode = self._lookup(mount, parent, absolute)
        if inode is None:
            raise error(errno.ENOENT, absolute)
        if inode.kind != "dir":
            raise error(errno.ENOTDIR, absolute)
        return inode

    def _change(self, mount: Mount, change: tuple[str, str, Any]) -> None:
        _apply(mount.names, change)
        mount.changes.append(change)

    def _description(self, fd: int) -> Description:
        description = self.files.get(fd)
        if description is None:
            raise error(errno.EBADF)
        if description.stale:
            raise OSError(errno.EBADF, "Bad file descriptor (the host crashed since it was opened)")
        return description

    # -- faults ---------------------------------------------------------------

    def inject(
        self, host: str, code: int, *, path: str | None, calls: frozenset[str], count: int
    ) -> None:
        with self.lock:
            self._faults.append(_Fault(host, code, path, calls, count))

    def _fault(self, call: str, description: Description) -> int | None:
        """The errno this call fails with, if an injected fault or a fault
        point says so."""
        mount = description.mount
        absolute = mount.absolute(description.path)
        for fault in self._faults:
            if (
                fault.host == mount.host
                and call in fault.calls
                and fault.count > 0
                and (
                    fault.path is None
                    or absolute == fault.path
                    or absolute.startswith(fault.path.rstrip("/") + "/")
                )
            ):
                fault.count -= 1
                self._faults = [f for f in self._faults if f.count > 0]
                return fault.code
        if mount.faults > 0.0:
            site = f"disk:{mount.host}:{mount.root}:{call}"
            if call == "write" and self._sometimes(site + ":ENOSPC", mount.faults):
                return errno.ENOSPC
            if self._sometimes(site + ":EIO", mount.faults):
                return errno.EIO
        return None

    def _failed(self, code: int, call: str, description: Description) -> OSError:
        mount = description.mount
        absolute = mount.absolute(description.path)
        self._record(
            "disk-fault", mount.host, mount.host, f"{errno.errorcode[code]} on {call} of {absolute}"
        )
        return error(code)

    # -- the calls ------------------------------------------------------------

    def open(self, host: str, mount: Mount, relative: str, flags: int) -> int:
        absolute = mount.absolute(relative)
        access = flags & _ACCMODE
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            raise error(errno.EOPNOTSUPP, absolute)
        with self.lock:
            inode = self._lookup(mount, relative, absolute)
            if inode is not None and flags & os.O_CREAT and flags & os.O_EXCL:
                raise error(errno.EEXIST, absolute)
            if inode is None:
                if not flags & os.O_CREAT:
                    raise error(errno.ENOENT, absolute)
                if flags & getattr(os, "O_DIRECTORY", 0):
                    raise error(errno.EINVAL, absolute)
                directory = self._directory(mount, relative, absolute)
                now = self._wall(host)
                inode = mount.new_inode("file", now)
                directory.mtime = now
                self._change(mount, ("link", relative, inode.number))
            if inode.kind == "dir":
                if access != os.O_RDONLY or flags & os.O_TRUNC:
                    raise error(errno.EISDIR, absolute)
            elif flags & getattr(os, "O_DIRECTORY", 0):
                raise error(errno.ENOTDIR, absolute)
            if flags & os.O_TRUNC and inode.kind == "file" and access != os.O_RDONLY:
                self._truncate(inode, 0, host)
            description = Description(
                mount,
                inode,
                relative,
                readable=access in (os.O_RDONLY, os.O_RDWR),
                writable=access in (os.O_WRONLY, os.O_RDWR),
                append=bool(flags & os.O_APPEND),
                sync=bool(flags & (os.O_SYNC | getattr(os, "O_DSYNC", 0))),
            )
            fd = _placeholder()
            self.files[fd] = description
            return fd

    def dup(self, fd: int) -> int:
        with self.lock:
            description = self._description(fd)
            description.references += 1
            new = _placeholder()
            self.files[new] = description
            return new

    def close(self, fd: int) -> None:
        """Forget *fd* (the caller closes the placeholder)."""
        with self.lock:
            description = self.files.pop(fd, None)
            if description is None:
                raise error(errno.EBADF)
            description.references -= 1

    def read(self, fd: int, size: int, offset: int | None = None) -> bytes:
        with self.lock:
            description = self._description(fd)
            if description.inode.kind == "dir":
                raise error(errno.EISDIR)
            if not description.readable:
                raise error(errno.EBADF)
            start = description.position if offset is None else offset
            data = description.inode.data
            chunk = bytes(data[start : start + size]) if size >= 0 else bytes(data[start:])
            if offset is None:
                description.position = start + len(chunk)
            return chunk

    def write(self, fd: int, data: bytes, offset: int | None = None) -> int:
        with self.lock:
            description = self._description(fd)
            if not description.writable:
                raise error(errno.EBADF)
            code = self._fault("write", description)
            if code is not None:
                raise self._failed(code, "write", description)
            inode = description.inode
            if offset is not None:
                start = offset
            elif description.append:
                start = len(inode.data)
            else:
                start = description.position
            mount = description.mount
            size = len(data)
            if mount.capacity is not None:
                growth = max(0, start + size - len(inode.data))
                room = mount.capacity - mount.used()
                if growth > room:
                    size = max(0, len(inode.data) + room - start)
                    if size == 0:
                        raise self._failed(errno.ENOSPC, "write", description)
            if size == 0:
                return 0
            chunk = bytes(data[:size])
            if start > len(inode.data):
                inode.data.extend(bytes(start - len(inode.data)))
            inode.data[start : start + size] = chunk
            inode.pending.append(("write", start, chunk))
            inode.mtime = self._wall(mount.host)
            if offset is None:
                description.position = start + size
            if description.sync:
                self._sync(inode)
            return size

    def seek(self, fd: int, position: int, how: int) -> int:
        with self.lock:
            description = self._description(fd)
            if how == os.SEEK_SET:
                new = position
            elif how == os.SEEK_CUR:
                new = description.position + position
            elif how == os.SEEK_END:
                new = len(description.inode.data) + position
            else:
                raise error(errno.EINVAL)
            if new < 0:
                raise error(errno.EINVAL)
            description.position = new
            return new

    def truncate_fd(self, fd: int, size: int) -> None:
        with self.lock:
            description = self._description(fd)
            if not description.writable or description.inode.kind == "dir":
                raise error(errno.EINVAL)
            self._truncate(description.inode, size, description.mount.host)

    def truncate(self, mount: Mount, relative: str, size: int) -> None:
        absolute = mount.absolute(relative)
        with self.lock:
            inode = self._lookup(mount, relative, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            if inode.kind == "dir":
                raise error(errno.EISDIR, absolute)
            self._truncate(inode, size, mount.host)

    def _truncate(self, inode: Inode, size: int, host: str) -> None:
        if size < 0:
            raise error(errno.EINVAL)
        if size < len(inode.data):
            del inode.data[size:]
        else:
            inode.data.extend(bytes(size - len(inode.data)))
        inode.pending.append(("truncate", size))
        inode.mtime = self._wall(host)

    def fsync(self, fd: int, call: str = "fsync") -> None:
        with self.lock:
            description = self._description(fd)
            inode = description.inode
            code = self._fault("fsync", description)
            if code is not None:
                # Linux: the pages that failed are marked clean. They stay
                # readable, and will never be written (until written again).
                inode.pending.clear()
                raise self._failed(code, call, description)
            if inode.kind == "dir":
                self._commit_names(description.mount, description.path)
            else:
                self._sync(inode)

    @staticmethod
    def _sync(inode: Inode) -> None:
        # The unsynced operations reach the disk: not a copy of the cache,
        # which may hold pages a failed fsync marked clean.
        durable = bytearray(inode.durable)
        for op in inode.pending:
            _write_op(durable, op)
        inode.durable = bytes(durable)
        inode.pending.clear()

    @staticmethod
    def _commit_names(mount: Mount, directory: str | None) -> None:
        """Make durable every name change up to the last one in *directory*
        (None: all of them)."""
        changes = mount.changes
        last = len(changes) - 1 if directory is None else -1
        if directory is not None:
            for i, change in enumerate(changes):
                if directory in _touches(change):
                    last = i
        for change in changes[: last + 1]:
            _apply(mount.durable_names, change)
        del changes[: last + 1]

    def sync(self, host: str) -> None:
        """``os.sync()``: everything of *host*'s mounts durable."""
        with self.lock:
            for mount in self._mounts.get(host, ()):
                for inode in mount.inodes.values():
                    self._sync(inode)
                self._commit_names(mount, None)

    def stat(self, mount: Mount, relative: str) -> os.stat_result:
        absolute = mount.absolute(relative)
        with self.lock:
            inode = self._lookup(mount, relative, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            return self._stat(mount, inode)

    def fstat(self, fd: int) -> os.stat_result:
        with self.lock:
            description = self._description(fd)
            return self._stat(description.mount, description.inode)

    @staticmethod
    def _stat(mount: Mount, inode: Inode) -> os.stat_result:
        if inode.kind == "dir":
            mode = stat_module.S_IFDIR | 0o755
            links = 2 + sum(
                1
                for name, number in mount.names.items()
                if name and mount.inodes[number].kind == "dir" and number != inode.number
            )
            size = 4096
        else:
            mode = stat_module.S_IFREG | 0o644
            links = 1
            size = len(inode.data)
        ns_m, ns_c = int(inode.mtime * 1e9), int(inode.ctime * 1e9)
        # The ten fields of the sequence, then the rest by name: their
        # positions differ between CPython and PyPy.
        return os.stat_result(
            (
                mode,
                inode.number,
                mount.device,
                links,
                os.getuid(),
                os.getgid(),
                size,
                int(inode.mtime),
                int(inode.mtime),
                int(inode.ctime),
            ),
            {
                "st_atime": inode.mtime,
                "st_mtime": inode.mtime,
                "st_ctime": inode.ctime,
                "st_atime_ns": ns_m,
                "st_mtime_ns": ns_m,
                "st_ctime_ns": ns_c,
                "st_blksize": 4096,
                "st_blocks": (size + 511) // 512,
                "st_rdev": 0,
            },
        )

    def is_dir_fd(self, fd: int) -> bool:
        description = self.files.get(fd)
        return description is not None and description.inode.kind == "dir"

    def path_of(self, fd: int) -> tuple[Mount, str]:
        with self.lock:
            description = self._description(fd)
            return description.mount, description.path

    def mkdir(self, mount: Mount, relative: str) -> None:
        absolute = mount.absolute(relative)
        with self.lock:
            if self._lookup(mount, relative, absolute) is not None:
                raise error(errno.EEXIST, absolute)
            directory = self._directory(mount, relative, absolute)
            now = self._wall(mount.host)
            inode = mount.new_inode("dir", now)
            directory.mtime = now
            self._change(mount, ("link", relative, inode.number))

    def unlink(self, mount: Mount, relative: str) -> None:
        absolute = mount.absolute(relative)
        with self.lock:
            inode = self._lookup(mount, relative, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            if inode.kind == "dir":
                raise error(errno.EISDIR, absolute)
            self._change(mount, ("unlink", relative, None))
            self._directory(mount, relative, absolute).mtime = self._wall(mount.host)

    def rmdir(self, mount: Mount, relative: str) -> None:
        absolute = mount.absolute(relative)
        with self.lock:
            if not relative:
                raise error(errno.EBUSY, absolute)
            inode = self._lookup(mount, relative, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            if inode.kind != "dir":
                raise error(errno.ENOTDIR, absolute)
            if any(name.startswith(relative + "/") for name in mount.names):
                raise error(errno.ENOTEMPTY, absolute)
            self._change(mount, ("unlink", relative, None))

    def rename(self, mount: Mount, source: str, target: str, target_abs: str) -> None:
        absolute = mount.absolute(source)
        with self.lock:
            inode = self._lookup(mount, source, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            self._directory(mount, target, target_abs)
            if source == target:
                return
            if inode.kind == "dir" and (target + "/").startswith(source + "/"):
                raise error(errno.EINVAL, absolute)
            existing = self._lookup(mount, target, target_abs)
            if existing is not None:
                if existing.kind == "dir" and inode.kind != "dir":
                    raise error(errno.EISDIR, target_abs)
                if existing.kind != "dir" and inode.kind == "dir":
                    raise error(errno.ENOTDIR, target_abs)
                if existing.kind == "dir" and any(
                    name.startswith(target + "/") for name in mount.names
                ):
                    raise error(errno.ENOTEMPTY, target_abs)
            self._change(mount, ("rename", source, target))
            now = self._wall(mount.host)
            for path in (source, target):
                parent = self._lookup(mount, _parent(path), absolute)
                if parent is not None:
                    parent.mtime = now

    def listdir(self, mount: Mount, relative: str) -> list[str]:
        absolute = mount.absolute(relative)
        with self.lock:
            inode = self._lookup(mount, relative, absolute)
            if inode is None:
                raise error(errno.ENOENT, absolute)
            if inode.kind != "dir":
                raise error(errno.ENOTDIR, absolute)
            prefix = relative + "/" if relative else ""
            return sorted(
                name[len(prefix) :]
                for name in mount.names
                if name and name.startswith(prefix) and "/" not in name[len(prefix) :]
            )

    def kind_of(self, mount: Mount, relative: str) -> str | None:
        with self.lock:
            try:
                inode = self._lookup(mount, relative, mount.absolute(relative))
            except OSError:
                return None
            return None if inode is None else inode.kind

    # -- crashes --------------------------------------------------------------

    def crash(self, host: str) -> None:
        """*host* crashed: its page cache is gone (see the module docstring)."""
        with self.lock:
            for description in self.files.values():
                if description.mount.host == host:
                    description.stale = True
            rng = self._rng(host)
            for mount in self._mounts.get(host, ()):
                self._crash(mount, rng)

    def _crash(self, mount: Mount, rng: random.Random) -> None:
        torn = mount.unsynced == "torn"
        changes = mount.changes
        kept_changes = rng.randint(0, len(changes)) if torn and changes else 0
        for change in changes[:kept_changes]:
            _apply(mount.durable_names, change)
        counts = {"kept": 0, "torn": 0, "lost": 0}
        for inode in mount.inodes.values():
            data = bytearray(inode.durable)
            for op in inode.pending:
                fate = rng.choice(("kept", "torn", "lost")) if torn else "lost"
                if op[0] == "truncate":
                    fate = "kept" if fate != "lost" else "lost"
                counts[fate] += 1
                if fate == "lost":
                    continue
                if op[0] == "truncate" or fate == "kept":
                    _write_op(data, op)
                    continue
                _, start, chunk = op
                at = start
                while at < start + len(chunk):
                    end = min(start + len(chunk), (at // SECTOR + 1) * SECTOR)
                    if rng.random() < 0.5:
                        _write_op(data, ("write", at, chunk[at - start : end - start]))
                    at = end
            inode.data = data
            inode.durable = bytes(data)
            inode.pending = []
        mount.names = dict(mount.durable_names)
        mount.changes = []
        alive = set(mount.names.values())
        mount.inodes = {n: i for n, i in mount.inodes.items() if n in alive}
        self._record(
            "disk-crash",
            mount.host,
            mount.host,
            f"{mount.root}: unsynced writes {counts['kept']} kept, {counts['torn']} torn, "
            f"{counts['lost']} lost; name changes {kept_changes} of {len(changes)} kept",
        )

    # -- for tests ------------------------------------------------------------

    def contents(self, mount: Mount, relative: str, *, durable: bool = False) -> bytes | None:
        """A file's bytes now (or what would survive a crash with nothing
        unsynced kept); None if no such file (by that namespace)."""
        with self.lock:
            names = mount.durable_names if durable else mount.names
            number = names.get(relative)
            if number is None:
                return None
            inode = mount.inodes[number]
            if inode.kind != "file":
                return None
            return inode.durable if durable else bytes(inode.data)


__all__ = ["SECTOR", "Description", "Disks", "Inode", "Mount", "Unsynced", "error"]
