"""The layering rules of ``docs/architecture.md``, checked on the source.

1. Imports flow one way: versions <- pollers <- core <- fd I/O <- the
   watchers (signals, children) <- transports <- net <- the top (`_loop`,
   `_entry`, ...). Each package may import only the packages listed for it
   in `ALLOWED`.
2. No upward calls through ``self``: `Loop` is `CoreLoop` plus stateless
   method groups. Every attribute a group (or the core) uses on ``self``
   must be defined by the class itself, by one of its bases, or be a public
   asyncio method implemented in a layer it may import. A lower layer that
   calls up (``self._make_socket_transport()`` from the fd layer, say) fails
   here even though no import shows it.
3. No hooks: no two classes of Loop's MRO define the same name (an override
   would be a hook for a higher layer), no group has ``__init__`` or assigns
   instance state, and no ``raise NotImplementedError`` stands in for a
   method some higher layer provides.
4. The MRO is the one `_loop.py`'s docstring documents.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import tideloop
from tideloop._core import native
from tideloop._core.coreloop import CoreLoop
from tideloop._core.scheduler import Scheduler

SRC = Path(tideloop.__file__).parent

#: What each layer may import. ``_versions`` (what the running Python's
#: asyncio does where releases differ) is below all of them.
ALLOWED: dict[str, set[str]] = {
    "_versions": set(),
    "_pollers": {"_versions"},
    "_core": {"_pollers", "_versions"},
    "_fdio": {"_core", "_pollers", "_versions"},
    "_signals": {"_fdio", "_core", "_pollers", "_versions"},
    "_children": {"_fdio", "_core", "_pollers", "_versions"},
    "_transports": {"_children", "_fdio", "_core", "_pollers", "_versions"},
    "_net": {"_transports", "_children", "_fdio", "_core", "_pollers", "_versions"},
}
TOP = {
    "_loop",
    "_entry",
    "__init__",
    "__main__",
    "demo",
    "testing",
    "_version",
    "_stats",
    "_recorder",
    "_trace",
    "otel",
    "_console",
    "_public",
}

#: ``raise NotImplementedError`` sites allowed in src, by module: features of
#: asyncio's API that are not built yet. The list only shrinks.
NOT_BUILT_YET: dict[str, int] = {}
#: ... and where asyncio's own API raises it, so we do too.
ASYNCIO_RAISES: dict[str, int] = {
    "_transports/tls.py": 1,  # write_eof(): TLS transports refuse half-close
    # A write pipe's pause_reading/resume_reading/is_reading, as asyncio's
    # (its write pipe transport is a ReadTransport that does not read).
    "_transports/pipes.py": 3,
}


def layer_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(("tideloop", *path.relative_to(SRC).parent.parts))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                names = [".".join([*base, node.module] if node.module else base)]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tideloop" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_module_is_in_a_known_layer() -> None:
    for path in SRC.rglob("*.py"):
        layer = layer_of(path)
        assert layer in ALLOWED or layer in TOP, f"{path}: unknown layer {layer!r}"


def test_imports_flow_downward() -> None:
    violations = [
        f"{path.relative_to(SRC)} imports {target}"
        for path in sorted(SRC.rglob("*.py"))
        if layer_of(path) not in TOP
        for target in imported_layers(path) - {layer_of(path)}
        if target not in ALLOWED[layer_of(path)]
    ]
    assert not violations, "\n".join(violations)


def test_the_import_checker_sees_relative_imports() -> None:
    # A guard against the check silently passing: these modules do import
    # lower layers, relatively or not.
    assert "_core" in imported_layers(SRC / "_fdio" / "registry.py")
    assert "_fdio" in imported_layers(SRC / "_transports" / "stream.py")


# ----------------------------------------------------------------------
# The Loop's classes


def loop_classes() -> list[type]:
    """Loop's MRO, tideloop's Python classes only (asyncio's bases, object and,
    on a native build, the native twin and the class that puts it first excluded)."""
    return [
        c
        for c in tideloop.Loop.__mro__
        if c.__module__.startswith("tideloop.") and c not in native_classes()
    ]


def native_classes() -> list[type]:
    """The native core's classes in Loop's MRO: ``_native.Core`` and ``NativeScheduler``."""
    core = native.core
    if core is None:
        return []
    return [c for c in tideloop.Loop.__mro__ if c is core.Core or c.__name__ == "NativeScheduler"]


def test_the_native_twin_defines_only_its_pure_twins_names() -> None:
    """The native core replaces methods of Scheduler, one for one, and adds none."""
    if native.core is None:
        pytest.skip(f"this build runs the pure core: {native.REASON}")
    core = native.core.Core
    own = {n for n, v in vars(core).items() if not n.startswith("__") and callable(v)}
    assert own, "the native core defines no methods?"
    assert own <= set(vars(Scheduler)), own - set(vars(Scheduler))
    # Its data (members, getsets) are Scheduler's attributes by name.
    data = {n for n, v in vars(core).items() if not n.startswith("__") and not callable(v)}
    assert data <= set(Scheduler.__annotations__) | {"_closed"}, data
    mro = tideloop.Loop.__mro__
    assert mro.index(core) < mro.index(Scheduler)


def layer_of_class(cls: type) -> str:
    parts = cls.__module__.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def may_use(user: str, provider: str) -> bool:
    """May code in layer *user* depend on code in layer *provider*?"""
    if user in TOP or user == provider:
        return True
    return provider in ALLOWED.get(user, set())


def defines(cls: type, name: str) -> bool:
    return name in vars(cls) or name in vars(cls).get("__annotations__", {})


def self_attributes(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(name, line, is_store) for every ``self.<name>`` in *tree*."""
    return [
        (node.attr, node.lineno, isinstance(node.ctx, ast.Store))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ]


