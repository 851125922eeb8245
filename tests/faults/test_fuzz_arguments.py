"""Bad arguments for every public loop method: the loop must answer as the stdlib loop does.

Each method of ``asyncio.AbstractEventLoop`` has a list of calls with bad
arguments (`CASES`): wrong types (None, str, float, object()), negative
sizes and offsets, ports out of range, a closed socket, a blocking socket, a
socket of the wrong type (UDP for TCP, TCP for Unix, an SSLSocket), a closed
loop, a running loop, arguments the stdlib refuses in combination. Hypothesis
draws a call and the loop's debug mode (which turns on asyncio's callback
and blocking-socket checks); the identical call runs on a fresh stdlib loop
and on a fresh loop of the kind under test (``loop_name``: the stdlib's and
tideloop with each poller), and the outcomes must be equal:

- where it failed: at the call, or when awaiting what the call returned;
- what the call returned: a coroutine, a future, or something else;
- the exception's type and message (``str(exc)``), with what differs by
  nature masked: object addresses, fd numbers, ports the kernel picked, the
  temporary directory, the reprs of loop, transport and handle objects, the
  "created at file:line" of debug mode, and the qualified name in a
  signature TypeError (``BaseEventLoop.stop()`` is ``Loop.stop()`` on
  tideloop);
- what a successful call returned (its kind: Handle, Task, bool, ...);
- the exception-handler calls that followed within a few iterations (a bad
  callback the stdlib accepts fails when it runs), each once.

Coroutines are awaited under ``asyncio.wait_for`` (1 s): a hang is an
outcome (TimeoutError) like any other, and an exception that escapes the
loop's run is one too. Whatever a call made (sockets, servers, transports,
tasks, fd callbacks, signal handlers, executor threads) is closed after it,
and each loop is closed; the conftests then check for fds and threads left.
On the stdlib loop itself (``loop_name`` "asyncio") the call runs on two
fresh stdlib loops: their outcomes must be equal, which shows that what is
compared is deterministic.

A difference found goes into `KNOWN_DIFFERENCES`: the fuzzer then does not
draw it on the loops it names, and `test_known_difference` pins it as a
strict expected failure there (passing on the others), until it is fixed.
Most of the differences this module found have been fixed (see the list).
One is deliberate and registered in divergences.py (the poll poller accepts
an fd that is not open, as asyncio's PollSelector loop does: divergence
"poll-accepts-fd-not-open"); `test_poll_accepts_fd_not_open` asserts what
each loop does there.

uvloop is not fuzzed here: its Cython methods differ from the stdlib's in
most messages (signature errors, its own argument checks), it has no debug
mode checks, and connect_read_pipe()/connect_write_pipe() of a regular file
abort the process (SIGABRT in libuv).

Calls left out on purpose, because the stdlib loop cannot be the oracle:
call_at() with a deadline that is not a number (divergence
"call-at-rejects-non-numbers"); on 3.11 shutdown_default_executor(timeout)
(divergence "executor-shutdown-timeout") and time() with an argument
(divergence "loop-time-is-the-clock": time is the clock's own function);
create_task(context=non-Context) (the stdlib's task can then never run, nor
be cancelled: closing the loop hangs); and calls that make the stdlib leave
something for the garbage collector to complain about in a later test
(create_server/create_unix_server with a backlog listen() refuses: the
listening socket leaks, on tideloop too; connect_read_pipe/connect_write_pipe
of an object with no usable fileno(): its half-built transport's __del__
raises AttributeError). create_connection(happy_eyeballs_delay='x') leaves a
coroutine never awaited on the stdlib loop: that case collects garbage at
once, and its RuntimeWarning is ignored in this module. Nothing here blocks
the stdlib loop's thread: a blocking socket given to recv() or accept() has
data or a connection waiting. Under ``--blockbuster`` the calls given a
blocking socket outside debug mode are left out: the loop then calls the
socket's recv()/accept()/... as the stdlib's does, and blockbuster flags that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import os
import re
import selectors
import shutil
import signal
import socket
import ssl
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, TypeVarTuple

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from divergences import DIVERGENCES
from loopwatch import FACTORIES, LoopFactory, finish

pytestmark = pytest.mark.filterwarnings(
    "ignore:coroutine 'Event.wait' was never awaited:RuntimeWarning"
)

#: Bound on awaiting what a call returned.
TIMEOUT = 1.0


def _a_coroutine_function() -> Callable[..., None]:
    """A function asyncio takes for a coroutine function, whose call makes no coroutine.

    (A real one's calls would leave coroutines never awaited behind, whose
    RuntimeWarnings come at garbage collection, maybe in another test.)
    """

    def fake(*args: Any) -> None:
        pass

    if hasattr(inspect, "markcoroutinefunction"):  # 3.12+
        marked: Callable[..., None] = inspect.markcoroutinefunction(fake)
        return marked
    fake._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
    return fake


a_coroutine_function = _a_coroutine_function()


class Closable(Protocol):
    def close(self) -> object: ...


C = TypeVar("C", bound=Closable)
Ts = TypeVarTuple("Ts")


def a_callback(*args: Any) -> None:
    pass


class Env:
    """The resources of one call on one loop: made fresh for each, all closed after it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tmp = tempfile.mkdtemp(prefix="tl-args-")
        self._closers: list[Callable[[], object]] = []
        self._coros: list[Any] = []
        self.readers: list[int] = []
        self.writers: list[int] = []
        self.signals: list[int] = []
        self.results: list[Any] = []
        # Set by a case's setup (on the running loop).
        self.transport: Any = None
        self.udp_transport: Any = None

    def own(self, obj: C) -> C:
        self._closers.append(obj.close)
        return obj

    def path(self, name: str) -> str:
        return os.path.join(self.tmp, name)

    # -- sockets ---------------------------------------------------------

    def tcp(self, blocking: bool = False) -> socket.socket:
        sock = self.own(socket.socket())
        sock.setblocking(blocking)
        return sock

    def udp(self) -> socket.socket:
        sock = self.own(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        return sock

    def unix(self) -> socket.socket:
        sock = self.own(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        sock.setblocking(False)
        return sock

    def closed(self) -> socket.socket:
        """A closed socket (non-blocking, as the loop's sockets are)."""
        sock = socket.socket()
        sock.setblocking(False)
        sock.close()
        return sock

    def listener(self, blocking: bool = False, pending: bool = False) -> socket.socket:
        """A listening TCP socket, with a connection waiting to be accepted if *pending*."""
        sock = self.own(socket.create_server(("127.0.0.1", 0)))
        if pending:
            self.own(socket.create_connection(sock.getsockname()))
        sock.setblocking(blocking)
        return sock

    def connected(self, blocking: bool = False, data: bytes = b"") -> socket.socket:
        """A connected TCP socket; its peer has sent *data*."""
        with socket.create_server(("127.0.0.1", 0)) as lst:
            sock = self.own(socket.create_connection(lst.getsockname()))
            peer = self.own(lst.accept()[0])
        if data:
            peer.sendall(data)
        sock.setblocking(blocking)
        return sock

    def closed_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        return port

    def ssl_socket(self) -> ssl.SSLSocket:
        raw = self.own(socket.socket())
        ctx = ssl.create_default_context()
        sock = ctx.wrap_socket(raw, server_hostname="h", do_handshake_on_connect=False)
        sock.setblocking(False)
        return self.own(sock)

    # -- files and pipes -------------------------------------------------

    def file(self, mode: str = "rb") -> Any:
        path = self.path("data")
        with open(path, "wb") as f:
            f.write(b"x" * 1000)
        return self.own(open(path, mode))

    def pipe(self) -> tuple[Any, Any]:
        r, w = os.pipe()
        return self.own(os.fdopen(r, "rb", buffering=0)), self.own(os.fdopen(w, "wb", 0))

    def coro(self) -> Any:
        """A coroutine object, closed after the call if nobody ran it."""
        coro = asyncio.sleep(0)
        self._coros.append(coro)
        return coro

    def other_loop_future(self) -> asyncio.Future[Any]:
        other = asyncio.SelectorEventLoop()
        self._closers.append(other.close)
        return other.create_future()

    def dead_executor(self) -> concurrent.futures.Executor:
        executor = concurrent.futures.ThreadPoolExecutor(1)
        executor.shutdown()
        return executor

    # -- async setup and cleanup -----------------------------------------

    async def setup_transport(self) -> None:
        """A connected TCP transport in ``transport``, a UDP one in ``udp_transport``."""
        sock = self.connected()
        self._closers.remove(sock.close)
        self.transport, _ = await self.loop.create_connection(asyncio.Protocol, sock=sock)
        self.udp_transport, _ = await self.loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )

    async def dispose(self) -> None:
        """Close what the call returned or left (on the running loop)."""
        servers = []
        for result in self.results:
            for obj in result if isinstance(result, tuple) else (result,):
                if isinstance(obj, (asyncio.Handle, asyncio.Future)) or hasattr(obj, "cancel"):
                    obj.cancel()
                elif hasattr(obj, "sockets") and hasattr(obj, "wait_closed"):
                    obj.close()
                    servers.append(obj)
                elif hasattr(obj, "get_extra_info") or isinstance(obj, socket.socket):
                    obj.close()
        for transport in (self.transport, self.udp_transport):
            if transport is not None:
                transport.close()
        for server in servers:
            await server.wait_closed()
        for _ in range(5):
            await asyncio.sleep(0)

    def cleanup(self) -> None:
        loop = self.loop
        if not loop.is_closed():
            for fd in self.readers:
                loop.remove_reader(fd)
            for fd in self.writers:
                loop.remove_writer(fd)
            for sig in self.signals:
                loop.remove_signal_handler(sig)
        for coro in self._coros:
            coro.close()
        for close in reversed(self._closers):
            close()
        shutil.rmtree(self.tmp, ignore_errors=True)


Call = Callable[[asyncio.AbstractEventLoop, Env], Any]


@dataclass(frozen=True)
class Case:
    label: str
    call: Call
    #: "running": called from a coroutine on the running loop; "idle": on the
    #: loop before it runs; "closed": on a closed loop.
    state: str = "running"
    #: The debug mode to run in, where it matters for the call to be safe.
    debug: bool | None = None
    setup: bool = False  # needs Env.setup_transport()
    #: Collect garbage after the call, so that what it left is finalized in this test.
    collect: bool = False
    #: The loop makes a blocking call on the test's blocking socket (as the
    #: stdlib's does): left out under ``--blockbuster``, which would flag it.
    blocks: bool = False


CASES: dict[str, list[Case]] = {}


def case(method: str, label: str, call: Call, **kwargs: Any) -> None:
    CASES.setdefault(method, []).append(Case(label, call, **kwargs))


def bound(call: Callable[[asyncio.AbstractEventLoop, Env, *Ts], Any], *values: *Ts) -> Call:
    """*call* with *values* (the loop variables of a list of cases) bound now, after (loop, env).

    A lambda's default arguments would bind them too, but mypy cannot infer
    the type of a lambda with more parameters than its context has.
    """
    return lambda loop, env: call(loop, env, *values)


def sig_arity(method: str, *args: Any) -> None:
    """The method called with one argument too many."""
    case(method, "one argument too many", lambda loop, env: getattr(loop, method)(*args, None))


BAD: dict[str, Any] = {"None": None, "str": "x", "float": 1.5, "object": object(), "negative": -1}
# The loop variables of the case lists below, bound with bound(): bad
# arguments on purpose (so Any), or functions making arguments from the Env.
_bad: Any
_sig: Any
_args: Any
_kwargs: Any
P = asyncio.Protocol
DP = asyncio.DatagramProtocol
SIGKILL = signal.SIGKILL

# -- running and stopping --------------------------------------------------
case(
    "run_until_complete",
    "None",
    lambda loop, env: loop.run_until_complete(None),  # type: ignore[arg-type]
    state="idle",
)
case(
    "run_until_complete",
    "object",
    lambda loop, env: loop.run_until_complete(object()),  # type: ignore[arg-type]
    state="idle",
)
case(
    "run_until_complete",
    "while running",
    lambda loop, env: loop.run_until_complete(env.coro()),
)
case(
    "run_until_complete",
    "closed loop",
    lambda loop, env: loop.run_until_complete(env.coro()),
    state="closed",
)
case(
    "run_until_complete",
    "another loop's future",
    lambda loop, env: loop.run_until_complete(env.other_loop_future()),
    state="idle",
)
case("run_forever", "while running", lambda loop, env: loop.run_forever())
case("run_forever", "closed loop", lambda loop, env: loop.run_forever(), state="closed")
sig_arity("run_forever")
case("close", "while running", lambda loop, env: loop.close())
case("close", "closed loop", lambda loop, env: loop.close(), state="closed")
sig_arity("close")
sig_arity("stop")
case("stop", "closed loop", lambda loop, env: loop.stop(), state="closed")
for _method in ("is_running", "is_closed", "time", "get_debug", "create_future"):
    if _method != "time":  # divergence "loop-time-is-the-clock": time() is the clock's
        sig_arity(_method)
    case(
        _method,
        "closed loop",
        bound(lambda loop, env, m: getattr(loop, m)(), _method),
        state="closed",
    )
case("set_debug", "str", lambda loop, env: (loop.set_debug("x"), loop.get_debug()))  # type: ignore[arg-type]
case("set_debug", "closed loop", lambda loop, env: loop.set_debug(True), state="closed")
sig_arity("shutdown_asyncgens")
case("shutdown_asyncgens", "twice", lambda loop, env: loop.shutdown_asyncgens())
if sys.version_info >= (3, 12):
    case(
        "shutdown_default_executor",
        "timeout str",
        lambda loop, env: loop.shutdown_default_executor("x"),  # type: ignore[arg-type]
    )
    case(
        "shutdown_default_executor",
        "timeout negative",
        lambda loop, env: loop.shutdown_default_executor(-1),  # type: ignore[call-arg]
    )
case(
    "shutdown_default_executor",
    "unknown keyword",
    lambda loop, env: loop.shutdown_default_executor(x=1),  # type: ignore[call-arg]
)
case("shutdown_default_executor", "twice", lambda loop, env: loop.shutdown_default_executor())
if sys.version_info >= (3, 12):  # 3.11: divergence "executor-shutdown-timeout"
    sig_arity("shutdown_default_executor", None)

# -- callbacks and timers --------------------------------------------------
for _method in ("call_soon", "call_soon_threadsafe"):
    for _name, _bad in BAD.items():
        case(
            _method,
            f"callback {_name}",
            bound(lambda loop, env, m, b: getattr(loop, m)(b), _method, _bad),
        )
    case(
        _method,
        "coroutine function",
        bound(lambda loop, env, m: getattr(loop, m)(a_coroutine_function), _method),
    )
    case(
        _method,
        "context str",
        bound(lambda loop, env, m: getattr(loop, m)(a_callback, context="x"), _method),
    )
    case(_method, "no callback", bound(lambda loop, env, m: getattr(loop, m)(), _method))
    case(
        _method,
        "closed loop",
        bound(lambda loop, env, m: getattr(loop, m)(a_callback), _method),
        state="closed",
    )
for _name, _bad in {**BAD, "nan": float("nan"), "huge": 1e300}.items():
    case(
        "call_later",
        f"delay {_name}",
        bound(lambda loop, env, b: loop.call_later(b, a_callback), _bad),
    )
for _name, _bad in BAD.items():
    case("call_later", f"callback {_name}", bound(lambda loop, env, b: loop.call_later(0, b), _bad))
    case("call_at", f"callback {_name}", bound(lambda loop, env, b: loop.call_at(0, b), _bad))
case("call_later", "coroutine function", lambda loop, env: loop.call_later(0, a_coroutine_function))
case("call_at", "coroutine function", lambda loop, env: loop.call_at(0, a_coroutine_function))
case("call_later", "closed loop", lambda loop, env: loop.call_later(0, a_callback), state="closed")
case("call_at", "closed loop", lambda loop, env: loop.call_at(0, a_callback), state="closed")
case("call_at", "when negative", lambda loop, env: loop.call_at(-1, a_callback))
case("call_at", "when huge", lambda loop, env: loop.call_at(1e300, a_callback))
case(
    "call_later",
    "context object",
    lambda loop, env: loop.call_later(0, a_callback, context=object()),  # type: ignore[arg-type]
)

# -- tasks -----------------------------------------------------------------
for _name, _bad in BAD.items():
    case("create_task", f"coro {_name}", bound(lambda loop, env, b: loop.create_task(b), _bad))
case("create_task", "coroutine function", lambda loop, env: loop.create_task(a_coroutine_function))  # type: ignore[arg-type]
case("create_task", "a future", lambda loop, env: loop.create_task(loop.create_future()))  # type: ignore[arg-type]
case("create_task", "name int", lambda loop, env: loop.create_task(env.coro(), name=5))  # type: ignore[arg-type]
case("create_task", "closed loop", lambda loop, env: loop.create_task(env.coro()), state="closed")
case("create_task", "unknown keyword", lambda loop, env: loop.create_task(env.coro(), x=1))  # type: ignore[call-arg]
case("set_task_factory", "str", lambda loop, env: loop.set_task_factory("x"))  # type: ignore[arg-type]
case("set_task_factory", "object", lambda loop, env: loop.set_task_factory(object()))  # type: ignore[arg-type]
sig_arity("get_task_factory")

# -- executor --------------------------------------------------------------
case("run_in_executor", "executor str", lambda loop, env: loop.run_in_executor("x", a_callback))  # type: ignore[arg-type]
case(
    "run_in_executor",
    "executor shut down",
    lambda loop, env: loop.run_in_executor(env.dead_executor(), a_callback),
)
for _name, _bad in BAD.items():
    case(
        "run_in_executor",
        f"func {_name}",
        bound(lambda loop, env, b: loop.run_in_executor(None, b), _bad),
    )
case(
    "run_in_executor",
    "coroutine function",
    lambda loop, env: loop.run_in_executor(None, a_coroutine_function),
)
case(
    "run_in_executor",
    "closed loop",
    lambda loop, env: loop.run_in_executor(None, a_callback),
    state="closed",
)
for _name, _bad in BAD.items():
    case(
        "set_default_executor",
        _name,
        bound(lambda loop, env, b: loop.set_default_executor(b), _bad),
    )
case(
    "set_default_executor",
    "plain Executor",
    lambda loop, env: loop.set_default_executor(concurrent.futures.Executor()),
)

# -- exception handling ----------------------------------------------------
for _name, _bad in {"str": "x", "object": object(), "float": 1.5}.items():
    case(
        "set_exception_handler",
        _name,
        bound(lambda loop, env, b: loop.set_exception_handler(b), _bad),
    )
sig_arity("get_exception_handler")
for _name, _bad in {"None": None, "str": "x", "empty dict": {}}.items():
    case(
        "default_exception_handler",
        _name,
        bound(lambda loop, env, b: loop.default_exception_handler(b), _bad),
    )
case(
    "call_exception_handler",
    "message only",
    lambda loop, env: loop.call_exception_handler({"message": "m"}),
)
case(
    "call_exception_handler",
    "exception not an exception",
    lambda loop, env: loop.call_exception_handler({"message": "m", "exception": "x"}),
)

# -- fd callbacks ----------------------------------------------------------
for _method in ("add_reader", "add_writer", "remove_reader", "remove_writer"):
    _adds = _method.startswith("add")
    _extra: tuple[Any, ...] = (a_callback,) if _adds else ()
    for _name, _bad in BAD.items():
        case(
            _method,
            f"fd {_name}",
            bound(lambda loop, env, m, b, e: getattr(loop, m)(b, *e), _method, _bad, _extra),
        )
    case(
        _method,
        "closed socket",
        bound(lambda loop, env, m, e: getattr(loop, m)(env.closed(), *e), _method, _extra),
    )
    case(
        _method,
        "fd not open",
        bound(lambda loop, env, m, e: getattr(loop, m)(10**6, *e), _method, _extra),
    )
    case(
        _method,
        "fd of a transport",
        bound(
            lambda loop, env, m, e: getattr(loop, m)(
                env.transport.get_extra_info("socket").fileno(), *e
            ),
            _method,
            _extra,
        ),
        setup=True,
    )
    case(
        _method,
        "closed loop",
        bound(lambda loop, env, m, e: getattr(loop, m)(env.udp(), *e), _method, _extra),
        state="closed",
    )


def _add_reader_bad_callback(loop: asyncio.AbstractEventLoop, env: Env, callback: Any) -> Any:
    sock = env.connected(data=b"ready")
    env.readers.append(sock.fileno())
    return loop.add_reader(sock, callback)


def _add_writer_bad_callback(loop: asyncio.AbstractEventLoop, env: Env, callback: Any) -> Any:
    sock = env.udp()
    env.writers.append(sock.fileno())
    return loop.add_writer(sock, callback)


for _name, _bad in {"None": None, "str": "x", "coroutine function": a_coroutine_function}.items():
    case(
        "add_reader",
        f"callback {_name}",
        bound(_add_reader_bad_callback, _bad),
    )
    case(
        "add_writer",
        f"callback {_name}",
        bound(_add_writer_bad_callback, _bad),
    )

# -- socket operations -----------------------------------------------------
_SOCKS: dict[str, Callable[[Env], Any]] = {
    "None": lambda env: None,
    "str": lambda env: "x",
    "closed socket": lambda env: env.closed(),
    "SSL socket": lambda env: env.ssl_socket(),
}
for _name, _make in _SOCKS.items():
    case(
        "sock_recv",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_recv(mk(env), 10), _make),
    )
    case(
        "sock_recv_into",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_recv_into(mk(env), bytearray(10)), _make),
    )
    case(
        "sock_sendall",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_sendall(mk(env), b"x"), _make),
    )
    case(
        "sock_connect",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_connect(mk(env), ("127.0.0.1", 1)), _make),
    )
    case(
        "sock_accept",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_accept(mk(env)), _make),
    )
    case(
        "sock_sendfile",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_sendfile(mk(env), env.file()), _make),
    )
