"""``python -m tideloop SCRIPT [ARGS...]``: run an unmodified asyncio program on tideloop.

Layer: top. The event loop policy is switched to tideloop (`install_policy`,
without `install`'s deprecation warning on 3.14+) and the program runs as
``__main__``, so its ``asyncio.run()``, ``asyncio.new_event_loop()`` and
``asyncio.get_event_loop()`` get tideloop loops. ``-m MODULE`` runs a module
the same way; ``--version`` prints the version. ``--stats`` prints the loops'
metrics to stderr at exit (see ``tideloop._stats``), also when the program
fails. ``--trace FILE`` writes a Perfetto trace of every loop the program
creates to FILE (see ``tideloop._trace``), finished also when the program
fails. ``console TARGET`` attaches to a running program's console
(``tideloop._console``).

Invariant: to the program, and to whoever reads its output, this behaves
like ``python SCRIPT`` / ``python -m MODULE``:

- ``sys.argv``, ``sys.path[0]`` and ``__file__`` are what ``python`` sets
  (the script's absolute path in ``__file__`` and in tracebacks, its
  directory with symlinks resolved in ``sys.path[0]``);
- a script that cannot be opened is one line and exit status 2, a module
  or directory that cannot be run one line and exit status 1, in
  ``python``'s words;
- the traceback of an exception the program lets escape starts at the
  program's own frames: this module's and runpy's are cut (`_program_frames`),
  then the interpreter prints it and exits as it would (1, or by SIGINT for
  a KeyboardInterrupt), through ``sys.excepthook``.

Parsing is `_parse`: options first, then the target (`Options`); a new
option is a branch there and a field of `Options`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import marshal
import os
import pkgutil
import runpy
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.machinery import SourceFileLoader

from . import __version__
from ._core.native import core_description
from ._entry import install_policy
from ._stats import StatsCollector
from ._trace import Trace
from ._versions import CANT_OPEN_QUOTES_PATH

USAGE = """\
usage: python -m tideloop [--version] [--stats [--slow-threshold SECONDS]]
                          [--trace FILE] (SCRIPT | -m MODULE) [ARGS...]
       python -m tideloop console [--once [--json]] TARGET

Run an asyncio program with tideloop as its event loop.

  --stats                  at exit, print the loops' metrics to stderr:
                           iterations, utilisation, timer lag percentiles
                           and the slowest callbacks with their task names
  --slow-threshold SECONDS a callback running this long is slow (0.1)
  --trace FILE             write a trace of what the loops did to FILE
                           (Chrome/Perfetto trace-event JSON: open it in
                           ui.perfetto.dev): tasks, callbacks, I/O, timers,
                           executor jobs, subprocesses, loop iterations

  console TARGET           attach to a running program's console (its socket:
                           tideloop.run(..., console=PATH), TIDELOOP_CONSOLE=PATH,
                           or its pid): see python -m tideloop console --help
"""


class UsageError(Exception):
    """A command line this module cannot run: the message, then the usage, exit status 2."""


@dataclass
class Options:
    """What the command line asked for."""

    #: The script's path, or the module's name with *module*.
    target: str
    module: bool = False
    #: The program's own arguments (``sys.argv[1:]`` as it sees them).
    args: list[str] = field(default_factory=list)
    stats: bool = False
    slow_threshold: float = 0.1
    #: Where --trace writes, or None.
    trace: str | None = None


def _prog() -> str:
    """How the user invoked us, for messages: ``python -m tideloop`` or the script's name."""
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0 or os.path.basename(argv0) == "__main__.py":
        return "python -m tideloop"
    return os.path.basename(argv0)


def _parse(args: list[str]) -> Options:
    stats = False
    threshold = 0.1
    trace_path: str | None = None
    while args and args[0].startswith("-") and args[0] != "-m":
        option = args.pop(0)
        if option == "--stats":
            stats = True
        elif option == "--slow-threshold" or option.startswith("--slow-threshold="):
            if "=" in option:
                value = option.partition("=")[2]
            elif args:
                value = args.pop(0)
            else:
                raise UsageError("--slow-threshold needs a value")
            try:
                threshold = float(value)
            except ValueError:
                raise UsageError(f"--slow-threshold: not a number: {value!r}") from None
            if not threshold >= 0:
                raise UsageError(f"--slow-threshold must be >= 0, got {value}")
        elif option == "--trace" or option.startswith("--trace="):
            if "=" in option:
                trace_path = option.partition("=")[2]
            elif args:
                trace_path = args.pop(0)
            if not trace_path:
                raise UsageError("--trace needs a file name")
        else:
            raise UsageError(f"unknown option {option}")
    if not args:
        raise UsageError("a script or -m MODULE is needed")
    module = args[0] == "-m"
    if module:
        args.pop(0)
        if not args:
            raise UsageError("-m needs a module name")
    return Options(args[0], module, args[1:], stats, threshold, trace_path)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    prog = _prog()
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        sys.stdout.write(f"tideloop {__version__} ({core_description()})\n")
        return 0
    if args[0] == "console":
        from ._console.client import main as console_main

        return console_main(args[1:])
    try:
        options = _parse(args)
    except UsageError as exc:
        sys.stderr.write(f"{prog}: {exc}\n" + USAGE)
        return 2
    if not options.module:
        # python opens the script before anything else runs, and says so in
        # one line when it cannot (exit status 2). A directory or zip file
        # with a __main__.py runs as python would run it.
        path = os.path.abspath(options.target)
        if not os.path.isdir(path):
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                shown = repr(path) if CANT_OPEN_QUOTES_PATH else path
                sys.stderr.write(
                    f"{prog}: can't open file {shown}: [Errno {exc.errno}] {exc.strerror}\n"
                )
                return 2
    install_policy()
    with contextlib.ExitStack() as stack:
        if options.trace is not None:
            try:
                stack.enter_context(Trace(options.trace))
            except OSError as exc:
                sys.stderr.write(
                    f"{prog}: --trace: cannot write {options.trace}: {exc.strerror}\n" + USAGE
                )
                return 2
        if not options.stats:
            return _launch(options, prog)
        with StatsCollector(options.slow_threshold) as collector:
            try:
                return _launch(options, prog)
            finally:
                sys.stderr.write(collector.report())


