"""``python -m tideloop SCRIPT [ARGS...]``: run an unmodified asyncio program on tideloop.

Layer: top. The event loop policy is switched to tideloop (`install`) and the
script runs as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` set as
``python SCRIPT`` would set them, so its ``asyncio.run()``,
``asyncio.new_event_loop()`` and ``asyncio.get_event_loop()`` get tideloop
loops. ``-m MODULE`` runs a module the same way; ``--version`` prints the
version.
"""

from __future__ import annotations

import os
import runpy
import sys

from . import __version__, install

USAGE = """\
usage: python -m tideloop [--version] (SCRIPT | -m MODULE) [ARGS...]

Run an asyncio program with tideloop as its event loop.
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        sys.stdout.write(f"tideloop {__version__}\n")
        return 0
    install()
    if args[0] == "-m":
        if len(args) < 2:
            sys.stderr.write("python -m tideloop: -m needs a module name\n" + USAGE)
            return 2
        module, rest = args[1], args[2:]
        sys.argv = [module, *rest]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    if args[0].startswith("-"):
        sys.stderr.write(f"python -m tideloop: unknown option {args[0]}\n" + USAGE)
        return 2
    script, rest = args[0], args[1:]
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