for _name, _bad in BAD.items():
    case(
        "sock_recv",
        f"nbytes {_name}",
        bound(lambda loop, env, b: loop.sock_recv(env.connected(data=b"x"), b), _bad),
    )
    case(
        "sock_recv_into",
        f"buf {_name}",
        bound(lambda loop, env, b: loop.sock_recv_into(env.connected(data=b"x"), b), _bad),
    )
    case(
        "sock_sendall",
        f"data {_name}",
        bound(lambda loop, env, b: loop.sock_sendall(env.connected(), b), _bad),
    )
    case(
        "sock_connect",
        f"address {_name}",
        bound(lambda loop, env, b: loop.sock_connect(env.tcp(), b), _bad),
    )
case(
    "sock_recv_into",
    "buf bytes",
    lambda loop, env: loop.sock_recv_into(env.connected(data=b"x"), b"x"),
)
case("sock_recv", "data ready", lambda loop, env: loop.sock_recv(env.connected(data=b"x"), 10))
# A blocking socket: refused in debug mode; otherwise the call succeeds at once.
for _debug in (False, True):
    _when = "debug" if _debug else "no debug"
    case(
        "sock_recv",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_recv(env.connected(blocking=True, data=b"x"), 10),
        debug=_debug,
        blocks=not _debug,
    )
    case(
        "sock_recv_into",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_recv_into(env.connected(True, b"x"), bytearray(10)),
        debug=_debug,
        blocks=not _debug,
    )
    case(
        "sock_sendall",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_sendall(env.connected(blocking=True), b"x"),
        debug=_debug,
        blocks=not _debug,
    )
    case(
        "sock_accept",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_accept(env.listener(blocking=True, pending=True)),
        debug=_debug,
        blocks=not _debug,
    )
    case(
        "sock_connect",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_connect(env.tcp(blocking=True), env.listener().getsockname()),
        debug=_debug,
        blocks=not _debug,
    )
    case(
        "sock_recvfrom",
        f"blocking socket, {_when}",
        lambda loop, env: loop.sock_recvfrom(env.connected(blocking=True, data=b"x"), 10),
        debug=_debug,
        blocks=not _debug,
    )
