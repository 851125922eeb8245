"""The kernel model's fd table: which fds are simulated sockets, and which are ready.

Layer: testing (the simulation; above ``endpoints``, below ``kernel`` and
``loop_side``). An `FdTable` is the part of the kernel model that the
loop's poller sees (through ``loop_side.SimPoller``), and the model's own
epoll:

- the live simulated sockets of one network, by fd (`add`, `remove`), also
  entered in the process-wide ``endpoints.ENDPOINTS`` that sockets read;
- the interest set: the events the loop's poller watches each simulated
  fd for (`watch`, `unwatch`), emptied for each new loop's poller;
- the candidates: the fds whose readiness may have changed since the last
  poll (`touch`), and `ready`, which computes readiness for them only.

Invariants:
- Every live simulated socket's endpoint is in ``ENDPOINTS`` (by fd) and
  in ``_by_fd`` from `add` until `remove`; `ready` reports only fds found
  there, and `remove` forgets the fd's interest (the kernel may hand the
  number out again, for a real fd).
- Readiness is recomputed only for fds in ``_candidates``: every change to
  an endpoint's state that can make it ready calls `touch`, and an fd that
  is ready stays a candidate (level-triggered), so a poll costs the
  sockets that changed, not every socket.
"""

from __future__ import annotations

from tideloop._pollers import READ, WRITE

from .endpoints import ENDPOINTS, Endpoint


class FdTable:
    """One network's simulated fds (see the module docstring)."""

    __slots__ = ("_by_fd", "_candidates", "_interest")

    def __init__(self) -> None:
        self._by_fd: dict[int, Endpoint] = {}
        #: fd -> the events the loop's poller watches it for.
        self._interest: dict[int, int] = {}
        self._candidates: dict[int, None] = {}

    # -- the sockets (the kernel model asks) -----------------------------------

    def add(self, fd: int, ep: Endpoint) -> None:
        """*ep* is the socket of *fd* from now on."""
        ep.fd = fd
        ENDPOINTS[fd] = ep
        self._by_fd[fd] = ep

    def remove(self, ep: Endpoint) -> None:
        """*ep*'s socket closed (or was collected)."""
        if ENDPOINTS.get(ep.fd) is ep:
            del ENDPOINTS[ep.fd]
        if self._by_fd.get(ep.fd) is ep:
            del self._by_fd[ep.fd]
            self._candidates.pop(ep.fd, None)
            self._interest.pop(ep.fd, None)

    def endpoints(self) -> list[Endpoint]:
        """Every live simulated socket's endpoint, in the order they were added."""
        return list(self._by_fd.values())

    def touch(self, ep: Endpoint) -> None:
        """*ep*'s readiness may have changed: the next poll looks at it."""
        if ep.fd >= 0 and not ep.closed:
            self._candidates[ep.fd] = None

    # -- readiness (the loop's poller asks) ------------------------------------

    def is_simulated(self, fd: int) -> bool:
        """Whether *fd* is a live simulated socket's."""
        return fd in self._by_fd

    def new_poller(self) -> None:
        """A new loop's poller: it watches nothing yet."""
        self._interest = {}

    def watching(self, fd: int) -> bool:
        return fd in self._interest

    def watch(self, fd: int, events: int) -> None:
        self._interest[fd] = events
        self._candidates[fd] = None

    def unwatch(self, fd: int) -> bool:
        """Stop watching *fd*; False if it was not watched here."""
        return self._interest.pop(fd, None) is not None

    def ready(self) -> list[tuple[int, int]]:
        """The watched fds that are ready now, with their events."""
        ready: list[tuple[int, int]] = []
        candidates = self._candidates
        if candidates:
            by_fd = self._by_fd
            interest = self._interest
            still: dict[int, None] = {}
            for fd in candidates:
                mask = interest.get(fd)
                ep = by_fd.get(fd)
                if not mask or ep is None:
                    continue
                bits = 0
                if mask & READ and ep.readable():
                    bits |= READ
                if mask & WRITE and ep.writable():
                    bits |= WRITE
                if bits:
                    ready.append((fd, bits))
                    still[fd] = None  # level-triggered: asked again next poll
            self._candidates = still
        return ready