def source_of(cls: type, method: str | None = None) -> str:
    """The source of *cls* (or of its *method*)."""
    return inspect.getsource(cls if method is None else vars(cls)[method])


def core_instance_attributes() -> set[str]:
    # __init__ and the _init_* parts it calls.
    names = [name for name in vars(CoreLoop) if name == "__init__" or name.startswith("_init_")]
    return {
        name
        for method in names
        for name, _, store in self_attributes(
            ast.parse(textwrap.dedent(source_of(CoreLoop, method)))
        )
        if store
    }


PUBLIC_API = {name for name in vars(asyncio.AbstractEventLoop) if not name.startswith("_")}


def upward_uses(cls: type, tree: ast.AST, mro: list[type]) -> list[str]:
    """The ``self.X`` uses in *cls*'s source *tree* that break rule 2."""
    problems = []
    layer = layer_of_class(cls)
    own_bases = [c for c in cls.__mro__ if c.__module__.startswith("tideloop.")]
    core_attrs = core_instance_attributes()
    for name, line, store in self_attributes(tree):
        if store and cls not in (CoreLoop, Scheduler, tideloop.Loop):
            problems.append(f"{cls.__name__}:{line} assigns self.{name}: groups hold no state")
            continue
        if any(defines(c, name) for c in own_bases) or name in core_attrs:
            continue
        if name in PUBLIC_API or name in vars(asyncio.AbstractEventLoop):
            provider = next((c for c in mro if name in vars(c)), None)
            if provider is None or may_use(layer, layer_of_class(provider)):
                continue
            problems.append(
                f"{cls.__name__}:{line} calls self.{name}, provided by "
                f"{provider.__name__} ({layer_of_class(provider)}), above {layer}"
            )
            continue
        if hasattr(object, name) or name in vars(asyncio.AbstractEventLoop):
            continue
        provider = next((c for c in mro if defines(c, name)), None)
        where = f"{provider.__name__} ({layer_of_class(provider)})" if provider else "nobody"
        problems.append(
            f"{cls.__name__}:{line} uses self.{name}, defined by {where}, "
            f"which is not {cls.__name__} or one of its bases"
        )
    return problems


def class_tree(cls: type) -> ast.AST:
    return ast.parse(textwrap.dedent(source_of(cls)))


def test_the_mro_is_the_documented_one() -> None:
    doc = tideloop._loop.__doc__ or ""
    block = doc[doc.index("    Loop ") : doc.index("`CoreLoop` is the only")]
    documented = re.findall(r"^    (\w+)\s", block, re.MULTILINE)
    assert documented == [c.__name__ for c in loop_classes()]


