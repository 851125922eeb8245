"""SimNetwork finds a replicated store's stale read from a seed, and replays it.

The store and its scenario are in `scenarios.sim_store` (plain asyncio, a leader and
two followers over simulated TCP, a fault schedule drawn from the seed). Its
followers serve reads from a lease that a partition does not revoke in time:
a read that starts after a write was acknowledged can return an older
version. The correct control forwards reads to the leader and never does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.sim_store import Outcome, first_failure, run_tideloop

ROOT = Path(__file__).resolve().parents[2]
#: The search must find the bug within this many schedules (it takes ~6 on average).
BOUND = 200


@pytest.fixture(scope="module")
def failing() -> Outcome:
    """The first failing seed from 0, found by searching."""
    found = first_failure(0, BOUND)
    assert found is not None, f"no stale read in {BOUND} schedules from seed 0"
    outcome = run_tideloop(found - 1)
    assert outcome.failure is not None
    return outcome


def test_the_correct_store_never_serves_a_stale_read() -> None:
    follower_reads = 0
    for seed in range(50):
        outcome = run_tideloop(seed, stale_reads=False)
        assert outcome.failure is None, f"seed {seed}: {outcome.failure}"
        follower_reads += sum(
            op.kind == "get" and op.node != "n1" and op.outcome == "ok"
            for op in outcome.result.history
        )
    assert follower_reads > 500  # the followers did answer (through the leader)


def test_the_search_finds_the_stale_read(failing: Outcome) -> None:
    assert failing.failure is not None
    assert failing.failure.startswith("stale read: c2's GET x on n")
    # Not every schedule shows it: the seeds before the failing one passed.
    assert failing.seed > 0
    assert all(run_tideloop(seed).failure is None for seed in range(failing.seed))


def test_the_failing_seed_replays_in_this_process(failing: Outcome) -> None:
    again = run_tideloop(failing.seed)
    assert again.log == failing.log
    assert again.failure == failing.failure


def test_the_failing_seed_replays_in_a_fresh_process(failing: Outcome) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "random"}  # a new process, new string hashes
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scenarios" / "sim_store.py"), str(failing.seed)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    lines = proc.stdout.splitlines()
    assert lines == [f"seed {failing.seed}: log {failing.digest}", f"  {failing.failure}"]


def test_the_perturbed_schedule_finds_and_replays_it_too() -> None:
    """With the loop's schedule perturbed by the same seed, the failing run
    is still one seed's: found, then replayed to the same log and message."""
    found = first_failure(0, BOUND, perturb=True)
    assert found is not None
    first = run_tideloop(found - 1, perturb=True)
    again = run_tideloop(found - 1, perturb=True)
    assert first.failure is not None
    assert (again.log, again.failure) == (first.log, first.failure)
