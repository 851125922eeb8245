"""Property checks: tideloop.testing.always after every callback, eventually within a time.

These are tideloop.testing's own API (the stdlib loop has nothing to compare
with): each test runs a small program and checks when a property is found
broken, what the report names, and that a loop without checks is left on
its fast path.
"""

from __future__ import annotations

import asyncio

import pytest

from tideloop import testing
from tideloop.testing import PropertyViolation, always, eventually


async def transfers(atomic: bool) -> dict[str, int]:
    """Two tasks move money between accounts; the total must never change."""
    accounts = {"a": 50, "b": 50}
    stop = always(lambda: sum(accounts.values()) == 100, name="money is conserved")

    async def move(src: str, dst: str, amount: int) -> None:
        for _ in range(3):
            if atomic:
                accounts[src] -= amount
                accounts[dst] += amount
                await asyncio.sleep(0.01)
            else:
                accounts[src] -= amount
                await asyncio.sleep(0.01)  # the money is nowhere meanwhile
                accounts[dst] += amount

    await asyncio.gather(
        asyncio.create_task(move("a", "b", 5), name="a-to-b"),
        asyncio.create_task(move("b", "a", 3), name="b-to-a"),
    )
    stop()
    return accounts


def test_always_holds_then_stops_checking() -> None:
    async def main() -> tuple[dict[str, int], bool]:
        accounts = await transfers(atomic=True)
        # With its last check gone the loop is back on its fast path.
        return accounts, asyncio.get_running_loop()._instruments.timed  # type: ignore[attr-defined]

    accounts, timed = testing.run(main(), virtual_time=True)
    assert accounts == {"a": 44, "b": 56} and timed is False


def test_always_names_the_callback_that_broke_it() -> None:
    with pytest.raises(PropertyViolation) as caught:
        testing.run(transfers(atomic=False), virtual_time=True)
    message = str(caught.value)
    # The step by its task, its coroutine and the program's line it then waits at.
    assert message == (
        "always(money is conserved) became false after a step of task 'a-to-b' "
        "(move, waiting at tests/testing/test_properties.py:32 "
        "`await asyncio.sleep(0.01)  # the money is nowhere meanwhile` in asyncio.sleep), "
        "at loop time 0.0"
    ), message
    assert type(caught.value).__module__ == "tideloop.testing"


def test_always_false_at_once_and_outside_tideloop() -> None:
    async def main() -> None:
        always(lambda: False)

    with pytest.raises(PropertyViolation, match=r"always\(lambda at .*\) is false already"):
        testing.run(main())
    with pytest.raises(RuntimeError, match="need a tideloop loop"):
        asyncio.run(main())


def test_eventually_returns_when_it_holds_or_fails_at_its_deadline() -> None:
    async def main(within: float) -> float:
        loop = asyncio.get_running_loop()
        done = {"flag": False}

        def finish() -> None:
            done["flag"] = True

        loop.call_later(1.0, finish)
        await eventually(lambda: done["flag"], within=within, name="the job finished")
        return loop.time()

    assert testing.run(main(2.0), virtual_time=True) == 1.0
    with pytest.raises(PropertyViolation) as caught:
        testing.run(main(0.5), virtual_time=True)
    assert str(caught.value) == (
        "eventually(the job finished) did not hold within 0.5 s (from loop time 0.0 to 0.5)"
    )

    async def bad() -> None:
        await eventually(lambda: True, within=-1)

    with pytest.raises(ValueError, match="within must be >= 0"):
        testing.run(bad())


def test_a_property_broken_only_on_some_schedules_is_found_by_seed_and_replays() -> None:
    # Two equal deadlines: asyncio leaves their order open, the Perturber
    # varies it. The invariant holds only if "reserve" runs before "spend".
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = {"reserved": False, "spent": False}
        always(lambda: state["reserved"] or not state["spent"], name="reserve before spend")
        loop.call_later(0.1, state.__setitem__, "reserved", True)
        loop.call_later(0.1, state.__setitem__, "spent", True)
        await asyncio.sleep(0.2)

    broken = []
    for seed in range(20):
        try:
            testing.run(main(), virtual_time=True, seed=seed)
        except PropertyViolation:
            broken.append(seed)
    assert 0 < len(broken) < 20
    for seed in broken[:3]:
        with pytest.raises(PropertyViolation):
            testing.run(main(), virtual_time=True, seed=seed)
    testing.run(main(), virtual_time=True)  # fixed order: first scheduled runs first