case("sock_accept", "not listening", lambda loop, env: loop.sock_accept(env.tcp()))
case("sock_accept", "UDP socket", lambda loop, env: loop.sock_accept(env.udp()))
case(
    "sock_connect",
    "port out of range",
    lambda loop, env: loop.sock_connect(env.tcp(), ("127.0.0.1", 70000)),
)
case(
    "sock_connect",
    "port negative",
    lambda loop, env: loop.sock_connect(env.tcp(), ("127.0.0.1", -1)),
)
case("sock_connect", "port str", lambda loop, env: loop.sock_connect(env.tcp(), ("127.0.0.1", "x")))
case("sock_connect", "1-tuple", lambda loop, env: loop.sock_connect(env.tcp(), ("127.0.0.1",)))
case(
    "sock_connect",
    "refused",
    lambda loop, env: loop.sock_connect(env.tcp(), ("127.0.0.1", env.closed_port())),
)
case(
    "sock_connect",
    "unix path missing",
    lambda loop, env: loop.sock_connect(env.unix(), env.path("missing")),
)
case("sock_connect", "unix path int", lambda loop, env: loop.sock_connect(env.unix(), 5))  # type: ignore[arg-type]
case("sock_connect", "UDP socket", lambda loop, env: loop.sock_connect(env.udp(), ("127.0.0.1", 9)))
for _name, _bad in BAD.items():
    case(
        "sock_recvfrom",
        f"bufsize {_name}",
        bound(lambda loop, env, b: loop.sock_recvfrom(env.udp(), b), _bad),
    )
    case(
        "sock_recvfrom_into",
        f"buf {_name}",
        bound(lambda loop, env, b: loop.sock_recvfrom_into(env.udp(), b), _bad),
    )
    if _bad is not None:  # None is the default: it would wait for a datagram
        case(
            "sock_recvfrom_into",
            f"nbytes {_name}",
            bound(lambda loop, env, b: loop.sock_recvfrom_into(env.udp(), bytearray(10), b), _bad),
        )
    case(
        "sock_sendto",
        f"data {_name}",
        bound(lambda loop, env, b: loop.sock_sendto(env.udp(), b, ("127.0.0.1", 9)), _bad),
    )
    case(
        "sock_sendto",
        f"address {_name}",
        bound(lambda loop, env, b: loop.sock_sendto(env.udp(), b"x", b), _bad),
    )
