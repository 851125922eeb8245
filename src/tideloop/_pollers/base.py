"""The poller interface: kernel readiness, nothing else.

Layer: pollers (the lowest). A poller holds the kernel's interest set (which
file descriptors, read and/or write) and reports which descriptors are ready.
It knows nothing of callbacks, handles, sockets or the loop; the fd registry
(`tideloop._fdio.registry`) is its only client and owns all bookkeeping.

Event bits are poll(2)'s, on every platform: READ is POLLIN (1) and WRITE is
POLLOUT (4). `poll()` returns ``(fd, bits)`` pairs where *bits* are the kernel's
raw bits, so error bits (ERR, HUP, NVAL) can appear. Their meaning for the
caller is fixed here, once: any bit other than WRITE lets the reader run and
any bit other than READ lets the writer run (the `selectors` module makes the
same choice), so an error reaches both callbacks, and each sees it from its
own syscall.

Invariants the registry relies on:

- ``register`` is called only for an fd that is not registered, ``modify``
  only for one that is, with a non-zero mask. ``register``/``modify`` raise the
  kernel's error (``OSError``) and leave nothing half-done.
- ``unregister`` never raises: the fd may already be closed, which (for epoll
  and kqueue) removed it from the kernel set already.
- ``poll(timeout)``: ``None`` blocks, ``0`` returns at once, otherwise seconds,
  rounded *up* to the kernel's resolution so a deadline is never woken early
  (waking early makes the loop spin until the deadline).
"""

from __future__ import annotations

from typing import Final, Protocol

READ: Final = 1  # POLLIN / EPOLLIN
WRITE: Final = 4  # POLLOUT / EPOLLOUT

#: Bits that mean "the reader may run" / "the writer may run" (see module docstring).
READER_BITS: Final = ~WRITE
WRITER_BITS: Final = ~READ


class Poller(Protocol):
    """What the fd registry needs from a kernel readiness mechanism."""

    #: "epoll", "kqueue", "poll", ...: shown in reprs and chosen by name.
    name: str

    def fileno(self) -> int:
        """The poller's own fd, or -1 if it has none (poll)."""
        ...

    def register(self, fd: int, events: int) -> None: ...

    def modify(self, fd: int, events: int) -> None: ...

    def unregister(self, fd: int) -> None: ...

    def poll(self, timeout: float | None) -> list[tuple[int, int]]: ...

    def close(self) -> None: ...
