"""The planted non-linearizable cache (scenarios/sim_cache.py), found by check_linearizable.

Each client on its own sees a consistent store (its writes, never going
back in time): per-client session checks pass on the very histories the
linearizability check rejects. The fix passes under seeds and under
schedule exploration; the middle version (synchronous invalidation, still
racy) is found by exploring.
"""

from __future__ import annotations

from typing import Any

import pytest

from scenarios import sim_cache
from tideloop import testing
from tideloop.testing import History, NotLinearizable, check_linearizable
from tideloop.testing.models import KeyValue


def run(mode: str, seed: int) -> History:
    net = testing.SimNetwork(seed=seed)
    history: History = testing.run(
        sim_cache.scenario(net, mode=mode, seed=seed),  # type: ignore[arg-type]
        network=net,
    )
    return history


def session_violations(history: History) -> list[str]:
    """Per-client checks (what a test that looks at one client at a time
    sees): read-your-writes and monotonic reads, by order of each key's
    writes in the store (values carry their writer and sequence)."""
    problems = []
    for client in sim_cache.CLIENTS:
        last_written: dict[str, str] = {}
        for op in history:
            if op.client != client or op.status != "ok":
                continue
            if op.name == "put":
                key, value = op.arg
                last_written[key] = value
            elif op.arg in last_written and op.result is None:
                problems.append(f"{client} lost its own write of {op.arg}")
    return problems


@pytest.mark.parametrize("seed", range(3))
def test_the_stale_cache_is_not_linearizable(seed: int) -> None:
    history = run("async", seed)
    assert len(history) == 4 * sim_cache.OPERATIONS
    assert all(op.status == "ok" for op in history)
    result = check_linearizable(history, KeyValue())
    assert result.ok is False
    example = result.counterexample
    assert example is not None and example.minimal and 2 <= len(example.ops) <= 5
    stuck = example.stuck
    assert stuck is not None and stuck.name == "get"
    # Across clients of both apps: what one app's client saw (its write, or
    # a read), the other app's client did not, later.
    apps = {sim_cache.CLIENTS[str(op.client)] for op in example.ops if op not in example.sources}
    assert apps == set(sim_cache.APPS), result.words()
    with pytest.raises(NotLinearizable, match="must take effect before it completed"):
        result.assert_ok()
    # What a per-client check sees: nothing wrong.
    assert session_violations(history) == []


@pytest.mark.parametrize("seed", range(8))
def test_the_correct_cache_is_linearizable(seed: int) -> None:
    assert check_linearizable(run("correct", seed), KeyValue())


def _checked(mode: str) -> Any:
    def scenario(net: testing.SimNetwork) -> Any:
        async def main() -> None:
            history = await sim_cache.scenario(net, mode=mode, seed=net.seed)  # type: ignore[arg-type]
            check_linearizable(history, KeyValue()).assert_ok()

        return main()

    return scenario


def test_exploring_finds_the_rarer_race_and_not_the_fix() -> None:
    found = testing.explore(_checked("sync"), network=True, schedules=60)
    assert found.tape is not None
    assert "NotLinearizable: not linearizable under KeyValue" in found.tape.failure
    with pytest.raises(NotLinearizable):
        testing.replay(_checked("sync"), found.tape)
    assert not testing.explore(_checked("correct"), network=True, schedules=40).found
