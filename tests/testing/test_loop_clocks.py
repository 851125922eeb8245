"""The process's clocks on a virtual-time loop's thread (``_loopclocks``).

asyncio's ``loop.time()`` is ``time.monotonic()``, and libraries rely on it
(aiohttp's connector compares the two; its cookie jar expires by
``time.time()``). Each behaviour runs on the stdlib loop, in real time, and
on tideloop's virtual time, where it takes no real time.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
import types
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from tideloop import testing
from tideloop.testing import EPOCH, SimNetwork, loop_clocks

# In a tuple: a run on virtual time replaces module globals bound to the
# clocks (this module's too), not what a container holds.
_REAL = (time.monotonic, time.time)


def real_monotonic() -> float:
    return _REAL[0]()


def real_time() -> float:
    return _REAL[1]()


Main = Callable[[], Coroutine[Any, Any, Any]]


def both(main: Main) -> tuple[Any, Any]:
    """*main*'s result on the stdlib loop and under virtual time."""
    return asyncio.run(main()), testing.run(main(), virtual_time=True)


@pytest.fixture
def library() -> Iterator[types.ModuleType]:
    """A loaded third-party module that bound the clocks at import, as
    ``from time import monotonic, time`` does (aiohttp's connector)."""
    module = types.ModuleType("thirdparty_clocks")
    exec(
        "from time import monotonic, monotonic_ns, time, time_ns\n"
        "class Pool:\n"
        "    clock = monotonic  # a built-in function as a class attribute\n"
        "    def now(self):\n"
        "        return self.clock()\n",
        module.__dict__,
    )
    sys.modules[module.__name__] = module
    try:
        yield module
    finally:
        del sys.modules[module.__name__]


def _module_calling_time(name: str) -> types.ModuleType:
    """A module named *name* whose ``now()`` calls ``time.monotonic()``."""
    module = types.ModuleType(name)
    exec("import time\ndef now():\n    return time.monotonic()\n", module.__dict__)
    return module


def test_monotonic_is_the_loops_time_and_moves_with_its_sleeps() -> None:
    """What aiohttp's connector does: store ``loop.time()``, later compare it
    with ``time.monotonic()``."""

    async def main() -> tuple[bool, bool, float, bool]:
        loop = asyncio.get_running_loop()
        stored = loop.time()
        await asyncio.sleep(1.5)
        elapsed = time.monotonic() - stored
        same = abs(time.monotonic() - loop.time()) < 0.05
        ns = abs(time.monotonic_ns() / 1e9 - loop.time()) < 0.05
        return same, ns, round(elapsed, 1), 1.5 <= elapsed < 1.6

    start = real_monotonic()
    real, virtual = both(main)
    assert real == (True, True, 1.5, True)
    assert virtual == (True, True, 1.5, True)
    # Both waits together took one real 1.5 s: the virtual one took none.
    assert real_monotonic() - start < 2.9


def test_the_wall_clock_moves_with_the_loop_from_the_real_time_of_day() -> None:
    """What aiohttp's cookie jar does: a ``Max-Age`` deadline by ``time.time()``."""

    async def main() -> tuple[float, bool, bool]:
        before = time.time()
        await asyncio.sleep(3600 if virtual[0] else 1.1)
        moved = time.time() - before
        near_now = abs(before - real_time()) < 60  # continuous with the real one
        ns = abs(time.time_ns() / 1e9 - time.time()) < 0.05
        return round(moved, 1), near_now, ns

    virtual = [False]
    assert asyncio.run(main()) == (1.1, True, True)
    virtual[0] = True
    assert testing.run(main(), virtual_time=True) == (3600.0, True, True)


def test_a_module_level_reference_follows_and_is_put_back(library: types.ModuleType) -> None:
    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.3)
        return (
            abs(library.monotonic() - loop.time()) < 0.05,
            abs(library.Pool().now() - loop.time()) < 0.05,
            abs(library.time() - time.time()) < 0.05,
        )

    assert both(main) == ((True, True, True), (True, True, True))
    assert library.monotonic is _REAL[0] and library.time is _REAL[1]
    assert library.Pool.clock is _REAL[0]
    assert time.monotonic is _REAL[0] and time.time is _REAL[1]


