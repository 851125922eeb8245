"""``python -m tideloop console TARGET``: attach to a program and show its loops.

Layer: top (the console). TARGET is the program's console socket (the path
it was given: ``console=PATH``, ``TIDELOOP_CONSOLE=PATH``) or its pid:
then the path is read from the program's environment
(``/proc/PID/environ``, readable by its own user only), or, on Python
3.14+ where the program's interpreter allows it, the console is started
inside it through ``sys.remote_exec`` (PEP 768) on a fresh socket in a
private directory.

Without options the screen refreshes every second (curses; ``q`` quits);
``--once`` watches for one interval and prints a snapshot as text,
``--once --json`` as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from typing import Any, Final

from tideloop._versions import REMOTE_EXEC

from .render import lines

__all__ = ["USAGE", "Client", "main"]

USAGE: Final = """\
usage: python -m tideloop console [--once [--json]] [--interval SECONDS] TARGET

Attach to a running tideloop program and show its loops: tasks (state, where
each waits, busy time, steps, wake-ups, age), utilisation, timer lag, slow
callbacks, transports, servers, subprocesses, and warnings.

TARGET   the program's console socket (tideloop.run(..., console=PATH) or
         TIDELOOP_CONSOLE=PATH), or its pid (the path is found in its
         environment; on Python 3.14+ a program started without one is
         attached through sys.remote_exec where it allows it)

  --once             watch for one interval, print a snapshot and exit
  --json             with --once: print it as JSON
  --interval SECONDS refresh period of the live screen, and what --once
                     watches for (1)
"""

#: Seconds to wait for a remotely started console to open its socket.
REMOTE_START_TIMEOUT: Final = 10.0


class Client:
    """A connection to a program's console socket."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self._buffer = b""

    def snapshot(self) -> dict[str, Any]:
        """The program's next snapshot; ConnectionError once it is gone."""
        gone = "the program closed the console connection (it has exited?)"
        try:
            self.sock.sendall(b'{"op": "snapshot"}\n')
            while b"\n" not in self._buffer:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError(gone)
                self._buffer += data
        except (BrokenPipeError, ConnectionResetError):
            raise ConnectionError(gone) from None
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _from_environment(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"TIDELOOP_CONSOLE="):
            return os.fsdecode(entry.partition(b"=")[2]) or None
    return None


_REMOTE_SCRIPT: Final = """\
try:
    import tideloop._console as _tideloop_console
    _tideloop_console.serve_discovered({path!r})
except BaseException as _exc:
    with open({error!r}, "w") as _f:
        _f.write(repr(_exc))
"""


def _remote_start(pid: int) -> str:
    """Start a console in process *pid* through ``sys.remote_exec``; its socket path."""
    if REMOTE_EXEC is None:
        raise SystemExit(
            f"python -m tideloop console: pid {pid} has no TIDELOOP_CONSOLE in its environment, "
            "and attaching without it needs Python 3.14+ (sys.remote_exec); start the program "
            "with TIDELOOP_CONSOLE=PATH or tideloop.run(..., console=PATH)"
        )
    directory = tempfile.mkdtemp(prefix="tideloop-console-")
    path = os.path.join(directory, "console.sock")
    error = os.path.join(directory, "error")
    script = os.path.join(directory, "attach.py")
    with open(script, "w") as f:
        f.write(_REMOTE_SCRIPT.format(path=path, error=error))
    try:
        REMOTE_EXEC(pid, script)
    except (OSError, RuntimeError) as exc:
        raise SystemExit(f"python -m tideloop console: cannot attach to pid {pid}: {exc}") from None
    deadline = time.monotonic() + REMOTE_START_TIMEOUT
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return path
        if os.path.exists(error):
            with open(error) as f:
                raise SystemExit(f"python -m tideloop console: pid {pid}: {f.read()}")
        time.sleep(0.05)
    raise SystemExit(
        f"python -m tideloop console: pid {pid} did not start its console within "
        f"{REMOTE_START_TIMEOUT:.0f}s (is it running Python code? does it allow remote "
        "execution: sys.is_remote_debug_enabled()?)"
    )


def resolve(target: str) -> str:
    """The console socket path of *target* (a path, or a pid)."""
    if target.isdigit():
        pid = int(target)
        path = _from_environment(pid)
        if path is not None:
            return path
        return _remote_start(pid)
    return target


def _live(client: Client, target: str, interval: float) -> None:
    import curses

    def screen(window: Any) -> None:
        with contextlib.suppress(curses.error):
            curses.curs_set(0)
        window.timeout(int(interval * 1000))
        while True:
            text = lines(client.snapshot(), target=target)
            height, width = window.getmaxyx()
            window.erase()
            for row, line in enumerate(text[: height - 1]):
                with contextlib.suppress(curses.error):
                    window.addnstr(row, 0, line, width - 1)
            with contextlib.suppress(curses.error):
                window.addnstr(height - 1, 0, "q: quit", width - 1, curses.A_REVERSE)
            window.refresh()
            key = window.getch()
            if key in (ord("q"), ord("Q"), 27):
                return

    curses.wrapper(screen)


def main(argv: list[str]) -> int:
    once = as_json = False
    interval = 1.0
    args = list(argv)
    target = None
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            return 0
        if arg == "--once":
            once = True
        elif arg == "--json":
            as_json = True
        elif arg == "--interval" or arg.startswith("--interval="):
            value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
            try:
                interval = float(value)
            except ValueError:
                return _fail(f"--interval: not a number: {value!r}")
            if not interval > 0:
                return _fail("--interval must be > 0")
        elif arg.startswith("-"):
            return _fail(f"unknown option {arg}")
        elif target is None:
            target = arg
        else:
            return _fail(f"one TARGET only (got {target!r} and {arg!r})")
    if target is None:
        return _fail("a TARGET (socket path or pid) is needed")
    if as_json and not once:
        return _fail("--json needs --once")
    path = resolve(target)
    try:
        client = Client(path)
    except OSError as exc:
        return _fail(f"cannot connect to {path}: {exc.strerror or exc}")
    with client:
        if once:
            # The first snapshot attaches the recorder; the second, an
            # interval later, has task statistics and rates over it.
            try:
                client.snapshot()
                time.sleep(interval)
                snapshot = client.snapshot()
            except OSError as exc:  # ConnectionError, a timeout
                sys.stderr.write(f"python -m tideloop console: {exc}\n")
                return 1
            if as_json:
                sys.stdout.write(json.dumps(snapshot, indent=1) + "\n")
            else:
                sys.stdout.write("\n".join(lines(snapshot, target=path)) + "\n")
            return 0 if "error" not in snapshot else 1
        try:
            _live(client, path, interval)
        except (ConnectionError, OSError) as exc:
            sys.stderr.write(f"python -m tideloop console: {exc}\n")
            return 1
        except KeyboardInterrupt:
            pass
    return 0


def _fail(message: str) -> int:
    sys.stderr.write(f"python -m tideloop console: {message}\n" + USAGE)
    return 2