for _name, _make in _SOCKS.items():
    case(
        "sock_recvfrom",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_recvfrom(mk(env), 10), _make),
    )
    case(
        "sock_recvfrom_into",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_recvfrom_into(mk(env), bytearray(10)), _make),
    )
    case(
        "sock_sendto",
        f"sock {_name}",
        bound(lambda loop, env, mk: loop.sock_sendto(mk(env), b"x", ("127.0.0.1", 9)), _make),
    )
case(
    "sock_recvfrom_into",
    "nbytes over the buffer",
    lambda loop, env: loop.sock_recvfrom_into(env.udp(), bytearray(10), 20),
)
case(
    "sock_sendto",
    "port out of range",
    lambda loop, env: loop.sock_sendto(env.udp(), b"x", ("127.0.0.1", 70000)),
)
case("sock_sendto", "1-tuple", lambda loop, env: loop.sock_sendto(env.udp(), b"x", ("127.0.0.1",)))
for _name, _bad in {
    "offset negative": {"offset": -1},
    "offset str": {"offset": "x"},
    "count 0": {"count": 0},
    "count negative": {"count": -1},
    "count str": {"count": "x"},
    "fallback str": {"fallback": "x"},
}.items():
    case(
        "sock_sendfile",
        _name,
        bound(lambda loop, env, kw: loop.sock_sendfile(env.connected(), env.file(), **kw), _bad),
    )
