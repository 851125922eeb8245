"""The simulation's checks from a user's pytest suite, through the tideloop_net fixture.

One pytest run in a subprocess (a project that never imports the plugin)
uses each of issue 40's features through the fixture the way the docs
show: a history checked for linearizability, a host's clock set, a disk
mounted and crashed (the livelock watch's marker and option are tested in
``test_liveness.py``). Sync tests and pytest-asyncio tests alike.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from children import SRC, run_pytest

#: The repository root (for `scenarios`).
ROOT = os.path.dirname(SRC)

SUITE = """
import asyncio
import os
import time

import pytest

from scenarios import sim_cache, sim_lease, sim_wal
from tideloop import testing
from tideloop.testing.models import KeyValue


def test_history(tideloop_net):
    history = asyncio.run(sim_cache.scenario(tideloop_net, mode="correct", seed=tideloop_net.seed))
    testing.check_linearizable(history, KeyValue()).assert_ok()


def test_history_violation(tideloop_net):
    history = asyncio.run(sim_cache.scenario(tideloop_net, mode="async", seed=tideloop_net.seed))
    testing.check_linearizable(history, KeyValue()).assert_ok()


def test_clock(tideloop_net):
    tideloop_net.set_clock("db", offset=-30)

    async def main():
        async def on_db():
            return time.time()
        return await tideloop_net.spawn("db", on_db()), time.time()

    on_db, here = asyncio.run(main())
    assert here - on_db == 30


def test_lease(tideloop_net):
    asyncio.run(sim_lease.scenario(tideloop_net, fixed=False, skew=sim_lease.SKEW))


def test_disk(tideloop_net):
    tideloop_net.mount("db", "/var/lib/store")
    history = asyncio.run(sim_wal.scenario(tideloop_net, fsync=True))
    testing.check_linearizable(history, KeyValue()).assert_ok()
    assert not os.path.exists("/var/lib/store/wal.log")


@pytest.mark.asyncio
async def test_disk_async(tideloop_net):
    tideloop_net.mount("db", "/var/lib/store")
    history = await sim_wal.scenario(tideloop_net, fsync=False)
    testing.check_linearizable(history, KeyValue()).assert_ok()
"""


def test_the_checks_through_the_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_checks.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    out = run_pytest(tmp_path, "-W", "ignore", path=[ROOT], timeout=180).stdout
    for name in ("test_history", "test_clock", "test_disk"):
        assert f"PASSED test_checks.py::{name}" in out, out
    # The planted bugs fail as the docs say, each with its checker's words.
    assert "FAILED test_checks.py::test_history_violation - tideloop.testing" in out, out
    assert "not linearizable under KeyValue" in out
    assert "FAILED test_checks.py::test_lease - tideloop.testing" in out
    assert "always(at most one leader) became false" in out
    assert "FAILED test_checks.py::test_disk_async - tideloop.testing" in out
    assert "get('k0') -> None must take effect before it completed" in out
