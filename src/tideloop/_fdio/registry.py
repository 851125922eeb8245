"""The fd registry (fd -> reader and writer handles) and asyncio's ``add_reader`` family.

Layer: fd I/O. `FdRegistry` is a component: the Loop builds one, hands it to
the core as its `IoSource` and to every transport, operation and component
that watches fds. It is the only owner of the poller's interest set: every
kernel registration goes through `FdRegistry._sync`, one function, so the
poller's state and ours cannot drift apart (the structure of trio's epoll
backend). It turns poll results into queued callbacks (`dispatch`, called
from the core's ``_run_once``). `FdMethods` is the loop's public face of it.

Semantics are asyncio's selector loop:

- One reader and one writer per fd. Adding a reader where one exists
  replaces it and cancels the old handle; removing returns True only if a
  callback was registered.
- A reader/writer handle is created once per registration and re-queued on
  every readiness event (no allocation per event). A handle found cancelled
  when its fd fires is unregistered then.
- An fd may be given as an int or as an object with ``fileno()``; a negative
  or unusable one raises ValueError, as selectors does. Like selectors,
  ``remove_*`` also accepts the object a registration was made with after
  it was closed (a closed socket's ``fileno()`` is -1): the registry keeps
  the objects given to ``add_*`` (``fileobjs``) and finds it among them.
- Kernel errors surface as asyncio shows them: registering a closed fd
  raises OSError (EBADF) and registers nothing; regular files raise
  PermissionError under epoll. If the kernel refuses to *change* an fd's
  mask, the fd is dropped entirely (reader and writer) before the error
  propagates: that is what asyncio's selector does, and it leaves no entry
  whose kernel state is unknown.
- Removing callbacks of an fd that was closed meanwhile works and returns
  True (the poller ignores the kernel's complaint).
- After the loop closes, ``remove_*`` return False and ``add_*`` raise.

Invariants:
- ``_masks[fd]`` is exactly what the poller has registered for fd, and is
  ``READ if fd in readers`` | ``WRITE if fd in writers`` after every `_sync`
  that returns normally.
- ``transports`` maps an fd to the transport using it, so that the public
  methods can refuse to touch an fd a transport owns (asyncio's rule).
- ``_internal`` holds the fds the loop's own components registered (the
  waker, the signal pipe, child pidfds); `user_fds` is everything else.
- ``_wake_only`` holds the registered fds whose readiness only means "the
  ready queue grew" (the loop's waker), which the core sees without
  polling; it is a subset of ``_masks``. ``polled`` is
  ``len(_masks) - len(_wake_only)``, recounted by `_count_polled` whenever
  either changes: the fds whose readiness is an event of their own. The
  core skips a zero-timeout poll while it is 0 (``CoreLoop._run_once``).
- ``fileobjs`` has an entry only for a registered fd, and only if its
  registration was made through ``add_*`` with an object rather than an int.
- `read_buffer` is scratch space shared by the loop's transports (their
  large reads, see ``_transports/stream``): what one read put there is valid
  only until the next read, so a reader copies it out before calling any code
  that could read again. One loop runs in one thread, so no two reads overlap.
"""

from __future__ import annotations

import asyncio
import select
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVarTuple, Unpack

from tideloop._core import native
from tideloop._core.coreloop import CoreLoop
from tideloop._core.handles import Handle, ReadyQueue
from tideloop._pollers import READ, READER_BITS, WRITE, WRITER_BITS, Poller

#: Size of `FdRegistry.read_buffer`. asyncio reads up to 256 KiB; a read
#: copied out of this buffer makes a bytes object of its size, and below 128
#: KiB (glibc's default mmap threshold) that comes from the heap instead of a
#: fresh mapping that page-faults on the copy.
#:
#: Facts / what this means for us: that holds where a bytes object is freed
#: as soon as it is dropped (CPython). PyPy frees it at its next collection,
#: so a bulk stream leaves thousands of dead 120 KiB blocks in the heap
#: between collections, and glibc does not give that memory back: a 1 GiB
#: transfer grew the process by 90-480 MiB (the stdlib loop, whose reads are
#: 256 KiB and so mapped and unmapped, by 3 MiB). On PyPy the reads are 256
#: KiB too: measured 3-4 MiB of growth, and the transfer 10% faster
#: (tests/faults/test_fault_flow.py).
READ_BUFFER_SIZE: Final = 256 * 1024 if sys.implementation.name == "pypy" else 120 * 1024

_Ts = TypeVarTuple("_Ts")

#: An fd number or an object with fileno().
FileDescriptorLike = Any


