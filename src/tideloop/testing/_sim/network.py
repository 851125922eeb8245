"""SimNetwork: the simulation as a test author drives it (hosts, links, faults).

Layer: testing (the simulation's top: above ``loop_side``, ``kernel`` and
``links``). A `SimNetwork` is the one object a test makes and hands to
the loop (``tideloop.testing.new_event_loop(network=net)``). It builds the
simulation's parts once and holds them:

- the kernel model (``kernel.Kernel``), drawing from a generator seeded
  with *seed*, and the `Links` between hosts, with the defaults given here;
- the loop's side (``loop_side.LoopSide``), which answers what the loop
  asks of a ``tideloop._fdio.network.Network``: `SimNetwork` forwards
  `wrap_poller`, `attach`, `socket`, `adopt` and `getaddrinfo` to it, and
  says which fds are simulated (`is_simulated`).

Its own methods are the test API: hosts (`host`, `address`,
`current_host`, `host_of`), tasks on hosts (`spawn`), links (`set_link`,
`set_latency`), faults (`partition`, `heal`, `reset`, `crash`,
`restart`), the fault points of a test's own code (`sometimes_fires`,
behind ``tideloop.testing.sometimes``), each host's wall clock
(`set_clock`, `wall_time`: ``clocks``) and disks (`mount`, `disk_fault`,
`disks`: ``disk``; a crash loses what was not synced). What each means to a program is
the model in the package docstring (``tideloop.testing._sim``).

Invariants:
- Every fault and link change is recorded in the event log (`log`) at the
  virtual time it is made, before any message it affects moves (messages
  move on the loop's timers), so a log reads as the run happened.
- A fault point is enabled or not per site and seed, from a generator of
  its own (not the network's): adding a site elsewhere changes neither
  which sites a seed enables nor the network's draws.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import os
import random
import socket
from collections.abc import Coroutine
from typing import Any, Literal

from tideloop._pollers import Poller

from .clocks import EPOCH, HostClocks
from .disk import Disks, Mount, Unsynced
from .endpoints import Host
from .kernel import HOST, Kernel, LogEntry
from .links import DEFAULT_LATENCY, Link, Links, Pair
from .loop_side import LoopSide

#: SimNetwork has a method named socket: annotations there say this.
_Socket = socket.socket


class SimNetwork:
    """A simulated network of hosts for one loop (see the module docstring).

    *seed* seeds the generator that draws latencies and faults. *real*: what
    a name or address no host has means: ``"refuse"`` (it does not exist)
    or ``"allow"`` (the real network's, through real sockets). *latency*,
    *loss*, *duplicate*, *split* and *bandwidth*: every link's, until
    `set_link` says otherwise for a pair of hosts. *buggify*: whether
    ``tideloop.testing.sometimes()`` fires (on some seeds) in its runs.
    *seed_globals*: whether ``tideloop.testing.run`` and the ``tideloop_net``
    fixture seed ``random`` and ``os.urandom`` (unless not *urandom*) and
    make ``time.time``/``time.monotonic`` virtual for the run.

    A network serves one loop at a time; once that loop is closed it may
    serve another (a test's next run), keeping its hosts.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: tuple[float, float] = DEFAULT_LATENCY,
        loss: float = 0.0,
        duplicate: float = 0.0,
        split: float = 0.0,
        bandwidth: float | None = None,
        real: Literal["refuse", "allow"] = "refuse",
        buggify: bool = True,
        seed_globals: bool = True,
        urandom: bool = True,
    ) -> None:
        if real not in ("refuse", "allow"):
            raise ValueError(f"real must be 'refuse' or 'allow', not {real!r}")
        self.seed = seed
        #: Whether ``tideloop.testing.sometimes()`` may fire in this network's runs.
        self.buggify = buggify
        #: Whether runs seed ``random``, ``os.urandom`` (*urandom*) and make
        #: ``time.time``/``time.monotonic`` virtual (``tideloop.testing._world``).
        self.seed_globals = seed_globals
        self.urandom = urandom
        self._sites: dict[str, bool] = {}
        self._sometimes_rng = random.Random(f"tideloop:{seed}:sometimes")
        default = Link()
        default.set(latency, loss, duplicate, split, bandwidth)
        self._links = Links(default)
        self._kernel = Kernel(random.Random(seed), self._links)
        self._side = LoopSide(self._kernel, real)
        self._clocks = HostClocks()
        self._disks = Disks(
            seed,
            self._kernel.record,
            self.sometimes_fires,
            self.wall_time,
        )
        #: The tasks `spawn` started that are not done: asyncio holds tasks
        #: weakly, so a server nobody else refers to would be collected in
        #: the middle of its run. The run's end cancels them (``asyncio.run``
        #: and ``testing.run`` cancel every task left), `crash` its host's.
        self._spawned: set[asyncio.Task[Any]] = set()

    @property
    def real(self) -> Literal["refuse", "allow"]:
        """What a name or address no host has means (``"refuse"`` or ``"allow"``)."""
        return self._side.real

    @property
    def log(self) -> list[LogEntry]:
        """What happened, in order: (virtual time, event, from host, to host, detail)."""
        return self._kernel.log

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop this network serves (the last one attached; None before any)."""
        return self._kernel.loop

    # -- what the loop asks (tideloop._fdio.network.Network): the loop side ------

    def wrap_poller(self, poller: Poller) -> Poller:
        return self._side.wrap_poller(poller)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        # A new loop: the tasks spawned on the last one (closed, or the side
        # refuses this one) are that run's, and go with it.
        self._spawned = {t for t in self._spawned if t.get_loop() is loop}
        self._side.attach(loop)

    def socket(self, family: int, type: int, proto: int, remote: Any = None) -> _Socket:
        return self._side.socket(family, type, proto, remote)

    def adopt(self, sock: _Socket, remote: Any = None) -> None:
        """Make a socket the program created itself simulated, in place, if it is
        the simulation's to carry (``loop_side.LoopSide.adopt``)."""
        self._side.adopt(sock, remote)

    def getaddrinfo(  # noqa: PLR0917 (socket.getaddrinfo's order)
        self, host: Any, port: Any, family: int, type: int, proto: int, flags: int
    ) -> list[tuple[Any, ...]] | None:
        return self._side.getaddrinfo(host, port, family, type, proto, flags)

    def is_simulated(self, fd: int) -> bool:
        """Whether *fd* is one of this network's live simulated sockets (a read only)."""
        return self._kernel.fds.is_simulated(fd)

    # -- hosts -------------------------------------------------------------

    def host(self, name: str) -> Host:
        """The host named *name*, created (with the next free address) on first use."""
        return self._kernel.host(name)

    def address(self, name: str) -> str:
        """The address of host *name*."""
        return self._kernel.host(name).address

    def current_host(self) -> Host:
        """The host the running code is on (``"client"`` outside every host)."""
        return self._kernel.current_host()

    def host_at(self, address: str) -> str | None:
        """The name of the host with *address* (None: no host has it)."""
        host = self._kernel.host_at(address)
        return None if host is None else host.name

    def host_of(self, task: asyncio.Task[Any]) -> str | None:
        """The name of the host *task* runs on (None: outside every host, on ``"client"``)."""
        host = self._side.host_of(task)
        return None if host is None else host.name

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start *coro* as a task on *host*: its sockets, and its tasks', are that host's.

        The network keeps the task until it is done (a server spawned and
        forgotten runs on); `crash` cancels it, and so does the end of the
        run (``asyncio.run`` and ``testing.run`` cancel the tasks left)."""
        loop = self._kernel.running_loop()
        h = self._kernel.host(host)
        if not h.up:
            coro.close()
            raise RuntimeError(f"host {host!r} is down (crash() it was; restart() it)")
        context = contextvars.copy_context()
        context.run(HOST.set, h)
        task = loop.create_task(coro, context=context)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    @property
    def spawned(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks `spawn` (and `restart`) started on the current loop that are not done."""
        return frozenset(self._spawned)

    # -- clocks ------------------------------------------------------------

    def set_clock(
        self, host: str, *, offset: float | None = None, drift: float | None = None
    ) -> None:
        """Set the wall clock code on *host* reads (``time.time()``,
        ``datetime.now()``): *offset* seconds ahead of the loop's clock now
        (negative: behind; not given: where it is, so it does not jump), and
        from now on gaining *drift* seconds a second (0.01: 1% fast; not
        given: unchanged). The loop's time, its timers and ``time.monotonic()``
        stay the same on every host (see ``clocks``)."""
        self._kernel.host(host)
        now = self._now()
        offset, drift = self._clocks.set(host, now, offset=offset, drift=drift)
        self._kernel.record("clock", host, host, f"offset={offset:+g} drift={drift:+g}")

    def wall_time(self, host: str | None = None, *, now: float | None = None) -> float:
        """The wall-clock time on *host* (None: the host the running code is
        on), in seconds since the Unix epoch, at loop time *now* (None: the
        loop's time now)."""
        name = self._kernel.current_host().name if host is None else host
        at = self._now() if now is None else now
        return EPOCH + at + self._clocks.offset(name, at)

    def _now(self) -> float:
        loop = self._kernel.loop
        return loop.time() if loop is not None else 0.0

    # -- disks -------------------------------------------------------------

    @property
    def disks(self) -> Disks:
        """The simulated file systems of every host (``disk.Disks``)."""
        return self._disks

    def mount(
        self,
        host: str,
        path: str | os.PathLike[str],
        *,
        capacity: int | None = None,
        unsynced: Unsynced = "torn",
        faults: float = 0.0,
    ) -> Mount:
        """Simulate the file system under *path* (absolute) for code on *host*:
        every file and directory there is the simulation's (empty at first),
        and the same path on another host is another one. A crash of *host*
        keeps only what was made durable (``fsync``, a directory's ``fsync``
        for names), tearing or losing the rest (*unsynced*: ``"torn"`` or
        ``"lost"``). *capacity*: bytes it holds (``ENOSPC`` past it).
        *faults*: the probability that a write or ``fsync`` fault point fires
        (on the seeds that enable it), failing with ``EIO`` or ``ENOSPC``.
        See ``disk`` for the model."""
        self._kernel.host(host)
        return self._disks.mount(
            host, os.fspath(path), capacity=capacity, unsynced=unsynced, faults=faults
        )

    def disk_fault(
        self,
        host: str,
        error: str | int = "EIO",
        *,
        path: str | os.PathLike[str] | None = None,
        calls: tuple[str, ...] = ("write", "fsync"),
        count: int = 1,
    ) -> None:
        """Fail the next *count* of *host*'s simulated *calls* (``"write"``,
        ``"fsync"``) on *path* (a file, or everything under a directory; None:
        any) with *error* (``"EIO"``, ``"ENOSPC"`` or an errno)."""
        code = getattr(errno, error) if isinstance(error, str) else int(error)
        unknown = set(calls) - {"write", "fsync"}
        if unknown:
            raise ValueError(f"calls are 'write' and 'fsync', not {sorted(unknown)}")
        where = None if path is None else os.path.normpath(os.fspath(path))
        self._disks.inject(host, code, path=where, calls=frozenset(calls), count=count)
        self._kernel.record("disk-fault-set", host, host, f"{errno.errorcode[code]} x{count}")

    # -- faults ------------------------------------------------------------

    def sometimes_fires(self, site: str, probability: float) -> bool:
        """Whether the fault point at *site* fires now (``tideloop.testing.sometimes``):
        never unless *site* is enabled for this seed, then with *probability*."""
        enabled = self._sites.get(site)
        if enabled is None:
            # Per site and seed, not drawn from a shared stream: adding a
            # site elsewhere does not change which sites this seed enables.
            enabled = random.Random(f"tideloop:{self.seed}:{site}").random() < 0.5
            self._sites[site] = enabled
        fired = enabled and self._sometimes_rng.random() < probability
        if fired:
            self._kernel.record("sometimes", self._kernel.current_host().name, "", site)
        return fired

    def set_link(
        self,
        a: str,
        b: str,
        *,
        latency: tuple[float, float] | float | None = None,
        loss: float | None = None,
        duplicate: float | None = None,
        split: float | None = None,
        bandwidth: float | None = None,
        oneway: bool = False,
    ) -> None:
        """Set what messages between hosts *a* and *b* go through (both ways unless
        *oneway*): a *latency* range in seconds (or one value), UDP *loss* and
        *duplicate* probabilities, the probability that a TCP send arrives in
        several pieces (*split*), and a *bandwidth* in bytes a second (0: none).
        What is not given keeps its value."""
        if isinstance(latency, (int, float)):
            latency = (latency, latency)
        pairs = [(a, b)] if oneway else [(a, b), (b, a)]
        self._links.configure(
            pairs, lambda link: link.set(latency, loss, duplicate, split, bandwidth)
        )
        self._kernel.record("link", a, b, "oneway" if oneway else "")

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None:
        """Messages between hosts *a* and *b* (both ways) take *low* to *high* seconds."""
        self.set_link(a, b, latency=(low, low if high is None else high))

    @property
    def partitions(self) -> frozenset[Pair]:
        """The (from host, to host) pairs whose messages are held now (`partition`)."""
        return self._links.partitions

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None:
        """Hold every message from *a* to *b* (and *b* to *a* unless *oneway*) until `heal`."""
        self._kernel.host(a)
        self._kernel.host(b)
        self._links.partition(a, b, oneway=oneway)
        self._kernel.record("partition", a, b, "oneway" if oneway else "")

    def heal(self, a: str | None = None, b: str | None = None, *, oneway: bool = False) -> None:
        """End partitions: between *a* and *b* (only *a* to *b* if *oneway*), every
        one of *a*'s if *b* is not given, every one if neither is; held
        messages are then delivered, in order, after a latency."""
        self._links.heal(a, b, oneway=oneway)
        self._kernel.record("heal", a or "*", b or "*", "oneway" if oneway else "")
        self._kernel.release_held()

    def reset(self, a: str, b: str) -> None:
        """Reset every connection between hosts *a* and *b*: both ends read ECONNRESET."""
        self._kernel.record("reset", a, b, "")
        self._kernel.reset(a, b)

    def crash(self, host: str) -> None:
        """Stop *host*: cancel its tasks, silence its sockets, reset its peers, drop
        its listeners. `restart` brings it back."""
        h = self._kernel.host(host)
        if not h.up:
            return
        self._kernel.record("crash", host, host, "")
        self._kernel.crash(h)
        self._disks.crash(host)
        loop = self._kernel.running_loop()
        for task in asyncio.all_tasks(loop):
            if self._side.host_of(task) is h:
                task.cancel(f"host {host} crashed")

    def restart(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Bring a crashed *host* back (same name and address) running *coro*."""
        h = self._kernel.host(host)
        if not h.up:
            self._kernel.restart(h)
            self._kernel.record("restart", host, host, "")
        return self.spawn(host, coro)
