"""Random sequences of transport calls on a connected pair, checked against asyncio's rules.

Hypothesis draws a sequence of steps; each example opens a fresh loop of the
kind under test (``fault_loop_name``) and a fresh connected pair on it, plays
the steps, closes everything and checks that nothing is left. The pair's two
sides are ``a`` and ``b``, each a transport with a recording protocol:

- TCP on loopback (``create_connection(sock=)`` / ``connect_accepted_socket``),
- AF_UNIX stream sockets (``socketpair``; ``create_unix_connection(sock=)`` /
  ``connect_accepted_socket``),
- TLS over loopback TCP (``create_connection(ssl=, sock=)`` /
  ``connect_accepted_socket(ssl=)``, the throwaway CA of ``fault_tls_contexts``),
- a pipe (``os.pipe()``: ``a`` is ``connect_write_pipe``'s transport, ``b``
  ``connect_read_pipe``'s; a step a side cannot take is skipped).

Steps: write(n), writelines([n, ...]) of the side's own byte stream;
pause_reading / resume_reading; read_some (resume for one iteration, then
pause again: a peer that reads a little); set_write_buffer_limits(high, low),
invalid pairs included; write_eof; close; abort; reset (TCP and TLS:
SO_LINGER 0, then abort, so the peer gets a RST); and letting the loop run
(a few iterations or a few milliseconds). The loop runs three iterations
after every step.

After every step, on every loop (the stdlib's included, which is the spec):

- what each side received is a prefix of what its peer wrote, in order, also
  after an abort or a reset;
- pause_writing and resume_writing alternate, starting with pause;
- eof_received at most once, never after connection_lost; no data_received
  after eof_received or connection_lost; connection_lost at most once;
- get_write_buffer_size() >= 0, and 0 once connection_lost was called.

At the end the readers are resumed and every side not closed yet is closed:
connection_lost then comes exactly once on each side (within 5 s), no
exception-handler call was made, no fd is left registered and no task
pending. The exception each step raised (or that it raised none) is compared
with what the same steps raise on a fresh stdlib loop: type and message
(addresses and fd numbers masked). Write after close or abort is silently
dropped and write after write_eof raises RuntimeError, as asyncio does (a
pipe's write after write_eof is dropped, a TLS transport's write_eof raises
NotImplementedError: whatever the stdlib does is the expectation).

Calls not made, where the stdlib loop cannot be the oracle:

- close() on a TLS transport that is already closing (closed or aborted by
  the test, or closed by its protocol at EOF): the stdlib's then drops its
  SSL protocol and every later call raises AttributeError; tideloop's stays
  a closed transport on purpose (divergence "tls-closed-twice");
- abort() on a write pipe transport that is already closing (the reader
  went away, or the test closed or aborted it): the stdlib's schedules its
  connection_lost() callback once more, which fails with AttributeError in
  the exception handler, or, once connection_lost() has run, raises
  AttributeError itself (a stdlib bug, 3.11 to 3.15: divergence
  "write-pipe-abort-when-closing", test_write_pipe_abort_when_closing);
- set_write_buffer_limits() on a TLS transport that is closing: once its
  connection is lost, the stdlib's asks the protocol it has dropped to
  pause writing, AttributeError in the exception handler (a stdlib bug that
  tideloop and uvloop share: test_tls_limits_after_connection_lost);
- writelines() on a TCP or Unix transport that is closing, where the
  stdlib's writelines() does not drop data once the connection is lost
  (3.12: divergence "writelines-after-connection-lost",
  test_writelines_after_connection_lost);
- reset of a transport that is closing (its socket is closed, or about to be);
- abort() on a read pipe transport: the stdlib's has none (AttributeError;
  divergence "read-pipe-abort", test_read_pipe_abort).

Whether a transport is closing yet can depend on how many iterations a loop
took to see its peer's close, so such a skipped call matches any outcome.

Differences found, each pinned by a test of its own at the end of this
module (the fuzzer lets exactly the outcomes of KNOWN_DIFFERENCES through,
and makes none of the calls above). uvloop's are strict expected failures
there: before 3.12, writelines() after write_eof() names writelines() in its
error on uvloop, write() on the stdlib (and on tideloop, which did as uvloop
until this test found it); uvloop raises RuntimeError from calls on a closed
transport, and from write() after write_eof() on a pipe, where the stdlib
drops the data. tideloop's are registered divergences (tests/divergences.py),
whose tests assert what each loop does, the stdlib's loop included wherever
the entry holds: tideloop's read pipe transport has an abort(), the
stdlib's none ("read-pipe-abort"); abort() of a closing write pipe
("write-pipe-abort-when-closing") and writelines() after connection_lost()
on 3.12 ("writelines-after-connection-lost") are stdlib bugs that tideloop
does not copy.

Examples are derandomized, the same on every run; the stdlib loop's outcome
for a sequence is computed once per process and reused.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import socket
import ssl
import struct
from asyncio import selector_events
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from fault_support import FAULT_FACTORIES, run
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from divergences import DIVERGENCES, STDLIB_WRITELINES_DROPS_WHEN_LOST
from loopwatch import LoopFactory, finish, registered_fds

LOOPS = FAULT_FACTORIES

KINDS = ["tcp", "unix", "tls", "pipe"]

#: The most each side writes in one example (writes past it are clamped).
STREAM_SIZE = 4 * 1024 * 1024
#: Each side's byte stream: no two windows of it alike, so a reordered or
#: repeated chunk breaks the prefix check.
STREAMS = {
    "a": hashlib.shake_256(b"fuzz-transports-a").digest(STREAM_SIZE),
    "b": hashlib.shake_256(b"fuzz-transports-b").digest(STREAM_SIZE),
}

#: Wait at most this long for connection_lost at the end of an example.
LOST_TIMEOUT = 5.0

Step = tuple[Any, ...]
T = TypeVar("T")

_sides = st.sampled_from(["a", "b"])
_sizes = st.sampled_from([1, 7, 1000, 16 * 1024, 100 * 1024, 300 * 1024])
_limits = st.sampled_from([None, 0, 1, 100, 4096, 64 * 1024, 1024 * 1024, -1])
_ARGS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "write": st.tuples(_sides, _sizes),
    "writelines": st.tuples(_sides, st.lists(_sizes, max_size=3).map(tuple)),
    "pause_reading": st.tuples(_sides),
    "resume_reading": st.tuples(_sides),
    "read_some": st.tuples(_sides),
    "limits": st.tuples(_sides, _limits, _limits),
    "write_eof": st.tuples(_sides),
    "close": st.tuples(_sides),
    "abort": st.tuples(_sides),
    "reset": st.tuples(_sides),
    "run": st.tuples(st.sampled_from([1, 10])),
    "sleep": st.tuples(st.sampled_from([0.001, 0.01])),
}
#: How often each step comes (writes most, the ends of a connection least).
_WEIGHTS = {"write": 6, "writelines": 3, "pause_reading": 2, "resume_reading": 2, "read_some": 2}
_WEIGHTS |= {"run": 2, "limits": 2, "sleep": 1, "write_eof": 1, "close": 1, "abort": 1, "reset": 1}
_OPS = [op for op, weight in _WEIGHTS.items() for _ in range(weight)]


def _step(op: str) -> st.SearchStrategy[Step]:
    return _ARGS[op].map(lambda args: (op, *args))


STEP = st.sampled_from(_OPS).flatmap(_step)
STEPS = st.lists(STEP, min_size=6, max_size=30).map(tuple)


class Recorder(asyncio.Protocol):
    """A protocol that records its calls and notes every breach of asyncio's rules."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self.name = name
        # Any: uvloop's transports are not asyncio.Transport instances.
        self.transport: Any = None
        self.events: list[str] = []
        self.flow: list[str] = []
        self.received = bytearray()
        self.violations: list[str] = []
        self.made: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[BaseException | None] = loop.create_future()
        self.eof = False

    def _bad(self, what: str) -> None:
        self.violations.append(f"side {self.name}: {what} (events so far: {self.events})")

    def _event(self, event: str) -> None:
        if not (event == "data" and self.events[-1:] == ["data"]):
            self.events.append(event)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.made.done():
            self._bad("connection_made twice")
            return
        self._event("made")
        self.transport = transport
        self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        if not self.made.done():
            self._bad("data_received before connection_made")
        if self.eof:
            self._bad("data_received after eof_received")
        if self.lost.done():
            self._bad("data_received after connection_lost")
        if not data:
            self._bad("data_received(b'')")
        self._event("data")
        self.received += data

    def eof_received(self) -> bool | None:
        if self.eof:
            self._bad("eof_received twice")
        if self.lost.done():
            self._bad("eof_received after connection_lost")
        self._event("eof")
        self.eof = True
        return None  # the transport closes itself

    def pause_writing(self) -> None:
        if self.flow[-1:] == ["pause"]:
            self._bad("pause_writing twice in a row")
        if self.lost.done():
            self._bad("pause_writing after connection_lost")
        self.flow.append("pause")

    def resume_writing(self) -> None:
        if self.flow[-1:] != ["pause"]:
            self._bad("resume_writing without pause_writing")
        if self.lost.done():
            self._bad("resume_writing after connection_lost")
        self.flow.append("resume")

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.lost.done():
            self._bad("connection_lost twice")
            return
        self._event("lost")
        self.lost.set_result(exc)