case(
    "sock_sendfile",
    "text file",
    lambda loop, env: loop.sock_sendfile(env.connected(), env.file("r")),
)
case("sock_sendfile", "file None", lambda loop, env: loop.sock_sendfile(env.connected(), None))  # type: ignore[arg-type]
case("sock_sendfile", "UDP socket", lambda loop, env: loop.sock_sendfile(env.udp(), env.file()))
case(
    "sock_sendfile",
    "blocking socket, debug",
    lambda loop, env: loop.sock_sendfile(env.connected(blocking=True), env.file()),
    debug=True,
)

# -- name resolution (literal addresses only: no DNS) ----------------------
for _name, _bad in {"float": 1.5, "object": object(), "bytes list": [b"x"]}.items():
    case("getaddrinfo", f"host {_name}", bound(lambda loop, env, b: loop.getaddrinfo(b, 80), _bad))
for _name, _bad in {"float": 1.5, "object": object(), "negative": -1, "70000": 70000}.items():
    case(
        "getaddrinfo",
        f"port {_name}",
        bound(lambda loop, env, b: loop.getaddrinfo("127.0.0.1", b), _bad),
    )
for _kw in ("family", "type", "proto", "flags"):
    case(
        "getaddrinfo",
        f"{_kw} str",
        bound(
            lambda loop, env, k: loop.getaddrinfo("127.0.0.1", 80, **{k: "x"}),  # type: ignore[arg-type]
            _kw,
        ),
    )
case(
    "getaddrinfo",
    "family AF_UNIX",
    lambda loop, env: loop.getaddrinfo("127.0.0.1", 80, family=socket.AF_UNIX),
)
case("getaddrinfo", "no port", lambda loop, env: loop.getaddrinfo("127.0.0.1"))  # type: ignore[call-arg]
for _name, _bad in {
    "None": None,
    "str": "x",
    "1-tuple": ("127.0.0.1",),
    "port negative": ("127.0.0.1", -1),
    "port 70000": ("127.0.0.1", 70000),
    "host int": (1, 80),
    "5-tuple": ("127.0.0.1", 80, 0, 0, 0),
}.items():
    case("getnameinfo", f"sockaddr {_name}", bound(lambda loop, env, b: loop.getnameinfo(b), _bad))
case("getnameinfo", "flags str", lambda loop, env: loop.getnameinfo(("127.0.0.1", 80), "x"))  # type: ignore[arg-type]

# -- connections and servers -----------------------------------------------
_CONNECT_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "port negative": lambda env: {"host": "127.0.0.1", "port": -1},
    "port 70000": lambda env: {"host": "127.0.0.1", "port": 70000},
    "port float": lambda env: {"host": "127.0.0.1", "port": 1.5},
    "host float": lambda env: {"host": 1.5, "port": 80},
    "host object": lambda env: {"host": object(), "port": 80},
    "refused": lambda env: {"host": "127.0.0.1", "port": env.closed_port()},
    "neither host nor sock": lambda env: {},
    "host and sock": lambda env: {"host": "127.0.0.1", "port": 80, "sock": env.tcp()},
    "sock UDP": lambda env: {"sock": env.udp()},
    "sock closed": lambda env: {"sock": env.closed()},
    "sock str": lambda env: {"sock": "x"},
    "server_hostname without ssl": lambda env: {
        "host": "127.0.0.1",
        "port": 80,
        "server_hostname": "h",
    },
    "ssl_handshake_timeout without ssl": lambda env: {
        "host": "127.0.0.1",
        "port": 80,
        "ssl_handshake_timeout": 1,
    },
    "ssl_shutdown_timeout without ssl": lambda env: {
        "host": "127.0.0.1",
        "port": 80,
        "ssl_shutdown_timeout": 1,
    },
    "ssl str": lambda env: {"host": "127.0.0.1", "port": env.closed_port(), "ssl": "x"},
    "ssl context, no hostname, sock": lambda env: {
        "sock": env.connected(),
        "ssl": ssl.create_default_context(),
    },
    "ssl_handshake_timeout negative": lambda env: {
        "sock": env.connected(),
        "ssl": ssl.create_default_context(),
        "server_hostname": "h",
        "ssl_handshake_timeout": -1,
    },
    "local_addr str": lambda env: {"host": "127.0.0.1", "port": 80, "local_addr": "x"},
    "local_addr port negative": lambda env: {
        "host": "127.0.0.1",
        "port": env.closed_port(),
        "local_addr": ("127.0.0.1", -1),
    },
    "interleave str": lambda env: {
        "host": "127.0.0.1",
        "port": env.closed_port(),
        "interleave": "x",
    },
    "family str": lambda env: {"host": "127.0.0.1", "port": 80, "family": "x"},
    "protocol_factory None": lambda env: {"sock": env.connected(), "protocol_factory": None},
    "protocol_factory raises": lambda env: {
        "sock": env.connected(),
        "protocol_factory": lambda: 1 / 0,
    },
}


def _connect(
    loop: asyncio.AbstractEventLoop, env: Env, make: Callable[[Env], dict[str, Any]]
) -> Any:
    kwargs = make(env)
    factory = kwargs.pop("protocol_factory", P)
    return loop.create_connection(factory, **kwargs)


for _name, _make in _CONNECT_BAD.items():
    case("create_connection", _name, bound(_connect, _make))
# The stdlib's staggered race leaves a coroutine never awaited here (pytestmark).
case(
    "create_connection",
    "happy_eyeballs_delay str",
    lambda loop, env: loop.create_connection(  # type: ignore[call-overload]
        P,
        "127.0.0.1",
        env.closed_port(),
        happy_eyeballs_delay="x",
    ),
    collect=True,
)

_SERVER_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "port negative": lambda env: {"host": "127.0.0.1", "port": -1},
    "port 70000": lambda env: {"host": "127.0.0.1", "port": 70000},
    "port float": lambda env: {"host": "127.0.0.1", "port": 1.5},
    "host float": lambda env: {"host": 1.5, "port": 0},
    "host list with float": lambda env: {"host": ["127.0.0.1", 1.5], "port": 0},
    "host and sock": lambda env: {"host": "127.0.0.1", "port": 0, "sock": env.tcp()},
    "sock UDP": lambda env: {"sock": env.udp()},
    "sock closed": lambda env: {"sock": env.closed()},
    "sock str": lambda env: {"sock": "x"},
    "backlog negative": lambda env: {"host": "127.0.0.1", "port": 0, "backlog": -1},
    "ssl str": lambda env: {"host": "127.0.0.1", "port": 0, "ssl": "x"},
    "ssl_handshake_timeout without ssl": lambda env: {
        "host": "127.0.0.1",
        "port": 0,
        "ssl_handshake_timeout": 1,
    },
    "ssl_shutdown_timeout without ssl": lambda env: {
        "host": "127.0.0.1",
        "port": 0,
        "ssl_shutdown_timeout": 1,
    },
    "reuse_port str": lambda env: {"host": "127.0.0.1", "port": 0, "reuse_port": "x"},
    "family AF_UNIX": lambda env: {"host": "127.0.0.1", "port": 0, "family": socket.AF_UNIX},
    "start_serving str": lambda env: {"host": "127.0.0.1", "port": 0, "start_serving": "x"},
    "no host, port in use": lambda env: {
        "host": "127.0.0.1",
        "port": env.listener().getsockname()[1],
    },
}
for _name, _make in _SERVER_BAD.items():
    case(
        "create_server", _name, bound(lambda loop, env, mk: loop.create_server(P, **mk(env)), _make)
    )

