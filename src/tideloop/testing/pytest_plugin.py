"""The pytest plugin: a suite's asyncio tests on tideloop, with virtual time and seeds.

Layer: top (``tideloop.testing``). Registered through the ``pytest11``
entry point ``tideloop``, so it is loaded wherever tideloop is installed,
and it does nothing unless asked. Every option is also an ini setting named
like it (`_OPTIONS`: ``--tideloop-seeds`` is ``tideloop_seeds``); the
command line wins, and ``--no-tideloop`` turns options, ini settings and
the marker off whatever the ini file says.

- ``--tideloop``: every asyncio test runs on tideloop.
- ``--tideloop-virtual-time`` (implies ``--tideloop``): every test's loops
  get a `VirtualClock`; ``--tideloop-autojump-threshold=SECONDS`` sets its
  threshold (default 0: see ``tideloop.testing._clock`` for when to raise it).
- ``--tideloop-seed=S`` (implies ``--tideloop``): every test's loops are
  perturbed by a `Perturber` with seed S.
- ``--tideloop-seeds=N`` (implies ``--tideloop``): each async test, and
  each test using ``tideloop_net`` (sync ones too), runs under up to N
  schedules and stops at the first failing one. The schedules come from
  ``--tideloop-strategy``: ``random`` (the default: seeds S..S+N-1, S from
  ``--tideloop-seed``, else 0), ``pct`` (the unperturbed schedule, then PCT
  schedules of ``--tideloop-depth`` change points) or ``systematic`` (every
  schedule with at most ``--tideloop-bound`` deviations, fewest first; the
  summary says when the bounded space was exhausted); a strategy's option
  given to another strategy is a usage error. A failing schedule is shrunk
  (at most ``--tideloop-shrink`` reruns of the test) and saved as a tape, in
  ``.tideloop-tapes/`` next to the test file or in ``--tideloop-tape-dir``
  (never over another: `Tape.save_new`); the report prints the minimal
  schedule in words and the command line that replays it. A test's
  progress shows once it has explored for `PROGRESS_AFTER` real seconds
  (`_Progress`); ``--tideloop-seeds-budget=SECONDS`` stops exploring a test
  after that much real time. What each test's exploration did travels with
  its report (`_Explored`, also from pytest-xdist's workers), for the
  summary: failing schedules, budgets, the slowest explorations, and a
  warning naming the tests whose loops slept in real timers (virtual time
  would skip that).
- ``--tideloop-executor=MODULE:FACTORY`` (with ``--tideloop-seeds``, under
  a seeded strategy: random, pct): each explored test runs its first
  schedule here and the others on the ``concurrent.futures.Executor``
  FACTORY returns (called once, at the first test that needs it; shut down
  at the end of the session), in batches of seeds, each batch a pytest run
  of the one test in a subprocess of a worker (``_pytest_scale``). The
  lowest failing seed is run again here (shrunk, taped, replayed as
  without an executor); one that passes here still fails the test. Given
  with another strategy, it is a usage error; empty, it overrides the ini
  file's.
- ``--tideloop-tape=FILE`` (implies ``--tideloop``): every test runs under
  that tape's deviations (its exact schedule).
- ``--tideloop-wakeups`` (with ``--tideloop-seed``, ``--tideloop-seeds``):
  the schedules also vary how many iterations a task's step takes (the
  opt-in mode of ``tideloop.testing.Perturber``); a failure that needs it
  is reported as latent. A tape made so carries the mode.
- ``@pytest.mark.tideloop(virtual_time=..., seed=..., autojump_threshold=...,
  livelock_after=...)`` runs one test on tideloop (with those settings) even
  without the options.
- ``--tideloop-livelock-after=SECONDS`` (or the marker's ``livelock_after``):
  a tideloop test whose tasks keep stepping for that long in loop time
  without reaching ``tideloop.testing.progress()`` fails with
  ``tideloop.testing.Livelock``.
- The ``tideloop_clock`` fixture turns on virtual time for its test and
  returns the `VirtualClock` that the test's loops use.
- The ``tideloop_net`` fixture gives its test's loops a `SimNetwork`
  (virtual time on; the network's seed is the test's schedule seed, 0
  without one, so ``--tideloop-seeds`` varies the network's faults too),
  seeds ``random``/``os.urandom`` and makes ``time`` virtual for the test
  (``tideloop.testing.seeded_globals``), and returns the network.

How each kind of test gets its loop (every route ends in `_Plugin.new_loop`,
which reads the running test's settings):

- pytest-asyncio 1.4+: its ``pytest_asyncio_loop_factories`` hook, which this
  plugin implements only under ``--tideloop`` options (an implementation
  changes how pytest-asyncio parametrizes every test), as a wrapper around
  the project's own: tideloop's factory joins the project's factories
  (`_AsyncioLoopFactories`), and only runs on it repeat under seeds. Older
  releases, and marked tests without the options: the event loop policy.
- anyio's pytest plugin: a backend given as ``("asyncio", {options})`` gets
  ``loop_factory`` added to its options; a plain ``"asyncio"`` backend builds
  its loop through the policy (rewriting the string into a tuple would break
  tests that compare ``anyio_backend == "asyncio"``).
- ``unittest.IsolatedAsyncioTestCase``: its ``loop_factory`` attribute on
  Python 3.13+ (when the class leaves it None), the policy before.
- ``asyncio.run()`` and ``asyncio.new_event_loop()`` inside a test: the
  policy.

The policy is installed for the session when the options are given, or when
a collected test uses the marker or the fixture; it delegates to the policy
it replaced whenever the running test is not a tideloop test. pytest-asyncio
and anyio are never imported here: the plugin looks only at hook names,
fixture names and markers.

Loops built in a broader scope than the test (a module-scoped pytest-asyncio
loop, an anyio runner kept alive by a module-scoped async fixture) use the
settings of the test that built them.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import concurrent.futures as cf
import contextlib
import dataclasses
import importlib.util
import inspect
import re
import shlex
import time
import unittest
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
from _pytest.runner import runtestprotocol

from tideloop._entry import _policy_base
from tideloop._versions import PY313

from . import new_event_loop
from ._blockbuster import patch_blockbuster_class
from ._clock import VirtualClock
from ._explore import Recorded, Tape, describe_tape, shrink_deviations
from ._loopclocks import loop_clocks
from ._pytest_scale import EXPLORED_PROPERTY, BatchWork, batch_length, spread
from ._recording import Recording
from ._scale import executor_factory, make_executor
from ._search import STRATEGIES, Options, Recipe
from ._sim import SimNetwork
from ._strategy import DecisionLog, Point, RandomStrategy, ReplayStrategy, Strategy
from ._world import seeded_globals

_PLUGIN_NAME = "tideloop-plugin"
_MARKER_KWARGS = frozenset({"virtual_time", "seed", "autojump_threshold", "livelock_after"})
#: The fixture pytest-asyncio parametrizes with the loop factory a test runs on.
_PYTEST_ASYNCIO_FACTORY: Final = "_asyncio_loop_factory"


@dataclasses.dataclass(frozen=True)
class _Option:
    """One setting: a command-line option and the ini setting named like it."""

    #: The command-line flag (``--tideloop-seeds``); its ini name and dest
    #: are the flag without dashes, with underscores (``tideloop_seeds``).
    flag: str
    #: "bool", "int", "float", "path" (relative to the ini file's directory
    #: when set there) or "str"; *choices* for a closed set.
    kind: str
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


_OPTIONS: Final = (
    _Option("--tideloop", "bool", "run every asyncio test on tideloop"),
    _Option(
        "--tideloop-virtual-time",
        "bool",
        "give every test's loops a virtual clock (implies --tideloop)",
    ),
    _Option(
        "--tideloop-autojump-threshold",
        "float",
        "real seconds the loop must be idle before virtual time jumps (default 0)",
        "SECONDS",
    ),
    _Option(
        "--tideloop-seed",
        "int",
        "perturb every test's schedule with seed S (implies --tideloop); "
        "with --tideloop-seeds, the first seed",
        "S",
    ),
    _Option(
        "--tideloop-seeds",
        "int",
        "run each async test (and each test using tideloop_net) under N schedules, "
        "stop at the first failing one (implies --tideloop)",
        "N",
    ),
    _Option(
        "--tideloop-seeds-budget",
        "float",
        "with --tideloop-seeds: stop exploring a test after SECONDS of real time "
        "(it passes; the summary says how many schedules ran)",
        "SECONDS",
    ),
    _Option(
        "--tideloop-strategy",
        "str",
        f"how --tideloop-seeds picks schedules: {STRATEGIES.described()} (default: random)",
        choices=STRATEGIES.names,
    ),
    _Option(
        "--tideloop-depth",
        "int",
        "pct: deviations (change points) per schedule (default 2; only with "
        "--tideloop-strategy=pct)",
        "D",
    ),
    _Option(
        "--tideloop-bound",
        "int",
        "systematic: at most K deviations per schedule (default 2; only with "
        "--tideloop-strategy=systematic)",
        "K",
    ),
    _Option(
        "--tideloop-shrink",
        "int",
        "rerun a failing test at most RUNS times to shrink its schedule (default 100; 0: do not)",
        "RUNS",
    ),
    _Option(
        "--tideloop-tape-dir",
        "path",
        "where failing schedules' tapes go (default: .tideloop-tapes next to the test)",
        "DIR",
    ),
    _Option(
        "--tideloop-wakeups",
        "bool",
        "with --tideloop-seed(s): also vary how many iterations a task's step "
        "takes (finds latent races; a failure that needs it is reported as latent)",
    ),
    _Option(
        "--tideloop-livelock-after",
        "float",
        "fail a tideloop test whose tasks keep stepping for SECONDS of loop time "
        "without reaching tideloop.testing.progress() (testing.Livelock)",
        "SECONDS",
    ),
    _Option(
        "--tideloop-executor",
        "str",
        "with --tideloop-seeds (random, pct): run each test's schedules after the "
        "first on the concurrent.futures.Executor FACTORY() returns (a process pool, a "
        "Dask cluster's client.get_executor()), a pytest run per batch of seeds; the "
        "workers need the project at the same path",
        "MODULE:FACTORY",
    ),
    _Option(
        "--tideloop-tape",
        "path",
        "run every test under this tape's schedule (implies --tideloop)",
        "FILE",
    ),
)

#: Settings that turn tideloop on for every test (the rest refine them).
_TURN_ON: Final = frozenset(
    {
        "tideloop",
        "tideloop_virtual_time",
        "tideloop_autojump_threshold",
        "tideloop_seed",
        "tideloop_seeds",
        "tideloop_tape",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tideloop", "tideloop: run asyncio tests on tideloop")
    for option in _OPTIONS:
        extra: dict[str, Any] = {}
        if option.kind == "bool":
            extra["action"] = "store_true"
        elif option.kind in ("int", "float"):
            extra["type"] = int if option.kind == "int" else float
        if option.choices:
            extra["choices"] = option.choices
        if option.metavar is not None:
            extra["metavar"] = option.metavar
        group.addoption(
            option.flag,
            dest=option.name,
            default=None,
            help=f"{option.help} [ini: {option.name}]",
            **extra,
        )
        parser.addini(
            option.name,
            f"tideloop: {option.help} (the same as {option.flag})",
            type="string",
            default="",
        )
    group.addoption(
        "--no-tideloop",
        dest="no_tideloop",
        action="store_true",
        default=False,
        help="turn tideloop off whatever the ini file says: no option, ini setting or "
        "@pytest.mark.tideloop applies (tests using tideloop_clock or tideloop_net "
        "still get tideloop, which they need)",
    )


def _settings(config: pytest.Config) -> dict[str, Any]:
    """Every setting's value: the command line's, else the ini file's, else None.

    Also ``"given"``: the names set on the command line or in the ini file.
    """
    values: dict[str, Any] = {}
    given: set[str] = set()
    off = bool(config.getoption("no_tideloop"))
    on_command_line = [o for o in _OPTIONS if config.getoption(o.name) is not None]
    if off and on_command_line:
        raise pytest.UsageError(f"--no-tideloop turns tideloop off: drop {on_command_line[0].flag}")
    for option in _OPTIONS:
        value = config.getoption(option.name)
        if value is not None:
            if option.kind == "path":
                value = str(value)
            values[option.name] = value
            given.add(option.name)
            continue
        raw = str(config.getini(option.name)).strip()
        value = None if not raw or off else _from_ini(config, option, raw)
        values[option.name] = value
        if value is not None:
            given.add(option.name)
    values["given"] = given
    return values


def _from_ini(config: pytest.Config, option: _Option, raw: str) -> Any:
    """An ini setting's value, checked as its option's would be."""
    where = f"ini setting {option.name} = {raw}"
    if option.kind == "bool":
        lowered = raw.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return None  # as if not given
        raise pytest.UsageError(f"{where}: expected true or false")
    if option.kind in ("int", "float"):
        try:
            return int(raw) if option.kind == "int" else float(raw)
        except ValueError:
            raise pytest.UsageError(
                f"{where}: expected {'an integer' if option.kind == 'int' else 'a number'}"
            ) from None
    if option.choices and raw not in option.choices:
        raise pytest.UsageError(f"{where}: expected one of {', '.join(option.choices)}")
    if option.kind == "path":
        # As pytest's own path settings: relative to the ini file's directory.
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return str(base / raw)
    return raw


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tideloop(virtual_time=False, seed=None, autojump_threshold=None, "
        "livelock_after=None): run this test's asyncio loops on tideloop, with these settings",
    )
    plugin = _Plugin(config)
    config.pluginmanager.register(plugin, _PLUGIN_NAME)
    # blockbuster (anyio's and aiohttp's suites use it) accepts asyncio's own
    # blocking frames; told here to accept tideloop's same calls too.
    if importlib.util.find_spec("blockbuster") is not None:
        import blockbuster

        patch_blockbuster_class(blockbuster.BlockBuster)
    if plugin.enabled:
        plugin.install_policy()
        if hasattr(config.hook, "pytest_asyncio_loop_factories"):
            config.pluginmanager.register(_AsyncioLoopFactories(plugin), "tideloop-asyncio")
        if plugin.seeds is not None and plugin.tape is None:
            config.pluginmanager.register(_SeedRunner(plugin), "tideloop-seeds")


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if isinstance(plugin, _Plugin):
        try:
            plugin.uninstall_policy()
        finally:
            plugin.close_executor()


@pytest.fixture
def tideloop_clock(request: pytest.FixtureRequest) -> VirtualClock:
    """The `VirtualClock` of this test's tideloop loops (turns virtual time on)."""
    plugin = request.config.pluginmanager.get_plugin(_PLUGIN_NAME)
    assert isinstance(plugin, _Plugin)
    settings = plugin.current
    if settings is None:
        raise RuntimeError("tideloop_clock: no test is running")
    settings.active = settings.virtual_time = True
    return settings.clock()