@dataclass
class Side:
    name: str
    proto: Recorder
    transport: Any
    can_write: bool
    can_read: bool
    can_reset: bool
    can_abort: bool
    kind: str
    written: int = 0  # bytes of STREAMS[name] handed to write()/writelines()

    def chunk(self, n: int) -> bytes:
        n = min(n, STREAM_SIZE - self.written)
        data = STREAMS[self.name][self.written : self.written + n]
        return data


@dataclass
class Outcome:
    """What one run of a sequence raised, step by step (compared between loops)."""

    raised: list[str | None] = field(default_factory=list)
    teardown: list[str | None] = field(default_factory=list)


PIPE_WRITER: dict[str, Any] = {
    "can_write": True,
    "can_read": False,
    "can_reset": False,
    "can_abort": True,
    "kind": "pipe",
}
#: A read pipe transport has no abort() in asyncio (divergence "read-pipe-abort").
PIPE_READER: dict[str, Any] = {
    "can_write": False,
    "can_read": True,
    "can_reset": False,
    "can_abort": False,
    "kind": "pipe",
}
SOCKET_SIDE: dict[str, Any] = {"can_write": True, "can_read": True, "can_abort": True}

#: Does the stdlib's socket transport have a writelines() of its own (3.12+)?
#: Before, writelines() is WriteTransport's join-and-write(), whose error
#: names write().
STDLIB_OWN_WRITELINES = "writelines" in vars(selector_events._SelectorSocketTransport)  # type: ignore[attr-defined]
#: Does the stdlib's writelines() drop the data once the connection is lost?
#: 3.12's own writelines() keeps it (divergence "writelines-after-connection-lost").
STDLIB_WRITELINES_DROPS = STDLIB_WRITELINES_DROPS_WHEN_LOST

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+|fd=\d+|\[Errno \d+\]")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_ADDRESS.sub('#', str(exc))}"