def test_only_core_and_loop_have_init() -> None:
    with_init = [c.__name__ for c in loop_classes() if "__init__" in vars(c)]
    assert with_init == ["Loop", "CoreLoop"]


def test_no_class_of_the_loop_overrides_another() -> None:
    seen: dict[str, str] = {}
    clashes = []
    for cls in loop_classes():
        for name, value in vars(cls).items():
            if name.startswith("__") and name.endswith("__"):
                continue
            if not callable(value) and not isinstance(value, (property, staticmethod)):
                continue
            if name in seen:
                clashes.append(f"{name}: {seen[name]} and {cls.__name__}")
            seen[name] = cls.__name__
    assert not clashes, "\n".join(clashes)


def test_no_upward_calls_through_self() -> None:
    mro = list(tideloop.Loop.__mro__)
    problems = [
        problem
        for cls in loop_classes()
        if cls is not tideloop.Loop
        for problem in upward_uses(cls, class_tree(cls), mro)
    ]
    assert not problems, "\n".join(problems)


PLANTED = """
class SockMethods:
    async def sock_recv(self, sock, n):
        # an fd-layer method calling up into the net layer's servers
        self.create_server(None)
        return self._start_serving(None, sock)
"""


def test_a_planted_upward_call_is_caught() -> None:
    from tideloop._fdio.sock import SockMethods

    problems = upward_uses(SockMethods, ast.parse(PLANTED), list(tideloop.Loop.__mro__))
    assert len(problems) == 2, problems
    assert "calls self.create_server, provided by ServerMethods (_net), above _fdio" in problems[0]
    assert "uses self._start_serving, defined by ServerMethods (_net)" in problems[1]


def test_a_planted_stateful_group_is_caught() -> None:
    from tideloop._net.server import ServerMethods

    planted = "class ServerMethods:\n    def f(self):\n        self._cache = {}\n"
    problems = upward_uses(ServerMethods, ast.parse(planted), list(tideloop.Loop.__mro__))
    assert problems == ["ServerMethods:3 assigns self._cache: groups hold no state"]


# ----------------------------------------------------------------------
# No stand-ins for code that lives elsewhere


def not_implemented_raises(path: Path) -> int:
    tree = ast.parse(path.read_text(), str(path))
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                count += 1
    return count


def test_not_implemented_only_for_features_not_built_yet() -> None:
    found = {
        str(path.relative_to(SRC)): n
        for path in sorted(SRC.rglob("*.py"))
        if (n := not_implemented_raises(path))
    }
    allowed = {**NOT_BUILT_YET, **ASYNCIO_RAISES}
    assert found == {path: n for path, n in allowed.items() if (SRC / path).exists()}


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_any_typed_loop_references(path: Path) -> None:
    """A component or transport names the loop by a real type, never ``Any``."""
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        target: ast.expr | None = None
        annotation: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, annotation = node.target, node.annotation
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotation = node.annotation
            target = ast.Name(id=node.arg)
        if target is None or annotation is None:
            continue
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("loop", "_loop") and ast.unparse(annotation) in ("Any", "typing.Any"):
            bad.append(f"line {node.lineno}: {name}: Any")
    assert not bad, bad


# ----------------------------------------------------------------------
# tideloop.testing reaches the loop through its constructor and public API

TESTING = SRC / "testing"

