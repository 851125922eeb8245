"""Differential: the native core and the pure-Python core run the same programs alike.

The pure-Python core is the reference. Hypothesis writes scheduling
programs (``call_soon`` with and without arguments and contexts,
``call_later``/``call_at``, cancellation from outside and from callbacks,
``call_soon_threadsafe``, callbacks that raise, set context variables,
schedule more or stop the loop, tasks that sleep, futures, wrong calls, fd
readers on socket pairs, one with a cancelled handle);
each runs in two worker processes (``differential_worker.py``), one per
core, on virtual time, and their traces must be equal: every callback in
the same order with the same arguments, context and loop time, every
exception-handler call with the same message, every error of a wrong call
with the same type and text, every handle's final state.

The transports are compared the same way (``differential_transport_worker.py``):
hypothesis writes programs that drive a stream transport (TCP or a Unix
socket pair, a `Protocol` or a `BufferedProtocol`, swapped or failing
mid-stream) or a datagram transport (UDP, connected or not) against a raw
peer socket: writes of every kind and size (bad types included), reads of
every size, pause and resume, water marks, half-close, close, abort, a
peer's EOF, close and reset. Every protocol callback with its bytes, every
exception-handler call, every API error, the transport's state after each
step and every byte the peer received must be equal.

On a build without the native core there is nothing to compare: the test
says so and skips (CI requires the native core on CPython).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from children import python_env
from tideloop._core import native

WORKER = Path(__file__).with_name("differential_worker.py")
TRANSPORT_WORKER = Path(__file__).with_name("differential_transport_worker.py")


class Oracle:
    """One worker process: a program in, its trace out."""

    def __init__(self, pure: bool, worker: Path = WORKER) -> None:
        env = python_env()
        env.pop("TIDELOOP_PURE", None)
        if pure:
            env["TIDELOOP_PURE"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(worker)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.native = self._read()["native"]

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the worker died (exit status {self.proc.poll()})"
        return json.loads(line)

    def run(self, program: list[list[Any]], debug: bool) -> Any:
        return self.ask({"program": program, "debug": debug})

    def ask(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def both(worker: Path) -> Iterator[tuple[Oracle, Oracle]]:
    if native.core is None and os.environ.get("TIDELOOP_PURE") is None:
        pytest.skip(f"no native core to compare with the pure one: {native.REASON}")
    pure, fast = Oracle(pure=True, worker=worker), Oracle(pure=False, worker=worker)
    try:
        if not fast.native:
            pytest.skip("the worker without TIDELOOP_PURE runs the pure core too")
        assert not pure.native
        yield pure, fast
    finally:
        pure.close()
        fast.close()


@pytest.fixture(scope="module")
def oracles() -> Iterator[tuple[Oracle, Oracle]]:
    yield from both(WORKER)


@pytest.fixture(scope="module")
def transport_oracles() -> Iterator[tuple[Oracle, Oracle]]:
    yield from both(TRANSPORT_WORKER)


idents = st.integers(0, 50)
delays = st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.5, 1.0, 2.5, 30.0])
ops = st.one_of(
    st.tuples(
        st.just("soon"),
        idents,
        st.integers(0, 3),
        st.one_of(st.none(), st.sampled_from(["a", "b"])),
        st.booleans(),
    ),
    st.tuples(st.just("raise"), idents),
    st.tuples(st.just("setvar"), idents),
    st.tuples(st.just("nested"), idents, st.integers(0, 3)),
    st.tuples(st.just("cancel_later"), idents, st.integers(0, 20)),
    st.tuples(st.just("later"), idents, delays),
    st.tuples(st.just("at"), idents, delays),
    st.tuples(st.just("later_int"), idents, st.integers(0, 3)),
    st.tuples(st.just("later_kw"), idents, delays),
    st.tuples(st.just("at_int"), idents, st.integers(0, 3)),
    st.tuples(st.just("threadsafe"), idents),
    st.tuples(st.just("cancel"), idents, st.integers(0, 20)),
    st.tuples(st.just("task"), idents, st.lists(delays, max_size=3)),
    st.tuples(st.just("future"), idents),
    st.tuples(st.just("bad"), idents),
    st.tuples(st.just("stop"), idents),
    st.tuples(st.just("yield"), idents),
    st.tuples(st.just("reader"), idents, st.text("abc", max_size=4), st.booleans()),
)
programs = st.lists(ops.map(list), max_size=25)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=programs, debug=st.booleans())
def test_both_cores_trace_alike(
    oracles: tuple[Oracle, Oracle], program: list[list[Any]], debug: bool
) -> None:
    pure, fast = oracles
    expected = pure.run(program, debug)
    assert fast.run(program, debug) == expected


def test_the_comparison_sees_a_difference(oracles: tuple[Oracle, Oracle]) -> None:
    """A guard: the traces carry what is compared (two programs that differ
    in one callback's argument give different traces)."""
    pure, fast = oracles
    one = pure.run([["soon", 1, 1, None, False], ["raise", 2]], False)
    other = fast.run([["soon", 1, 2, None, False], ["raise", 2]], False)
    assert one != other
    assert ["cb", 1, [0], "-", 0.0] in one
    assert any(e[0] == "handler" and e[1].startswith("Exception in callback") for e in one)


sizes = st.sampled_from([0, 1, 100, 1024, 40_000, 70_000, 300_000])
data_kinds = st.sampled_from(
    [
        "bytes",
        "bytes",
        "bytearray",
        "memoryview",
        "mv_int",
        "mv_strided",
        "mv_released",
        "str",
        "none",
    ]
)
stream_protocols = st.sampled_from(
    [
        "plain",
        "keep_open",
        "buffered:16:ok",
        "buffered:65536:ok",
        "buffered:8:empty",
        "buffered:8:readonly",
    ]
)
# Most steps keep the connection; the steps that end it come last, so that
# programs spend their length on data.
stream_steps = st.one_of(
    st.tuples(st.just("write"), sizes, data_kinds),
    st.tuples(st.just("write"), sizes, st.just("bytes")),
    st.tuples(st.just("write_kw"), sizes),
    st.tuples(st.just("writelines"), st.lists(sizes, max_size=4)),
    st.tuples(st.just("pause_reading")),
    st.tuples(st.just("resume_reading")),
    st.tuples(st.just("limits"), st.sampled_from([0, 1024, 65536])),
    st.tuples(
        st.just("fail"),
        st.sampled_from(
            ["data_received", "eof_received", "get_buffer", "buffer_updated", "pause_writing"]
        ),
    ),
    st.tuples(st.just("set_protocol"), stream_protocols),
    st.tuples(st.just("drain"), st.booleans()),
    st.tuples(st.just("peer_send"), st.sampled_from([1, 1000, 40_000, 100_000])),
)
stream_endings = st.one_of(
    st.tuples(st.just("write_eof")),
    st.tuples(st.just("close")),
    st.tuples(st.just("abort")),
    st.tuples(st.just("peer_shutdown")),
    st.tuples(st.just("peer_close"), st.booleans()),
)
stream_ops = st.builds(
    lambda body, end: body + end,
    st.lists(stream_steps.map(list), max_size=12),
    st.lists(st.one_of(stream_endings, stream_steps).map(list), max_size=4),
)
datagram_ops = st.one_of(
    st.tuples(
        st.just("sendto"),
        st.sampled_from([0, 1, 1000, 60_000]),
        st.sampled_from(
            [
                "none",
                "omit",
                "peer",
                "peer2",
                "peer_list",
                "peer_name",
                "peer_scope",
                "bad_port",
                "dead",
                "bad",
            ]
        ),
        st.sampled_from(["bytes", "bytes", "bytearray", "memoryview", "str"]),
    ),
    st.tuples(st.just("sendto_kw"), st.sampled_from([0, 10, 1000])),
    st.tuples(st.just("peer_send"), st.sampled_from([0, 1, 1000, 60_000])),
    st.tuples(st.just("fail"), st.just("datagram_received")),
    st.tuples(st.just("close")),
    st.tuples(st.just("abort")),
)
transport_requests = st.one_of(
    st.fixed_dictionaries(
        {
            "kind": st.just("stream"),
            "family": st.sampled_from(["unix", "tcp"]),
            "protocol": stream_protocols,
            "ops": stream_ops,
            "debug": st.booleans(),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("datagram"),
            "connected": st.booleans(),
            "family": st.sampled_from(["inet", "inet6"]),
            "ops": st.lists(datagram_ops.map(list), max_size=10),
            "debug": st.booleans(),
        }
    ),
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=transport_requests)
def test_both_cores_run_transports_alike(
    transport_oracles: tuple[Oracle, Oracle], request: dict[str, Any]
) -> None:
    pure, fast = transport_oracles
    expected = pure.ask(request)
    assert fast.ask(request) == expected


def test_the_transport_comparison_sees_the_bytes(transport_oracles: tuple[Oracle, Oracle]) -> None:
    """A guard: the traces carry every byte both ways, and the errors."""
    pure, fast = transport_oracles
    request: dict[str, Any] = {
        "kind": "stream",
        "family": "unix",
        "protocol": "plain",
        "ops": [["write", 1024, "bytes"], ["peer_send", 1000], ["write", 3, "str"]],
        "debug": False,
    }
    trace = fast.ask(request)
    assert trace == pure.ask(request)
    assert [
        "data",
        "bytes",
        1000,
        trace[trace.index(["step", 1, ["peer_send", 1000]]) + 1][3],
    ] in trace
    assert ["state", 0, False, True, 1024] in trace
    assert any(e[:3] == ["error", "write", "TypeError"] for e in trace)
    other = fast.ask({**request, "ops": [["write", 1025, "bytes"], ["peer_send", 1000]]})
    assert other[-1] != trace[-1]  # what the peer received differs