async def open_pair(
    loop: asyncio.AbstractEventLoop,
    kind: str,
    contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None,
) -> tuple[Side, Side]:
    pa, pb = Recorder(loop, "a"), Recorder(loop, "b")
    if kind == "pipe":
        rfd, wfd = os.pipe()
        wfile = os.fdopen(wfd, "wb", buffering=0)
        rfile = os.fdopen(rfd, "rb", buffering=0)
        try:
            ta, _ = await loop.connect_write_pipe(lambda: pa, wfile)
        except BaseException:
            wfile.close()
            rfile.close()
            raise
        try:
            tb, _ = await loop.connect_read_pipe(lambda: pb, rfile)
        except BaseException:
            rfile.close()
            ta.abort()
            raise
        return (
            Side("a", pa, ta, **PIPE_WRITER),
            Side("b", pb, tb, **PIPE_READER),
        )
    if kind == "unix":
        sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ta, _ = await loop.create_unix_connection(lambda: pa, sock=sa)
            tb, _ = await loop.connect_accepted_socket(lambda: pb, sb)
        except BaseException:
            sa.close()
            sb.close()
            raise
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            sa = socket.create_connection(listener.getsockname())
            sb, _ = listener.accept()
        try:
            if kind == "tls":
                assert contexts is not None
                server_ctx, client_ctx = contexts
                (ta, _), (tb, _) = await asyncio.gather(
                    loop.create_connection(
                        lambda: pa,
                        sock=sa,
                        ssl=client_ctx,
                        server_hostname="127.0.0.1",
                        ssl_shutdown_timeout=LOST_TIMEOUT / 2,
                    ),
                    loop.connect_accepted_socket(
                        lambda: pb, sb, ssl=server_ctx, ssl_shutdown_timeout=LOST_TIMEOUT / 2
                    ),
                )
            else:
                ta, _ = await loop.create_connection(lambda: pa, sock=sa)
                tb, _ = await loop.connect_accepted_socket(lambda: pb, sb)
        except BaseException:
            sa.close()
            sb.close()
            raise
    return (
        Side("a", pa, ta, **SOCKET_SIDE, can_reset=kind != "unix", kind=kind),
        Side("b", pb, tb, **SOCKET_SIDE, can_reset=kind != "unix", kind=kind),
    )