_UNIX_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "path float": lambda env: {"path": 1.5},
    "path missing": lambda env: {"path": env.path("missing")},
    "path in a missing directory": lambda env: {"path": env.path("no/such")},
    "path and sock": lambda env: {"path": env.path("s"), "sock": env.unix()},
    "neither path nor sock": lambda env: {},
    "sock TCP": lambda env: {"sock": env.tcp()},
    "sock closed": lambda env: {"sock": env.closed()},
    "sock str": lambda env: {"sock": "x"},
    "server_hostname without ssl": lambda env: {"path": env.path("s"), "server_hostname": "h"},
    "ssl_handshake_timeout without ssl": lambda env: {
        "path": env.path("s"),
        "ssl_handshake_timeout": 1,
    },
    "ssl_shutdown_timeout without ssl": lambda env: {
        "path": env.path("s"),
        "ssl_shutdown_timeout": 1,
    },
}
for _name, _make in _UNIX_BAD.items():
    case(
        "create_unix_connection",
        _name,
        bound(lambda loop, env, mk: loop.create_unix_connection(P, **mk(env)), _make),
    )
    if "server_hostname" not in _name:
        case(
            "create_unix_server",
            _name.replace("missing", "missing (server)"),
            bound(lambda loop, env, mk: loop.create_unix_server(P, **mk(env)), _make),
        )
case(
    "create_unix_server",
    "path is a directory",
    lambda loop, env: loop.create_unix_server(P, env.tmp),
)

_ACCEPTED_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "sock UDP": lambda env: {"sock": env.udp()},
    "sock closed": lambda env: {"sock": env.closed()},
    "sock str": lambda env: {"sock": "x"},
    "sock None": lambda env: {"sock": None},
    "ssl_handshake_timeout without ssl": lambda env: {
        "sock": env.connected(),
        "ssl_handshake_timeout": 1,
    },
    "ssl_shutdown_timeout without ssl": lambda env: {
        "sock": env.connected(),
        "ssl_shutdown_timeout": 1,
    },
}
for _name, _make in _ACCEPTED_BAD.items():
    case(
        "connect_accepted_socket",
        _name,
        bound(lambda loop, env, mk: loop.connect_accepted_socket(P, **mk(env)), _make),
    )

_DGRAM_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "no address, no family": lambda env: {},
    "local_addr str": lambda env: {"local_addr": "x"},
    "local_addr 1-tuple": lambda env: {"local_addr": ("127.0.0.1",)},
    "local_addr port negative": lambda env: {"local_addr": ("127.0.0.1", -1)},
    "remote_addr port 70000": lambda env: {"remote_addr": ("127.0.0.1", 70000)},
    "remote_addr float": lambda env: {"remote_addr": 1.5},
    "sock TCP": lambda env: {"sock": env.tcp()},
    "sock and local_addr": lambda env: {"sock": env.udp(), "local_addr": ("127.0.0.1", 0)},
    "sock str": lambda env: {"sock": "x"},
    "reuse_address": lambda env: {"local_addr": ("127.0.0.1", 0), "reuse_address": True},
    "family AF_UNIX, local_addr tuple": lambda env: {
        "family": socket.AF_UNIX,
        "local_addr": ("127.0.0.1", 0),
    },
    "family AF_UNIX, missing remote path": lambda env: {
        "family": socket.AF_UNIX,
        "remote_addr": env.path("missing"),
    },
    "family str": lambda env: {"local_addr": ("127.0.0.1", 0), "family": "x"},
    "allow_broadcast, no remote": lambda env: {
        "local_addr": ("127.0.0.1", 0),
        "allow_broadcast": True,
    },
}
for _name, _make in _DGRAM_BAD.items():
    case(
        "create_datagram_endpoint",
        _name,
        bound(lambda loop, env, mk: loop.create_datagram_endpoint(DP, **mk(env)), _make),
    )

# -- TLS upgrade and sendfile ----------------------------------------------
case(
    "start_tls",
    "sslcontext None",
    lambda loop, env: loop.start_tls(env.transport, P(), None),  # type: ignore[arg-type]
    setup=True,
)
case(
    "start_tls",
    "sslcontext str",
    lambda loop, env: loop.start_tls(env.transport, P(), "x"),  # type: ignore[arg-type]
    setup=True,
)
case(
    "start_tls",
    "UDP transport",
    lambda loop, env: loop.start_tls(env.udp_transport, P(), ssl.create_default_context()),
    setup=True,
)
case(
    "start_tls",
    "transport None",
    lambda loop, env: loop.start_tls(None, P(), ssl.create_default_context()),  # type: ignore[arg-type]
)
_SENDFILE_BAD: dict[str, Callable[[Env], dict[str, Any]]] = {
    "file None": lambda env: {"file": None},
    "text file": lambda env: {"file": env.file("r")},
    "offset negative": lambda env: {"file": env.file(), "offset": -1},
    "offset str": lambda env: {"file": env.file(), "offset": "x"},
    "count 0": lambda env: {"file": env.file(), "count": 0},
    "count str": lambda env: {"file": env.file(), "count": "x"},
}
for _name, _make_kw in _SENDFILE_BAD.items():
    case(
        "sendfile",
        _name,
        bound(lambda loop, env, mk: loop.sendfile(env.transport, **mk(env)), _make_kw),
        setup=True,
    )
case(
    "sendfile",
    "UDP transport",
    lambda loop, env: loop.sendfile(env.udp_transport, env.file()),
    setup=True,
)
case("sendfile", "transport None", lambda loop, env: loop.sendfile(None, env.file()))  # type: ignore[arg-type]


def _sendfile_closing(loop: asyncio.AbstractEventLoop, env: Env) -> Any:
    env.transport.close()
    return loop.sendfile(env.transport, env.file())


case("sendfile", "transport closing", _sendfile_closing, setup=True)

# -- pipes and children ----------------------------------------------------
_PIPES_BAD: dict[str, Callable[[Env], Any]] = {
    "None": lambda env: None,
    "regular file": lambda env: env.file(),
    "socket": lambda env: env.udp(),
}
for _method in ("connect_read_pipe", "connect_write_pipe"):
    for _name, _make_pipe in _PIPES_BAD.items():
        case(
            _method,
            _name,
            bound(lambda loop, env, m, mk: getattr(loop, m)(P, mk(env)), _method, _make_pipe),
        )
    case(
        _method,
        "protocol_factory None",
        bound(
            lambda loop, env, m: getattr(loop, m)(None, env.pipe()[0 if "read" in m else 1]),
            _method,
        ),
    )