def fd_of(fileobj: FileDescriptorLike) -> int:
    """The fd number of *fileobj*, with selectors' errors."""
    if type(fileobj) is int:
        fd = fileobj
    else:
        try:
            fd = int(fileobj if isinstance(fileobj, int) else fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


class FdRegistry:
    __slots__ = (
        "_internal",
        "_masks",
        "_poller",
        "_read_view",
        "_ready",
        "_wake_only",
        "closed",
        "fileobjs",
        "poll",
        "polled",
        "readers",
        "transports",
        "writers",
    )

    def __init__(self, poller: Poller, ready: ReadyQueue) -> None:
        self._poller = poller
        self._ready = ready
        #: The poller's poll, for the core (`IoSource.poll`).
        self.poll = poller.poll
        self.readers: dict[int, asyncio.Handle] = {}
        self.writers: dict[int, asyncio.Handle] = {}
        self._masks: dict[int, int] = {}
        self._internal: set[int] = set()
        self._wake_only: set[int] = set()
        #: Registered fds whose events the core must poll for (see the invariants).
        self.polled = 0
        #: The objects `FdMethods.add_reader`/`add_writer` were given, by fd.
        self.fileobjs: dict[int, object] = {}
        self.transports: weakref.WeakValueDictionary[int, asyncio.BaseTransport] = (
            weakref.WeakValueDictionary()
        )
        self.closed = False
        self._read_view: memoryview | None = None

    @property
    def poller(self) -> Poller:
        return self._poller

    def read_buffer(self) -> memoryview:
        """The loop's scratch buffer for large reads (`READ_BUFFER_SIZE`), made on first use."""
        view = self._read_view
        if view is None:
            view = self._read_view = memoryview(bytearray(READ_BUFFER_SIZE))
        return view

    # ------------------------------------------------------------------
    # Dispatch: called by the core once per poll that returned events.

    def dispatch(self, events: list[tuple[int, int]]) -> None:
        readers = self.readers
        writers = self.writers
        append = self._ready.append
        for fd, bits in events:
            if bits & READER_BITS:
                handle = readers.get(fd)
                if handle is not None:
                    if handle._cancelled:
                        self.remove_reader(fd)
                    else:
                        append(handle)
            if bits & WRITER_BITS:
                handle = writers.get(fd)
                if handle is not None:
                    if handle._cancelled:
                        self.remove_writer(fd)
                    else:
                        append(handle)

    # ------------------------------------------------------------------
    # The single owner of kernel registration state.

    def _sync(self, fd: int) -> None:
        want = (READ if fd in self.readers else 0) | (WRITE if fd in self.writers else 0)
        have = self._masks.get(fd, 0)
        if want == have:
            return
        poller = self._poller
        if not want:
            del self._masks[fd]
            self._wake_only.discard(fd)
            self._count_polled()
            if self.fileobjs:
                self.fileobjs.pop(fd, None)
            poller.unregister(fd)
            return
        try:
            if have:
                poller.modify(fd, want)
            else:
                poller.register(fd, want)
        except BaseException:
            self.readers.pop(fd, None)
            self.writers.pop(fd, None)
            self.fileobjs.pop(fd, None)
            if have:
                del self._masks[fd]
                self._wake_only.discard(fd)
                self._count_polled()
                poller.unregister(fd)
            raise
        self._masks[fd] = want
        if not have:
            self._count_polled()

    def _count_polled(self) -> None:
        self.polled = len(self._masks) - len(self._wake_only)

    # ------------------------------------------------------------------
    # Registrations. *fd* is an int here; `fd_of` converts at the edges.

    def set_reader(self, fd: int, handle: asyncio.Handle) -> None:
        """Make *handle* fd's reader; a previous reader's handle is cancelled."""
        old = self.readers.get(fd)
        self.readers[fd] = handle
        self._sync(fd)
        if old is not None and old is not handle:
            old.cancel()

    def remove_reader(self, fd: int) -> bool:
        """Unregister and cancel fd's reader; False if there was none."""
        if self.closed:
            return False
        handle = self.readers.pop(fd, None)
        if handle is None:
            return False
        self._sync(fd)
        handle.cancel()
        return True

    def remove_reader_if(self, fd: int, handle: asyncio.Handle) -> None:
        """Remove fd's reader only if it is still *handle* (not a later one)."""
        if self.readers.get(fd) is handle:
            self.remove_reader(fd)

    def detach_reader(self, fd: int) -> None:
        """Unregister fd's reader *without cancelling its handle*.

        For owners (transports) that keep one handle and re-register it with
        `set_reader` on resume: a cancelled handle cannot run again. The
        handle may already be queued for this iteration, so its callback must
        check its owner's state before acting.
        """
        if self.readers.pop(fd, None) is not None:
            self._sync(fd)

    def set_writer(self, fd: int, handle: asyncio.Handle) -> None:
        old = self.writers.get(fd)
        self.writers[fd] = handle
        self._sync(fd)
        if old is not None and old is not handle:
            old.cancel()

    def remove_writer(self, fd: int) -> bool:
        if self.closed:
            return False
        handle = self.writers.pop(fd, None)
        if handle is None:
            return False
        self._sync(fd)
        handle.cancel()
        return True

    def remove_writer_if(self, fd: int, handle: asyncio.Handle) -> None:
        if self.writers.get(fd) is handle:
            self.remove_writer(fd)

    def detach_writer(self, fd: int) -> None:
        """Unregister fd's writer without cancelling its handle (see `detach_reader`)."""
        if self.writers.pop(fd, None) is not None:
            self._sync(fd)

    # ------------------------------------------------------------------
    # The loop's own fds

    def add_internal_reader(
        self, fd: int, handle: asyncio.Handle, *, wake_only: bool = False
    ) -> None:
        """Register a reader for an fd the loop itself owns (waker, signal pipe, ...).

        *wake_only*: the fd's readiness means nothing but "wake up" (the
        waker), so it does not count in ``polled``.
        """
        self.set_reader(fd, handle)
        if wake_only:
            self._wake_only.add(fd)
            self._count_polled()
        self._internal.add(fd)

    def remove_internal_reader(self, fd: int) -> None:
        self._internal.discard(fd)
        self._wake_only.discard(fd)
        self.remove_reader(fd)

    def registrations(self) -> int:
        """Readers plus writers registered now, the loop's own included."""
        return len(self.readers) + len(self.writers)

    def user_fds(self) -> list[int]:
        """Registered fds that are not the loop's own: what a test may not leave behind."""
        return [fd for fd in self.readers.keys() | self.writers.keys() if fd not in self._internal]

    # ------------------------------------------------------------------

    def registered_fd(self, fileobj: FileDescriptorLike) -> int:
        """*fileobj*'s fd; if it has none any more, the fd it was registered with.

        selectors' lookup: a closed socket still finds its registration.
        The ValueError of `fd_of` is raised if it has none.
        """
        try:
            return fd_of(fileobj)
        except ValueError:
            for fd, obj in self.fileobjs.items():
                if obj is fileobj:
                    return fd
            raise

    def check_no_transport(self, fd: FileDescriptorLike) -> None:
        """asyncio's rule: the public fd methods must not touch a transport's fd."""
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        transport = self.transports.get(fileno)
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def close(self) -> None:
        """Forget every registration and close the poller (the loop is closing)."""
        if self.closed:
            return
        self.closed = True
        self.readers.clear()
        self.writers.clear()
        self.fileobjs.clear()
        self._masks.clear()
        self._internal.clear()
        self._wake_only.clear()
        self.polled = 0
        self._read_view = None
        self._poller.close()


class FdMethods(CoreLoop):
    """``add_reader``, ``remove_reader``, ``add_writer``, ``remove_writer``."""

    _fds: FdRegistry

    def add_reader(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
    ) -> None:
        self._fds.check_no_transport(fd)
        self._check_closed()
        fds = self._fds
        fileno = fd_of(fd)
        fds.set_reader(fileno, Handle(callback, args, self, None))
        if type(fd) is not int:
            fds.fileobjs[fileno] = fd

    def remove_reader(self, fd: FileDescriptorLike) -> bool:
        self._fds.check_no_transport(fd)
        if self._closed:
            return False
        return self._fds.remove_reader(self._fds.registered_fd(fd))

    def add_writer(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
    ) -> None:
        self._fds.check_no_transport(fd)
        self._check_closed()
        fds = self._fds
        fileno = fd_of(fd)
        fds.set_writer(fileno, Handle(callback, args, self, None))
        if type(fd) is not int:
            fds.fileobjs[fileno] = fd

    def remove_writer(self, fd: FileDescriptorLike) -> bool:
        self._fds.check_no_transport(fd)
        if self._closed:
            return False
        return self._fds.remove_writer(self._fds.registered_fd(fd))


# The native core runs this registry's dispatch itself (the same code, in
# C, without a frame per iteration), when it is the one the core polls; and
# when the poller's poll is select.epoll's own, it makes that epoll_wait
# itself and dispatches from its own buffer (no tuple per event).
if native.core is not None:
    native.core.configure_dispatch(
        FdRegistry.dispatch, READER_BITS, WRITER_BITS, getattr(select, "epoll", None)
    )
