"""Which core runs, and the native core's own objects (its ready queue).

The behaviour of the loop is tested on both builds by every other test (CI
runs the suite with and without ``TIDELOOP_PURE=1``); these tests check the
choice itself and what only the native build has.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import subprocess
import sys

import pytest

import tideloop
from tideloop._core import native
from tideloop._core.scheduler import LoopBase, Scheduler, make_ready_queue

SRC = os.path.dirname(os.path.dirname(tideloop.__file__))


def core_in_child(**env: str) -> str:
    """``python -m tideloop --version`` in a child with *env* added."""
    out = subprocess.run(
        [sys.executable, "-m", "tideloop", "--version"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": SRC, **env},
        timeout=60,
    )
    return out.stdout.strip()


def test_native_is_reported_the_same_everywhere() -> None:
    assert tideloop.NATIVE is native.NATIVE
    assert (native.core is None) == (native.REASON is not None)
    assert (LoopBase is Scheduler) == (not tideloop.NATIVE)
    kind = collections.deque if native.core is None else native.core.ReadyQueue
    assert type(make_ready_queue()) is kind


def test_the_native_core_runs_where_it_is_required() -> None:
    """CI sets TIDELOOP_REQUIRE_NATIVE on CPython: a missing build fails, not falls back."""
    if os.environ.get("TIDELOOP_REQUIRE_NATIVE") != "1" or os.environ.get("TIDELOOP_PURE"):
        pytest.skip("the native core is required only where CI says so")
    assert tideloop.NATIVE, native.REASON
    from tideloop._transports import native as transports

    assert transports.NATIVE, "the transports' native module was not built"


def test_tideloop_pure_forces_the_pure_core() -> None:
    assert core_in_child(TIDELOOP_PURE="1").endswith("(pure-Python core: TIDELOOP_PURE is set)")
    # "0" and "" mean no.
    expected = "(native core)" if tideloop.NATIVE and not os.environ.get("TIDELOOP_PURE") else ""
    if expected:
        assert core_in_child(TIDELOOP_PURE="0").endswith(expected)
        assert core_in_child(TIDELOOP_PURE="").endswith(expected)


@pytest.fixture
def ready() -> object:
    if native.core is None:
        pytest.skip(f"no native core here: {native.REASON}")
    return native.core.ReadyQueue()


def test_ready_queue_is_a_fifo_like_a_deque(ready: object) -> None:
    q: collections.deque[int] = ready  # type: ignore[assignment]  # the same methods
    assert len(q) == 0 and not q
    for i in range(200):  # past the first growth, wrapping the ring
        q.append(i)
        if i % 3 == 0:
            assert q.popleft() == i // 3
    assert len(q) == 200 - 67
    q.extend([1000, 1001])
    assert list(q)[-2:] == [1000, 1001]
    items = list(q)
    assert [q.popleft() for _ in range(len(items))] == items
    with pytest.raises(IndexError, match="pop from an empty deque"):
        q.popleft()
    q.extend(range(5))
    q.extend(q)  # a snapshot: each item once more
    assert list(q) == [0, 1, 2, 3, 4] * 2
    q.clear()
    assert list(q) == [] and repr(q) == "ReadyQueue([])"


def test_ready_queue_clear_survives_a_finalizer_that_appends(ready: object) -> None:
    q: collections.deque[object] = ready  # type: ignore[assignment]
    seen = []

    class Reappends:
        def __del__(self) -> None:
            q.append("late")
            seen.append(len(q))

    q.append(Reappends())
    q.clear()
    assert seen == [1] and list(q) == ["late"]


def test_the_native_ready_queue_refuses_other_queues() -> None:
    if native.core is None:
        pytest.skip(f"no native core here: {native.REASON}")
    loop = tideloop.new_event_loop()
    try:
        with pytest.raises(TypeError, match=r"must be a ReadyQueue, not collections\.deque"):
            loop._ready = collections.deque()  # type: ignore[assignment]
        assert type(loop._ready) is native.core.ReadyQueue
    finally:
        loop.close()


def test_call_soon_keeps_the_pure_signature() -> None:
    """Keyword ``callback``, ``context``, and Python's own errors, on either core."""
    loop = tideloop.new_event_loop()
    try:
        seen: list[object] = []
        loop.call_soon(callback=functools.partial(seen.append, 0), context=None)
        h = loop.call_soon(seen.append, 1)
        assert isinstance(h, asyncio.Handle) and h._args == (1,)  # type: ignore[attr-defined]
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert seen == [0, 1]
        with pytest.raises(TypeError, match=r"call_soon\(\) missing 1 required positional"):
            loop.call_soon()  # type: ignore[call-arg]
        with pytest.raises(
            TypeError, match=r"call_soon\(\) got an unexpected keyword argument 'x'"
        ):
            loop.call_soon(print, x=1)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="got multiple values for argument 'callback'"):
            loop.call_soon(print, callback=print)  # type: ignore[misc]
        with pytest.raises(TypeError, match=r"run_forever\(\) takes 1 positional argument"):
            loop.run_forever(1)  # type: ignore[call-arg]
    finally:
        loop.close()