_EXEC_BAD: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "program None": ((None,), {}),
    "program float": ((1.5,), {}),
    "program missing": (("/nonexistent/program",), {}),
    "arg None": ((sys.executable, None), {}),
    "universal_newlines": ((sys.executable,), {"universal_newlines": True}),
    "shell": ((sys.executable,), {"shell": True}),
    "bufsize": ((sys.executable,), {"bufsize": 1}),
    "text": ((sys.executable,), {"text": True}),
    "encoding": ((sys.executable,), {"encoding": "utf-8"}),
    "errors": ((sys.executable,), {"errors": "strict"}),
    "stdin str": ((sys.executable,), {"stdin": "x"}),
    "cwd missing": ((sys.executable,), {"cwd": "/nonexistent/dir"}),
    "unknown keyword": ((sys.executable,), {"x": 1}),
}
for _name, (_args, _kwargs) in _EXEC_BAD.items():
    case(
        "subprocess_exec",
        _name,
        bound(
            lambda loop, env, a, k: loop.subprocess_exec(asyncio.SubprocessProtocol, *a, **k),
            _args,
            _kwargs,
        ),
    )
for _name, (_args, _kwargs) in {
    "cmd None": ((None,), {}),
    "cmd list": ((["true"],), {}),
    "universal_newlines": (("true",), {"universal_newlines": True}),
    "shell False": (("true",), {"shell": False}),
    "bufsize": (("true",), {"bufsize": 1}),
    "text": (("true",), {"text": True}),
    "encoding": (("true",), {"encoding": "utf-8"}),
    "errors": (("true",), {"errors": "strict"}),
    "cwd missing": (("true",), {"cwd": "/nonexistent/dir"}),
}.items():
    case(
        "subprocess_shell",
        _name,
        bound(
            lambda loop, env, a, k: loop.subprocess_shell(asyncio.SubprocessProtocol, *a, **k),
            _args,
            _kwargs,
        ),
    )


def _add_signal_handler(loop: asyncio.AbstractEventLoop, env: Env, sig: Any, callback: Any) -> Any:
    if isinstance(sig, int) and 1 <= sig < signal.NSIG:
        env.signals.append(sig)
    return loop.add_signal_handler(sig, callback)


for _name, _sig in {
    "str": "x",
    "float": 1.5,
    "0": 0,
    "NSIG": signal.NSIG,
    "SIGKILL": SIGKILL,
    "SIGSTOP": signal.SIGSTOP,
    "None": None,
}.items():
    case(
        "add_signal_handler",
        f"sig {_name}",
        bound(lambda loop, env, s: _add_signal_handler(loop, env, s, a_callback), _sig),
    )
    case(
        "remove_signal_handler",
        f"sig {_name}",
        bound(lambda loop, env, s: loop.remove_signal_handler(s), _sig),
    )
for _name, _cb in {"None": None, "str": "x", "coroutine function": a_coroutine_function}.items():
    case(
        "add_signal_handler",
        f"callback {_name}",
        bound(lambda loop, env, c: _add_signal_handler(loop, env, signal.SIGUSR1, c), _cb),
    )
case(
    "add_signal_handler",
    "closed loop",
    lambda loop, env: loop.add_signal_handler(signal.SIGUSR1, a_callback),
    state="closed",
)
case(
    "remove_signal_handler",
    "not installed",
    lambda loop, env: loop.remove_signal_handler(signal.SIGUSR2),
)
case(
    "remove_signal_handler",
    "closed loop",
    lambda loop, env: loop.remove_signal_handler(signal.SIGUSR2),
    state="closed",
)


# ----------------------------------------------------------------------
# Running a case and describing what happened


@dataclass(frozen=True)
class Outcome:
    stage: str  # "call" (raised at the call), "await" (raised awaiting it), "ok"
    returned: str  # "coroutine", "future" or the kind of the result
    error: str | None  # "Type: message", masked
    handler: tuple[str, ...] = field(default=())  # exception-handler calls, masked


def mask(text: str, env: Env | None = None) -> str:
    """*text* without what differs by nature between two runs or two loop classes."""
    if env is not None:
        text = text.replace(env.tmp, "<tmp>")
    text = re.sub(r"0x[0-9a-fA-F]+", "0x#", text)
    text = re.sub(r"fd=-?\d+", "fd=#", text)
    text = re.sub(r"(File descriptor|file descriptor) \d+", r"\1 #", text)
    text = re.sub(r"(laddr|raddr)=\('[^']*', \d+\)", r"\1=(#)", text)
    text = re.sub(r"\('(127\.0\.0\.1|0\.0\.0\.0|::1?)', \d+\)", r"('\1', #)", text)
    # The reprs of the loop's own objects name its classes.
    text = re.sub(r"<[\w.]*(EventLoop|Loop)\b[^<>]*>", "<loop>", text)
    text = re.sub(r"<[\w.]*Transport\b[^<>]*(<[^<>]*>)?[^<>]*>", "<transport>", text)
    text = re.sub(r"<(Timer)?Handle\b[^<>]*>", "<handle>", text)
    # Debug mode's "created at file:line" of a future or handle names the loop's code.
    text = re.sub(r"created at \S+:\d+", "created at #", text)
    # A signature TypeError names the method's class: BaseEventLoop.stop().
    text = re.sub(r"^[\w.]+\(\) (takes|got|missing)", r"f() \1", text)
    return text


def describe(exc: BaseException, env: Env | None = None) -> str:
    return f"{type(exc).__name__}: {mask(str(exc), env)}"


