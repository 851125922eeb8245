"""open(), os and os.path for code on a simulated host: the calls behind a mount.

Layer: testing (above ``_sim``, below ``_world``, whose `seeded_globals`
applies `install` for the duration of a simulated run once the network has
a mount, through a `Patches`). ``SimNetwork.mount(host, path)`` says which
paths are simulated for code on which host (``_sim/disk.py`` holds the
file systems and their crash model); this module puts them behind the
calls programs make:

- ``open`` (``builtins.open``, ``io.open``: so also ``pathlib``'s
  ``open``/``read_text``/``write_bytes``, ``aiofiles.open``): a path under a
  mount, or a simulated descriptor, gives the usual objects
  (``TextIOWrapper``, ``BufferedReader``/``Writer``/``Random`` or, unbuffered,
  a raw file: a `SimFileIO`, an ``io.FileIO`` whose reads and writes go to
  the simulation), validated as ``open`` validates;
- ``os.open``, ``close``, ``read``, ``write``, ``pread``, ``pwrite``,
  ``lseek``, ``fsync``, ``fdatasync``, ``fstat``, ``ftruncate``, ``dup``,
  ``stat``, ``lstat``, ``truncate``, ``rename``, ``replace``, ``remove``,
  ``unlink``, ``mkdir``, ``rmdir``, ``listdir``, ``scandir``, ``access``,
  ``utime``, ``chmod``, ``fchmod``, ``readlink``, ``sync``, ``sendfile``,
  ``copy_file_range``, the extended-attribute calls (which fail with
  ``ENOTSUP``, as on a file system without them) (so ``os.path``,
  ``os.walk``, ``os.makedirs``,
  ``shutil`` and ``pathlib`` follow); ``dir_fd`` arguments that are
  simulated directories too;
- references to those taken at import (``aiofiles``: ``sync_open = open``,
  ``aiofiles.os.rename = wrap(os.rename)``) through `Patches.everywhere`.

Whatever is not under a mount of the running code's host (its host is a
task's, or the host that started its thread or submitted its job: see
``_wallclock``) goes to the real call, unchanged. ``os.link`` and
``os.symlink`` under a mount fail with ``EOPNOTSUPP`` (links are not
simulated).

Invariant: a call on a real path or a real descriptor reaches the real
function with the arguments it was given.
"""

from __future__ import annotations

import errno
import io
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._patching import Patches
from ._sim import SimNetwork
from ._sim.disk import Disks, Mount, error

_PATCHED = (
    "open",
    "close",
    "read",
    "write",
    "pread",
    "pwrite",
    "lseek",
    "fsync",
    "fdatasync",
    "fstat",
    "ftruncate",
    "dup",
    "stat",
    "lstat",
    "truncate",
    "rename",
    "replace",
    "remove",
    "unlink",
    "mkdir",
    "rmdir",
    "listdir",
    "scandir",
    "access",
    "utime",
    "chmod",
    "fchmod",
    "readlink",
    "sync",
    "sendfile",
    "copy_file_range",
    "link",
    "symlink",
    "listxattr",
    "getxattr",
    "setxattr",
    "removexattr",
)
#: The real calls, bound at import (before any run patches them).
_REAL: dict[str, Callable[..., Any]] = {n: getattr(os, n) for n in _PATCHED if hasattr(os, n)}
_real_open = io.open