# -- the transports' native paths (tideloop._transports._native) --


def test_the_transports_native_paths_run_with_the_native_core() -> None:
    from tideloop._transports import datagram, stream
    from tideloop._transports import native as transports

    assert transports.NATIVE is (native.core is not None)
    write = stream.SocketTransport.__dict__["write"]
    sendto = datagram.DatagramTransport.__dict__["sendto"]
    if transports.NATIVE:
        # Native methods of the classes, named as the pure ones are.
        assert type(write).__name__ == "method_descriptor"
        assert write.__qualname__ == "SocketTransport.write"
        assert sendto.__qualname__ == "DatagramTransport.sendto"
    else:
        assert write is stream.SocketTransport._write_pure
        assert sendto is datagram.DatagramTransport._sendto_pure


def test_a_read_handle_keeps_the_bound_method_it_always_had() -> None:
    """The core runs a twin in its place: the Handle and its repr do not change."""
    import socket

    loop = tideloop.new_event_loop()
    a, b = socket.socketpair()
    try:
        got: list[bytes] = []

        class Collect(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                got.append(data)
                if sum(map(len, got)) >= 5:
                    loop.stop()

        transport, _ = loop.run_until_complete(loop.connect_accepted_socket(Collect, a))
        loop.run_until_complete(asyncio.sleep(0))
        handle = loop._fds.readers[transport._fd]  # type: ignore[attr-defined]
        assert handle._callback == transport._read_ready  # type: ignore[attr-defined]
        assert "SocketTransport._read_ready()" in repr(handle)
        b.send(b"hello")
        loop.run_forever()
        assert b"".join(got) == b"hello"
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        b.close()
        loop.close()


def test_set_twin_adds_replaces_and_removes() -> None:
    if native.core is None:
        pytest.skip(f"no native core here: {native.REASON}")
    core = native.core
    ran: list[str] = []

    class Thing:
        def method(self, arg: object = None) -> None:
            ran.append(f"pure {arg}")

    thing = Thing()
    loop = tideloop.new_event_loop()
    try:

        def run(*calls: tuple[object, ...]) -> None:
            for args in calls:
                loop.call_soon(thing.method, *args)
            loop.call_soon(loop.stop)
            loop.run_forever()

        core.set_twin(Thing.method, lambda self: ran.append(f"twin {self is thing}"))
        run(())
        core.set_twin(Thing.method, lambda self: ran.append("second twin"))
        run((), (8,))  # with arguments: never a twin
        core.set_twin(Thing.method, None)
        run((), (7,))
        assert ran == ["twin True", "second twin", "pure 8", "pure None", "pure 7"]
        with pytest.raises(TypeError, match="a twin must be callable"):
            core.set_twin(Thing.method, 42)
    finally:
        core.set_twin(Thing.method, None)
        loop.close()