def kind_of(value: Any) -> str:
    """What a call returned, by kind (the classes differ between loops)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        return type(value).__name__
    if isinstance(value, (str, bytes)):
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, tuple):
        return "(" + ", ".join(kind_of(v) for v in value) + ")"
    if isinstance(value, list):
        return f"list[{len(value)}]"
    if isinstance(value, socket.socket):
        return "socket"
    if asyncio.iscoroutine(value):
        return "coroutine"
    if isinstance(value, asyncio.Task) or type(value).__name__ == "Task":
        return "Task"
    if asyncio.isfuture(value):
        return "Future"
    name = type(value).__name__
    for kind in ("TimerHandle", "Handle", "Server", "Transport", "Protocol"):
        if kind in name:
            return kind
    return name


async def drive(
    loop: asyncio.AbstractEventLoop, env: Env, case: Case
) -> tuple[str, str, str | None]:
    """Make the call on the running loop; (stage, returned, error)."""
    if case.setup:
        await env.setup_transport()
    try:
        value = case.call(loop, env)
    except Exception as exc:
        return "call", "", describe(exc, env)
    if not (asyncio.iscoroutine(value) or asyncio.isfuture(value)):
        env.results.append(value)
        return "ok", kind_of(value), None
    returned = "coroutine" if asyncio.iscoroutine(value) else "future"
    if returned == "coroutine":
        env._coros.append(value)
    try:
        result = await asyncio.wait_for(value, TIMEOUT)
    except Exception as exc:
        return "await", returned, describe(exc, env)
    env.results.append(result)
    return "ok", f"{returned} -> {kind_of(result)}", None


def outcome_on(factory: LoopFactory, case: Case, debug: bool) -> Outcome:
    """The outcome of *case* on a fresh loop from *factory*; the loop is closed after."""
    loop = factory()
    env = Env(loop)
    calls: list[str] = []

    def handler(_loop: asyncio.AbstractEventLoop, context: Any) -> None:
        if not isinstance(context, dict):
            calls.append(f"context {kind_of(context)}")
            return
        exc = context.get("exception")
        calls.append(
            mask(str(context.get("message")), env)
            + ("" if exc is None else f" ({describe(exc, env)})")
        )

    loop.set_exception_handler(handler)
    loop.set_debug(debug)
    try:
        if case.state == "closed":
            loop.close()
            try:
                value = case.call(loop, env)
            except Exception as exc:
                return Outcome("call", "", describe(exc, env))
            if asyncio.iscoroutine(value):
                env._coros.append(value)
            return Outcome("ok", kind_of(value), None)
        error: str | None
        if case.state == "idle":
            try:
                value = case.call(loop, env)
            except Exception as exc:
                stage, returned, error = "call", "", describe(exc, env)
            else:
                stage, returned, error = "ok", kind_of(value), None
        else:

            async def main() -> tuple[str, str, str | None]:
                try:
                    return await drive(loop, env, case)
                finally:
                    for _ in range(5):  # let a bad callback run, and fail
                        await asyncio.sleep(0)
                    await env.dispose()

            try:
                stage, returned, error = loop.run_until_complete(main())
            except Exception as exc:  # not the call's: the loop's run raised
                stage, returned, error = "escaped the loop", "", describe(exc, env)
        # Sorted and once each: a callback left registered may fail once per iteration.
        return Outcome(stage, returned, error, tuple(sorted(set(calls))))
    finally:
        env.cleanup()
        close_loop(loop)
        if case.collect:
            gc.collect()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close *loop* as the fixtures do; a task left pending by a run that raised is cancelled."""
    if loop.is_closed():
        return
    try:
        finish(loop)
    except AssertionError:
        # finish() closed the loop after cancelling the task the failed run left.
        assert loop.is_closed()


@dataclass(frozen=True)
class KnownDifference:
    loops: tuple[str, ...]  # loop name prefixes
    method: str
    label: str
    reason: str
    debug: bool | None = None  # None: in both modes
    #: The key of the registered divergence (divergences.py) this difference
    #: is, if it is deliberate: a test of its own asserts it, not
    #: test_known_difference.
    divergence: str | None = None


#: Differences the fuzzer found and tideloop still has (see the module
#: docstring). Five more that it found were fixed: default_exception_handler(None)
#: and ('x') in debug mode, getaddrinfo(flags='x'), sock_accept(None) and ('x'),
#: create_connection(happy_eyeballs_delay='x').
KNOWN_DIFFERENCES: list[KnownDifference] = [
    KnownDifference(
        DIVERGENCES["poll-accepts-fd-not-open"].loops,
        method,
        "fd not open",
        DIVERGENCES["poll-accepts-fd-not-open"].what,
        divergence="poll-accepts-fd-not-open",
    )
    for method in ("add_reader", "add_writer")
]
#: The differences pinned as strict expected failures (not deliberate).
UNFIXED = [k for k in KNOWN_DIFFERENCES if k.divergence is None]


def known(loop_name: str, method: str, label: str, debug: bool) -> KnownDifference | None:
    for k in KNOWN_DIFFERENCES:
        if (
            loop_name.startswith(k.loops)
            and (k.method, k.label) == (method, label)
            and k.debug in (None, debug)
        ):
            return k
    return None


def compare(loop_name: str, method: str, case: Case, debug: bool) -> None:
    expected = outcome_on(asyncio.SelectorEventLoop, case, debug)
    got = outcome_on(FACTORIES[loop_name], case, debug)
    assert got == expected, (
        f"{method}: {case.label} (debug={debug}) on {loop_name}:\n"
        f"  got      {got}\n  expected {expected} (stdlib)"
    )


METHODS = sorted(CASES)


@pytest.mark.parametrize("method", METHODS)
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
@given(data=st.data())
def test_bad_arguments(
    loop_name: str, method: str, request: pytest.FixtureRequest, data: st.DataObject
) -> None:
    case = data.draw(st.sampled_from(CASES[method]), label="case")
    debug = case.debug if case.debug is not None else data.draw(st.booleans(), label="debug")
    assume(known(loop_name, method, case.label, debug) is None)
    assume(not (case.blocks and request.config.getoption("--blockbuster")))
    compare(loop_name, method, case, debug)


def test_every_method_has_cases() -> None:
    """Every public method of AbstractEventLoop has bad calls to make."""
    public = {n for n in vars(asyncio.AbstractEventLoop) if not n.startswith("_")}
    assert public - set(CASES) == set()


def _known_params() -> list[Any]:
    params = []
    for k in UNFIXED:
        for debug in (False, True) if k.debug is None else (k.debug,):
            for loop_kind in FACTORIES:
                marks = []
                if loop_kind.startswith(k.loops):
                    marks.append(pytest.mark.xfail(strict=True, reason=k.reason))
                mode = "debug" if debug else "no debug"
                params.append(
                    pytest.param(
                        loop_kind,
                        k.method,
                        k.label,
                        debug,
                        marks=marks,
                        id=f"{loop_kind}-{k.method}-{k.label}-{mode}",
                    )
                )
    return params


if UNFIXED:  # (an empty parameter set would be a skipped test)

    @pytest.mark.parametrize(("loop_kind", "method", "label", "debug"), _known_params())
    def test_known_difference(loop_kind: str, method: str, label: str, debug: bool) -> None:
        """One difference the fuzzer found: a strict expected failure on the loops that differ."""
        (case,) = [c for c in CASES[method] if c.label == label]
        compare(loop_kind, method, case, debug)


@pytest.mark.divergence("poll-accepts-fd-not-open")
@pytest.mark.parametrize("loop_kind", list(FACTORIES))
@pytest.mark.parametrize("method", ["add_reader", "add_writer"])
@pytest.mark.parametrize("debug", [False, True], ids=["no debug", "debug"])
def test_poll_accepts_fd_not_open(loop_kind: str, method: str, debug: bool) -> None:
    """add_reader()/add_writer() of an fd that is not open, on each loop.

    The stdlib loop (its default selector: epoll) and tideloop's epoll poller
    raise OSError(EBADF) at the call; tideloop's poll poller accepts the fd,
    as the stdlib loop does with a selectors.PollSelector.
    """
    entry = DIVERGENCES["poll-accepts-fd-not-open"]
    (case,) = [c for c in CASES[method] if c.label == "fd not open"]
    stdlib = outcome_on(asyncio.SelectorEventLoop, case, debug)
    with_poll_selector = outcome_on(
        lambda: asyncio.SelectorEventLoop(selectors.PollSelector()), case, debug
    )
    assert (with_poll_selector.stage, with_poll_selector.error) == ("ok", None)
    if entry.holds:
        assert (stdlib.stage, stdlib.error) == ("call", "OSError: [Errno 9] Bad file descriptor")
    got = outcome_on(FACTORIES[loop_kind], case, debug)
    if entry.holds and loop_kind.startswith(entry.loops):
        assert got == with_poll_selector
    else:
        assert got == stdlib
