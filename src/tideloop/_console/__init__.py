"""The live console: ``python -m tideloop console TARGET`` shows a running program's loops.

Layer: top. A program opens a console socket when asked, and only then:

- ``tideloop.run(main(), console=PATH)``: for that run's loop;
- ``TIDELOOP_CONSOLE=PATH``: for every loop ``tideloop.new_event_loop``
  makes in the process (``python -m tideloop``, ``tideloop.run``, the
  installed policy, ``loop_factory=tideloop.new_event_loop``); the socket
  opens with the first loop and is removed at exit;
- on Python 3.14+, ``python -m tideloop console PID`` with neither: the
  client asks the program's interpreter to run `serve_discovered` through
  ``sys.remote_exec`` (PEP 768), which finds its tideloop loops.

The parts: `server` (the socket, its security, snapshots taken on each
loop's thread), `snapshot` (what a snapshot holds), `render` (the text),
`client` (attaching, the live screen, ``--once``/``--json``).

What it costs: with no client attached, a thread asleep in ``select``.
While one is attached, each loop has a light `Recorder` (task statistics,
slow callbacks); snapshots run on the loop's thread, bounded, once a
second per client. Nothing that attaches changes what the program does:
it reads, and the recorder's wrappers pass every call through.
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tideloop._loop import Loop

    from .server import ConsoleServer

__all__ = ["ENVIRONMENT_VARIABLE", "install_from_environment", "serve", "serve_discovered"]

#: The environment variable that opens a console socket for every loop.
ENVIRONMENT_VARIABLE = "TIDELOOP_CONSOLE"

_lock = threading.Lock()
_process_server: ConsoleServer | None = None
_process_failed = False


def serve(loop: Loop, path: str | os.PathLike[str]) -> ConsoleServer:
    """Open a console socket at *path* for *loop*; close the returned server when done."""
    from .server import ConsoleServer

    server = ConsoleServer(path)
    server.add(loop)
    return server


def _process_console(path: str) -> ConsoleServer | None:
    """The process's console server at *path* (made on first use; None if it failed)."""
    global _process_server, _process_failed
    with _lock:
        if _process_server is not None or _process_failed:
            return _process_server
        from .server import ConsoleError, ConsoleServer

        try:
            _process_server = ConsoleServer(path)
        except (ConsoleError, OSError) as exc:
            _process_failed = True
            warnings.warn(f"tideloop: no console: {exc}", RuntimeWarning, stacklevel=3)
            return None
        atexit.register(_process_server.close)
        return _process_server


def install_from_environment() -> None:
    """With ``TIDELOOP_CONSOLE`` set, answer for every loop made from now on."""
    path = os.environ.get(ENVIRONMENT_VARIABLE)
    if not path:
        return
    from tideloop._loop import NEW_LOOP_OBSERVERS

    def observe(loop: Loop) -> None:
        server = _process_console(path)
        if server is not None:
            server.add(loop)

    NEW_LOOP_OBSERVERS.append(observe)


def serve_discovered(path: str) -> None:
    """Open a console at *path* for every tideloop loop of this process, now and later.

    What ``sys.remote_exec`` runs in a program the console attaches to: its
    loops are found among the live objects (once), the ones made later
    through ``tideloop.new_event_loop``.
    """
    from tideloop._loop import NEW_LOOP_OBSERVERS, Loop

    server = _process_console(path)
    if server is None:
        raise RuntimeError(f"cannot open a console at {path}")
    for obj in gc.get_objects():
        if isinstance(obj, Loop) and not obj.is_closed():
            server.add(obj)
    NEW_LOOP_OBSERVERS.append(server.add)
