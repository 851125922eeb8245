"""Loop: the public event loop class. It builds the components and owns them.

Layer: top. ``docs/architecture.md`` is the map; in short:

**Components** are the loop's state, each an object built once here and
handed to whoever uses it (no component reaches into the Loop):

    clock       _core/clock.py        where time comes from (injected: virtual time)
    schedule    _core/interfaces.py   optional: decides the orderings asyncio leaves open
                                      (tideloop.testing's seeded perturbation); given to
                                      the core only
    supervisor  _core/interfaces.py   optional: watches a virtual-time run (busy threads,
                                      deadlocks: tideloop.testing); given to the core, and
                                      bound to a read-only `LoopView` of the loop built here
    fds         _fdio/registry.py     FdRegistry: the poller's interest set, fd -> reader/
                                      writer handles, fd -> transport; the core's IoSource
    resolver    _fdio/resolver.py          Resolver: literal-address fast path, getaddrinfo
    signals     _signals.py           SignalWatcher: handlers, the wakeup pipe
    children    _children.py  ChildWatcher: pidfds (or a thread) reap children
    listeners   _net/server.py        Listeners: accept retries, Unix socket files

**Method groups** are where the public methods live, grouped by topic. Each
is a class without ``__init__`` and without state of its own; it declares
the components it uses as annotations and extends `CoreLoop`, or the
lower-layer groups whose methods it calls. The method resolution order is
exactly this list (a test checks it):

    Loop                          here: builds the components
    ServerMethods                 _net/server.py         create_server, create_unix_server
    ConnectMethods                _net/connect.py        create_connection, create_unix_connection,
                                                         connect_accepted_socket
    StreamMethods                 _transports/stream.py  _make_socket_transport,
                                                         _make_ssl_transport,
                                                         _create_connection_transport
    TlsMethods                    _transports/tls.py     start_tls
    DatagramMethods               _transports/datagram.py create_datagram_endpoint,
                                                         _make_datagram_transport
    SendfileMethods               _transports/sendfile.py sock_sendfile, sendfile
    SubprocessMethods             _transports/subprocess.py subprocess_exec, subprocess_shell
    PipeMethods                   _transports/pipes.py   connect_read_pipe, connect_write_pipe
    SignalMethods                 _signals.py            add/remove_signal_handler
    SockMethods                   _fdio/sock.py          sock_recv, sock_sendall, sock_connect, ...
    DnsMethods                    _fdio/resolver.py      getaddrinfo, getnameinfo
    FdMethods                     _fdio/registry.py      add_reader, remove_reader, ...
    CoreLoop                      _core/coreloop.py      construction, run_until_complete, close,
                                                         tasks; delegates to the executor, async
                                                         generator, error and metrics components
    Scheduler                     _core/scheduler.py     call_soon & co, the run phase, run_forever,
                                                         stop, debug (a native twin goes first
                                                         where built)

`CoreLoop` is the only class besides `Loop` with an ``__init__``. Every
method of `asyncio.AbstractEventLoop` is provided.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable
from typing import Any, cast

from ._children import ChildWatcher
from ._core.clock import Clock, MonotonicClock
from ._core.coreloop import CoreLoop
from ._core.handles import Handle
from ._core.interfaces import Schedule, Supervisor
from ._core.scheduler import make_ready_queue
from ._fdio.registry import FdMethods, FdRegistry
from ._fdio.resolver import DnsMethods, Resolver
from ._fdio.sock import SockMethods
from ._fdio.sockets import Network
from ._net.connect import ConnectMethods
from ._net.server import Listeners, ServerMethods
from ._pollers import Poller, make_poller
from ._signals import SignalMethods, SignalWatcher
from ._transports.datagram import DatagramMethods
from ._transports.pipes import PipeMethods
from ._transports.sendfile import SendfileMethods
from ._transports.stream import StreamMethods
from ._transports.subprocess import SubprocessMethods
from ._transports.tls import TlsMethods

__all__ = ["Loop", "new_event_loop"]


class Loop(
    ServerMethods,
    ConnectMethods,
    StreamMethods,
    TlsMethods,
    DatagramMethods,
    SendfileMethods,
    SubprocessMethods,
    PipeMethods,
    SignalMethods,
    SockMethods,
    DnsMethods,
    FdMethods,
    CoreLoop,
):
    """A drop-in `asyncio.AbstractEventLoop`.

    *poller* picks the readiness mechanism: ``"epoll"``, ``"kqueue"``,
    ``"poll"``, a `Poller` instance, or None for the platform's best.
    *clock* supplies time (see ``tideloop._core.clock``); None means real
    monotonic time. *schedule* (see ``tideloop._core.coreloop.Schedule``; e.g.
    ``tideloop.testing.Perturber``) varies the orderings asyncio leaves open;
    None means tideloop's fixed order. *network* (see
    ``tideloop._fdio.sockets``; e.g. ``tideloop.testing.SimNetwork``)
    supplies the sockets the loop creates, names and readiness; None means
    the kernel's. *supervisor* (see ``tideloop._core.interfaces.Supervisor``)
    watches a virtual-time run: busy threads, deadlocks; None means none.
    """

    def __init__(
        self,
        *,
        poller: Poller | str | None = None,
        clock: Clock | None = None,
        schedule: Schedule | None = None,
        network: Network | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        ready = make_ready_queue()
        kernel_poller = make_poller(poller)
        fds = FdRegistry(
            kernel_poller if network is None else network.wrap_poller(kernel_poller), ready
        )
        try:
            CoreLoop.__init__(
                self,
                ready=ready,
                io=fds,
                clock=MonotonicClock() if clock is None else clock,
                schedule=schedule,
                supervisor=supervisor,
            )
        except BaseException:
            fds.close()
            raise
        self._fds = fds
        fds.add_internal_reader(
            self._waker.fileno(), Handle(self._waker.drain, (), self, None), wake_only=True
        )
        self._network = network
        self._resolver = Resolver(self, network)
        self._signals = SignalWatcher(self, fds)
        self._own(self._signals)
        self._listeners = Listeners()
        self._own(self._listeners)
        self._children = ChildWatcher(self, fds)
        self._own(self._children)
        self._own(_LetGo(self, self._resolver, self._signals, self._children))
        if network is not None:
            network.attach(self)
        if supervisor is not None or schedule is not None:
            view = _View(self)
            if schedule is not None:
                schedule.bind(view)
            if supervisor is not None:
                supervisor.bind(view)

    @property
    def network(self) -> Network | None:
        """The `Network` this loop was built with (``Loop(network=...)``), or None."""
        return self._network


class _View:
    """A read-only look at a loop for its `Supervisor` (``interfaces.LoopView``).

    Built here, at the top, because it reads components of several layers
    (the fd registry, the signal watcher, the executor). It holds the loop
    weakly: the supervisor is reachable from the loop (the core's seams),
    and a closed loop must be freed by reference counting alone.
    """

    __slots__ = ("_loop",)

    def __init__(self, loop: Loop) -> None:
        self._loop = weakref.ref(loop)

    def _get(self) -> Loop:
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the loop is gone")
        return loop

    def time(self) -> float:
        return self._get().time()

    def tasks(self) -> set[asyncio.Task[Any]]:
        return {t for t in asyncio.all_tasks(self._get()) if not t.done()}

    def waker_fd(self) -> int:
        return self._get()._waker.fileno()

    def watched_fds(self) -> set[int]:
        loop = self._get()
        fds = loop._fds
        own = {loop._waker.fileno(), loop._signals.pipe_fd}
        return {fd for fd in fds.readers.keys() | fds.writers.keys() if fd not in own}

    def fd_handles(self, fd: int) -> tuple[asyncio.Handle | None, asyncio.Handle | None]:
        fds = self._get()._fds
        return fds.readers.get(fd), fds.writers.get(fd)

    def timers(self) -> list[asyncio.TimerHandle]:
        return [h for h in self._get()._timers.handles() if not h.cancelled()]

    def signals(self) -> set[int]:
        return set(self._get()._signals.handlers)

    def executor_threads(self) -> set[int]:
        executor = self._get()._jobs.default
        return {t.ident for t in getattr(executor, "_threads", ()) if t.ident is not None}

    def pending_thread_jobs(self) -> int:
        return self._get()._jobs.pending

    def thread_jobs(self) -> list[object]:
        running = self._get()._jobs.running
        return [] if running is None else list(running)

    def children(self) -> set[int]:
        return self._get()._children.watched()


class _LetGo:
    """When a loop closes, its components' references to it become weak.

    The resolver and the signal and child watchers point back at the loop,
    a cycle that only the cyclic collector frees. A closed asyncio loop is
    freed by reference counting the moment its last user lets go; code
    counts on it (anyio's test_asyncio_run_does_not_leak_event_loop: its
    worker thread lets go of the loop just after the run, maybe after the
    test's ``gc.collect()``). Through a weak proxy the components answer
    anything still called on the closed loop as before ("Event loop is
    closed"), and close themselves after it (the loop is alive while it
    closes). The proxy is made now: holding the loop would be a cycle too.
    """

    __slots__ = ("_children", "_proxy", "_resolver", "_signals")

    def __init__(
        self, loop: Loop, resolver: Resolver, signals: SignalWatcher, children: ChildWatcher
    ) -> None:
        self._proxy = cast(Loop, weakref.proxy(loop))
        self._resolver = resolver
        self._signals = signals
        self._children = children

    def close(self) -> None:
        self._resolver._loop = self._proxy
        self._signals._loop = self._proxy
        self._children._loop = self._proxy


def _name_coroutines_as_asyncio(cls: type, reference: type) -> None:
    """Give *cls*'s public coroutine methods the ``__qualname__`` of *reference*'s.

    Facts / what this means for us: a coroutine object takes its
    ``__qualname__`` from its function, and asyncio's own warnings and logs
    print it: "coroutine 'BaseEventLoop.shutdown_asyncgens' was never
    awaited" (``asyncio.Runner.close`` on a loop the program closed), "Task
    was destroyed but it is pending! task: <Task pending
    coro=<BaseEventLoop.create_server() ...>>". Tools filter on those names:
    pytest-asyncio ignores ``.*BaseEventLoop.shutdown_asyncgens.*`` when its
    runner closes. Named after the method group that defines them
    (``CoreLoop.shutdown_asyncgens``), tideloop's slipped past every such
    filter. So each public coroutine method the stdlib loop also has is
    named as the stdlib loop names it; its code object (what tracebacks
    show: the file, the line, ``co_qualname``) stays tideloop's.
    """
    for name in dir(reference):
        if name.startswith("_"):
            continue
        theirs, ours = getattr(reference, name, None), getattr(cls, name, None)
        if (
            inspect.iscoroutinefunction(theirs)
            and inspect.iscoroutinefunction(ours)
            and getattr(ours, "__module__", "").startswith("tideloop.")
        ):
            ours.__qualname__ = theirs.__qualname__


_name_coroutines_as_asyncio(Loop, asyncio.SelectorEventLoop)


def new_event_loop(
    *,
    poller: Poller | str | None = None,
    clock: Clock | None = None,
    schedule: Schedule | None = None,
    network: Network | None = None,
    supervisor: Supervisor | None = None,
) -> Loop:
    """Create a new tideloop event loop (usable as asyncio's ``loop_factory``)."""
    loop = Loop(
        poller=poller, clock=clock, schedule=schedule, network=network, supervisor=supervisor
    )
    for observe in NEW_LOOP_OBSERVERS:
        observe(loop)
    return loop


#: Called with every loop `new_event_loop` creates (``tideloop.run``, the
#: policy and ``loop_factory`` all go through it); ``python -m tideloop
#: --stats`` uses it to find the loops it reports on. Empty otherwise.
NEW_LOOP_OBSERVERS: list[Callable[[Loop], object]] = []
