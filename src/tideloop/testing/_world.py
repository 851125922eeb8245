"""What a simulated run makes deterministic beyond the network, and the check that it is.

Layer: testing (above ``_sim``). A `SimNetwork` makes the network's
answers a function of its seed; a program also draws from the process's
own sources of chance and time. For the duration of a simulated run
(`seeded_globals`, which ``tideloop.testing.run`` and the ``tideloop_net``
fixture apply):

- the ``random`` module's shared generator is seeded from the network's
  seed (its state is restored afterwards);
- ``os.urandom`` returns bytes from a generator of that seed (so does
  ``uuid.uuid4``, which reads it); opt out with ``urandom=False``.
  ``secrets`` and ``random.SystemRandom`` hold their own reference to the
  kernel's and stay unpredictable;
- ``time.time`` / ``time.time_ns`` read `EPOCH` plus the loop's (virtual)
  time, moved by ``SimNetwork.set_clock`` for code on that host; so do
  ``datetime.now()``, ``date.today()`` and ``time.localtime()`` and its
  kin (``_wallclock``); ``time.monotonic`` / ``time.monotonic_ns`` read the
  loop's time on every host. Every caller sees them, threads included
  (a thread or executor job runs on the host that started it). tideloop's
  own code bound the real functions at import and keeps real time where it
  needs it;
- once the network has a mount (``SimNetwork.mount``), ``open`` and ``os``'s
  file calls reach the simulated disks for paths under it (``_files``).

`sometimes` is a fault point a test puts in its own code (FoundationDB's
"buggify"): in a simulated run each call site is enabled on about half of
the seeds, and an enabled site fires with the given probability, from the
seed; outside a simulated run it is always False, so it can stay in
production code.

`check_determinism` runs a scenario twice (and once more in a fresh
process if asked) and names the first event where two runs' logs differ.

Invariant: every patch `seeded_globals` makes is undone when it exits, in
reverse order, even if the run raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final

from tideloop._loop import Loop

from . import _coverage, _files, _wallclock
from ._patching import Patches
from ._sim import SimNetwork
from ._sim.clocks import EPOCH

Scenario = Callable[[SimNetwork], Coroutine[Any, Any, Any]]
LogEntry = tuple[float, str, str, str, str]


class NondeterminismError(AssertionError):
    """Two runs of one seed did not produce the same event log."""


@contextlib.contextmanager
def seeded_globals(
    net: SimNetwork, loop: asyncio.AbstractEventLoop | None = None, *, urandom: bool = True
) -> Iterator[None]:
    """Seed ``random``, ``os.urandom`` and make ``time.time``/``time.monotonic``
    virtual (the time of *loop*, or of the loop *net* serves) until exit."""
    seed = net.seed
    saved_random = random.getstate()
    random.seed(f"tideloop:{seed}:random")
    patches: list[tuple[Any, str, Any]] = []
    more = Patches()

    def patch(owner: Any, name: str, value: Any) -> None:
        patches.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def loop_time() -> float:
        running = loop if loop is not None else net.loop
        return 0.0 if running is None else running.time()

    try:
        if urandom:
            stream = random.Random(f"tideloop:{seed}:urandom")

            def seeded_urandom(size: int) -> bytes:
                if size < 0:
                    raise ValueError("negative argument not allowed")
                return stream.randbytes(size)

            patch(os, "urandom", seeded_urandom)
        patch(time, "monotonic", loop_time)
        patch(time, "monotonic_ns", lambda: int(loop_time() * 1e9))
        # time.time(), datetime: each host's wall clock; hosts carried into threads.
        _wallclock.install(more, net, loop_time)
        # open() and os's file calls: the disks, once something is mounted.
        installed: list[bool] = []

        def mounted() -> None:
            if not installed:
                installed.append(True)
                _files.install(more, net)

        if net.disks:
            mounted()
        more.on_undo(net.disks.when_mounted(mounted))
        yield
    finally:
        more.undo()
        for owner, name, value in reversed(patches):
            setattr(owner, name, value)
        random.setstate(saved_random)


def sometimes(probability: float = 0.25) -> bool:
    """True on some seeds, at this call site: a fault point for a test's own code.

    In a run on a `SimNetwork` with faults on (``SimNetwork(buggify=True)``,
    the default), a call site is enabled or not for the whole run from the
    seed (about half the seeds enable it), and an enabled site returns True
    with *probability* on each call. Anywhere else: False.
    """
    loop = asyncio.events._get_running_loop()
    net = loop.network if isinstance(loop, Loop) else None
    if not isinstance(net, SimNetwork) or not net.buggify:
        return False
    caller = sys._getframe(1)
    code = caller.f_code
    # A site is named by file, function and line, not by path: the same
    # seed enables the same sites in another checkout.
    site = f"{os.path.basename(code.co_filename)}:{code.co_name}:{caller.f_lineno}"
    fired = net.sometimes_fires(site, probability)
    if fired:
        _coverage.note("sometimes", site)  # a coverage search counts its first firing
    return fired


def _run_once(scenario: Scenario, seed: int, network_options: dict[str, Any]) -> list[LogEntry]:
    from . import run  # a cycle at import time otherwise

    net = SimNetwork(seed=seed, **network_options)

    async def main() -> None:
        await scenario(net)

    run(main(), network=net)
    return [tuple(entry) for entry in net.log]  # type: ignore[misc]


def _describe(entry: LogEntry | None) -> str:
    if entry is None:
        return "nothing (the run had ended)"
    at, event, a, b, detail = entry
    return f"{event} {a}->{b} at {at!r}" + (f" ({detail})" if detail else "")


def first_divergence(first: list[LogEntry], second: list[LogEntry]) -> str | None:
    """Where two event logs part (None: they are the same)."""
    for i in range(max(len(first), len(second))):
        one = first[i] if i < len(first) else None
        two = second[i] if i < len(second) else None
        if one != two:
            return f"event #{i}: {_describe(one)} in one run, {_describe(two)} in the other"
    return None


def check_determinism(
    scenario: Scenario,
    *,
    seed: int = 0,
    runs: int = 2,
    fresh_process: bool = False,
    **network_options: Any,
) -> list[LogEntry]:
    """Run *scenario* (given the `SimNetwork`) *runs* times with *seed*, and in
    a fresh interpreter too if *fresh_process* (then *scenario* must be a
    module-level function); return the event log, or raise
    `NondeterminismError` naming the first event where two runs differ."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, not {runs!r}")
    logs = [_run_once(scenario, seed, network_options) for _ in range(runs)]
    if fresh_process:
        logs.append(_run_in_fresh_process(scenario, seed, network_options))
    for i, log in enumerate(logs[1:], start=2):
        where = first_divergence(logs[0], log)
        if where is not None:
            label = "the fresh process" if fresh_process and i == len(logs) else f"run {i}"
            raise NondeterminismError(f"seed {seed}: {label} diverged from run 1 at {where}")
    return logs[0]


def _run_in_fresh_process(
    scenario: Scenario, seed: int, network_options: dict[str, Any]
) -> list[LogEntry]:
    module, name = scenario.__module__, scenario.__qualname__
    if "<" in name:
        raise ValueError(f"fresh_process needs a module-level scenario, not {name!r}")
    spec = json.dumps([module, name, seed, network_options])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, spec],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the fresh process failed:\n{out.stderr[-4000:]}")
    entries: list[LogEntry] = [tuple(entry) for entry in json.loads(out.stdout)]
    return entries


_CHILD: Final = """
import importlib, json, sys
from tideloop.testing._world import _run_once
module, name, seed, options = json.loads(sys.argv[1])
scenario = importlib.import_module(module)
for part in name.split("."):
    scenario = getattr(scenario, part)
print(json.dumps(_run_once(scenario, seed, options)))
"""

__all__ = [
    "EPOCH",
    "NondeterminismError",
    "check_determinism",
    "first_divergence",
    "seeded_globals",
    "sometimes",
]