async def iterate(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


#: The outcome of a call not made because of the transport's state, which the
#: loops may reach after different numbers of iterations: compared with nothing.
SKIPPED = "skipped"
#: The outcome of a step this side cannot take (a pipe's reading end cannot write).
NOT_APPLICABLE = "-"


async def play_step(step: Step, sides: dict[str, Side]) -> str | None:
    """Take one step; what it raised (described), or None.

    set_write_buffer_limits() returns the limits it leaves, as its outcome.
    """
    op = step[0]
    if op == "run":
        await iterate(step[1])
        return None
    if op == "sleep":
        await asyncio.sleep(step[1])
        return None
    side = sides[step[1]]
    t = side.transport
    needs = {"write": side.can_write, "writelines": side.can_write, "limits": side.can_write}
    needs |= {"write_eof": side.can_write, "abort": side.can_abort, "reset": side.can_reset}
    needs |= {"pause_reading": side.can_read, "resume_reading": side.can_read}
    needs |= {"read_some": side.can_read}
    if not needs.get(op, True):
        return NOT_APPLICABLE
    if t.is_closing() and (
        (side.kind == "tls" and op in ("close", "limits"))
        or (side.kind == "pipe" and op == "abort")
        or (side.kind in ("tcp", "unix") and op == "writelines" and not STDLIB_WRITELINES_DROPS)
        or op == "reset"  # its socket is closed or about to be: nothing to reset
    ):
        return SKIPPED  # not made: see the module docstring
    try:
        if op == "write":
            data = side.chunk(step[2])
            t.write(data)
            side.written += len(data)
        elif op == "writelines":
            chunks = []
            offset = side.written
            for size in step[2]:
                n = min(size, STREAM_SIZE - offset)
                chunks.append(STREAMS[side.name][offset : offset + n])
                offset += n
            t.writelines(chunks)
            side.written = offset
        elif op == "read_some":
            t.resume_reading()
            await iterate(1)
            t.pause_reading()
        elif op == "limits":
            t.set_write_buffer_limits(high=step[2], low=step[3])
            return f"limits {t.get_write_buffer_limits()}"
        elif op == "reset":
            sock = t.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            t.abort()
        else:  # pause_reading, resume_reading, write_eof, close, abort
            getattr(t, op)()
    except Exception as exc:
        return describe(exc)
    return None


def check(sides: dict[str, Side], where: str) -> None:
    """asyncio's invariants, after a step (*where* says which)."""
    for side in sides.values():
        peer = sides["b" if side.name == "a" else "a"]
        proto = side.proto
        assert not proto.violations, f"{where}: {proto.violations}"
        got = bytes(proto.received)
        assert len(got) <= peer.written, f"{where}: side {side.name} got more than was sent"
        if got != STREAMS[peer.name][: len(got)]:
            n = next(
                i for i, (x, y) in enumerate(zip(got, STREAMS[peer.name], strict=False)) if x != y
            )
            pytest.fail(
                f"{where}: side {side.name} received bytes that are not a prefix of "
                f"what side {peer.name} wrote (first difference at byte {n} of {len(got)})"
            )
        if side.can_write:
            size = side.transport.get_write_buffer_size()
            assert size >= 0, f"{where}: side {side.name}: get_write_buffer_size() = {size}"
            if proto.lost.done():
                assert size == 0, (
                    f"{where}: side {side.name}: get_write_buffer_size() = {size} "
                    "after connection_lost"
                )


async def close_pair(sides: dict[str, Side]) -> tuple[list[str | None], bool]:
    """Resume the readers, close every side, wait for both connection_lost calls.

    Returns what the calls raised and whether both connection_lost calls came
    within LOST_TIMEOUT (if not, every side is aborted, so nothing is left).
    """
    raised: list[str | None] = []
    for side in sides.values():
        if side.can_read:
            try:
                side.transport.resume_reading()
            except Exception as exc:
                raised.append(describe(exc))
    for side in sides.values():
        if not (side.kind == "tls" and side.transport.is_closing()):
            try:
                side.transport.close()
            except Exception as exc:
                raised.append(describe(exc))
    lost = asyncio.gather(*(side.proto.lost for side in sides.values()))
    done, _ = await asyncio.wait([lost], timeout=LOST_TIMEOUT)
    if not done:
        lost.cancel()
        for side in sides.values():
            t = side.transport
            getattr(t, "abort", t.close)()
        await asyncio.wait([lost], timeout=LOST_TIMEOUT)
    await iterate(3)
    return raised, bool(done)


async def play(
    loop: asyncio.AbstractEventLoop,
    kind: str,
    steps: tuple[Step, ...],
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> Outcome:
    outcome = Outcome()
    a, b = await open_pair(loop, kind, contexts)
    sides = {"a": a, "b": b}
    try:
        for i, step in enumerate(steps):
            outcome.raised.append(await play_step(step, sides))
            await iterate(3)
            check(sides, f"after step {i} {step!r}")
    finally:
        # Everything ends: readers resumed, every side closed, connection_lost on both.
        outcome.teardown, done = await close_pair(sides)
    assert done, (
        f"connection_lost did not come within {LOST_TIMEOUT} s after close: "
        f"a {a.proto.events}, b {b.proto.events}"
    )
    check(sides, "at the end")
    for side in sides.values():  # what the examples reached (--hypothesis-show-statistics)
        if side.proto.flow:
            event(f"side {side.name} paused writing")
        if side.proto.eof:
            event(f"side {side.name} saw EOF")
        if side.proto.received:
            event(f"side {side.name} received data")
    return outcome


def play_on_fresh_loop(
    factory: LoopFactory,
    kind: str,
    steps: tuple[Step, ...],
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> Outcome:
    """Play *steps* on a new loop from *factory*; the loop is checked and closed."""
    loop = factory()
    handler_calls: list[str] = []

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        handler_calls.append(f"{context.get('message')} ({context.get('exception')!r})")

    loop.set_exception_handler(handler)
    try:
        outcome = run(loop, play(loop, kind, steps, contexts))
        left = registered_fds(loop)
        assert not left, f"fds still registered after both connection_lost: {sorted(left)}"
    finally:
        finish(loop)
    assert not handler_calls, f"exception handler called: {handler_calls}"
    return outcome


@dataclass(frozen=True)
class KnownDifference:
    """A difference from the stdlib loop that a test of its own pins (a strict xfail).

    The fuzzer lets exactly this pair of outcomes through, so that it goes on
    checking everything else on that loop; the pinned test fails (XPASS)
    once the difference is gone, and then this entry goes too.
    """

    loops: tuple[str, ...]  # loop name prefixes
    kinds: tuple[str, ...]  # transport kinds
    ops: tuple[str, ...]  # steps ("teardown" for the closing calls)
    mine: str  # regular expression for the loop's outcome
    theirs: str  # regular expression for the stdlib's ("None": it raised nothing)
    pinned_by: str

    def matches(
        self, loop_name: str, kind: str, op: str, mine: str | None, theirs: str | None
    ) -> bool:
        if not loop_name.startswith(self.loops) or kind not in self.kinds or op not in self.ops:
            return False
        if mine is None:
            return False
        return bool(re.fullmatch(self.mine, mine) and re.fullmatch(self.theirs, str(theirs)))


KNOWN_DIFFERENCES = [
    KnownDifference(
        loops=("uvloop",),
        kinds=("tcp", "unix"),
        ops=("writelines",),
        mine=re.escape("RuntimeError: Cannot call writelines() after write_eof()"),
        theirs=re.escape("RuntimeError: Cannot call write() after write_eof()"),
        pinned_by="test_writelines_after_write_eof",
    ),
    KnownDifference(
        loops=("uvloop",),
        kinds=("tcp", "unix", "pipe"),
        ops=("write", "writelines", "write_eof", "limits", "teardown"),
        mine=r"RuntimeError: unable to perform operation on <.*>; the handler is closed",
        theirs=r".*",
        pinned_by="test_calls_on_a_closed_transport",
    ),
    KnownDifference(
        loops=("uvloop",),
        kinds=("pipe",),
        ops=("write", "writelines"),
        mine=re.escape("RuntimeError: Cannot call write() after write_eof()"),
        theirs="None",
        pinned_by="test_write_pipe_write_after_write_eof",
    ),
]


def known_difference(
    loop_name: str, kind: str, op: str, mine: str | None, theirs: str | None
) -> bool:
    return any(k.matches(loop_name, kind, op, mine, theirs) for k in KNOWN_DIFFERENCES)


_stdlib_outcomes: dict[tuple[str, tuple[Step, ...]], Outcome] = {}


def stdlib_outcome(
    kind: str, steps: tuple[Step, ...], contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> Outcome:
    key = (kind, steps)
    if key not in _stdlib_outcomes:
        _stdlib_outcomes[key] = play_on_fresh_loop(asyncio.SelectorEventLoop, kind, steps, contexts)
    return _stdlib_outcomes[key]


def fuzz(
    fault_loop_name: str,
    kind: str,
    steps: tuple[Step, ...],
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    factory: Callable[[], asyncio.AbstractEventLoop] = LOOPS[fault_loop_name]
    if fault_loop_name == "asyncio":
        stdlib_outcome(kind, steps, contexts)
        return
    got = play_on_fresh_loop(factory, kind, steps, contexts)
    expected = stdlib_outcome(kind, steps, contexts)
    ops = [step[0] for step in steps]
    for i, (step, mine, theirs) in enumerate(zip(steps, got.raised, expected.raised, strict=True)):
        if SKIPPED in (mine, theirs):
            continue
        if mine != theirs and not known_difference(fault_loop_name, kind, step[0], mine, theirs):
            pytest.fail(f"step {i} {step!r}: {fault_loop_name} {mine!r}, stdlib {theirs!r}")
    assert len(got.teardown) == len(expected.teardown), (got.teardown, expected.teardown)
    for mine, theirs in zip(got.teardown, expected.teardown, strict=True):
        if mine != theirs and not known_difference(fault_loop_name, kind, "teardown", mine, theirs):
            pytest.fail(f"teardown: {fault_loop_name} {mine!r}, stdlib {theirs!r} ({ops})")


FUZZ_SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ_SETTINGS
@given(steps=STEPS)
def test_fuzz_transport_pair(
    fault_loop_name: str,
    kind: str,
    fault_tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    steps: tuple[Step, ...],
) -> None:
    fuzz(fault_loop_name, kind, steps, fault_tls_contexts)


# ----------------------------------------------------------------------
# The differences the fuzzer found, pinned one by one (KNOWN_DIFFERENCES and
# the calls the fuzzer does not make). A test of uvloop's asserts what the
# stdlib loop does and is a strict expected failure on uvloop. A test of a
# registered divergence (``@pytest.mark.divergence``; every loop runs it here)
# asserts tideloop's documented behaviour on the loops the entry names, the
# stdlib's on its loop where the entry holds (checked on the other loops'
# runs too, against a fresh stdlib loop), and on every other loop what the
# test says.

Contexts = tuple[ssl.SSLContext, ssl.SSLContext]
Probe = Callable[[asyncio.AbstractEventLoop], Coroutine[Any, Any, T]]


def probe(loop: asyncio.AbstractEventLoop, make: Probe[T]) -> tuple[T, list[str]]:
    """Run ``make(loop)`` on *loop*; its result and the exception-handler calls meanwhile."""
    calls: list[str] = []

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        calls.append(f"{context.get('message')} ({type(context.get('exception')).__name__})")

    loop.set_exception_handler(handler)
    try:
        return run(loop, make(loop)), calls
    finally:
        loop.set_exception_handler(None)


def probe_stdlib(make: Probe[T]) -> tuple[T, list[str]]:
    """`probe` on a fresh stdlib loop, closed afterwards."""
    loop = asyncio.SelectorEventLoop()
    try:
        return probe(loop, make)
    finally:
        finish(loop)


def attempt(call: Callable[[], object]) -> str | None:
    try:
        call()
    except Exception as exc:
        return describe(exc)
    return None


F = TypeVar("F", bound=Callable[..., None])


def fault_xfail_if(condition: bool, *prefixes: str, reason: str) -> Callable[[F], F]:
    """``fault_xfail(*prefixes)`` where *condition* holds; no mark elsewhere."""

    def mark(test: F) -> F:
        if condition:
            return pytest.mark.fault_xfail(*prefixes, reason=reason)(test)  # type: ignore[no-any-return]
        return test

    return mark


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@fault_xfail_if(
    not STDLIB_OWN_WRITELINES,
    "uvloop",
    reason="writelines() after write_eof() raises RuntimeError('Cannot call writelines() after "
    "write_eof()'); before 3.12 the stdlib's writelines() is WriteTransport's join-and-write(), "
    "whose message names write()",
)
def test_writelines_after_write_eof(
    fault_loop: asyncio.AbstractEventLoop, fault_tls_contexts: Contexts, kind: str
) -> None:
    async def case(loop: asyncio.AbstractEventLoop) -> str | None:
        a, b = await open_pair(loop, kind, fault_tls_contexts)
        a.transport.write_eof()
        outcome = attempt(lambda: a.transport.writelines([b"x"]))
        await close_pair({"a": a, "b": b})
        return outcome

    got = probe(fault_loop, case)
    assert got == probe_stdlib(case)


UVLOOP_CLOSED_HANDLE = pytest.mark.fault_xfail(
    "uvloop",
    reason="once a uvloop TCP, Unix or pipe transport is closed (close(), abort(), or closed "
    "at EOF), write(), writelines(), write_eof() and set_write_buffer_limits() raise "
    "RuntimeError('unable to perform operation on <...>; the handler is closed'), and "
    "get_extra_info('socket') is None; the stdlib's drop the data, do nothing, and keep the "
    "socket (uvloop's TLS transport does as the stdlib's)",
)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("tcp", marks=UVLOOP_CLOSED_HANDLE),
        pytest.param("unix", marks=UVLOOP_CLOSED_HANDLE),
        "tls",
        pytest.param("pipe", marks=UVLOOP_CLOSED_HANDLE),
    ],
)
def test_calls_on_a_closed_transport(
    fault_loop: asyncio.AbstractEventLoop, fault_tls_contexts: Contexts, kind: str
) -> None:
    """After connection_lost: what the calls of side a do, for each way a side ends."""

    async def case(loop: asyncio.AbstractEventLoop) -> dict[str, str | None]:
        outcomes: dict[str, str | None] = {}
        for how in ("close", "abort", "peer closes"):
            a, b = await open_pair(loop, kind, fault_tls_contexts)
            t = a.transport
            if how == "peer closes":
                b.transport.close()
            else:
                getattr(t, how)()
            await asyncio.wait_for(a.proto.lost, LOST_TIMEOUT)
            outcomes[f"{how}: write"] = attempt(functools.partial(t.write, b"x"))
            if STDLIB_WRITELINES_DROPS or kind not in ("tcp", "unix"):
                # (else a stdlib bug: test_writelines_after_connection_lost)
                outcomes[f"{how}: writelines"] = attempt(functools.partial(t.writelines, [b"x"]))
            outcomes[f"{how}: write_eof"] = attempt(t.write_eof)
            if kind != "tls":  # a stdlib bug there: test_tls_limits_after_connection_lost
                outcomes[f"{how}: limits"] = attempt(
                    functools.partial(t.set_write_buffer_limits, 1000)
                )
            outcomes[f"{how}: socket"] = type(t.get_extra_info("socket")).__name__
            outcomes[f"{how}: buffer size"] = str(t.get_write_buffer_size())
            await close_pair({"a": a, "b": b})
        return outcomes

    got = probe(fault_loop, case)
    assert got == probe_stdlib(case)


@pytest.mark.fault_xfail(
    "uvloop",
    reason="write() after write_eof() on a write pipe transport whose buffer is not empty "
    "raises RuntimeError('Cannot call write() after write_eof()'); the stdlib's drops the "
    "data (its write_eof() closes the pipe once the buffer drains)",
)
def test_write_pipe_write_after_write_eof(fault_loop: asyncio.AbstractEventLoop) -> None:
    async def case(loop: asyncio.AbstractEventLoop) -> tuple[str | None, bool]:
        a, b = await open_pair(loop, "pipe", None)
        b.transport.pause_reading()
        a.transport.write(a.chunk(300 * 1024))  # more than the pipe holds: some is buffered
        a.written = 300 * 1024
        assert a.transport.get_write_buffer_size() > 0
        a.transport.write_eof()
        outcome = attempt(lambda: a.transport.write(b"x"))
        b.transport.resume_reading()
        await asyncio.wait_for(b.proto.lost, LOST_TIMEOUT)
        await close_pair({"a": a, "b": b})
        return outcome, bytes(b.proto.received) == STREAMS["a"][: a.written]

    got = probe(fault_loop, case)
    assert got == probe_stdlib(case)


def differs(fault_loop_name: str, key: str) -> bool:
    """Is *fault_loop_name* one of the loops that divergence *key* names, where it holds?"""
    entry = DIVERGENCES[key]
    return entry.holds and fault_loop_name.startswith(entry.loops)


_CALLBACK_ARGS = re.compile(r"(_call_connection_lost)\(.*?\)")


@pytest.mark.divergence("write-pipe-abort-when-closing")
@pytest.mark.parametrize("calls", ["abort, abort", "close, abort", "abort, lost, abort"])
def test_write_pipe_abort_when_closing(
    fault_loop_name: str, fault_loop: asyncio.AbstractEventLoop, calls: str
) -> None:
    """asyncio's contract on tideloop and uvloop; the stdlib loop's bug on its own.

    The contract: connection_lost() once, and abort() of a transport that is
    already closing does nothing. The stdlib's abort() schedules its
    connection_lost() callback again, which fails in the exception handler
    (AttributeError: its protocol is gone), or, once connection_lost() has
    run, raises AttributeError itself.
    """

    async def case(loop: asyncio.AbstractEventLoop) -> tuple[list[str], list[str | None]]:
        a, b = await open_pair(loop, "pipe", None)
        raised = []
        for call in calls.split(", "):
            if call == "lost":
                await asyncio.wait_for(a.proto.lost, LOST_TIMEOUT)
            else:
                raised.append(attempt(getattr(a.transport, call)))
        await iterate(5)
        await close_pair({"a": a, "b": b})
        return a.proto.events + a.proto.violations, raised

    def outcome(loop: asyncio.AbstractEventLoop | None) -> object:
        """*loop*'s outcome (a fresh stdlib loop's for None), without the callbacks' arguments."""
        (events, raised), handler_calls = probe_stdlib(case) if loop is None else probe(loop, case)
        return events, raised, [_CALLBACK_ARGS.sub(r"\1(...)", c) for c in handler_calls]

    contract: object = (["made", "lost"], [None, None], [])
    if calls == "abort, lost, abort":
        bug: object = (
            ["made", "lost"],
            [None, "AttributeError: 'NoneType' object has no attribute '_remove_reader'"],
            [],
        )
    else:
        bug = (
            ["made", "lost"],
            [None, None],
            [
                "Exception in callback _UnixWritePipeTransport._call_connection_lost(...) "
                "(AttributeError)"
            ],
        )
    holds = DIVERGENCES["write-pipe-abort-when-closing"].holds
    assert outcome(None) == (bug if holds else contract)
    assert outcome(fault_loop) == (bug if holds and fault_loop_name == "asyncio" else contract)


@pytest.mark.divergence("read-pipe-abort")
@pytest.mark.fault_xfail(
    "uvloop",
    reason="uvloop's read pipe transport's abort() raises NotImplementedError; the stdlib's "
    "has no abort() (it is a ReadTransport: abort() belongs to WriteTransport), so calling "
    "it raises AttributeError",
)
def test_read_pipe_abort(fault_loop_name: str, fault_loop: asyncio.AbstractEventLoop) -> None:
    """tideloop's read pipe transport aborts: connection_lost(None), the pipe closed.

    The stdlib's has no abort(): AttributeError.
    """

    async def case(loop: asyncio.AbstractEventLoop) -> tuple[str | None, list[str], bool]:
        a, b = await open_pair(loop, "pipe", None)
        # The attribute itself is missing on the stdlib's: look it up inside attempt().
        outcome = attempt(lambda: b.transport.abort())  # noqa: PLW0108
        if outcome is None:
            assert await asyncio.wait_for(b.proto.lost, LOST_TIMEOUT) is None
        events = b.proto.events + b.proto.violations
        pipe_closed = bool(b.transport.get_extra_info("pipe").closed)
        await close_pair({"a": a, "b": b})
        return outcome, events, pipe_closed

    got = probe(fault_loop, case)
    stdlib = probe_stdlib(case)
    if DIVERGENCES["read-pipe-abort"].holds:
        no_abort = "AttributeError: '_UnixReadPipeTransport' object has no attribute 'abort'"
        assert stdlib == ((no_abort, ["made"], False), [])
    if differs(fault_loop_name, "read-pipe-abort"):
        assert got == ((None, ["made", "lost"], True), [])
    else:
        assert got == stdlib


def test_tls_limits_after_connection_lost(
    fault_loop: asyncio.AbstractEventLoop, fault_tls_contexts: Contexts
) -> None:
    """Every loop does what the stdlib does, a bug of its own (so the fuzzer does not call it).

    set_write_buffer_limits(low=0) on a TLS transport after connection_lost()
    asks its protocol, which is gone, to pause writing: AttributeError, in
    the exception handler.
    """

    async def case(loop: asyncio.AbstractEventLoop) -> str | None:
        a, b = await open_pair(loop, "tls", fault_tls_contexts)
        a.transport.close()
        await asyncio.wait_for(a.proto.lost, LOST_TIMEOUT)
        outcome = attempt(lambda: a.transport.set_write_buffer_limits(low=0))
        await close_pair({"a": a, "b": b})
        return outcome

    got = probe(fault_loop, case)
    assert got == probe_stdlib(case)


@pytest.mark.divergence("writelines-after-connection-lost")
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("tcp", marks=UVLOOP_CLOSED_HANDLE),
        pytest.param("unix", marks=UVLOOP_CLOSED_HANDLE),
    ],
)
def test_writelines_after_connection_lost(
    fault_loop_name: str,
    fault_loop: asyncio.AbstractEventLoop,
    fault_tls_contexts: Contexts,
    kind: str,
) -> None:
    """asyncio's contract, data written after connection_lost() is dropped, but on 3.12's loop.

    The stdlib's writelines() of 3.12 has no check for a lost connection: it
    keeps the data (get_write_buffer_size() > 0 for good) and raises (on
    3.12.1 TypeError after close(), whose transport dropped its write
    callback, and AttributeError after abort(), whose transport dropped its
    loop). No writer may be left registered for the closed socket's fd number.
    """

    async def case(loop: asyncio.AbstractEventLoop) -> dict[str, tuple[str | None, int, set[int]]]:
        outcomes = {}
        for how in ("peer closes", "abort"):
            a, b = await open_pair(loop, kind, fault_tls_contexts)
            if how == "abort":
                a.transport.abort()
            else:
                b.transport.close()
            await asyncio.wait_for(a.proto.lost, LOST_TIMEOUT)
            before = registered_fds(loop)
            outcome = attempt(functools.partial(a.transport.writelines, [b"x"]))
            size = a.transport.get_write_buffer_size()
            left = registered_fds(loop) - before
            await close_pair({"a": a, "b": b})
            for fd in left:  # a stale registration must not outlive the test
                loop.remove_writer(fd)
            outcomes[how] = (outcome, size, left)
        return outcomes

    contract: dict[str, tuple[str | None, int, set[int]]] = {
        "peer closes": (None, 0, set()),
        "abort": (None, 0, set()),
    }
    stdlib, stdlib_calls = probe_stdlib(case)
    assert stdlib_calls == []
    if DIVERGENCES["writelines-after-connection-lost"].holds:
        for how, (outcome, size, left) in stdlib.items():
            assert (outcome is not None, size > 0, left) == (True, True, set()), how
    else:
        assert stdlib == contract
    got, calls = probe(fault_loop, case)
    assert calls == []
    if fault_loop_name == "asyncio":
        assert got == stdlib
    else:
        assert got == contract