def test_other_threads_and_the_standard_library_keep_the_real_clocks() -> None:
    """A job runs at real speed and its timeouts expire in real time; so do
    the standard library's timed waits, on any thread."""
    stdlib = _module_calling_time("json._clock_probe")  # named as stdlib code
    own = _module_calling_time("thirdparty_probe")

    async def main(delay: float) -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(delay)  # on virtual time: far from the real clock
        in_job = await loop.run_in_executor(None, time.monotonic)
        box: list[float] = []
        thread = threading.Thread(target=lambda: box.append(time.monotonic()))
        thread.start()
        thread.join()
        real_now = real_monotonic()
        return (
            abs(in_job - real_now) < 5 and abs(box[0] - real_now) < 5,
            abs(stdlib.now() - real_now) < 5,
            abs(own.now() - loop.time()) < 0.05,
        )

    assert asyncio.run(main(0.01)) == (True, True, True)
    assert testing.run(main(100_000), virtual_time=True) == (True, True, True)


def test_off_the_running_loop_the_clocks_are_real() -> None:
    """Before the loop runs, and on the loop's thread between runs."""
    loop = testing.new_event_loop(virtual_time=True)
    try:
        with loop_clocks():
            assert abs(time.monotonic() - real_monotonic()) < 1
            loop.run_until_complete(asyncio.sleep(50_000))
            assert loop.time() >= 50_000
            assert abs(time.monotonic() - real_monotonic()) < 1
        assert time.monotonic is _REAL[0]
    finally:
        loop.close()


def test_a_simulated_runs_clocks_take_over(library: types.ModuleType) -> None:
    """With a SimNetwork, time.time() is the host's wall clock (EPOCH-based),
    through a module-level reference too."""

    async def main() -> tuple[float, float, float]:
        await asyncio.sleep(5)
        loop = asyncio.get_running_loop()
        return library.time() - EPOCH, time.time() - EPOCH, library.monotonic() - loop.time()

    wall_a, wall_b, mono = testing.run(main(), network=SimNetwork(seed=3))
    assert wall_a == pytest.approx(5, abs=0.01) and wall_b == pytest.approx(5, abs=0.01)
    assert mono == pytest.approx(0, abs=0.01)
    assert library.time is _REAL[1]


def test_real_time_runs_are_untouched() -> None:
    async def main() -> bool:
        return time.monotonic is _REAL[0]

    assert testing.run(main()) is True
    assert testing.run(main(), virtual_time=True) is False


def test_a_standard_library_timeout_on_the_loops_thread_expires_in_real_time() -> None:
    """``queue.Queue.get(timeout=)`` counts its deadline by the ``monotonic``
    it bound at import: on a clock that moves only when the loop is idle it
    would never expire."""

    async def main() -> str:
        try:
            queue.Queue().get(timeout=0.1)
        except queue.Empty:
            return "empty"
        return "got"

    assert both(main) == ("empty", "empty")


def test_a_busy_wait_on_the_loops_thread_ends() -> None:
    """Waiting for ``time.monotonic()`` inside one callback: a real clock
    moves by the callback's own duration; the virtual one, once reads have
    found it unmoved for SPIN_GRACE real seconds, moves at real speed."""

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            pass
        return loop.time() >= end - 0.001

    start = real_monotonic()
    assert both(main) == (True, True)
    assert real_monotonic() - start < 2


def test_the_thread_clock_reads_the_given_clock_off_the_loop_only() -> None:
    """``loop_clocks(clock)`` (the plugin's: the test's clock): this thread
    reads it while no loop runs here; a running stdlib loop keeps its own,
    real, clock; other threads read the real one."""
    clock = testing.VirtualClock()
    clock.advance(7)

    async def on_stdlib_loop() -> bool:
        return abs(time.monotonic() - asyncio.get_running_loop().time()) < 0.05

    with loop_clocks(lambda: clock):
        assert time.monotonic() == 7.0 and abs(time.time() - real_time() - 7) < 1
        assert asyncio.run(on_stdlib_loop()) is True
        box: list[float] = []
        thread = threading.Thread(target=lambda: box.append(time.monotonic()))
        thread.start()
        thread.join()
        assert abs(box[0] - real_monotonic()) < 5
    assert abs(time.monotonic() - real_monotonic()) < 1
