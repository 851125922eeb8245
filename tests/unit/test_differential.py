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

import tideloop
from tideloop._core import native

WORKER = Path(__file__).with_name("differential_worker.py")
SRC = os.path.dirname(os.path.dirname(tideloop.__file__))


class Oracle:
    """One worker process: a program in, its trace out."""

    def __init__(self, pure: bool) -> None:
        env = {**os.environ, "PYTHONPATH": SRC}
        env.pop("TIDELOOP_PURE", None)
        if pure:
            env["TIDELOOP_PURE"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)],
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
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"program": program, "debug": debug}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def oracles() -> Iterator[tuple[Oracle, Oracle]]:
    if native.core is None and os.environ.get("TIDELOOP_PURE") is None:
        pytest.skip(f"no native core to compare with the pure one: {native.REASON}")
    pure, fast = Oracle(pure=True), Oracle(pure=False)
    try:
        if not fast.native:
            pytest.skip("the worker without TIDELOOP_PURE runs the pure core too")
        assert not pure.native
        yield pure, fast
    finally:
        pure.close()
        fast.close()


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
