"""``python -m tideloop SCRIPT [ARGS...]``: run an unmodified asyncio program on tideloop.

Layer: top. The event loop policy is switched to tideloop (`install_policy`,
without `install`'s deprecation warning on 3.14+) and the
script runs as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` set as
``python SCRIPT`` would set them, so its ``asyncio.run()``,
``asyncio.new_event_loop()`` and ``asyncio.get_event_loop()`` get tideloop
loops. ``-m MODULE`` runs a module the same way; ``--version`` prints the
version. ``--stats`` prints the loops' metrics to stderr at exit (see
``tideloop._stats``), also when the program fails. ``--trace FILE`` writes
a Perfetto trace of every loop the program creates to FILE (see
``tideloop._trace``), finished also when the program fails. ``console
TARGET`` attaches to a running program's console (``tideloop._console``).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys

from . import __version__
from ._core.native import core_description
from ._entry import install_policy
from ._stats import StatsCollector
from ._trace import Trace

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


def _fail(message: str) -> int:
    sys.stderr.write(f"python -m tideloop: {message}\n" + USAGE)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        sys.stdout.write(f"tideloop {__version__} ({core_description()})\n")
        return 0
    if args[0] == "console":
        from ._console.client import main as console_main

        return console_main(args[1:])
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
                return _fail("--slow-threshold needs a value")
            try:
                threshold = float(value)
            except ValueError:
                return _fail(f"--slow-threshold: not a number: {value!r}")
            if not threshold >= 0:
                return _fail(f"--slow-threshold must be >= 0, got {value}")
        elif option == "--trace" or option.startswith("--trace="):
            if "=" in option:
                trace_path = option.partition("=")[2]
            elif args:
                trace_path = args.pop(0)
            if not trace_path:
                return _fail("--trace needs a file name")
        else:
            return _fail(f"unknown option {option}")
    if not args:
        return _fail("a script or -m MODULE is needed")
    if args[0] == "-m" and len(args) < 2:
        return _fail("-m needs a module name")
    install_policy()
    with contextlib.ExitStack() as stack:
        if trace_path is not None:
            try:
                stack.enter_context(Trace(trace_path))
            except OSError as exc:
                return _fail(f"--trace: cannot write {trace_path}: {exc.strerror}")
        if not stats:
            _run(args)
            return 0
        with StatsCollector(threshold) as collector:
            try:
                _run(args)
            finally:
                sys.stderr.write(collector.report())
    return 0


def _run(args: list[str]) -> None:
    if args[0] == "-m":
        module, rest = args[1], args[2:]
        sys.argv = [module, *rest]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script, rest = args[0], args[1:]
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    sys.exit(main())
