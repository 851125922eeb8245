"""tideloop.testing: virtual time, seeded schedule perturbation, a pytest plugin.

Layer: top. Everything here is built from constructor arguments of
`tideloop.Loop` (``clock=``, ``schedule=``, ``network=``); the only
patching is `seeded_globals` (``random``, ``os.urandom``, ``time``), for
the duration of a simulated run, and `loop_clocks` (``time.monotonic`` and
``time.time`` on a virtual-time loop's thread read its clock), for a run on
virtual time; each is undone after it.

    from tideloop import testing

    # An hour of asyncio.sleep in well under a second of real time:
    testing.run(main(), virtual_time=True)

    # The same program under a seeded schedule (same seed, same decisions):
    testing.run(main(), seed=1234)

    # Search for a failing schedule, shrink it, save it, replay it:
    found = testing.explore(main, strategy="pct", schedules=1000)
    found.tape.save("race.tape.json"); testing.replay(main, "race.tape.json")

    loop = testing.new_event_loop(virtual_time=True, seed=7)   # both

    # Several hosts on a simulated network (virtual time implied):
    net = testing.SimNetwork(seed=3)
    testing.run(main(net), network=net)

- `VirtualClock` (``_clock``): time that moves by `VirtualClock.advance` or
  jumps to the next timer when the loop is idle (autojump). `loop_clocks`
  (``_loopclocks``): the process's clocks follow it on the loop's thread.
- `Perturber` (``_schedule``): varies the orderings asyncio leaves open; its
  module docstring is the exact model. Its decision points are answered by
  a `Strategy` (``_strategy``: `RandomStrategy` from a seed, `PCTStrategy`,
  `ReplayStrategy`) and recorded in a `DecisionLog`.
- `explore`, `shrink`, `replay`, `Tape`, `diff` (``_explore``): many
  schedules of a scenario under a strategy (random, PCT, systematic),
  a failure shrunk to its fewest deviations, saved as a tape that replays
  by identity; ``python -m tideloop.testing`` runs them from a shell.
- `SimNetwork` (``_sim``): hosts, simulated TCP, UDP and Unix
  sockets, latency and faults; its package docstring is the exact model.
- `Deadlock` (``_deadlock``), `always`, `eventually` (``_properties``): a
  virtual-time run that can never wake is reported with every task's await
  chain; properties checked after every callback. `VirtualTimeWarning`
  (``_threads``): virtual time moved on without a thread that tideloop
  could not tell waiting from working.
- The exceptions (`Deadlock`, `PropertyViolation`, `NondeterminismError`,
  `RunTimeout`) and `VirtualTimeWarning` are public here and name this
  module as theirs, so a traceback prints ``tideloop.testing.Deadlock``.
- `sometimes`, `seeded_globals`, `check_determinism` (``_world``): fault
  points in a test's own code, the process-wide sources of chance and time
  a simulated run seeds, and the check that a seed replays.
- `History`, `check_linearizable` (``_history``, ``_linearizable``, the
  models in ``models``) and `check_serializable` (``_serializable``): what
  clients saw, checked for linearizability and for serializability.
- `leads_to`, `progress`, `Livelock` (``_liveness``): liveness properties,
  and livelocks (``livelock_after=``) told apart from deadlocks.
- ``SimNetwork.set_clock`` and ``SimNetwork.mount``: each host's wall clock
  (``_sim/clocks.py``, ``_wallclock``) and disks (``_sim/disk.py``,
  ``_files``), through the patches a simulated run makes (``_patching``).
- The pytest plugin (``tideloop.testing.pytest_plugin``, registered as a
  ``pytest11`` entry point) is inactive unless ``--tideloop...`` options,
  the ``tideloop`` marker or the ``tideloop_clock`` / ``tideloop_net``
  fixtures are used.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextlib
import functools
from collections.abc import Coroutine
from typing import Any, TypeVar

from tideloop._loop import Loop
from tideloop._pollers import Poller
from tideloop._public import public_dir as _public_dir

from . import _coverage
from ._blockbuster import allow_tideloop
from ._clock import VirtualClock
from ._deadlock import Deadlock
from ._explore import Exploration, RunTimeout, Tape, diff, explore, replay, shrink
from ._history import UNKNOWN, History, Op
from ._linearizable import Counterexample, Linearizability, NotLinearizable, check_linearizable
from ._liveness import Livelock, leads_to, progress, watch_livelocks
from ._loopclocks import loop_clocks
from ._properties import PropertyViolation, always, eventually
from ._schedule import Perturber
from ._serializable import Anomaly, NotSerializable, Serializability, check_serializable
from ._sim import SimNetwork, SimSocket
from ._strategy import DecisionLog, PCTStrategy, RandomStrategy, ReplayStrategy, Strategy
from ._supervisor import VirtualTimeWatch
from ._threads import VirtualTimeWarning
from ._world import EPOCH, NondeterminismError, check_determinism, seeded_globals, sometimes

__all__ = [
    "EPOCH",
    "UNKNOWN",
    "Anomaly",
    "Counterexample",
    "Deadlock",
    "DecisionLog",
    "Exploration",
    "History",
    "Linearizability",
    "Livelock",
    "NondeterminismError",
    "NotLinearizable",
    "NotSerializable",
    "Op",
    "PCTStrategy",
    "Perturber",
    "PropertyViolation",
    "RandomStrategy",
    "ReplayStrategy",
    "RunTimeout",
    "Serializability",
    "SimNetwork",
    "SimSocket",
    "Strategy",
    "Tape",
    "VirtualClock",
    "VirtualTimeWarning",
    "allow_tideloop",
    "always",
    "check_determinism",
    "check_linearizable",
    "check_serializable",
    "current_clock",
    "diff",
    "eventually",
    "explore",
    "leads_to",
    "loop_clocks",
    "new_event_loop",
    "progress",
    "replay",
    "run",
    "seeded_globals",
    "shrink",
    "sometimes",
]

_T = TypeVar("_T")

# What a test sees fail prints (and pickles) by the name it is imported by:
# ``tideloop.testing.Deadlock``, not the private module it is defined in.
for _public in (Deadlock, NondeterminismError, PropertyViolation, RunTimeout, VirtualTimeWarning):
    _public.__module__ = __name__
del _public


def new_event_loop(
    *,
    virtual_time: bool | VirtualClock | None = None,
    seed: int | None = None,
    poller: Poller | str | None = None,
    autojump_threshold: float = 0.0,
    network: SimNetwork | None = None,
    strategy: Strategy | DecisionLog | None = None,
    wakeups: bool = False,
    livelock_after: float | None = None,
) -> Loop:
    """A tideloop loop for tests (usable as asyncio's ``loop_factory``).

    *virtual_time*: True for a new `VirtualClock` (with *autojump_threshold*),
    or the `VirtualClock` to use; None (the default) means True with a
    *network* and False without. *seed*: an int to perturb the schedule with
    a `Perturber` of that seed; None keeps tideloop's fixed order.
    *strategy*: instead of a seed, the `Strategy` that answers the
    Perturber's decision points (`PCTStrategy`, a tape's `ReplayStrategy`),
    or the `DecisionLog` of a run whose loops share one strategy.
    *wakeups*: with a seed or strategy, also vary how many iterations a
    task's step takes (opt-in; a failure that needs it is *latent*, see
    `Perturber`).
    *network*: a `SimNetwork` for the loop's TCP sockets and names.
    With virtual time, a run where every task waits and nothing (no timer,
    thread, real fd or signal) can wake them raises `Deadlock` out of the
    loop, naming what each task awaits, instead of hanging; and the clock
    does not jump while a thread of the program's looks busy (`ThreadWatch`).
    *livelock_after*: seconds of loop time in which tasks keep stepping
    without reaching a `progress` point that make the loop raise `Livelock`
    (see ``tideloop.testing._liveness``); None: not watched.
    """
    if livelock_after is not None and not livelock_after > 0:
        raise ValueError(f"livelock_after must be > 0 seconds, not {livelock_after!r}")
    if virtual_time is None:
        virtual_time = network is not None
    clock: VirtualClock | None
    if isinstance(virtual_time, VirtualClock):
        clock = virtual_time
    elif virtual_time:
        clock = VirtualClock(autojump_threshold=autojump_threshold)
    else:
        clock = None
    schedule: Perturber | None = None
    if isinstance(strategy, DecisionLog):
        schedule = Perturber(log=strategy, wakeups=wakeups)
    elif strategy is not None:
        schedule = Perturber(strategy=strategy, wakeups=wakeups)
    elif seed is not None:
        schedule = Perturber(seed, wakeups=wakeups)
    elif wakeups:
        raise ValueError("wakeups=True needs a seed or a strategy to vary task steps with")
    # Under virtual time a run that can never wake raises Deadlock with
    # every task's await stack, instead of hanging, and the clock does not
    # jump while a thread of the program's is busy.
    supervisor = None if clock is None else VirtualTimeWatch(network)
    if network is not None:
        _coverage.saw_network(network)  # a coverage search's probe reads its log
    loop = Loop(
        poller=poller, clock=clock, schedule=schedule, network=network, supervisor=supervisor
    )
    if livelock_after is not None:
        watch_livelocks(loop, livelock_after)
    return loop


def run(
    main: Coroutine[Any, Any, _T],
    *,
    virtual_time: bool | VirtualClock | None = None,
    seed: int | None = None,
    debug: bool | None = None,
    autojump_threshold: float = 0.0,
    network: SimNetwork | None = None,
    strategy: Strategy | DecisionLog | None = None,
    wakeups: bool = False,
    livelock_after: float | None = None,
) -> _T:
    """Run *main* like ``asyncio.run``, on `new_event_loop` with these options.

    With a *network*, ``random``, ``os.urandom`` and ``time`` are seeded
    or virtual for the run (`seeded_globals`; ``SimNetwork(seed_globals=False)``
    turns that off). If it raises and a *seed* was given, the exception
    carries a note with the seed, so the traceback says how to replay the run.
    """
    if asyncio.events._get_running_loop() is not None:
        raise RuntimeError("tideloop.testing.run() cannot be called from a running event loop")
    if isinstance(strategy, Strategy):
        strategy = DecisionLog(strategy)  # one log for every loop of the run
    if virtual_time is None:
        virtual_time = network is not None  # as new_event_loop resolves it
    factory = functools.partial(
        new_event_loop,
        virtual_time=virtual_time,
        seed=seed,
        autojump_threshold=autojump_threshold,
        network=network,
        strategy=strategy,
        wakeups=wakeups,
        livelock_after=livelock_after,
    )
    seeded: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if network is not None and network.seed_globals:
        seeded = seeded_globals(network, urandom=network.urandom)
    # On virtual time, time.monotonic() and time.time() on the loop's thread
    # follow its clock (_loopclocks); a simulated run's own clocks, applied
    # inside, take over.
    clocks: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if virtual_time:
        clocks = loop_clocks()
    try:
        with clocks, seeded, asyncio.Runner(debug=debug, loop_factory=factory) as runner:
            return runner.run(main)
    except BaseException as exc:
        if seed is not None:
            exc.add_note(f"tideloop.testing: schedule seed {seed} (replay with seed={seed})")
        raise


def current_clock() -> VirtualClock:
    """The running loop's `VirtualClock` (call from a coroutine or callback)."""
    loop = asyncio.get_running_loop()
    clock = loop.clock if isinstance(loop, Loop) else None
    if not isinstance(clock, VirtualClock):
        raise RuntimeError("the running loop has no VirtualClock (use virtual_time=True)")
    return clock


# The exceptions a user catches print and pickle under their public path
# (``tideloop.testing.Deadlock``), not the private module that defines them.
for _exported in list(globals().values()):
    if (
        isinstance(_exported, type)
        and issubclass(_exported, BaseException)
        and _exported.__name__ in __all__
        and _exported.__module__.startswith(f"{__name__}._")
    ):
        _exported.__module__ = __name__
del _exported


def __dir__() -> list[str]:
    # dir(tideloop.testing) lists the public API (and the package's own
    # dunders and the public submodules imported so far, e.g. pytest_plugin),
    # not the names its code imports.
    return _public_dir(globals(), __all__, __name__)
