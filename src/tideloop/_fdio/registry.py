"""FdLoop: the fd registry (fd -> reader and writer callbacks).

Layer: fd I/O. This class owns the poller's interest set: every kernel
registration goes through `_sync`, one function, so the poller's state and
ours cannot drift apart (the structure trio's epoll backend uses). It turns
poll results into queued callbacks (`_process_events`, called from the core's
`_run_once`) and provides asyncio's ``add_reader`` family.

Semantics are asyncio's selector loop:

- One reader and one writer per fd. Adding a reader where one exists
  replaces it and cancels the old handle; removing returns True only if a
  callback was registered.
- A reader/writer handle is created once per registration and re-queued on
  every readiness event (no allocation per event). A handle found cancelled
  when its fd fires is unregistered then.
- An fd may be given as an int or as an object with ``fileno()``; a negative
  or unusable one raises ValueError, as selectors does.
- Kernel errors surface as asyncio shows them: registering a closed fd
  raises OSError (EBADF) and registers nothing; regular files raise
  PermissionError under epoll. If the kernel refuses to *change* an fd's
  mask, the fd is dropped entirely (reader and writer) before the error
  propagates: that is what asyncio's selector does, and it leaves no entry
  whose kernel state is unknown.
- Removing callbacks of an fd that was closed meanwhile works and returns
  True (the poller ignores the kernel's complaint).
- After ``close()``, ``remove_*`` return False and ``add_*`` raise.

Invariants:
- ``_masks[fd]`` is exactly what the poller has registered for fd, and is
  ``READ if fd in _readers`` | ``WRITE if fd in _writers`` after every `_sync`
  that returns normally.
- ``_fd_transports`` maps an fd to the transport using it, so that the public
  methods can refuse to touch an fd a transport owns (asyncio's rule).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, TypeVarTuple, Unpack

from tideloop._core.clock import Clock
from tideloop._core.handles import Handle
from tideloop._core.run import CoreLoop
from tideloop._pollers import READ, READER_BITS, WRITE, WRITER_BITS, Poller

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


class FdLoop(CoreLoop):
    def __init__(self, *, poller: Poller | str | None = None, clock: Clock | None = None) -> None:
        super().__init__(poller=poller, clock=clock)
        self._readers: dict[int, asyncio.Handle] = {}
        self._writers: dict[int, asyncio.Handle] = {}
        self._masks: dict[int, int] = {}
        self._fd_transports: weakref.WeakValueDictionary[int, asyncio.BaseTransport] = (
            weakref.WeakValueDictionary()
        )
        # fds the loop itself registered (the waker, the signal pipe).
        self._internal_fds = 0
        self._add_reader(self._waker.fileno(), self._waker.drain)
        self._internal_fds += 1

    # ------------------------------------------------------------------
    # Dispatch: called by the core once per poll that returned events.

    def _process_events(self, events: list[tuple[int, int]]) -> None:
        readers = self._readers
        writers = self._writers
        append = self._ready.append
        for fd, bits in events:
            if bits & READER_BITS:
                handle = readers.get(fd)
                if handle is not None:
                    if handle._cancelled:
                        self._remove_reader(fd)
                    else:
                        append(handle)
            if bits & WRITER_BITS:
                handle = writers.get(fd)
                if handle is not None:
                    if handle._cancelled:
                        self._remove_writer(fd)
                    else:
                        append(handle)

    # ------------------------------------------------------------------
    # The single owner of kernel registration state.

    def _sync(self, fd: int) -> None:
        want = (READ if fd in self._readers else 0) | (WRITE if fd in self._writers else 0)
        have = self._masks.get(fd, 0)
        if want == have:
            return
        poller = self._poller
        if not want:
            del self._masks[fd]
            poller.unregister(fd)
            return
        try:
            if have:
                poller.modify(fd, want)
            else:
                poller.register(fd, want)
        except BaseException:
            self._readers.pop(fd, None)
            self._writers.pop(fd, None)
            if have:
                del self._masks[fd]
                poller.unregister(fd)
            raise
        self._masks[fd] = want

    # ------------------------------------------------------------------
    # Internal twins (no transport check): used by the loop and transports.

    def _add_reader(
        self, fd: FileDescriptorLike, callback: Callable[..., object], *args: Any
    ) -> asyncio.Handle:
        self._check_closed()
        return self._set_reader(fd_of(fd), Handle(callback, args, self, None))

    def _set_reader(self, fd: int, handle: asyncio.Handle) -> asyncio.Handle:
        old = self._readers.get(fd)
        self._readers[fd] = handle
        self._sync(fd)
        if old is not None:
            old.cancel()
        return handle

    def _remove_reader(self, fd: FileDescriptorLike) -> bool:
        if self._closed:
            return False
        fd = fd_of(fd)
        handle = self._readers.pop(fd, None)
        if handle is None:
            return False
        self._sync(fd)
        handle.cancel()
        return True

    def _detach_reader(self, fd: int) -> None:
        """Unregister fd's reader *without cancelling its handle*.

        For owners (transports) that keep one handle and re-register it with
        `_set_reader` on resume: a cancelled handle cannot run again. The
        handle may already be queued for this iteration, so its callback must
        check its owner's state before acting.
        """
        if self._readers.pop(fd, None) is not None:
            self._sync(fd)

    def _add_writer(
        self, fd: FileDescriptorLike, callback: Callable[..., object], *args: Any
    ) -> asyncio.Handle:
        self._check_closed()
        return self._set_writer(fd_of(fd), Handle(callback, args, self, None))

    def _set_writer(self, fd: int, handle: asyncio.Handle) -> asyncio.Handle:
        old = self._writers.get(fd)
        self._writers[fd] = handle
        self._sync(fd)
        if old is not None:
            old.cancel()
        return handle

    def _remove_writer(self, fd: FileDescriptorLike) -> bool:
        if self._closed:
            return False
        fd = fd_of(fd)
        handle = self._writers.pop(fd, None)
        if handle is None:
            return False
        self._sync(fd)
        handle.cancel()
        return True

    def _detach_writer(self, fd: int) -> None:
        """Unregister fd's writer without cancelling its handle (see `_detach_reader`)."""
        if self._writers.pop(fd, None) is not None:
            self._sync(fd)

    # ------------------------------------------------------------------
    # Public API

    def _ensure_fd_no_transport(self, fd: FileDescriptorLike) -> None:
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        transport = self._fd_transports.get(fileno)
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def add_reader(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
    ) -> None:
        self._ensure_fd_no_transport(fd)
        self._add_reader(fd, callback, *args)

    def remove_reader(self, fd: FileDescriptorLike) -> bool:
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)

    def add_writer(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
    ) -> None:
        self._ensure_fd_no_transport(fd)
        self._add_writer(fd, callback, *args)

    def remove_writer(self, fd: FileDescriptorLike) -> bool:
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)

    # ------------------------------------------------------------------

    def _close(self) -> None:
        self._remove_reader(self._waker.fileno())
        self._internal_fds -= 1
        self._readers.clear()
        self._writers.clear()
        self._masks.clear()
        super()._close()
