"""The pytest plugin: a suite's asyncio tests on tideloop, with virtual time and seeds.

Layer: top (``tideloop.testing``). Registered through the ``pytest11``
entry point ``tideloop``, so it is loaded wherever tideloop is installed,
and it does nothing unless asked:

- ``--tideloop``: every asyncio test runs on tideloop.
- ``--tideloop-virtual-time`` (implies ``--tideloop``): every test's loops
  get a `VirtualClock`; ``--tideloop-autojump-threshold=SECONDS`` sets its
  threshold (default 0: see ``tideloop.testing._clock`` for when to raise it).
- ``--tideloop-seed=S`` (implies ``--tideloop``): every test's loops are
  perturbed by a `Perturber` with seed S.
- ``--tideloop-seeds=N`` (implies ``--tideloop``): each async test runs N
  times, under seeds S..S+N-1 (S from ``--tideloop-seed``, else 0), and
  stops at the first failing seed; the failure report and the summary name
  the seed and the command line that replays it.
- ``@pytest.mark.tideloop(virtual_time=..., seed=..., autojump_threshold=...)``
  runs one test on tideloop (with those settings) even without the options.
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
  changes how pytest-asyncio parametrizes every test). Older releases, and
  marked tests without the options: the event loop policy.
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
import dataclasses
import importlib.util
import inspect
import shlex
import sys
import unittest
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from tideloop._runner import _policy_base

from . import new_event_loop
from ._blockbuster import patch_blockbuster_class
from ._clock import VirtualClock
from ._network import SimNetwork
from ._world import seeded_globals

_PLUGIN_NAME = "tideloop-plugin"
_MARKER_KWARGS = frozenset({"virtual_time", "seed", "autojump_threshold"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tideloop", "tideloop: run asyncio tests on tideloop")
    group.addoption(
        "--tideloop",
        action="store_true",
        default=False,
        help="run every asyncio test on tideloop",
    )
    group.addoption(
        "--tideloop-virtual-time",
        action="store_true",
        default=False,
        help="give every test's loops a virtual clock (implies --tideloop)",
    )
    group.addoption(
        "--tideloop-autojump-threshold",
        type=float,
        default=None,
        metavar="SECONDS",
        help="real seconds the loop must be idle before virtual time jumps (default 0)",
    )
    group.addoption(
        "--tideloop-seed",
        type=int,
        default=None,
        metavar="S",
        help="perturb every test's schedule with seed S (implies --tideloop); "
        "with --tideloop-seeds, the first seed",
    )
    group.addoption(
        "--tideloop-seeds",
        type=int,
        default=None,
        metavar="N",
        help="run each async test under N seeds, stop at the first failing one "
        "(implies --tideloop)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tideloop(virtual_time=False, seed=None, autojump_threshold=None): run this "
        "test's asyncio loops on tideloop, with these settings",
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
        if plugin.seeds is not None:
            config.pluginmanager.register(_SeedRunner(plugin), "tideloop-seeds")


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if isinstance(plugin, _Plugin):
        plugin.uninstall_policy()


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
    _clock: VirtualClock | None = None
    _network: SimNetwork | None = None

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
    seed: int
    passed_before: int
    replay: str


class _Plugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        opt = config.getoption
        self.virtual_time: bool = opt("tideloop_virtual_time")
        threshold = opt("tideloop_autojump_threshold")
        self.autojump_threshold: float = 0.0 if threshold is None else float(threshold)
        if not self.autojump_threshold >= 0.0:
            raise pytest.UsageError("--tideloop-autojump-threshold must be >= 0")
        self.seed: int | None = opt("tideloop_seed")
        self.seeds: int | None = opt("tideloop_seeds")
        if self.seeds is not None and self.seeds < 1:
            raise pytest.UsageError("--tideloop-seeds must be at least 1")
        self.enabled: bool = (
            opt("tideloop")
            or self.virtual_time
            or threshold is not None
            or self.seed is not None
            or self.seeds is not None
        )
        #: The running test's settings (None between tests).
        self.current: _Settings | None = None
        self.failures: list[_Failure] = []
        self._previous_policy: Any = None
        self._policy_installed = False

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
            )
        if not settings.active:
            return self._previous_new_loop()
        return new_event_loop(
            virtual_time=settings.clock() if settings.virtual_time else False,
            seed=settings.seed,
            network=settings.network() if settings.uses_network else None,
        )

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

    def settings_for(self, item: pytest.Item, seed: int | None) -> _Settings:
        marker = item.get_closest_marker("tideloop")
        fixtures = getattr(item, "fixturenames", ())
        uses_network = "tideloop_net" in fixtures
        uses_clock = "tideloop_clock" in fixtures or uses_network
        settings = _Settings(
            active=self.enabled or marker is not None or uses_clock,
            virtual_time=self.virtual_time or uses_clock,
            autojump_threshold=self.autojump_threshold,
            seed=seed,
            uses_network=uses_network,
        )
        if marker is not None:
            kwargs = marker.kwargs
            if "virtual_time" in kwargs:
                settings.virtual_time = bool(kwargs["virtual_time"]) or uses_clock
            if kwargs.get("autojump_threshold") is not None:
                settings.autojump_threshold = float(kwargs["autojump_threshold"])
        return settings

    def seeds_for(self, item: pytest.Item) -> list[int | None]:
        marker = item.get_closest_marker("tideloop")
        if marker is not None and marker.kwargs.get("seed") is not None:
            return [int(marker.kwargs["seed"])]
        if self.seeds is not None and _is_async_test(item):
            base = 0 if self.seed is None else self.seed
            return list(range(base, base + self.seeds))
        return [self.seed]

    def replay_command(self, item: pytest.Item, seed: int) -> str:
        args = ["pytest", item.nodeid, f"--tideloop-seed={seed}"]
        if self.virtual_time:
            args.append("--tideloop-virtual-time")
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
                wanted = True
            elif {"tideloop_clock", "tideloop_net"} & set(getattr(item, "fixturenames", ())):
                wanted = True
        if wanted:
            self.install_policy()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        self.current = self.settings_for(item, self.seeds_for(item)[0])
        try:
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
            if settings.seed is not None:
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
        # IsolatedAsyncioTestCase grew a loop_factory attribute in 3.13.
        cls = getattr(item, "cls", None)
        settings = self.current
        patched = (
            sys.version_info >= (3, 13)
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

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.failures:
            return
        terminalreporter.section("tideloop: failing schedule seeds")
        for f in self.failures:
            terminalreporter.line(
                f"{f.nodeid}: seed {f.seed} failed ({f.passed_before} seeds passed before it)"
            )
            terminalreporter.line(f"    replay: {f.replay}")


class _SeedRunner:
    """Runs each async test under several seeds (``--tideloop-seeds``)."""

    def __init__(self, plugin: _Plugin) -> None:
        self._plugin = plugin

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        plugin = self._plugin
        seeds = plugin.seeds_for(item)
        if len(seeds) == 1:
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports: list[pytest.TestReport] = []
        for i, seed in enumerate(seeds):
            plugin.current = plugin.settings_for(item, seed)
            # Each run tears down only the test's own fixtures (nextitem =
            # its parent); the parent's stay up for the next run.
            reports = runtestprotocol(item, log=False, nextitem=item.parent)  # type: ignore[arg-type]
            if any(r.failed for r in reports):
                assert seed is not None
                plugin.failures.append(
                    _Failure(item.nodeid, seed, i, plugin.replay_command(item, seed))
                )
                break
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
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


class _AsyncioLoopFactories:
    """pytest-asyncio's loop-factory hook, registered under ``--tideloop`` only."""

    def __init__(self, plugin: _Plugin) -> None:
        self._plugin = plugin

    @pytest.hookimpl(tryfirst=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
        return {"tideloop": self._plugin.new_loop}


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
