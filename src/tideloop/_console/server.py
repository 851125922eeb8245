"""The console's server: a Unix socket the program opens, answered off the loop's thread.

Layer: top (the console). `ConsoleServer` listens on a Unix socket at a
path the program chose (``tideloop.run(..., console=PATH)``,
``TIDELOOP_CONSOLE=PATH``) and answers clients (``python -m tideloop
console``) with snapshots of its loops.

Facts / what this means for us:

- A Unix socket's file mode decides who may connect, and the directory it
  sits in decides who may replace it. So the directory must belong to the
  program's user and be writable by nobody else (else `ConsoleError`), and
  the socket is made owner-only (0600) before it appears at its path: it is
  bound inside a private directory (``mkdtemp``: 0700), chmod-ed, then
  hard-linked to the path (``link`` fails if something is there already:
  nothing is ever replaced) and the temporary name removed. The process
  umask is not touched (other threads may be creating files).
- ``SO_PEERCRED`` (``LOCAL_PEERCRED`` on macOS) gives the uid of the
  process at the other end. A client of another user (root included) is
  refused and disconnected: nobody but the program's own user attaches,
  whatever the file's mode.
- The server is one thread blocked in ``select`` on the listening socket
  and its clients: with nobody attached, it costs the program nothing but
  that sleeping thread. It says it is quiet (``_core/quiet.py``) while
  nobody is attached: otherwise, being a thread, it would make every loop
  of the process poll on each iteration (a quarter of the ``sleep(0)``
  rate), and only a client from outside ever wakes it. While at least
  one client is attached, each loop has a `Recorder` (``events=False``:
  task statistics and slow callbacks, about a microsecond per callback)
  attached; the last client to leave detaches it.
- A snapshot is taken on the loop's thread (``call_soon_threadsafe``),
  between two callbacks, so it sees consistent state and never races the
  program; the server waits for it at most `SNAPSHOT_TIMEOUT` seconds. A
  loop that does not answer in time is reported as such, with the metrics
  any thread may read (``loop.metrics()``): it is blocked.

The protocol: one JSON object per line each way. A client sends
``{"op": "snapshot"}`` and receives ``{"pid": ..., "argv": [...], "loops":
[...]}`` (each loop's `snapshot.take`, or ``{"loop": n, "blocked": true,
"metrics": ...}``). Anything else gets ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import select
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from typing import Any, Final

from tideloop._core.quiet import Quiet, quiet
from tideloop._loop import Loop
from tideloop._recorder import Recorder

from .snapshot import Previous, UnawaitedWarnings, counts, take

__all__ = ["SNAPSHOT_TIMEOUT", "ConsoleError", "ConsoleServer", "check_directory"]

#: Seconds the server waits for a loop's thread to take a snapshot.
SNAPSHOT_TIMEOUT: Final = 1.0
#: The longest request line a client may send.
MAX_REQUEST: Final = 4096


class ConsoleError(Exception):
    """The console socket cannot be opened where asked."""


def check_directory(path: str) -> None:
    """Refuse a socket *path* whose directory someone else could write to."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise ConsoleError(f"console socket {path!r}: {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConsoleError(f"console socket {path!r}: {directory} is not a directory")
    if info.st_uid != os.getuid():
        raise ConsoleError(
            f"console socket {path!r}: {directory} belongs to uid {info.st_uid}, not to this "
            f"program's user ({os.getuid()}): use a directory of your own "
            "(e.g. $XDG_RUNTIME_DIR)"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConsoleError(
            f"console socket {path!r}: {directory} is writable by other users "
            f"(mode {stat.S_IMODE(info.st_mode):o}): use a directory only you can write to"
        )


def _bind_private(path: str) -> socket.socket:
    """A listening socket at *path*, mode 0600, made where nobody else can see it first."""
    check_directory(path)
    directory = os.path.dirname(os.path.abspath(path))
    private = tempfile.mkdtemp(prefix=".tideloop-console-", dir=directory)
    staging = os.path.join(private, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(staging)
        os.chmod(staging, 0o600)
        try:
            os.link(staging, path)
        except FileExistsError:
            raise ConsoleError(
                f"console socket {path!r}: the path exists (another console? remove it if stale)"
            ) from None
        sock.listen(8)
    except BaseException:
        sock.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        with contextlib.suppress(OSError):
            os.rmdir(private)
    return sock


#: macOS/BSD: ``getsockopt(SOL_LOCAL, LOCAL_PEERCRED)`` gives a ``struct xucred``
#: (version, uid, ...); Python's socket module names neither constant.
_SOL_LOCAL: Final = 0
_LOCAL_PEERCRED: Final = 1


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket.

    Linux: ``SO_PEERCRED`` (pid, uid, gid of the peer when it connected);
    macOS and the BSDs: ``LOCAL_PEERCRED``.
    """
    if sys.platform == "linux":
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    else:  # mypy checks platform-guarded code only as an if/else branch
        # struct xucred: u_int cr_version, uid_t cr_uid, short cr_ngroups,
        # gid_t cr_groups[16] (the kernel wants the whole size).
        creds = conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, struct.calcsize("IIh16I"))
        _version, uid = struct.unpack("2I", creds[:8])
        return int(uid)


class _Served:
    """A loop the server answers for, and the errors its handler was given."""

    __slots__ = ("before", "errors", "loop", "number", "previous", "wrapper")

    def __init__(self, loop: Loop, number: int) -> None:
        self.loop: weakref.ref[Loop] = weakref.ref(loop)
        self.number = number
        self.previous: dict[int, Previous] = {}  # by client
        #: The last errors reported to the loop's exception handler.
        self.errors: deque[dict[str, Any]] = deque(maxlen=20)
        # The loop's call_exception_handler is wrapped (in the instance's
        # dict, as the recorder does): the wrapper notes the error, then
        # calls what was there. Called only on errors: nothing per callback.
        self.before: Any = loop.__dict__.get("call_exception_handler")
        original = loop.call_exception_handler
        errors = self.errors

        @functools.wraps(original)
        def call_exception_handler(*args: Any, **kwargs: Any) -> None:
            context = args[0] if len(args) == 1 and not kwargs else None
            if isinstance(context, dict):
                errors.append(_error_row(context))
            original(*args, **kwargs)

        self.wrapper = call_exception_handler
        loop.__dict__["call_exception_handler"] = call_exception_handler

    def unwrap(self) -> None:
        loop = self.loop()
        if loop is None or loop.__dict__.get("call_exception_handler") is not self.wrapper:
            return  # replaced since by someone else: theirs stays
        if self.before is None:
            del loop.__dict__["call_exception_handler"]
        else:
            loop.__dict__["call_exception_handler"] = self.before


def _error_row(context: dict[str, Any]) -> dict[str, Any]:
    future = context.get("future") or context.get("task")
    exc = context.get("exception")
    return {
        "message": str(context.get("message", "")),
        "exception": None if exc is None else repr(exc),
        "task": future.get_name() if isinstance(future, asyncio.Task) else None,
        "at": time.monotonic(),
    }


class ConsoleServer:
    """Serves snapshots of its loops on a Unix socket (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._sock = _bind_private(self.path)
        self._ino = os.stat(self.path).st_ino
        self._lock = threading.Lock()
        self._loops: list[_Served] = []
        self._numbers = 0
        self._clients: dict[socket.socket, bytearray] = {}
        self._recorder: Recorder | None = None
        self._attached_at = 0.0
        self.unawaited = UnawaitedWarnings()
        self.unawaited.install()
        self.refused = 0
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="tideloop-console", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------
    # Loops

    def add(self, loop: Loop) -> None:
        """Answer for *loop* too (every loop made, with ``TIDELOOP_CONSOLE``)."""
        with self._lock:
            if any(s.loop() is loop for s in self._loops):
                return
            self._numbers += 1
            self._loops.append(_Served(loop, self._numbers))
            recorder = self._recorder
        if recorder is not None:
            self._attach(recorder, loop)

    def _served(self) -> list[tuple[_Served, Loop]]:
        with self._lock:
            served = list(self._loops)
        alive = [(s, loop) for s, loop in ((s, s.loop()) for s in served) if loop is not None]
        open_ = [(s, loop) for s, loop in alive if not loop.is_closed()]
        if len(open_) != len(served):
            keep = {id(s) for s, _ in open_}
            with self._lock:
                self._loops = [s for s in self._loops if id(s) in keep]
        return open_

    @staticmethod
    def _attach(recorder: Recorder, loop: Loop) -> None:
        """Attach in the loop's thread (or now, if it is not running)."""
        if loop.is_running():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(_attach_quietly, recorder, loop)
        else:
            _attach_quietly(recorder, loop)

    @staticmethod
    def _detach(recorder: Recorder, loop: Loop) -> None:
        if loop.is_running():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(recorder.detach, loop)
        else:
            recorder.detach(loop)

    # ------------------------------------------------------------------
    # The thread

    def _serve(self) -> None:
        with quiet() as say:
            self._serve_quietly(say)

    def _serve_quietly(self, say: Quiet) -> None:
        listener = self._sock
        while True:
            with self._lock:
                if self._closed:
                    return
                clients = list(self._clients)
            # Nobody attached: only a client (from outside) wakes this
            # thread, so loops need not hand it the GIL at once (quiet.py).
            say.set(not clients)
            try:
                watched: list[Any] = [listener, self._wake_r, *clients]
                readable, _, _ = select.select(watched, [], [])
            except OSError:
                # Only close() closes what select watches (clients are closed
                # in this thread): the server is stopping.
                return
            if self._wake_r in readable:
                os.read(self._wake_r, 64)
            if listener in readable:
                self._accept()
            for conn in readable:
                if conn in clients:
                    self._receive(conn)

    def _accept(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        try:
            uid = peer_uid(conn)
        except OSError:
            uid = -1
        if uid != os.getuid():
            # Not the program's user: refused, whatever the socket's mode.
            self.refused += 1
            with contextlib.suppress(OSError):
                conn.sendall(b'{"error": "refused: not the program\'s user"}\n')
            conn.close()
            return
        with self._lock:
            first = not self._clients
            self._clients[conn] = bytearray()
            if first:
                self._recorder = Recorder(events=False)
                self._attached_at = time.monotonic()
            recorder = self._recorder
        if first and recorder is not None:
            for _, loop in self._served():
                self._attach(recorder, loop)

    def _drop(self, conn: socket.socket) -> None:
        conn.close()
        with self._lock:
            self._clients.pop(conn, None)
            last = not self._clients
            recorder = self._recorder if last else None
            if last:
                self._recorder = None
        for served, loop in self._served():
            served.previous.pop(id(conn), None)
            if recorder is not None:
                self._detach(recorder, loop)

    def _receive(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(MAX_REQUEST)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        with self._lock:
            buffer = self._clients.get(conn)
        if buffer is None:
            return
        buffer += data
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            reply = self._answer(conn, line)
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                self._drop(conn)
                return
        if len(buffer) > MAX_REQUEST:
            self._drop(conn)

    def _answer(self, conn: socket.socket, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except ValueError:
            return {"error": "not JSON"}
        if not isinstance(request, dict) or request.get("op") != "snapshot":
            return {"error": 'unknown request (expected {"op": "snapshot"})'}
        return self.snapshot(id(conn))

    def snapshot(self, client: int = 0) -> dict[str, Any]:
        """Every loop's snapshot, each taken in its loop's thread (or marked blocked)."""
        with self._lock:
            recorder = self._recorder
            attached_at = self._attached_at
        if recorder is None:  # asked without a client (tests, --once in-process)
            recorder = Recorder(events=False)
        loops = []
        for served, loop in self._served():
            previous = served.previous.setdefault(client, Previous())
            loops.append(self._one(served, loop, recorder, previous, attached_at))
        return {"pid": os.getpid(), "argv": list(sys.argv), "loops": loops}

    def _one(
        self, served: _Served, loop: Loop, recorder: Recorder, previous: Previous, at: float
    ) -> dict[str, Any]:
        unawaited = self.unawaited

        def work() -> dict[str, Any]:
            return take(
                loop,
                served.number,
                recorder,
                previous,
                unawaited=unawaited,
                errors=list(served.errors),
                attached_at=at,
            )

        if not loop.is_running():
            return {"loop": served.number, "running": False, **_metrics_only(loop)}
        result: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def run() -> None:
            if result.set_running_or_notify_cancel():
                try:
                    result.set_result(work())
                except BaseException as exc:  # reported to the client
                    result.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
            return result.result(SNAPSHOT_TIMEOUT)
        except concurrent.futures.TimeoutError:
            result.cancel()
            return {"loop": served.number, "running": True, "blocked": True, **_metrics_only(loop)}
        except RuntimeError:  # closed meanwhile
            return {"loop": served.number, "running": False, "closed": True}
        except Exception as exc:
            return {"loop": served.number, "error": f"snapshot failed: {exc!r}"}

    # ------------------------------------------------------------------

    def close(self) -> None:
        """Stop serving, disconnect clients, remove the socket file (if still ours)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.write(self._wake_w, b"x")
        if threading.current_thread() is not self._thread:
            self._thread.join(5)
        with self._lock:
            clients = list(self._clients)
            self._clients.clear()
            recorder = self._recorder
            self._recorder = None
        for conn in clients:
            conn.close()
        for served, loop in self._served():
            if recorder is not None:
                self._detach(recorder, loop)
            served.unwrap()
        self._sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.unawaited.uninstall()
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._ino:
                os.unlink(self.path)

    def __enter__(self) -> ConsoleServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _attach_quietly(recorder: Recorder, loop: Loop) -> None:
    if not loop.is_closed():
        recorder.attach(loop)


def _metrics_only(loop: Loop) -> dict[str, Any]:
    """What another thread may read of a loop that cannot answer."""
    m = loop.metrics()
    return {
        "metrics": {
            **counts(m),
            "busy_time": m.busy_time,
            "idle_time": m.idle_time,
        }
    }