@pytest.fixture
def tideloop_net(request: pytest.FixtureRequest) -> Iterator[SimNetwork]:
    """The `SimNetwork` of this test's tideloop loops (turns it and virtual time on)."""
    plugin = request.config.pluginmanager.get_plugin(_PLUGIN_NAME)
    assert isinstance(plugin, _Plugin)
    settings = plugin.current
    if settings is None:
        raise RuntimeError("tideloop_net: no test is running")
    settings.active = settings.virtual_time = settings.uses_network = True
    net = settings.network()
    if not net.seed_globals:
        yield net
        return
    with seeded_globals(net, urandom=net.urandom):
        yield net


@dataclasses.dataclass
class _Settings:
    """What the loops built for the running test look like."""

    active: bool
    virtual_time: bool
    autojump_threshold: float
    seed: int | None
    uses_network: bool = False
    #: The opt-in wake-up mode (only with a seed or strategy).
    wakeups: bool = False
    #: Seconds of loop time without a progress point that make a livelock.
    livelock_after: float | None = None
    #: Answers the schedule's decision points (None: a seed's random one,
    #: or no perturbation without a seed).
    strategy: Strategy | None = None
    _clock: VirtualClock | None = None
    _network: SimNetwork | None = None
    _log: DecisionLog | None = None

    @property
    def made_log(self) -> DecisionLog | None:
        """The decision log, if a loop of the run has asked for it (`decisions`)."""
        return self._log

    def decisions(self) -> DecisionLog | None:
        """The run's decision log, shared by its loops (None: unperturbed)."""
        if self._log is None:
            if self.strategy is not None:
                self._log = DecisionLog(self.strategy)
            elif self.seed is not None:
                self._log = DecisionLog(RandomStrategy(self.seed))
        return self._log

    def clock(self) -> VirtualClock:
        if self._clock is None:
            self._clock = VirtualClock(autojump_threshold=self.autojump_threshold)
        return self._clock

    def network(self) -> SimNetwork:
        if self._network is None:
            self._network = SimNetwork(seed=0 if self.seed is None else self.seed)
        return self._network