def _launch(options: Options, prog: str) -> int:
    """Run the program; exit status 1 with python's one line if runpy cannot find it."""
    previous = sys.excepthook
    sys.excepthook = _trimming_hook(previous)
    try:
        _run(options)
    except (ImportError, _CannotRun) as exc:
        if isinstance(exc, ImportError) and not _raised_by_runpy(exc):
            raise  # the program's own ImportError: its traceback, as python shows it
        sys.stderr.write(f"{prog}: {exc}\n")
        sys.excepthook = previous
        return 1
    # An exception that escapes leaves the hook installed: the interpreter
    # calls it on the way out.
    sys.excepthook = previous
    return 0


def _run(options: Options) -> None:
    if options.module:
        sys.argv = [options.target, *options.args]
        sys.path[0] = os.getcwd()
        # As python -m: sys.argv[0] becomes the module's file.
        runpy.run_module(options.target, run_name="__main__", alter_sys=True)
        return
    # As python SCRIPT: sys.argv[0] as given, __file__ and the code's file
    # name absolute, sys.path[0] the script's directory (symlinks resolved);
    # a directory or zip file runs its __main__ module, from its own path.
    sys.argv = [options.target, *options.args]
    path = os.path.abspath(options.target)
    importer = pkgutil.get_importer(path)
    if importer is None:
        sys.path[0] = os.path.dirname(os.path.realpath(path))
        _exec_as_main(_script_code(path), path, SourceFileLoader("__main__", path), None)
        return
    sys.path[0] = path
    spec = importer.find_spec("__main__") if hasattr(importer, "find_spec") else None
    code = spec.loader.get_code("__main__") if spec and spec.loader else None  # type: ignore[attr-defined]
    if spec is None or code is None:
        raise _CannotRun(f"can't find '__main__' module in {path!r}")
    _exec_as_main(code, spec.origin or path, spec.loader, spec)


class _CannotRun(Exception):
    """python's one-line refusal to run a directory: exit status 1."""


def _script_code(path: str) -> types.CodeType:
    with io.open_code(path) as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:  # python runs a .pyc file too
        code = marshal.loads(data[16:])
        if not isinstance(code, types.CodeType):
            raise _CannotRun(f"can't run {path!r}: not a code object")
        return code
    return compile(data, path, "exec", dont_inherit=True)


def _exec_as_main(code: types.CodeType, file: str, loader: object, spec: object) -> None:
    """Run *code* as the ``__main__`` module, as python runs a script (runpy's way)."""
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=file,
        __loader__=loader,
        __spec__=spec,
        __cached__=getattr(spec, "cached", None),
        __package__=None if spec is None else "",
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module  # pickle and multiprocessing find the program's names
    try:
        exec(code, module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _is_runpy(tb: types.TracebackType) -> bool:
    return tb.tb_frame.f_globals.get("__name__") == "runpy"


def _raised_by_runpy(exc: BaseException) -> bool:
    """Is *exc* runpy's own "cannot find it" error, not one raised by the program?"""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and _is_runpy(last)


def _program_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """*tb* from the program's first frame on, or *tb* itself if it did not pass `_run`."""
    ours = (_run.__code__, _script_code.__code__, _exec_as_main.__code__)
    start = None
    entry = tb
    while entry is not None:
        if entry.tb_frame.f_code in ours:
            start = entry
        entry = entry.tb_next
    if start is None:
        return tb
    program = start.tb_next
    while program is not None and _is_runpy(program):
        program = program.tb_next
    return program


def _trimming_hook(
    previous: Callable[[type[BaseException], BaseException, types.TracebackType | None], object],
) -> Callable[[type[BaseException], BaseException, types.TracebackType | None], None]:
    def hook(
        kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
    ) -> None:
        trimmed = _program_frames(tb)
        # The default hook prints the exception's own __traceback__ when it
        # has one, whatever *tb* says: cut that one too.
        value.__traceback__ = trimmed
        previous(kind, value, trimmed)

    return hook


if __name__ == "__main__":
    sys.exit(main())
