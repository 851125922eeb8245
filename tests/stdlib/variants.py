"""Variant classes: test classes that build a stdlib loop on purpose, retargeted.

Some ``test_asyncio`` classes do not ask for "the default loop" but construct
one explicitly: ``asyncio.SelectorEventLoop(selectors.EpollSelector())`` in
``create_event_loop``, ``asyncio.SelectorEventLoop()`` in ``new_loop`` or
``setUp``, a mocked ``asyncio.BaseEventLoop()``. Policy injection cannot
reach them, so for each such class a subclass named ``Tideloop...`` is added
to the module:

- in a tideloop run, its loop is ``tideloop.new_event_loop(poller=...)``
  (the method that builds the loop is overridden; see `Variant.hook`);
- in the stdlib run, it is the original class unchanged under the variant's
  name, with the stdlib loop upstream chose for it.

So a variant's tests have the same ids in both runs, and the stdlib column
of the report is exactly upstream's result for those tests. The original
classes are listed in `not_applicable.py` (category ``STDLIB_LOOP``): run as
themselves they would test the stdlib loop in both runs.

The big per-selector mixins (test_events, test_sock_lowlevel, test_sendfile)
get one variant per poller: the epoll class runs tideloop's epoll poller, the
poll class tideloop's poll poller. The others use the default poller.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import inject


@dataclass(frozen=True)
class Variant:
    module: str
    #: The original class (its tests are inherited unchanged).
    base: str
    #: The name the variant gets in the module.
    name: str
    #: Which loop: "default", or a poller/selector name ("epoll", "poll").
    kind: str
    #: How the original gets its loop (the method the variant overrides):
    #: "create_event_loop" / "new_loop" return it; "setUp" builds it, and the
    #: variant's setUp runs the setUp methods *above* the one that builds a
    #: stdlib loop, then builds ours; "swap" runs the original setUp with
    #: the stdlib class named by `swap` replaced by our factory meanwhile;
    #: "runner_new_loop" is test_runners' instrumented loop.
    hook: str
    #: For hook "swap": "module:attribute" of the class setUp constructs.
    swap: str = ""


def _per_poller(module: str, stem: str = "EventLoopTests") -> list[Variant]:
    # Each upstream per-selector class that exists on the platform gets the
    # tideloop poller of the same kernel mechanism (select() has none).
    return [
        Variant(module, f"EPoll{stem}", f"TideloopEpoll{stem}", "epoll", "create_event_loop"),
        Variant(module, f"Kqueue{stem}", f"TideloopKqueue{stem}", "kqueue", "create_event_loop"),
        Variant(module, f"Poll{stem}", f"TideloopPoll{stem}", "poll", "create_event_loop"),
    ]


VARIANTS: list[Variant] = [
    *_per_poller("test_events"),
    *_per_poller("test_sock_lowlevel"),
    *_per_poller("test_sendfile"),
    Variant(
        "test_buffered_proto",
        "BufferedProtocolSelectorTests",
        "TideloopBufferedProtocolTests",
        "default",
        "new_loop",
    ),
    Variant(
        "test_server", "SelectorStartServerTests", "TideloopStartServerTests", "default", "new_loop"
    ),
    Variant(
        "test_sslproto", "SelectorStartTLSTests", "TideloopStartTLSTests", "default", "new_loop"
    ),
    Variant(
        "test_unix_events",
        "SelectorEventLoopUnixSocketTests",
        "TideloopUnixSocketTests",
        "default",
        "setUp",
    ),
    Variant(
        "test_unix_events",
        "SelectorEventLoopSignalTests",
        "TideloopSignalTests",
        "default",
        "setUp",
    ),
    Variant(
        "test_base_events",
        "BaseEventLoopWithSelectorTests",
        "TideloopLoopWithSelectorTests",
        "default",
        "setUp",
    ),
    # base_events.BaseEventLoop() with a mocked _selector: the tests that use
    # only public API apply to any loop.
    Variant("test_base_events", "BaseEventLoopTests", "TideloopBaseLoopTests", "default", "setUp"),
    # BaseSelectorEventLoop() (no native sendfile); setUp also opens a file.
    Variant(
        "test_base_events",
        "BaseLoopSockSendfileTests",
        "TideloopSockSendfileTests",
        "default",
        "swap",
        swap="asyncio.selector_events:BaseSelectorEventLoop",
    ),
    # 3.14+: a plain TestCase whose setUp builds asyncio.SelectorEventLoop().
    Variant(
        "test_events",
        "UnixPipeObjectSupportTests",
        "TideloopUnixPipeObjectSupportTests",
        "default",
        "swap",
        swap="asyncio:SelectorEventLoop",
    ),
    # test_runners: every test runs asyncio.run()/Runner through a policy whose
    # loops are mocked BaseEventLoops; the variants give them real loops.
    Variant("test_runners", "RunTests", "TideloopRunTests", "default", "runner_new_loop"),
    Variant("test_runners", "RunnerTests", "TideloopRunnerTests", "default", "runner_new_loop"),
    # test_pep492: a mocked BaseEventLoop in BaseTest.setUp.
    Variant("test_pep492", "LockTests", "TideloopLockTests", "default", "setUp"),
    Variant("test_pep492", "StreamReaderTests", "TideloopStreamReaderTests", "default", "setUp"),
    Variant("test_pep492", "CoroutineTests", "TideloopCoroutineTests", "default", "setUp"),
]

_poller: str | None = None


def configure(poller: str | None) -> None:
    """Set tideloop's default poller for the variants (None: the platform's)."""
    global _poller
    _poller = poller


def _defining_class(cls: type[Any], attr: str) -> type[Any]:
    for klass in cls.__mro__:
        if attr in vars(klass):
            return klass
    raise AttributeError(f"{cls.__name__} has no {attr}")


def _hook_method(base: type[Any], variant: Variant) -> tuple[str, Callable[..., Any]]:
    make = inject.tideloop_factory(variant.kind, _poller)
    if variant.hook in ("create_event_loop", "new_loop"):

        def new(self: Any) -> asyncio.AbstractEventLoop:
            return make()

        return variant.hook, new

    if variant.hook == "setUp":
        # The original setUp builds the loop; skip it and run the ones above.
        owner = _defining_class(base, "setUp")

        def setUp(self: Any) -> None:
            super(owner, self).setUp()
            self.loop = make()
            self.set_event_loop(self.loop)

        return "setUp", setUp

    if variant.hook == "swap":
        module_name, _, attr = variant.swap.partition(":")
        original_setup = base.setUp

        def swap_setUp(self: Any) -> None:
            target = importlib.import_module(module_name)
            saved = getattr(target, attr)
            setattr(target, attr, lambda *args, **kwargs: make())
            try:
                original_setup(self)
            finally:
                setattr(target, attr, saved)

        return "setUp", swap_setUp

    if variant.hook == "runner_new_loop":
        # test_runners.BaseTest.tearDown checks that the runner closed the loop
        # and called shutdown_asyncgens(); keep that check, on a real loop.
        def new_loop(self: Any) -> asyncio.AbstractEventLoop:
            loop = make()
            loop.shutdown_ag_run = False  # type: ignore[attr-defined]
            real_shutdown = loop.shutdown_asyncgens

            async def shutdown_asyncgens() -> None:
                loop.shutdown_ag_run = True  # type: ignore[attr-defined]
                await real_shutdown()

            loop.shutdown_asyncgens = shutdown_asyncgens  # type: ignore[method-assign]
            return loop

        return "new_loop", new_loop

    raise ValueError(f"unknown hook {variant.hook!r}")


def add_variants(module: ModuleType, loop: str) -> list[str]:
    """Add this module's variant classes to it; return their names."""
    short = module.__name__.rpartition(".")[2]
    added = []
    for variant in VARIANTS:
        if variant.module != short:
            continue
        base = getattr(module, variant.base, None)
        if base is None:
            continue  # not in this Python's version of the module
        namespace: dict[str, Any] = {"__module__": module.__name__}
        if loop == "tideloop":
            attr, method = _hook_method(base, variant)
            namespace[attr] = method
        cls = type(variant.name, (base,), namespace)
        cls.__qualname__ = variant.name
        setattr(module, variant.name, cls)
        added.append(variant.name)
    return added