#: ``obj._name`` reads that testing/ may make, by (receiver, attribute): the
#: interpreter's and the stdlib's own private API, which asyncio itself
#: uses, and asyncio handles' fields. Never a tideloop loop's or
#: component's state: that is reached through ``Loop(...)``'s arguments
#: (``clock``, ``schedule``, ``network``, ``supervisor``), the read-only
#: `LoopView` a supervisor is bound to, and the loop's public methods.
TESTING_MAY_READ: dict[tuple[str, str], str] = {
    ("sys", "_getframe"): "the caller's frame (sometimes() names its call site)",
    ("sys", "_current_frames"): "every thread's frame (ThreadWatch)",
    ("asyncio.events", "_get_running_loop"): "asyncio's own check for a running loop",
    ("handle", "_callback"): "an asyncio.Handle's callback, to name the task it steps",
    ("handle", "_cancelled"): "an asyncio.Handle's cancelled flag",
    ("handle", "_args"): "an asyncio.Handle's arguments: a timer's future, a server's socket",
    ("reader", "_transport"): "a StreamReader's transport, to name the task reading a connection",
    ("task", "_exception"): "a finished task's exception, read without marking it retrieved",
    ("task", "_fut_waiter"): "the future a task is suspended on, to name who it waits for",
    ("item.session", "_setupstate"): "pytest's fixture teardown stack (the plugin)",
    ("super()", "_real_close"): "a socket subclass calling its base class",
    ("asyncio.tasks", "_PyTask"): "the pure-Python Task, whose steps a Perturber varies",
    ("condition", "_waiters"): "a threading.Condition's waiters: a notified thread is busy",
    ("concurrent.futures.thread", "_WorkItem"): "a thread pool's job: which thread runs which job",
    ("asyncio.events", "_get_event_loop_policy"): "the policy, without 3.14's warning",
    ("asyncio.events", "_set_event_loop_policy"): "the policy, without 3.14's warning",
    ("executor", "_shutdown"): "a stdlib thread pool shutting down: its workers exit (ThreadWatch)",
    ("executor", "_max_workers"): "a stdlib pool's worker count: batches in flight (the plugin)",
}


def private_reads(path: Path) -> list[tuple[int, str, str, bool]]:
    """(line, receiver, attribute, is_store) of each ``obj._name`` on another object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
        ):
            receiver = ast.unparse(node.args[0])
            if receiver not in ("self", "cls"):
                found.append((node.lineno, receiver, node.args[1].value, node.func.id == "setattr"))
            continue
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        receiver = ast.unparse(node.value)
        if receiver in ("self", "cls"):
            continue
        found.append((node.lineno, receiver, attr, isinstance(node.ctx, ast.Store)))
    return found


def private_uses(
    path: Path,
    allowed: dict[tuple[str, str], str],
    may_assign: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """The ``obj._name`` uses in *path* that *allowed* (reads) and *may_assign* do not allow."""
    return [
        f"{path.name}:{line} {'assigns' if store else 'reads'} {receiver}.{attr}"
        for line, receiver, attr, store in private_reads(path)
        if (receiver, attr) not in (may_assign if store else allowed)
    ]


def test_testing_touches_no_private_state_of_other_objects() -> None:
    problems = [
        problem
        for path in sorted(TESTING.rglob("*.py"))
        for problem in private_uses(path, TESTING_MAY_READ)
    ]
    assert not problems, "\n".join(problems)


def test_a_planted_private_hook_in_testing_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def make(loop, check):\n"
        "    loop._stuck_hook = check\n"
        "    return loop._fds.readers, loop._signals._sig_rfd, sys._getframe(0)\n"
        "    getattr(loop, '_network', None)\n"
    )
    problems = sorted(p.split(" ", 1)[1] for p in private_uses(planted, TESTING_MAY_READ))
    assert problems == [
        "assigns loop._stuck_hook",
        "reads loop._fds",
        "reads loop._network",
        "reads loop._signals",
        "reads loop._signals._sig_rfd",
    ]


# ----------------------------------------------------------------------
# No import circles, not even type-only ones


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The tideloop modules *path* imports at module level, ``if TYPE_CHECKING:`` included."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [base])])
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(path.read_text(), str(path)).body)
    return {m for m in found if m in modules and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of *graph* with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    return cycles


def test_no_import_cycles() -> None:
    paths = {module_name(p): p for p in SRC.rglob("*.py")}
    graph = {name: module_imports(path, set(paths)) for name, path in paths.items()}
    # The checker sees imports under `if TYPE_CHECKING:` (interfaces.py names the clock so).
    assert "tideloop._core.clock" in graph["tideloop._core.interfaces"]
    assert import_cycles(graph) == []


def test_a_planted_type_only_cycle_is_caught() -> None:
    assert import_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_version_facts_live_in_one_module() -> None:
    """Only ``_versions.py`` tests the interpreter's version (principle 1's one place)."""
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "_versions.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.version_info"
    ]
    assert found == []
