"""bench.profile's iteration mode: the worker measures what it says, and cleans up."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest

from bench import profile


@pytest.mark.parametrize("bench_loop", ["asyncio", "tideloop"])
@pytest.mark.parametrize("fds", [1, 3])
def test_iteration_worker_times_callbacks_and_closes_what_it_opened(
    bench_loop: str, fds: int
) -> None:
    before = set(os.listdir("/proc/self/fd"))
    ns = profile.iteration_worker(bench_loop, fds, 300)
    # A real duration per callback: positive and far below a millisecond.
    assert 0 < ns < 1e6
    assert set(os.listdir("/proc/self/fd")) == before


def test_iteration_worker_runs_exactly_n_callbacks_spread_over_every_fd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[int] = []
    real_factory = profile.loops.factory

    def counting_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
        make = real_factory(name)

        def new_loop() -> asyncio.AbstractEventLoop:
            loop = make()
            add_reader = loop.add_reader

            def add_counted_reader(fd: Any, callback: Callable[[], object]) -> None:
                def counted() -> None:
                    ran.append(fd)
                    callback()

                add_reader(fd, counted)

            monkeypatch.setattr(loop, "add_reader", add_counted_reader)
            return loop

        return new_loop

    monkeypatch.setattr(profile.loops, "factory", counting_factory)
    profile.iteration_worker("tideloop", 2, 50)
    assert len(ran) == 3 * 50  # best of three runs, each stopped at exactly n
    assert len(set(ran)) == 2  # both fds stay ready and are served
