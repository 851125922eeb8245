"""The four planted bugs of issue 40, replayed from tapes recorded on CPython 3.11.

Each tape holds the failing run's network seed and options, its livelock
watch and its schedule's deviations (``testing.explore(..., network=True)``
made them); replayed on whatever interpreter runs this, each fails again
the same way. Recorded on CPython 3.11 with, for each of the ``SCENARIOS``
below, ``testing.explore(scenario, network=True, schedules=100,
**options).tape.save(TAPES / f"{name}.json")``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scenarios import sim_cache, sim_lease, sim_retry, sim_wal
from tideloop import testing
from tideloop.testing import Livelock, NotLinearizable, PropertyViolation, SimNetwork
from tideloop.testing.models import KeyValue

TAPES = Path(__file__).parent / "tapes"


def cache(net: SimNetwork) -> Any:
    async def main() -> None:
        history = await sim_cache.scenario(net, mode="sync", seed=net.seed)
        testing.check_linearizable(history, KeyValue()).assert_ok()

    return main()


def lease(net: SimNetwork) -> Any:
    return sim_lease.scenario(net, fixed=False, skew=sim_lease.SKEW)


def wal(net: SimNetwork) -> Any:
    async def main() -> None:
        net.mount("db", "/var/lib/store")
        history = await sim_wal.scenario(net, fsync=False)
        testing.check_linearizable(history, KeyValue()).assert_ok()

    return main()


def retry(net: SimNetwork) -> Any:
    return sim_retry.scenario(net, jitter=False)


#: name -> (scenario, explore's options), and what its replay raises.
SCENARIOS: dict[str, tuple[Any, dict[str, Any]]] = {
    "sim_cache_sync": (cache, {}),
    "sim_lease_skew": (lease, {}),
    "sim_wal_no_fsync": (wal, {}),
    "sim_retry_livelock": (retry, {"livelock_after": 2.0}),
}
RAISES = {
    "sim_cache_sync": NotLinearizable,
    "sim_lease_skew": PropertyViolation,
    "sim_wal_no_fsync": NotLinearizable,
    "sim_retry_livelock": Livelock,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_recorded_tape_replays(name: str) -> None:
    tape = testing.Tape.load(TAPES / f"{name}.json")
    assert tape.python.startswith("3.11") and tape.network == {}
    scenario, options = SCENARIOS[name]
    assert tape.livelock_after == options.get("livelock_after")
    for _ in range(2):
        with pytest.raises(RAISES[name]) as caught:
            testing.replay(scenario, tape)
        # The same words (but task numbers and addresses, which vary).
        assert _plain(str(caught.value).splitlines()[0]) in _plain(tape.failure)


def _plain(text: str) -> str:
    return re.sub(r"Task-\d+|0x[0-9a-f]+", "...", text)