class SimFileIO(io.FileIO):
    """A raw file on a simulated disk: an ``io.FileIO`` (its placeholder
    descriptor is the simulated one's number) whose reads, writes, seeks and
    truncations are the simulation's."""

    def __init__(self, fd: int, mode: str, closefd: bool, disks: Disks, name: Any) -> None:
        super().__init__(fd, mode, closefd=closefd)
        self.disks = disks
        self.name = name

    def _check(self, readable: bool = False, writable: bool = False) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if readable and not self.readable():
            raise io.UnsupportedOperation("File not open for reading")
        if writable and not self.writable():
            raise io.UnsupportedOperation("File not open for writing")
        return self.fileno()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.disks.read(self._check(readable=True), len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        return self.disks.read(self._check(readable=True), size)

    def readall(self) -> bytes:
        return self.disks.read(self._check(readable=True), -1)

    def write(self, data: Any) -> int:
        return self.disks.write(self._check(writable=True), bytes(memoryview(data).cast("B")))

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        return self.disks.seek(self._check(), position, whence)

    def tell(self) -> int:
        return self.disks.seek(self._check(), 0, os.SEEK_CUR)

    def seekable(self) -> bool:
        self._check()
        return True

    def truncate(self, size: int | None = None) -> int:
        fd = self._check(writable=True)
        if size is None:
            size = self.tell()
        self.disks.truncate_fd(fd, size)
        return size

    def close(self) -> None:
        if not self.closed and self.closefd:
            try:
                self.disks.close(self.fileno())
            except OSError:
                pass  # closed with os.close already
        super().close()


class _DirEntry:
    """What ``os.scandir`` yields for a simulated directory (``os.DirEntry``'s methods)."""

    def __init__(self, name: Any, path: Any, kind: str, stat: Callable[[], os.stat_result]) -> None:
        self.name = name
        self.path = path
        self._kind = kind
        self._stat = stat

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._kind == "dir"

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._kind == "file"

    def is_symlink(self) -> bool:
        return False

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self._stat()

    def inode(self) -> int:
        return self._stat().st_ino

    def __fspath__(self) -> Any:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


class _ScandirIterator:
    """``os.scandir``'s iterator over a simulated directory (a context manager)."""

    def __init__(self, entries: list[_DirEntry]) -> None:
        self._entries: Iterator[_DirEntry] = iter(entries)

    def __iter__(self) -> _ScandirIterator:
        return self

    def __next__(self) -> _DirEntry:
        return next(self._entries)

    def close(self) -> None:
        self._entries = iter(())

    def __enter__(self) -> _ScandirIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Probed(Exception):
    """What `_probe` raises: the flags ``open`` would open a file with."""


def _probe(path: Any, flags: int) -> int:
    raise _Probed(flags)


def _validated(  # noqa: PLR0917 (open's arguments, in open's order)
    file: Any,
    mode: Any,
    buffering: Any,
    encoding: Any,
    errors: Any,
    newline: Any,
    closefd: Any,
) -> int:
    """Check ``open``'s arguments as the running Python's ``open`` does (it
    is asked, with an opener that stops it before it opens anything), and
    return the flags it would open a file with."""
    name = "tideloop-probe" if isinstance(file, int) else file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _real_open(
                name,
                mode,
                buffering,
                encoding,
                errors,
                newline,
                True if isinstance(file, int) else closefd,
                opener=_probe,
            )
        except _Probed as probed:
            flags: int = probed.args[0]
            return flags
    raise AssertionError("open() returned without calling its opener")


def _fd_of(file: Any) -> int:
    if isinstance(file, int):
        return file
    fileno = getattr(file, "fileno", None)
    if fileno is None:
        raise TypeError(
            f"argument must be an int, or have a fileno() method, not {type(file).__name__}"
        )
    return int(fileno())


def install(patches: Patches, net: SimNetwork) -> None:
    """Put *net*'s disks behind ``open`` and ``os`` until *patches* are undone."""
    disks = net.disks
    files = disks.files
    real = _REAL

    def host() -> str:
        return net.current_host().name

    def where(path: Any, dir_fd: int | None = None) -> tuple[Mount, str, str] | None:
        """The mount, path under its root and absolute path of a simulated
        *path* for the running code's host (None: a real one)."""
        if isinstance(path, int):
            return None
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None  # the real call raises the right error
        if dir_fd is not None:
            if not disks.is_dir_fd(dir_fd):
                return None
            mount, relative = disks.path_of(dir_fd)
            text = os.path.join(mount.absolute(relative), text)
        absolute = os.path.normpath(text if os.path.isabs(text) else os.path.abspath(text))
        found = disks.find(host(), absolute)
        if found is None:
            return None
        return found[0], found[1], absolute

    def same_type(path: Any, value: str) -> Any:
        return os.fsencode(value) if isinstance(os.fspath(path), bytes) else value

    # -- descriptors ----------------------------------------------------------

    def sim_os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        found = where(path, dir_fd)
        if found is None:
            return real["open"](path, flags, mode, dir_fd=dir_fd)  # type: ignore[no-any-return]
        mount, relative, _ = found
        return disks.open(host(), mount, relative, flags)

    def sim_close(fd: int) -> None:
        if fd in files:
            disks.close(fd)
        real["close"](fd)

    def sim_read(fd: int, size: int) -> bytes:
        if fd in files:
            return disks.read(fd, size)
        return real["read"](fd, size)  # type: ignore[no-any-return]

    def sim_write(fd: int, data: Any) -> int:
        if fd in files:
            return disks.write(fd, bytes(memoryview(data).cast("B")))
        return real["write"](fd, data)  # type: ignore[no-any-return]

    def sim_pread(fd: int, size: int, offset: int) -> bytes:
        if fd in files:
            return disks.read(fd, size, offset)
        return real["pread"](fd, size, offset)  # type: ignore[no-any-return]

    def sim_pwrite(fd: int, data: Any, offset: int) -> int:
        if fd in files:
            return disks.write(fd, bytes(memoryview(data).cast("B")), offset)
        return real["pwrite"](fd, data, offset)  # type: ignore[no-any-return]

    def sim_lseek(fd: int, position: int, how: int) -> int:
        if fd in files:
            return disks.seek(fd, position, how)
        return real["lseek"](fd, position, how)  # type: ignore[no-any-return]

    def sim_fsync(fd: Any) -> None:
        number = _fd_of(fd)
        if number in files:
            disks.fsync(number)
        else:
            real["fsync"](fd)

    def sim_fdatasync(fd: Any) -> None:
        number = _fd_of(fd)
        if number in files:
            disks.fsync(number, "fdatasync")
        else:
            real["fdatasync"](fd)

    def sim_fstat(fd: int) -> os.stat_result:
        if fd in files:
            return disks.fstat(fd)
        return real["fstat"](fd)  # type: ignore[no-any-return]

    def sim_ftruncate(fd: int, length: int) -> None:
        if fd in files:
            disks.truncate_fd(fd, length)
        else:
            real["ftruncate"](fd, length)

    def sim_dup(fd: int) -> int:
        if fd in files:
            return disks.dup(fd)
        return real["dup"](fd)  # type: ignore[no-any-return]

    def sim_sync() -> None:
        disks.sync(host())
        real["sync"]()

    # -- paths ----------------------------------------------------------------

    def sim_stat(
        path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True
    ) -> os.stat_result:
        if isinstance(path, int) and path in files:
            return disks.fstat(path)
        found = where(path, dir_fd)
        if found is None:
            return real["stat"](  # type: ignore[no-any-return]
                path, dir_fd=dir_fd, follow_symlinks=follow_symlinks
            )
        return disks.stat(found[0], found[1])

    def sim_lstat(path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        found = where(path, dir_fd)
        if found is None:
            return real["lstat"](path, dir_fd=dir_fd)  # type: ignore[no-any-return]
        return disks.stat(found[0], found[1])

    def sim_truncate(path: Any, length: int) -> None:
        if isinstance(path, int) and path in files:
            disks.truncate_fd(path, length)
            return
        found = where(path)
        if found is None:
            real["truncate"](path, length)
        else:
            disks.truncate(found[0], found[1], length)

    def renamer(name: str) -> Callable[..., None]:
        def sim_rename(
            src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
        ) -> None:
            source = where(src, src_dir_fd)
            target = where(dst, dst_dir_fd)
            if source is None and target is None:
                real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                return
            if source is None or target is None or source[0] is not target[0]:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src, None, dst)
            disks.rename(source[0], source[1], target[1], target[2])

        sim_rename.__name__ = name
        return sim_rename

    def remover(name: str) -> Callable[..., None]:
        def sim_remove(path: Any, *, dir_fd: int | None = None) -> None:
            found = where(path, dir_fd)
            if found is None:
                real[name](path, dir_fd=dir_fd)
            else:
                disks.unlink(found[0], found[1])

        sim_remove.__name__ = name
        return sim_remove

    def sim_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        found = where(path, dir_fd)
        if found is None:
            real["mkdir"](path, mode, dir_fd=dir_fd)
        else:
            disks.mkdir(found[0], found[1])

    def sim_rmdir(path: Any, *, dir_fd: int | None = None) -> None:
        found = where(path, dir_fd)
        if found is None:
            real["rmdir"](path, dir_fd=dir_fd)
        else:
            disks.rmdir(found[0], found[1])

    def listing(path: Any) -> tuple[Mount, str, list[str]] | None:
        if isinstance(path, int):
            if not disks.is_dir_fd(path):
                return None
            mount, relative = disks.path_of(path)
            return mount, relative, disks.listdir(mount, relative)
        found = where("." if path is None else path)
        if found is None:
            return None
        return found[0], found[1], disks.listdir(found[0], found[1])

    def sim_listdir(path: Any = None) -> list[Any]:
        found = listing(path)
        if found is None:
            return real["listdir"]() if path is None else real["listdir"](path)  # type: ignore[no-any-return]
        names = found[2]
        if path is not None and not isinstance(path, int) and isinstance(os.fspath(path), bytes):
            return [os.fsencode(n) for n in names]
        return names

    def sim_scandir(path: Any = None) -> Any:
        found = listing(path)
        if found is None:
            return real["scandir"]() if path is None else real["scandir"](path)
        mount, relative, names = found
        entries = []
        for name in names:
            child = f"{relative}/{name}" if relative else name
            kind = disks.kind_of(mount, child) or "file"
            if isinstance(path, int):
                shown_name: Any = name
                shown_path: Any = name
            else:
                base = "." if path is None else path
                shown_name = same_type(base, name)
                shown_path = os.path.join(os.fspath(base), shown_name)

            def stat_of(child: str = child) -> os.stat_result:
                return disks.stat(mount, child)

            entries.append(_DirEntry(shown_name, shown_path, kind, stat_of))
        return _ScandirIterator(entries)

    def sim_access(
        path: Any,
        mode: int,
        *,
        dir_fd: int | None = None,
        effective_ids: bool = False,
        follow_symlinks: bool = True,
    ) -> bool:
        found = where(path, dir_fd)
        if found is None:
            return real["access"](  # type: ignore[no-any-return]
                path,
                mode,
                dir_fd=dir_fd,
                effective_ids=effective_ids,
                follow_symlinks=follow_symlinks,
            )
        return disks.kind_of(found[0], found[1]) is not None

    def existing(path: Any, dir_fd: int | None) -> bool:
        """For the calls that change nothing simulated: True if *path* is
        simulated (and exists: ENOENT otherwise)."""
        if isinstance(path, int) and path in files:
            disks.fstat(path)
            return True
        found = where(path, dir_fd)
        if found is None:
            return False
        disks.stat(found[0], found[1])
        return True

    def sim_utime(path: Any, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> None:
        if not existing(path, dir_fd):
            real["utime"](path, *args, dir_fd=dir_fd, **kwargs)

    def sim_chmod(path: Any, mode: int, *, dir_fd: int | None = None, **kwargs: Any) -> None:
        if not existing(path, dir_fd):
            real["chmod"](path, mode, dir_fd=dir_fd, **kwargs)

    def sim_fchmod(fd: int, mode: int) -> None:
        if fd in files:
            disks.fstat(fd)
        else:
            real["fchmod"](fd, mode)

    def sim_readlink(path: Any, *, dir_fd: int | None = None) -> Any:
        found = where(path, dir_fd)
        if found is None:
            return real["readlink"](path, dir_fd=dir_fd)
        disks.stat(found[0], found[1])
        raise error(errno.EINVAL, found[2])  # nothing simulated is a link

    def linker(name: str) -> Callable[..., None]:
        def sim_link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            target = where(dst)
            if where(src) is None and target is None:
                real[name](src, dst, *args, **kwargs)
                return
            raise OSError(errno.EOPNOTSUPP, f"{name} is not simulated", os.fspath(dst))

        sim_link.__name__ = name
        return sim_link

    def xattrs(name: str) -> Callable[..., Any]:
        def sim_xattr(path: Any, *args: Any, **kwargs: Any) -> Any:
            if (isinstance(path, int) and path in files) or where(path) is not None:
                raise OSError(errno.ENOTSUP, "extended attributes are not simulated")
            return real[name](path, *args, **kwargs)

        sim_xattr.__name__ = name
        return sim_xattr

    def copy(out_fd: int, in_fd: int, count: int, offset: int | None) -> int:
        if in_fd in files:
            data = disks.read(in_fd, count, offset)
        elif offset is None:
            data = real["read"](in_fd, count)
        else:
            data = real["pread"](in_fd, count, offset)
        if not data:
            return 0
        if out_fd in files:
            return disks.write(out_fd, data)
        return real["write"](out_fd, data)  # type: ignore[no-any-return]

    def sim_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int, *a: Any) -> int:
        if out_fd not in files and in_fd not in files:
            return real["sendfile"](out_fd, in_fd, offset, count, *a)  # type: ignore[no-any-return]
        return copy(out_fd, in_fd, count, offset)

    def sim_copy_file_range(
        src: int, dst: int, count: int, offset_src: int | None = None, offset_dst: int | None = None
    ) -> int:
        if src not in files and dst not in files:
            return real["copy_file_range"](  # type: ignore[no-any-return]
                src, dst, count, offset_src, offset_dst
            )
        if offset_dst is not None:
            raise error(errno.EXDEV)  # shutil then copies another way
        return copy(dst, src, count, offset_src)

    # -- open() -----------------------------------------------------------

    def sim_open(  # noqa: PLR0917 (open's signature)
        file: Any,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        closefd: bool = True,
        opener: Callable[[Any, int], int] | None = None,
    ) -> Any:
        args = (file, mode, buffering, encoding, errors, newline, closefd)
        if isinstance(file, int):
            if file not in files:
                return _real_open(*args, opener=opener)
        elif opener is None and where(file) is None:
            return _real_open(*args)
        flags = _validated(file, mode, buffering, encoding, errors, newline, closefd)
        if isinstance(file, int):
            fd = file
        else:
            file = os.fspath(file)
            fd = opener(file, flags) if opener is not None else sim_os_open(file, flags, 0o666)
            if fd not in files:  # an opener that opened a real file
                return _real_open(*args, opener=lambda *_: fd)
        binary = "b" in mode
        updating = "+" in mode
        if binary and buffering == 1:
            warnings.warn(
                "line buffering (buffering=1) isn't supported in binary mode, "
                "the default buffer size will be used",
                RuntimeWarning,
                2,
            )
        raw_mode = "".join(c for c in mode if c in "xrwa+")
        if disks.is_dir_fd(fd):
            if not isinstance(file, int):
                sim_close(fd)
            raise error(errno.EISDIR, file if not isinstance(file, int) else None)
        raw = SimFileIO(fd, raw_mode, closefd, disks, file)
        result: Any = raw
        try:
            line_buffering = False
            if buffering == 1 or (buffering < 0 and raw.isatty()):
                buffering = -1
                line_buffering = True
            if buffering < 0:
                buffering = io.DEFAULT_BUFFER_SIZE
                block = disks.fstat(fd).st_blksize
                if block > 1:
                    buffering = block
            if buffering == 0:
                if binary:
                    return result
                raise ValueError("can't have unbuffered text I/O")
            buffer: Any
            if updating:
                buffer = io.BufferedRandom(raw, buffering)
            elif "r" in mode:
                buffer = io.BufferedReader(raw, buffering)
            else:
                buffer = io.BufferedWriter(raw, buffering)
            result = buffer
            if binary:
                return result
            wrapper = io.TextIOWrapper(
                buffer, io.text_encoding(encoding), errors, newline, line_buffering
            )
            result = wrapper
            wrapper.mode = mode  # type: ignore[misc]
            return result
        except BaseException:
            result.close()
            raise

    replacements: dict[str, Callable[..., Any]] = {
        "open": sim_os_open,
        "close": sim_close,
        "read": sim_read,
        "write": sim_write,
        "pread": sim_pread,
        "pwrite": sim_pwrite,
        "lseek": sim_lseek,
        "fsync": sim_fsync,
        "fdatasync": sim_fdatasync,
        "fstat": sim_fstat,
        "ftruncate": sim_ftruncate,
        "dup": sim_dup,
        "stat": sim_stat,
        "lstat": sim_lstat,
        "truncate": sim_truncate,
        "rename": renamer("rename"),
        "replace": renamer("replace"),
        "remove": remover("remove"),
        "unlink": remover("unlink"),
        "mkdir": sim_mkdir,
        "rmdir": sim_rmdir,
        "listdir": sim_listdir,
        "scandir": sim_scandir,
        "access": sim_access,
        "utime": sim_utime,
        "chmod": sim_chmod,
        "fchmod": sim_fchmod,
        "readlink": sim_readlink,
        "sync": sim_sync,
        "sendfile": sim_sendfile,
        "copy_file_range": sim_copy_file_range,
        "link": linker("link"),
        "symlink": linker("symlink"),
        "listxattr": xattrs("listxattr"),
        "getxattr": xattrs("getxattr"),
        "setxattr": xattrs("setxattr"),
        "removexattr": xattrs("removexattr"),
    }
    import builtins

    everywhere: dict[int, tuple[Any, Any]] = {id(_real_open): (_real_open, sim_open)}
    # What the names hold now, when it is not the real call: a wrapper put
    # there since tideloop was imported (blockbuster's, a profiler's), which
    # a module imported since (aiofiles.os) may have taken as its own.
    for current in {id(io.open): io.open, id(builtins.open): builtins.open}.values():
        everywhere.setdefault(id(current), (current, sim_open))
    for name, fake in replacements.items():
        if name not in real:
            continue  # not on this platform
        current = getattr(os, name)
        patches.attribute(os, name, fake)
        everywhere[id(real[name])] = (real[name], fake)
        everywhere.setdefault(id(current), (current, fake))
    patches.attribute(io, "open", sim_open)
    patches.attribute(builtins, "open", sim_open)
    patches.everywhere(everywhere)


__all__ = ["SimFileIO", "install"]