@dataclasses.dataclass
class _Failure:
    nodeid: str
    schedule: str
    passed_before: int
    replay: str
    #: The failure's kind and where its report is (the report itself is in
    #: the test's own section: printed once).
    summary: str = ""
    #: Where it was found, if not here (--tideloop-executor's workers).
    found: str = ""


class _Plugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        opt = _settings(config)
        given: set[str] = opt["given"]
        #: --no-tideloop: options, ini settings and the marker are off.
        self.off: bool = bool(config.getoption("no_tideloop"))
        self.virtual_time: bool = bool(opt["tideloop_virtual_time"])
        threshold = opt["tideloop_autojump_threshold"]
        self.autojump_threshold: float = 0.0 if threshold is None else float(threshold)
        if not self.autojump_threshold >= 0.0:
            raise pytest.UsageError("--tideloop-autojump-threshold must be >= 0")
        self.seed: int | None = opt["tideloop_seed"]
        self.seeds: int | None = opt["tideloop_seeds"]
        if self.seeds is not None and self.seeds < 1:
            raise pytest.UsageError("--tideloop-seeds must be at least 1")
        budget = opt["tideloop_seeds_budget"]
        self.seeds_budget: float | None = None if budget is None else float(budget)
        if self.seeds_budget is not None:
            if self.seeds is None:
                raise pytest.UsageError(
                    "--tideloop-seeds-budget limits --tideloop-seeds: give --tideloop-seeds"
                )
            if not self.seeds_budget > 0:
                raise pytest.UsageError("--tideloop-seeds-budget must be > 0")
        self.strategy: Recipe = STRATEGIES.get(opt["tideloop_strategy"] or "random")
        depth, bound, shrink = opt["tideloop_depth"], opt["tideloop_bound"], opt["tideloop_shrink"]
        self.depth: int = 2 if depth is None else depth
        self.bound: int = 2 if bound is None else bound
        self.shrink_budget: int = 100 if shrink is None else shrink
        if self.depth < 1 or self.bound < 0 or self.shrink_budget < 0:
            raise pytest.UsageError(
                "--tideloop-depth must be at least 1, --tideloop-bound and "
                "--tideloop-shrink at least 0"
            )
        # A strategy's option given to a strategy that ignores it is a
        # mistake (pct's depth with random): say so rather than ignore it.
        options = {"depth": "tideloop_depth", "bound": "tideloop_bound"}
        for field, takers in STRATEGIES.unused(
            self.strategy.name, {f for f, name in options.items() if name in given}
        ):
            flag = "--" + options[field].replace("_", "-")
            raise pytest.UsageError(
                f"{flag} is for --tideloop-strategy={takers}: the {self.strategy.name} "
                f"strategy does not use it (give --tideloop-strategy={takers}, or drop {flag})"
            )
        self.tape_dir: str | None = opt["tideloop_tape_dir"]
        livelock_after = opt["tideloop_livelock_after"]
        if livelock_after is not None and not livelock_after > 0:
            raise pytest.UsageError("--tideloop-livelock-after must be > 0")
        self.livelock_after: float | None = livelock_after
        tape_path = opt["tideloop_tape"]
        self.tape_path: str | None = tape_path
        self.tape: Tape | None = None
        if tape_path is not None:
            try:
                self.tape = Tape.load(tape_path)
            except (OSError, ValueError, KeyError) as exc:
                raise pytest.UsageError(
                    f"--tideloop-tape: cannot read {tape_path}: {exc}"
                ) from None
            if self.tape.virtual_time:
                self.virtual_time = True
        self.wakeups: bool = bool(opt["tideloop_wakeups"]) or bool(self.tape and self.tape.wakeups)
        if self.wakeups and self.seed is None and self.seeds is None and self.tape is None:
            raise pytest.UsageError(
                "--tideloop-wakeups varies schedules: give --tideloop-seed or --tideloop-seeds"
            )
        #: In a pytest run of a --tideloop-executor worker (``_pytest_scale``):
        #: pct's measured length (0: none); None in any other run. Such a run
        #: has no budget (the session's is its caller's) and no executor.
        self.batch_length: int | None = batch_length(config)
        if self.batch_length is not None:
            self.seeds_budget = None
        spec = opt["tideloop_executor"]
        #: --tideloop-executor's MODULE:FACTORY (None: schedules run here).
        self.executor_spec: str | None = spec if spec and self.batch_length is None else None
        self._executor_factory: Any = None
        self._executor: cf.Executor | None = None
        if self.executor_spec is not None:
            if self.seeds is None:
                raise pytest.UsageError(
                    "--tideloop-executor runs --tideloop-seeds' schedules: give --tideloop-seeds"
                )
            if not self.strategy.seeded:
                names = ", ".join(STRATEGIES.seeded_names())
                raise pytest.UsageError(
                    f"--tideloop-executor is for --tideloop-strategy={names} (a seed each): "
                    f"the {self.strategy.name} strategy picks each schedule from the runs "
                    "before it, in this process (drop --tideloop-executor; an empty "
                    "--tideloop-executor= overrides the ini file's)"
                )
            try:
                self._executor_factory = executor_factory(
                    self.executor_spec, "--tideloop-executor takes MODULE:FACTORY"
                )
            except (ValueError, ImportError, AttributeError) as exc:
                raise pytest.UsageError(str(exc)) from None
        self.enabled: bool = bool(given & _TURN_ON) and not self.off
        #: The running test's settings (None between tests).
        self.current: _Settings | None = None
        #: What each explored test reported (`_Explored`), by node id, from
        #: this process or pytest-xdist's workers.
        self.explored: dict[str, _Explored] = {}
        self._previous_policy: Any = None
        self._policy_installed = False

    # ------------------------------------------------------------------
    # --tideloop-executor

    def executor(self) -> cf.Executor:
        """--tideloop-executor's executor: FACTORY's, called at the first test
        that needs it (a usage error if it fails: the session stops)."""
        if self._executor is None:
            spec = self.executor_spec
            assert spec is not None and self._executor_factory is not None
            # Made under the policy the session had before tideloop's: an
            # executor's own loops (a Dask client's, in a thread of its own,
            # for as long as it lives) are not the tests' loops, and a
            # testing loop there would take its idle waits for deadlocks.
            installed = self._policy_installed
            self.uninstall_policy()
            try:
                self._executor = make_executor(spec, self._executor_factory)
            except Exception as exc:
                text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
                raise pytest.UsageError(f"--tideloop-executor={spec}: {text}") from None
            finally:
                if installed:
                    self.install_policy()
        return self._executor

    def close_executor(self) -> None:
        """Shut the executor down (the plugin called the factory: it owns it)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def batch_work(self, item: pytest.Item, length: int) -> BatchWork:
        """A batch of *item*'s seeds for a worker (``_pytest_scale``), but its
        seeds: the session's tideloop settings, its ``-p`` and ``-o``."""
        config = self.config
        args = [
            "--tideloop",
            f"--tideloop-strategy={self.strategy.name}",
            f"--tideloop-autojump-threshold={self.autojump_threshold!r}",
        ]
        if self.virtual_time:
            args.append("--tideloop-virtual-time")
        if "depth" in self.strategy.uses:
            args.append(f"--tideloop-depth={self.depth}")
        if "bound" in self.strategy.uses:
            args.append(f"--tideloop-bound={self.bound}")
        if self.wakeups:
            args.append("--tideloop-wakeups")
        if self.livelock_after is not None:
            args.append(f"--tideloop-livelock-after={self.livelock_after!r}")
        for name in getattr(config.option, "plugins", None) or ():
            args += ["-p", str(name)]
        for override in getattr(config.option, "override_ini", None) or ():
            args += ["-o", str(override)]
        if config.pluginmanager.hasplugin("xdist"):
            args += ["-n", "0"]  # one test, in the worker's subprocess itself
        _, sep, rest = item.nodeid.partition("::")
        return BatchWork(
            target=str(item.path) + sep + rest,
            nodeid=item.nodeid,
            cwd=str(config.invocation_params.dir),
            rootdir=str(config.rootpath),
            inifile=None if config.inipath is None else str(config.inipath),
            args=tuple(args),
            length=length,
        )

    # ------------------------------------------------------------------
    # Building loops

    def new_loop(self) -> asyncio.AbstractEventLoop:
        """The loop factory every route uses."""
        settings = self.current
        if settings is None:
            # Outside a test (collection, a session fixture of no test).
            if not self.enabled:
                return self._previous_new_loop()
            return new_event_loop(
                virtual_time=self.virtual_time,
                seed=self.seed,
                autojump_threshold=self.autojump_threshold,
                strategy=None if self.tape is None else self.tape.strategy(),
                wakeups=self.wakeups and (self.seed is not None or self.tape is not None),
                livelock_after=self.livelock_after,
            )
        if not settings.active:
            return self._previous_new_loop()
        decisions = settings.decisions()
        return new_event_loop(
            virtual_time=settings.clock() if settings.virtual_time else False,
            network=settings.network() if settings.uses_network else None,
            strategy=decisions,
            wakeups=settings.wakeups and decisions is not None,
            livelock_after=settings.livelock_after,
        )

    def _test_clock(self) -> VirtualClock | None:
        """The running test's clock, for its thread's reads of
        ``time.monotonic()`` while no loop runs there (``_loopclocks``)."""
        settings = self.current
        if settings is None or not (settings.active and settings.virtual_time):
            return None
        return settings.clock()

    def _previous_new_loop(self) -> asyncio.AbstractEventLoop:
        previous = self._previous_policy
        if previous is None:
            return asyncio.SelectorEventLoop()
        loop: asyncio.AbstractEventLoop = previous.new_event_loop()
        return loop

    def install_policy(self) -> None:
        if self._policy_installed:
            return
        getter = getattr(asyncio.events, "_get_event_loop_policy", None)
        if getter is None:
            getter = asyncio.get_event_loop_policy
        self._previous_policy = getter()
        _set_policy(_policy_class()(self))
        self._policy_installed = True

    def uninstall_policy(self) -> None:
        if self._policy_installed:
            _set_policy(self._previous_policy)
            self._policy_installed = False

    # ------------------------------------------------------------------
    # Which tests, which settings

    def marker(self, item: pytest.Item) -> pytest.Mark | None:
        """The test's ``@pytest.mark.tideloop``, unless --no-tideloop."""
        return None if self.off else item.get_closest_marker("tideloop")

    def settings_for(
        self, item: pytest.Item, seed: int | None, strategy: Strategy | None = None
    ) -> _Settings:
        marker = self.marker(item)
        fixtures = getattr(item, "fixturenames", ())
        uses_network = "tideloop_net" in fixtures
        uses_clock = "tideloop_clock" in fixtures or uses_network
        settings = _Settings(
            active=self.enabled or marker is not None or uses_clock,
            virtual_time=self.virtual_time or uses_clock,
            autojump_threshold=self.autojump_threshold,
            seed=seed,
            uses_network=uses_network,
            strategy=strategy,
            wakeups=self.wakeups,
            livelock_after=self.livelock_after,
        )
        if strategy is None and self.tape is not None:
            settings.strategy = self.tape.strategy()
        if marker is not None:
            kwargs = marker.kwargs
            if "virtual_time" in kwargs:
                settings.virtual_time = bool(kwargs["virtual_time"]) or uses_clock
            if kwargs.get("autojump_threshold") is not None:
                settings.autojump_threshold = float(kwargs["autojump_threshold"])
            if kwargs.get("livelock_after") is not None:
                settings.livelock_after = float(kwargs["livelock_after"])
        return settings

    def seeds_for(self, item: pytest.Item) -> list[int | None]:
        """The seeds *item* runs under: several under --tideloop-seeds for an
        async test, and for a test using ``tideloop_net`` (sync or not: the
        network's faults follow the seed), unless the marker fixes one or
        pytest-asyncio runs it on a loop factory of the project's own."""
        marker = self.marker(item)
        if marker is not None and marker.kwargs.get("seed") is not None:
            return [int(marker.kwargs["seed"])]
        if (
            self.seeds is not None
            and (_is_async_test(item) or "tideloop_net" in getattr(item, "fixturenames", ()))
            and not self._on_another_factory(item)
        ):
            base = 0 if self.seed is None else self.seed
            return list(range(base, base + self.seeds))
        return [self.seed]

    def _on_another_factory(self, item: pytest.Item) -> bool:
        """Whether pytest-asyncio runs *item* on a loop factory other than
        tideloop's (a project's own, beside which tideloop joined): seeds
        would vary nothing there."""
        callspec = getattr(item, "callspec", None)
        params = getattr(callspec, "params", {})
        factory = params.get(_PYTEST_ASYNCIO_FACTORY, self.new_loop)
        return factory is not None and factory != self.new_loop

    def replay_command(self, item: pytest.Item, seed: int | None, tape: str | None = None) -> str:
        args = ["pytest", item.nodeid]
        args.append(f"--tideloop-tape={tape}" if tape is not None else f"--tideloop-seed={seed}")
        if self.virtual_time:
            args.append("--tideloop-virtual-time")
        if self.wakeups and tape is None:
            args.append("--tideloop-wakeups")  # a tape carries its mode
        if self.autojump_threshold:
            args.append(f"--tideloop-autojump-threshold={self.autojump_threshold}")
        return shlex.join(args)

    # ------------------------------------------------------------------
    # Hooks

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        wanted = False
        for item in items:
            marker = item.get_closest_marker("tideloop")
            if marker is not None:
                unknown = set(marker.kwargs) - _MARKER_KWARGS
                if marker.args or unknown:
                    raise pytest.UsageError(
                        f"{item.nodeid}: @pytest.mark.tideloop takes only the keyword "
                        f"arguments {sorted(_MARKER_KWARGS)}"
                    )
                wanted = wanted or not self.off
            # (Also with a marker that --no-tideloop made void: these
            # fixtures need tideloop whatever the settings say.)
            if {"tideloop_clock", "tideloop_net"} & set(getattr(item, "fixturenames", ())):
                wanted = True
        if wanted:
            self.install_policy()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        settings = self.current = self.settings_for(item, self.seeds_for(item)[0])
        # On virtual time, time.monotonic() and time.time() on a loop's
        # thread follow its clock (_loopclocks), from setup to teardown.
        clocks: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if settings.active and settings.virtual_time:
            clocks = loop_clocks(self._test_clock)
        try:
            with clocks:
                return (yield)
        finally:
            self.current = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        settings = self.current
        if report.failed and settings is not None and settings.active:
            lines = []
            if self.tape is not None:
                lines.append(f"schedule: the tape {self.tape_path}")
                lines.append(self.tape.words())
            elif settings.strategy is not None:
                lines.append(f"schedule: {settings.strategy.describe()}")
            elif settings.seed is not None:
                lines.append(
                    f"schedule seed {settings.seed}; replay: "
                    f"{self.replay_command(item, settings.seed)}"
                )
            if settings.virtual_time:
                lines.append(f"virtual time: {settings.clock()!r}")
            if lines:
                report.sections.append(("tideloop", "\n".join(lines)))
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        __tracebackhide__ = True  # the plugin's frame is no part of a test's failure
        # IsolatedAsyncioTestCase grew a loop_factory attribute in 3.13.
        cls = getattr(item, "cls", None)
        settings = self.current
        patched = (
            PY313
            and settings is not None
            and settings.active
            and isinstance(cls, type)
            and issubclass(cls, unittest.IsolatedAsyncioTestCase)
            and getattr(cls, "loop_factory", None) is None
        )
        if not patched:
            return (yield)
        assert isinstance(cls, type)
        had_own = "loop_factory" in vars(cls)
        cls.loop_factory = staticmethod(self.new_loop)  # type: ignore[attr-defined]
        try:
            return (yield)
        finally:
            if had_own:
                cls.loop_factory = None  # type: ignore[attr-defined]
            else:
                del cls.loop_factory  # type: ignore[attr-defined]

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        result = yield
        settings = self.current
        if (
            fixturedef.argname == "anyio_backend"
            and settings is not None
            and settings.active
            and isinstance(result, tuple)
            and len(result) == 2
            and result[0] == "asyncio"
            and isinstance(result[1], dict)
        ):
            result = ("asyncio", {**result[1], "loop_factory": self.new_loop})
            cached = fixturedef.cached_result
            if cached is not None:
                fixturedef.cached_result = (result, *cached[1:])
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Here too under pytest-xdist: its workers' reports carry it.
        for name, value in report.user_properties:
            if name == _PROPERTY and isinstance(value, dict):
                self.explored[report.nodeid] = _Explored(**value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        explored = list(self.explored.values())
        failures = [e for e in explored if e.failure is not None]
        if failures:
            terminalreporter.section("tideloop: failing schedules")
            for e in failures:
                f = _Failure(**(e.failure or {}))
                terminalreporter.line(
                    f"{f.nodeid}: {f.schedule} failed ({f.passed_before} schedules passed "
                    "before it)"
                )
                # The report itself is in the test's own section (printed
                # once): here its kind, its timeline and how to replay it.
                if f.found:
                    terminalreporter.line(f"    {f.found}")
                if f.summary:
                    terminalreporter.line(f"    {f.summary}")
                if f.replay:
                    terminalreporter.line(f"    replay: {f.replay}")
        noted = [e for e in explored if e.note and e.failure is None]
        stopped = [e for e in explored if e.budget_stopped]
        slow = sorted(
            (e for e in explored if e.seconds >= PROGRESS_AFTER and not e.budget_stopped),
            key=lambda e: -e.seconds,
        )
        if noted or stopped or slow:
            terminalreporter.section("tideloop: schedules")
            for e in noted:
                terminalreporter.line(f"{e.nodeid}: {e.note}")
            for e in stopped:
                terminalreporter.line(f"{e.nodeid}: {_ran(e)}")
            if slow:
                terminalreporter.line(f"slowest explorations (of {len(explored)}):")
                for e in slow[:10]:
                    terminalreporter.line(f"    {e.nodeid}: {_ran(e)}")
        asleep = [
            e
            for e in explored
            if not e.virtual_time and e.slept >= SLEPT_WARN and e.slept >= SLEPT_SHARE * e.seconds
        ]
        if asleep:
            terminalreporter.section("tideloop: warning: real time asleep under seeds", yellow=True)
            for e in sorted(asleep, key=lambda e: -e.slept):
                terminalreporter.line(
                    f"{e.nodeid}: slept {e.slept:.1f} s of its {e.seconds:.1f} s in timers "
                    f"over {e.ran} schedule(s) ({e.slept / e.ran:.2f} s each)"
                )
            terminalreporter.line(
                "These tests wait for real timers (asyncio.sleep, timeouts, call_later) "
                "on every schedule. Under virtual time those take no real time, and the "
                "schedules are the same: run them with --tideloop-virtual-time (ini: "
                "tideloop_virtual_time = true) or mark them "
                "@pytest.mark.tideloop(virtual_time=True)."
            )


def _tape_path(plugin: _Plugin, item: pytest.Item) -> Path:
    """Where a failing schedule of *item* is saved."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid.split("::", 1)[-1])[:150]
    stem = Path(str(item.fspath)).stem
    if plugin.tape_dir is not None:
        return Path(plugin.tape_dir) / f"{stem}__{name}.json"
    return Path(str(item.fspath)).parent / ".tideloop-tapes" / f"{stem}__{name}.json"


#: Real seconds a test explores quietly; past them its progress shows.
PROGRESS_AFTER: Final = 2.0
#: Real seconds between two progress lines of one test.
PROGRESS_EVERY: Final = 5.0
#: A test whose loops slept this many real seconds in timers (and this share
#: of its time) under seeds is named in the summary: virtual time would help.
SLEPT_WARN: Final = 1.0
SLEPT_SHARE: Final = 0.2
#: The report property that carries a test's `_Explored` (to pytest-xdist's
#: controller too, and to --tideloop-executor's caller: ``_pytest_scale``).
_PROPERTY: Final = EXPLORED_PROPERTY


@dataclasses.dataclass
class _Explored:
    """What exploring one test under several schedules did (sent with its report)."""

    nodeid: str
    #: Schedules run, of at most *total*.
    ran: int
    total: int
    seconds: float
    #: Real seconds its loops slept waiting for timers (real time only).
    slept: float = 0.0
    virtual_time: bool = False
    #: Stopped by --tideloop-seeds-budget before *total* (none failed).
    budget_stopped: bool = False
    #: A bounded space's end, in words ("... passed (12 schedules: exhausted)").
    note: str = ""
    failure: dict[str, Any] | None = None


class _Progress:
    """A test's schedules done out of its total, and its time, on the terminal.

    Quiet while a test is quick: a line appears once it has explored for
    `PROGRESS_AFTER` real seconds, then every `PROGRESS_EVERY`, and one at
    its end. Not in pytest-xdist's workers (no terminal there: the
    controller's summary lists the slow tests).
    """

    def __init__(self, plugin: _Plugin, item: pytest.Item, total: int) -> None:
        config = plugin.config
        worker = hasattr(config, "workerinput")
        self._terminal = None if worker else config.pluginmanager.get_plugin("terminalreporter")
        self._nodeid = item.nodeid
        self._total = total
        self._budget = plugin.seeds_budget
        self._at_most = "" if plugin.strategy.by_seed else "at most "
        self.started = time.perf_counter()
        self._shown: float | None = None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def tick(self, done: int) -> None:
        now = time.perf_counter()
        elapsed = now - self.started
        if self._terminal is None or elapsed < PROGRESS_AFTER:
            return
        if self._shown is not None and now - self._shown < PROGRESS_EVERY:
            return
        self._shown = now
        left = elapsed / done * (self._total - done)
        if self._budget is not None:
            left = min(left, self._budget - elapsed)
        budget = "" if self._budget is None else f", budget {self._budget:g} s"
        self._terminal.write_line(
            f"tideloop: {self._nodeid}: {done}/{self._at_most}{self._total} schedules "
            f"in {elapsed:.1f} s (about {max(left, 0):.0f} s to go{budget})"
        )

    def end(self, explored: _Explored) -> None:
        if self._terminal is None or self._shown is None:
            return
        self._terminal.write_line(f"tideloop: {self._nodeid}: {_ran(explored)}")


def _ran(explored: _Explored) -> str:
    """What exploring a test did, in words."""
    took = f"in {explored.seconds:.1f} s"
    if explored.failure is not None:
        return f"schedule {explored.ran} of {explored.total} failed {took}"
    if explored.budget_stopped:
        return (
            f"{explored.ran} of {explored.total} schedules passed {took}, then the "
            "budget (--tideloop-seeds-budget) stopped it"
        )
    return f"{explored.ran} schedules passed {took}"


class _SeedRunner:
    """Runs each async test under several schedules (``--tideloop-seeds``)."""

    def __init__(self, plugin: _Plugin) -> None:
        self._plugin = plugin
        #: The running test's bounded space's end, in words ("" if none).
        self._note = ""

    def _schedules(
        self, item: pytest.Item
    ) -> Generator[tuple[int | None, Strategy | None], DecisionLog | None, None]:
        """(seed, strategy) per run; the runner sends each run's log back in."""
        plugin = self._plugin
        seeds = plugin.seeds_for(item)
        recipe = plugin.strategy
        if plugin.batch_length is not None and recipe.seeded and not recipe.by_seed:
            # A worker's batch (``_pytest_scale``): its seeds' schedules, of
            # the length the caller measured; the caller ran the unperturbed one.
            options = Options(depth=plugin.depth, bound=plugin.bound, seed=seeds[0] or 0)
            for seed in seeds:
                yield seed, recipe.strategy(seed or 0, options, plugin.batch_length)
            return
        if len(seeds) == 1 or plugin.strategy.by_seed:
            for seed in seeds:
                yield seed, None
            return
        n = len(seeds)
        base = seeds[0] or 0
        search = plugin.strategy.search(Options(depth=plugin.depth, bound=plugin.bound, seed=base))
        log: DecisionLog | None = None
        start = 0
        first = search.first()
        if first is not None:
            log = yield base, first
            start = 1
        try:
            for i in range(start, n):
                strategy = search.next(base + i, log)
                if strategy is None:
                    self._note = (
                        f"{search.space} passed ({i} schedules: exhausted)"
                        if search.exhausted
                        else f"{i} schedules passed (a run met more decision points than a "
                        "log keeps: not exhausted)"
                    )
                    return
                log = yield base + i, strategy
        finally:
            search.close()

    def _run(
        self, item: pytest.Item, seed: int | None, strategy: Strategy | None
    ) -> tuple[list[pytest.TestReport], DecisionLog | None]:
        plugin = self._plugin
        plugin.current = settings = plugin.settings_for(item, seed, strategy)
        # Each run tears down only the test's own fixtures (nextitem =
        # its parent); the parent's stay up for the next run.
        reports = runtestprotocol(item, log=False, nextitem=item.parent)  # type: ignore[arg-type]
        return reports, settings.made_log

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        plugin = self._plugin
        total = len(plugin.seeds_for(item))
        if total == 1 and plugin.batch_length is None:
            return None
        # Before the test's log starts: a factory that fails stops the session.
        executor = None if plugin.executor_spec is None else plugin.executor()
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self._note = ""
        progress = _Progress(plugin, item, total)
        explored = _Explored(
            item.nodeid, 0, total, 0.0, virtual_time=plugin.settings_for(item, 0).virtual_time
        )
        if executor is None:
            reports = self._explore(item, explored, progress)
        else:
            reports = self._spread(item, executor, explored, progress)
        if not explored.failure:
            explored.seconds = progress.elapsed
        explored.note = self._note
        progress.end(explored)
        # Now the teardown that the next item expects (what runtestprotocol
        # would have done with the real nextitem).
        setupstate = item.session._setupstate
        call = pytest.CallInfo.from_call(
            lambda: setupstate.teardown_exact(nextitem), when="teardown"
        )
        if call.excinfo is not None:
            report = ihook.pytest_runtest_makereport(item=item, call=call)
            if reports and reports[-1].when == "teardown" and not reports[-1].failed:
                reports[-1] = report
            else:
                reports.append(report)
        if reports:
            carrier = next((r for r in reports if r.when == "call"), reports[-1])
            carrier.user_properties.append((_PROPERTY, dataclasses.asdict(explored)))
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _explore(
        self, item: pytest.Item, explored: _Explored, progress: _Progress
    ) -> list[pytest.TestReport]:
        """Run *item*'s schedules here, one after another, until one fails."""
        plugin = self._plugin
        total = explored.total
        reports: list[pytest.TestReport] = []
        schedules = self._schedules(item)
        last: DecisionLog | None = None
        try:
            seed, strategy = next(schedules)
            while True:
                reports, last = self._run(item, seed, strategy)
                explored.ran += 1
                if last is not None:
                    explored.slept += last.slept
                if any(r.failed for r in reports):
                    explored.seconds = progress.elapsed
                    schedules.close()  # the search ends: a coverage probe stops before shrinking
                    explored.failure = self._failed(
                        item,
                        seed=seed,
                        strategy=strategy,
                        log=last,
                        passed_before=explored.ran - 1,
                        reports=reports,
                    )
                    break
                progress.tick(explored.ran)
                budget = plugin.seeds_budget
                if budget is not None and progress.elapsed >= budget and explored.ran < total:
                    explored.budget_stopped = True
                    break
                seed, strategy = schedules.send(last)
        except StopIteration:
            pass
        finally:
            schedules.close()  # a search that measures its runs stops now
        return reports

    def _spread(
        self,
        item: pytest.Item,
        executor: cf.Executor,
        explored: _Explored,
        progress: _Progress,
    ) -> list[pytest.TestReport]:
        """--tideloop-executor: the first schedule here (its reports are the
        test's; pct's, the unperturbed one, measures the decisions its change
        points spread over), the others on *executor* in batches
        (``_pytest_scale.spread``); the lowest failing seed found there is run
        again here, through `_failed` as without an executor."""
        plugin = self._plugin
        recipe = plugin.strategy
        seeds = [seed or 0 for seed in plugin.seeds_for(item)]
        base = seeds[0]
        first = recipe.first()
        reports, log = self._run(item, base, first)
        explored.ran = 1
        if log is not None:
            explored.slept += log.slept
        if any(r.failed for r in reports):
            explored.seconds = progress.elapsed
            explored.failure = self._failed(
                item, seed=base, strategy=first, log=log, passed_before=0, reports=reports
            )
            return reports
        length = log.count if recipe.measure and log is not None else 0
        budget = plugin.seeds_budget
        spreaded = spread(
            executor,
            plugin.batch_work(item, length),
            seeds[1:],
            left=lambda: None if budget is None else budget - progress.elapsed,
            tick=lambda ran: progress.tick(1 + ran),
        )
        where = f"the executor (--tideloop-executor={plugin.executor_spec})"
        passed_before = 1 + spreaded.passed_before
        if spreaded.error_seeds is not None:
            explored.ran = passed_before + 1  # the batch, as one schedule that failed
            explored.seconds = progress.elapsed
            start, count = spreaded.error_seeds
            replay = shlex.join(
                ["pytest", item.nodeid, f"--tideloop-seed={start}", f"--tideloop-seeds={count}"]
            )
            why = (
                f"tideloop: {where} did not run seeds {start}..{start + count - 1} of this "
                f"test:\n{spreaded.error}\n(the same batch here: {replay})"
            )
            status = spreaded.error.splitlines()[0] if spreaded.error else ""
            explored.failure = self._fail_here(
                item,
                reports,
                schedule=f"seeds {start}..{start + count - 1}",
                passed_before=passed_before,
                replay=replay,
                why=why,
                summary=f"not run on {where}: {status}",
            )
            return reports
        if spreaded.failed_seed is None:
            explored.ran = 1 + spreaded.ran
            explored.budget_stopped = spreaded.budget_stopped
            self._note = (
                f"{explored.ran} schedules passed: 1 here, {spreaded.ran} on {where} "
                f"in {spreaded.batches} batch(es)"
            )
            return reports
        seed = spreaded.failed_seed
        options = Options(depth=plugin.depth, bound=plugin.bound, seed=base)
        strategy = None if recipe.by_seed else recipe.strategy(seed, options, length)
        explored.ran = passed_before + 1
        reports, log = self._run(item, seed, strategy)
        if log is not None:
            explored.slept += log.slept
        explored.seconds = progress.elapsed
        described = strategy.describe() if strategy is not None else f"seed {seed}"
        if any(r.failed for r in reports):
            failure = self._failed(
                item,
                seed=seed,
                strategy=strategy,
                log=log,
                passed_before=passed_before,
                reports=reports,
            )
            failure["found"] = f"found on {where}; failed here again"
            explored.failure = failure
            return reports
        replay = plugin.replay_command(item, seed) if recipe.by_seed else ""
        why = (
            f"tideloop: {described} failed on a worker of {where}:\n"
            f"    {spreaded.failure}\n"
            "and passed when run again here: what made it fail there is not in its "
            "schedule alone (the worker's environment or files, real timing). "
            "Not shrunk, no tape."
        )
        if replay:
            why += f"\n(this schedule here: {replay})"
        explored.failure = self._fail_here(
            item,
            reports,
            schedule=described,
            passed_before=passed_before,
            replay=replay,
            why=why,
            summary=f"found on {where} ({spreaded.failure}); passed when run again here",
        )
        return reports

    def _fail_here(
        self,
        item: pytest.Item,
        reports: list[pytest.TestReport],
        *,
        schedule: str,
        passed_before: int,
        replay: str,
        why: str,
        summary: str,
    ) -> dict[str, Any]:
        """Fail the test, whose reports here passed, for what a worker found
        (*why*): a failure found is never lost (a `_Failure`, as a dict)."""
        carrier = next((r for r in reports if r.when == "call"), reports[-1])
        carrier.outcome = "failed"
        carrier.longrepr = why
        return dataclasses.asdict(
            _Failure(item.nodeid, schedule, passed_before, replay, summary=summary)
        )

    def _failed(
        self,
        item: pytest.Item,
        *,
        seed: int | None,
        strategy: Strategy | None,
        log: DecisionLog | None,
        passed_before: int,
        reports: list[pytest.TestReport],
    ) -> dict[str, Any]:
        """Shrink a failing schedule, save its tape, and say how to replay it
        (a `_Failure`, as a dict to travel with the report)."""
        plugin = self._plugin
        described = strategy.describe() if strategy is not None else f"seed {seed}"
        if log is None:  # the test built no perturbed loop: only the seed replays
            replay = plugin.replay_command(item, seed)
            return dataclasses.asdict(_Failure(item.nodeid, described, passed_before, replay))
        original = len(log.deviations)
        runs = 0
        if plugin.shrink_budget and log.deviations:

            def fails(candidate: dict[Point, int]) -> DecisionLog | None:
                trial_reports, trial = self._run(item, seed, ReplayStrategy(candidate))
                failed = any(r.failed for r in trial_reports)
                return trial if failed and trial is not None else None

            log, runs = shrink_deviations(log, fails, budget=plugin.shrink_budget)
        failure = next((str(r.longrepr) for r in reports if r.failed), "")
        tape = Tape.from_log(
            log,
            found_by=described,
            scenario=item.nodeid,
            failure=failure.splitlines()[-1] if failure else "",
            virtual_time=plugin.settings_for(item, seed).virtual_time,
            wakeups=plugin.wakeups,
            shrunk_from=original,
        )
        # Once more, recorded: the deviations in the program's terms, the timeline.
        recording = Recording()
        deviations = {d.point: d.value for d in tape.deviations}
        trial_reports, trial = self._run(
            item, seed, ReplayStrategy(deviations, recording=recording)
        )
        recording.finish(None)
        if trial is not None:
            failed = any(r.failed for r in trial_reports)
            describe_tape(tape, Recorded(trial, recording, None, failed=failed))
        path, renamed = tape.save_new(_tape_path(plugin, item))
        timeline = tape.save_timeline(tape_path=path)
        words = tape.report()
        if runs:
            words += f"\n(shrunk from {original} deviation(s) in {runs} run(s))"
        if renamed:
            words += f"\n({renamed})"
        replay = plugin.replay_command(item, seed, str(path))
        summary = f"{tape.kind} failure: see its report above; timeline: {timeline}"
        for report in reports:
            if report.failed:
                report.sections.append(
                    (
                        "tideloop: minimal schedule",
                        f"{words}\ntape: {path}\ntimeline: {timeline}\nreplay: {replay}",
                    )
                )
        return dataclasses.asdict(_Failure(item.nodeid, described, passed_before, replay, summary))


class _AsyncioLoopFactories:
    """pytest-asyncio's loop-factory hook, registered under ``--tideloop`` only.

    A wrapper around the project's own implementations (a ``conftest.py``'s
    ``pytest_asyncio_loop_factories``), so they are still asked: tideloop's
    factory joins theirs as ``"tideloop"`` (theirs keeps the name if they
    have one). A test naming one of theirs (``loop_factories=["uvloop"]``)
    runs on it; one naming none runs on each, tideloop included. Without
    factories of the project's, every test runs on tideloop.
    """

    def __init__(self, plugin: _Plugin) -> None:
        self._plugin = plugin

    @pytest.hookimpl(wrapper=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> Generator[None, object, object]:
        theirs = yield
        if theirs is None:
            return {"tideloop": self._plugin.new_loop}
        if not isinstance(theirs, Mapping):
            return theirs  # pytest-asyncio says what is wrong with it
        return {**theirs, "tideloop": theirs.get("tideloop", self._plugin.new_loop)}


def _is_async_test(item: pytest.Item) -> bool:
    for name in ("tideloop", "asyncio", "anyio"):
        if item.get_closest_marker(name) is not None:
            return True
    obj = getattr(item, "obj", None)
    if inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj):
        return True
    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, unittest.IsolatedAsyncioTestCase)


def _set_policy(policy: Any) -> None:
    setter = getattr(asyncio.events, "_set_event_loop_policy", None)
    if setter is None:
        setter = asyncio.set_event_loop_policy
    setter(policy)


_policy_cls: type[Any] | None = None


def _policy_class() -> type[Any]:
    """asyncio's default policy, with loops from the plugin (built on first use)."""
    global _policy_cls
    if _policy_cls is None:

        class TestPolicy(_policy_base()):  # type: ignore[misc]
            """Event loop policy of the tideloop pytest plugin."""

            def __init__(self, plugin: _Plugin) -> None:
                super().__init__()
                self._tideloop_plugin = plugin

            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                return self._tideloop_plugin.new_loop()

            def __repr__(self) -> str:
                return "<tideloop.testing.pytest_plugin.TestPolicy>"

        _policy_cls = TestPolicy
    return _policy_cls
