"""Clocks per host: SimNetwork.set_clock moves the wall clock code on a host reads.

tideloop.testing's own API. What moves (``time.time``, ``datetime.now``,
``date.today``, ``time.localtime``), on which code (tasks spawned on the
host, their executor jobs and threads), and what stays global (the loop's
time, its timers, ``time.monotonic``) are each checked here; the planted
bug is `scenarios.sim_lease`, a lease whose holder compares the
coordinator's wall-clock expiry with its own clock: found only with a
skewed clock, by the ``always`` property it breaks.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
import sys
import threading
import time
import types
import warnings
from typing import Any

import pytest

from scenarios import sim_lease
from tideloop import testing
from tideloop.testing import EPOCH, PropertyViolation, SimNetwork

REAL_DATETIME = datetime.datetime


def readings() -> dict[str, float]:
    """What code reads as the time, in each form, as seconds after EPOCH."""
    return {
        "time": time.time() - EPOCH,
        "time_ns": time.time_ns() / 1e9 - EPOCH,
        "datetime": datetime.datetime.now().timestamp() - EPOCH,
        "datetime_utc": datetime.datetime.now(datetime.UTC).timestamp() - EPOCH,
        "localtime": time.mktime(time.localtime()) - EPOCH,
        "monotonic": time.monotonic(),
        "loop": asyncio.get_running_loop().time(),
    }


async def on(net: SimNetwork, host: str, delay: float) -> dict[str, float]:
    async def read() -> dict[str, float]:
        await asyncio.sleep(delay)
        return readings()

    return await net.spawn(host, read()) if host != "client" else await read()


def approx(value: float, expected: float) -> None:
    assert value == pytest.approx(expected, abs=1e-6), (value, expected)


def test_offset_and_drift_move_one_hosts_wall_clock() -> None:
    async def main(net: SimNetwork) -> dict[str, dict[str, float]]:
        net.set_clock("behind", offset=-1.5)
        await asyncio.sleep(1.0)
        net.set_clock("fast", offset=10.0, drift=0.01)  # at loop time 1.0
        hosts = ("behind", "fast", "client", "other")
        got = await asyncio.gather(*(on(net, h, 2.0) for h in hosts))
        return dict(zip(hosts, got, strict=True))

    net = SimNetwork(seed=1)
    got = testing.run(main(net), network=net)
    at = 3.0  # every reading is at loop time 3.0
    expected = {
        "behind": at - 1.5,
        "fast": at + 10.0 + 0.01 * (at - 1.0),
        "client": at,
        "other": at,
    }
    for host, wall in expected.items():
        for form in ("time", "time_ns", "datetime", "datetime_utc"):
            approx(got[host][form], wall)
        assert abs(got[host]["localtime"] - wall) < 1.0  # whole seconds
        # What stays global: the loop's time and time.monotonic, on every host.
        assert got[host]["monotonic"] == got[host]["loop"] == at
    clock_events = [e for e in net.log if e[1] == "clock"]
    assert clock_events == [
        (0.0, "clock", "behind", "behind", "offset=-1.5 drift=+0"),
        (1.0, "clock", "fast", "fast", "offset=+10 drift=+0.01"),
    ]


def test_setting_the_drift_alone_does_not_jump_the_clock() -> None:
    async def main(net: SimNetwork) -> list[float]:
        net.set_clock("h", offset=5.0, drift=0.1)
        await asyncio.sleep(10)
        before = net.wall_time("h") - EPOCH
        net.set_clock("h", drift=0.0)  # keeps the reading, stops the drift
        after = net.wall_time("h") - EPOCH
        await asyncio.sleep(10)
        net.set_clock("h", offset=0.0)  # a step back, as an NTP correction
        return [before, after, net.wall_time("h") - EPOCH]

    net = SimNetwork()
    before, after, stepped = testing.run(main(net), network=net)
    approx(before, 10 + 5 + 1.0)
    approx(after, before)
    approx(stepped, 20.0)


def test_timers_on_a_skewed_host_keep_the_loops_time() -> None:
    # A drifting clock does not make its host's sleeps shorter: the loop has
    # one clock (documented as what stays global).
    async def main(net: SimNetwork) -> list[float]:
        net.set_clock("fast", drift=0.5, offset=100)

        async def nap() -> float:
            start = time.monotonic()
            await asyncio.sleep(2)
            return time.monotonic() - start

        return list(await asyncio.gather(net.spawn("fast", nap()), nap()))

    net = SimNetwork()
    assert testing.run(main(net), network=net) == [2.0, 2.0]


def test_threads_and_executor_jobs_read_their_hosts_clock() -> None:
    def in_thread() -> float:
        box: list[float] = []
        thread = threading.Thread(target=lambda: box.append(time.time() - EPOCH))
        thread.start()
        thread.join()
        return box[0]

    async def read_all() -> list[float]:
        loop = asyncio.get_running_loop()
        return [
            await asyncio.to_thread(lambda: time.time() - EPOCH),
            await loop.run_in_executor(None, lambda: time.time() - EPOCH),
            await asyncio.to_thread(in_thread),
            in_thread(),
        ]

    async def main(net: SimNetwork) -> tuple[list[float], list[float]]:
        net.set_clock("skewed", offset=-7.0)
        # The skewed host first, so that the pool's threads start from it.
        skewed = await net.spawn("skewed", read_all())
        plain = await read_all()
        return skewed, plain

    net = SimNetwork()
    skewed, plain = testing.run(main(net), network=net)
    assert skewed == [-7.0] * 4
    assert plain == [0.0] * 4


def test_datetime_references_taken_at_import_follow_the_host(monkeypatch: Any) -> None:
    # A module that did `from datetime import datetime, date` before the run.
    module = types.ModuleType("imported_early")
    module.datetime = REAL_DATETIME  # type: ignore[attr-defined]
    module.date = datetime.date  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "imported_early", module)

    async def main(net: SimNetwork) -> tuple[Any, ...]:
        net.set_clock("h", offset=86400 * 3)

        async def read() -> tuple[Any, ...]:
            now = module.datetime.now()
            return (
                now,
                module.date.today(),
                isinstance(REAL_DATETIME(2020, 1, 1), module.datetime),
                isinstance(now, REAL_DATETIME),
                repr(now).startswith("datetime.datetime(2026, 1, 4"),
                type(pickle.loads(pickle.dumps(now))) is module.datetime,
                pickle.dumps(now) == pickle.dumps(REAL_DATETIME(*now.timetuple()[:6])),
            )

        return await net.spawn("h", read())

    net = SimNetwork()
    now, today, *checks = testing.run(main(net), network=net)
    assert (now.year, now.month, now.day) == (2026, 1, 4)
    assert today == datetime.date(2026, 1, 4)
    assert checks == [True, True, True, True, True]
    # Everything is back after the run: the module's own references too.
    assert module.datetime is REAL_DATETIME and datetime.datetime is REAL_DATETIME
    assert time.time() > EPOCH + 86400 * 300  # the real clock (a year after EPOCH)
    assert type(pickle.loads(pickle.dumps(now))) is REAL_DATETIME


def test_utcnow_warns_as_this_python_does() -> None:
    with warnings.catch_warnings(record=True) as real:
        warnings.simplefilter("always")
        REAL_DATETIME.utcnow()

    async def main(net: SimNetwork) -> tuple[Any, list[Any]]:
        net.set_clock("client", offset=60)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            value = datetime.datetime.utcnow()
        return value, said

    net = SimNetwork()
    value, said = testing.run(main(net), network=net)
    assert value == REAL_DATETIME(2026, 1, 1, 0, 1)
    assert [(w.category, str(w.message)) for w in said] == [
        (w.category, str(w.message)) for w in real
    ]
    assert all(w.filename == __file__ for w in said)


def test_set_clock_refuses_nonsense() -> None:
    net = SimNetwork()
    with pytest.raises(ValueError, match="drift must be > -1"):
        net.set_clock("h", drift=-1.0)
    with pytest.raises(ValueError, match="not NaN"):
        net.set_clock("h", offset=float("nan"))


def test_without_seeded_globals_the_clock_is_the_real_one() -> None:
    async def main(net: SimNetwork) -> float:
        net.set_clock("client", offset=-1000)
        return time.time()

    net = SimNetwork(seed_globals=False)
    assert testing.run(main(net), network=net) > EPOCH + 86400 * 300


# ----------------------------------------------------------------------
# The planted bug: a lease compared across hosts' wall clocks


@pytest.mark.parametrize("fixed", [False, True], ids=["wall-clock expiry", "monotonic"])
def test_every_clock_right_hides_the_lease_bug(fixed: bool) -> None:
    for seed in range(3):
        net = SimNetwork(seed=seed)
        leaders = testing.run(sim_lease.scenario(net, fixed=fixed), network=net)
        assert leaders == {"n1": False, "n2": False}


def test_a_clock_behind_breaks_the_lease() -> None:
    net = SimNetwork(seed=0)
    with pytest.raises(PropertyViolation) as caught:
        testing.run(sim_lease.scenario(net, fixed=False, skew=sim_lease.SKEW), network=net)
    message = str(caught.value)
    assert message.startswith("always(at most one leader) became false after a step of task")
    when = float(message.rsplit("at loop time ", 1)[1])
    # After the partition (n1 can no longer renew), once the coordinator gave
    # the lease away and before n1's skewed clock let it go.
    assert sim_lease.CUT < when < sim_lease.CUT + sim_lease.LEASE + sim_lease.SKEW


def test_the_fixed_lease_holds_with_any_skew_and_schedule() -> None:
    for seed in range(3):
        for skew in (sim_lease.SKEW, -sim_lease.SKEW, 30.0):
            net = SimNetwork(seed=seed)
            testing.run(sim_lease.scenario(net, fixed=True, skew=skew), network=net)

    def scenario(net: SimNetwork) -> Any:
        return sim_lease.scenario(net, fixed=True, skew=sim_lease.SKEW)

    assert not testing.explore(scenario, network=True, schedules=10).found


def test_explore_finds_the_skew_and_the_tape_replays_it() -> None:
    def scenario(net: SimNetwork) -> Any:
        return sim_lease.scenario(net, fixed=False, skew=sim_lease.SKEW)

    found = testing.explore(scenario, network=True, schedules=5)
    assert found.tape is not None and "at most one leader" in found.tape.failure
    with pytest.raises(PropertyViolation, match="at most one leader"):
        testing.replay(scenario, found.tape)
