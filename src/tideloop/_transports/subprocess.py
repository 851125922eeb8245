"""Subprocesses: the subprocess transport, and ``subprocess_exec``/``subprocess_shell``.

Layer: transports. `SubprocessTransport` is an ``asyncio.SubprocessTransport``
with the semantics of asyncio's ``base_subprocess`` for the running Python
(what ``asyncio.create_subprocess_exec`` and its ``Process`` build on): the
child is started with ``subprocess.Popen`` (so every Popen argument works),
its pipes become our pipe transports, and the `ChildWatcher` component
reports its exit. `SubprocessMethods` holds the loop methods.

The protocol sees, in this order: ``connection_made``; then, in the order
they happened, ``pipe_data_received(fd, data)``,
``pipe_connection_lost(fd, exc)`` and ``process_exited()``; and last
``connection_lost(None)``, once the process has exited *and* every pipe has
closed. ``Process.wait()`` (``_wait``) returns as soon as the process has
exited, even while a grandchild still holds its stdout (gh-119710; asyncio
before that fix waited for the pipes too: ``tests/divergences.py``,
"wait-returns-at-exit").

- ``close()`` closes the pipes and, if the child is still running, kills
  it (``Popen.kill()``, SIGKILL); the exit is still reaped and reported.
- ``send_signal``/``terminate``/``kill`` signal the pid with ``os.kill``, and
  never once the child has been reaped: its pid may belong to another
  process by then. (asyncio before 3.13
  went through ``Popen.send_signal``, which may reap the child itself and so
  lose its exit status to the watcher; ``tests/divergences.py``,
  "send-signal-never-reaps".)
- Bad arguments are refused as asyncio refuses them: ``universal_newlines``,
  ``text``, ``encoding``, ``errors``, ``bufsize`` other than 0, ``shell`` for
  exec (ValueError); a missing or non-executable program or a missing
  ``cwd`` raise Popen's own errors, with every pipe closed and nothing
  watched.
- The child starts on a thread of its own (`start_child`), not on the
  loop's: ``Popen`` blocks until the child has exec'd (it reads the
  exec-error pipe), which with a large parent or a slow exec takes
  milliseconds that would stall every other callback (the stdlib loop and
  uvloop block there; blockbuster flags it). The loop waits for the thread
  as for an executor job (virtual time does not jump past it). A spawn
  whose caller was cancelled meanwhile, or whose loop closed, kills and
  reaps the child it started. The exception: while a SIGCHLD handler is
  installed (one that may reap every child, as asyncio's FastChildWatcher
  does), the child starts on the loop's thread, as asyncio starts it, so
  that it is watched before such a handler can run.

Invariants:
- ``_pending_calls`` is a list until ``connection_made`` has been
  scheduled, and None after: protocol callbacks that happen earlier (an
  exit reported before the pipes were connected) are queued in order and
  scheduled right after it.
- ``connection_lost`` is scheduled once (``_finished``), after
  ``process_exited`` and after every pipe's ``pipe_connection_lost``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

from tideloop._children import HAS_WAITID, ChildWatcher, waitid_exited
from tideloop._core.errors import logger

from .pipes import PipeMethods

_FD = int
#: What `SubprocessMethods.start_child` gives: the child and its pidfd, if any.
_Started = tuple[subprocess.Popen[bytes], int | None]


class _PipeProto(asyncio.Protocol):
    """The protocol of one of the child's pipes: forwards to the transport."""

    __slots__ = ("disconnected", "fd", "pipe", "proc")

    def __init__(self, proc: SubprocessTransport, fd: _FD) -> None:
        self.proc: SubprocessTransport | None = proc
        self.fd = fd
        self.pipe: asyncio.BaseTransport | None = None
        self.disconnected = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} fd={self.fd} pipe={self.pipe!r}>"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.pipe = transport

    def connection_lost(self, exc: BaseException | None) -> None:
        self.disconnected = True
        proc = self.proc
        if proc is not None:
            self.proc = None
            proc._pipe_connection_lost(self.fd, exc)

    def pause_writing(self) -> None:
        if self.proc is not None:
            self.proc._protocol.pause_writing()

    def resume_writing(self) -> None:
        if self.proc is not None:
            self.proc._protocol.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.proc is not None:
            self.proc._pipe_data_received(self.fd, data)


def _is_running(pid: int) -> bool:
    """Has child *pid* not exited yet? Asked without reaping it (the watcher must)."""
    if sys.platform == "linux" and HAS_WAITID:
        try:
            return not waitid_exited(pid, block=False)
        except ChildProcessError:
            return False
    else:  # no waitid: assume it runs (killing a zombie is harmless)
        return True


class SubprocessTransport(asyncio.SubprocessTransport):
    _extra: dict[str, Any]  # asyncio.BaseTransport's slot

    def __init__(
        self,
        loop: SubprocessMethods,
        protocol: asyncio.BaseProtocol,
        proc: subprocess.Popen[bytes],
        program: Any,
        *,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """A transport for *proc*, a child `start_child` has started."""
        super().__init__(extra)
        self._closed = False
        self._protocol: Any = protocol
        self._loop = loop
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._returncode: int | None = None
        self._exit_waiters: set[asyncio.Future[int]] | None = set()
        # Set when the watcher has reaped the child: from then on its pid is
        # not ours to signal.
        self._reaped = False
        self._pending_calls: list[tuple[Callable[..., object], tuple[Any, ...]]] | None = []
        # Connecting the pipes failed: the protocol never hears of this child.
        self._connect_failed = False
        self._pipes: dict[_FD, _PipeProto | None] = {}
        self._finished = False
        # Popen makes a pipe exactly where it was asked for one (PIPE).
        for fd, pipe in enumerate((proc.stdin, proc.stdout, proc.stderr)):
            if pipe is not None:
                self._pipes[fd] = None
        self._proc = proc
        self._pid = proc.pid
        self._extra["subprocess"] = proc
        if loop._debug:
            logger.debug("process %r created: pid %s", program, self._pid)
        loop.create_task(self._connect_pipes(waiter))

    async def _connect_pipes(self, waiter: asyncio.Future[None] | None) -> None:
        """Pipe transports on the child's pipes, then connection_made.

        Through the loop's public ``connect_*_pipe`` methods, as asyncio
        does: code that wraps them (tests do) sees the child's pipes too.
        """
        proc = self._proc
        assert proc is not None
        loop = self._loop
        try:
            if proc.stdin is not None:
                _, proto = await loop.connect_write_pipe(lambda: _PipeProto(self, 0), proc.stdin)
                self._pipes[0] = proto
            if proc.stdout is not None:
                _, proto = await loop.connect_read_pipe(lambda: _PipeProto(self, 1), proc.stdout)
                self._pipes[1] = proto
            if proc.stderr is not None:
                _, proto = await loop.connect_read_pipe(lambda: _PipeProto(self, 2), proc.stderr)
                self._pipes[2] = proto
            loop.call_soon(self._protocol.connection_made, self)
            pending = self._pending_calls
            self._pending_calls = None
            if pending:
                for callback, data in pending:
                    loop.call_soon(callback, *data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._connect_failed = True
            self._pending_calls = None
            self._forget_unconnected_pipes()
            if waiter is not None and not waiter.cancelled():
                waiter.set_exception(exc)
        else:
            if waiter is not None and not waiter.cancelled():
                waiter.set_result(None)

    def _forget_unconnected_pipes(self) -> None:
        """After a failed connect: close the child's pipes we have no transport for.

        Otherwise `_try_finish` would wait for them forever, and so would
        ``_wait()`` (asyncio hangs there).
        """
        proc = self._proc
        for fd in [fd for fd, proto in self._pipes.items() if proto is None]:
            del self._pipes[fd]
            if proc is not None:
                pipe = (proc.stdin, proc.stdout, proc.stderr)[fd]
                if pipe is not None:
                    pipe.close()
        self._try_finish()

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._closed:
            info.append("closed")
        if self._pid is not None:
            info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        elif self._pid is not None:
            info.append("running")
        else:
            info.append("not started")
        stdin = self._pipes.get(0)
        if stdin is not None:
            info.append(f"stdin={stdin.pipe}")
        stdout = self._pipes.get(1)
        stderr = self._pipes.get(2)
        if stdout is not None and stderr is stdout:
            info.append(f"stdout=stderr={stdout.pipe}")
        else:
            if stdout is not None:
                info.append(f"stdout={stdout.pipe}")
            if stderr is not None:
                info.append(f"stderr={stderr.pipe}")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self.close()

    # ------------------------------------------------------------------
    # asyncio.SubprocessTransport

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> Any:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proto in self._pipes.values():
            if proto is not None and proto.pipe is not None:
                proto.pipe.close()
        proc = self._proc
        if proc is not None and not self._reaped and _is_running(proc.pid):
            if self._loop._debug:
                logger.warning("Close running child process: kill %r", self)
            # Popen.kill(), as asyncio (code and tests wrap it). Its poll()
            # reaps only a child that has exited, which then gets no signal:
            # a recycled pid cannot be hit, as Popen's waitpid would fail.
            try:
                proc.kill()
            except (ProcessLookupError, PermissionError):
                pass  # exited meanwhile, or running setuid

    def get_pid(self) -> int:
        assert self._pid is not None
        return self._pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> Any:
        proto = self._pipes.get(fd)
        return None if proto is None else proto.pipe

    def _check_proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ProcessLookupError()
        return self._proc

    def send_signal(self, signal: int) -> None:
        proc = self._check_proc()
        if self._reaped:
            return  # the pid may have been reused already
        # Through the watcher: a thread of its may be reaping it right now.
        self._loop._children.send_signal(proc.pid, signal)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    # ------------------------------------------------------------------
    # Events, in order (see the invariants)

    def _call(self, callback: Callable[..., object], *data: Any) -> None:
        pending = self._pending_calls
        if pending is not None:
            pending.append((callback, data))
        elif not self._connect_failed:
            self._loop.call_soon(callback, *data)

    def _pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        self._call(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _pipe_data_received(self, fd: int, data: bytes) -> None:
        self._call(self._protocol.pipe_data_received, fd, data)

    def _process_exited(self, returncode: int) -> None:
        if self._returncode is not None:
            return
        if self._loop._debug:
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        proc = self._proc
        if proc is not None and proc.returncode is None:
            # The watcher reaped it: give Popen the status (else Popen's
            # __del__ warns that the child is still running).
            proc.returncode = returncode
        self._call(self._protocol.process_exited)
        self._try_finish()
        # Waiters wake at exit, not when the pipes close too: a grandchild
        # may hold them for as long as it lives.
        waiters = self._exit_waiters
        self._exit_waiters = None
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(returncode)

    def _child_exited(self, pid: int, returncode: int) -> None:
        """The watcher's callback (the child is reaped); one iteration later, as asyncio."""
        self._reaped = True
        self._loop.call_soon(self._process_exited, returncode)

    async def _wait(self) -> int:
        """The return code, once the process has exited."""
        if self._returncode is not None:
            return self._returncode
        waiters = self._exit_waiters
        if waiters is None:  # no return code, yet woken: cannot happen
            raise ProcessLookupError()
        waiter: asyncio.Future[int] = self._loop.create_future()
        waiters.add(waiter)
        try:
            return await waiter
        finally:
            # A cancelled wait must not stay in the set until exit.
            if self._exit_waiters is not None:
                self._exit_waiters.discard(waiter)

    def _try_finish(self) -> None:
        if self._finished or self._returncode is None:
            return
        if all(p is not None and p.disconnected for p in self._pipes.values()):
            self._finished = True
            if self._connect_failed:
                # Only the exit waiters are left to wake.
                self._loop.call_soon(self._call_connection_lost, None)
            else:
                self._call(self._call_connection_lost, None)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            if not self._connect_failed:
                self._protocol.connection_lost(exc)
        finally:
            self._proc = None
            self._protocol = None


def _check_subprocess_args(
    universal_newlines: bool, bufsize: int, text: Any, encoding: Any, errors: Any
) -> None:
    if universal_newlines:
        raise ValueError("universal_newlines must be False")
    if bufsize != 0:
        raise ValueError("bufsize must be 0")
    if text:
        raise ValueError("text must be False")
    if encoding is not None:
        raise ValueError("encoding must be None")
    if errors is not None:
        raise ValueError("errors must be None")


class SubprocessMethods(PipeMethods):
    """``subprocess_exec``, ``subprocess_shell``."""

    _children: ChildWatcher

    async def subprocess_shell(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        cmd: bytes | str,
        *,
        stdin: Any = subprocess.PIPE,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        universal_newlines: bool = False,
        shell: bool = True,
        bufsize: int = 0,
        encoding: Any = None,
        errors: Any = None,
        text: Any = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, asyncio.BaseProtocol]:
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if not shell:
            raise ValueError("shell must be True")
        _check_subprocess_args(universal_newlines, bufsize, text, encoding, errors)
        # Not the arguments in the log: they may hold secrets, and be long.
        return await self._spawn(
            f"run shell command {cmd!r}",
            protocol_factory,
            cmd,
            True,
            stdin,
            stdout,
            stderr,
            bufsize,
            kwargs,
        )

    async def subprocess_exec(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        program: Any,
        *args: Any,
        stdin: Any = subprocess.PIPE,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        universal_newlines: bool = False,
        shell: bool = False,
        bufsize: int = 0,
        encoding: Any = None,
        errors: Any = None,
        text: Any = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, asyncio.BaseProtocol]:
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if shell:
            raise ValueError("shell must be False")
        _check_subprocess_args(universal_newlines, bufsize, text, encoding, errors)
        return await self._spawn(
            f"execute program {program!r}",
            protocol_factory,
            (program, *args),
            False,
            stdin,
            stdout,
            stderr,
            bufsize,
            kwargs,
        )

    async def _spawn(  # noqa: PLR0917
        self,
        what: str,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        args: Any,
        shell: bool,
        stdin: Any,
        stdout: Any,
        stderr: Any,
        bufsize: int,
        kwargs: dict[str, Any],
    ) -> tuple[asyncio.SubprocessTransport, asyncio.BaseProtocol]:
        protocol = protocol_factory()
        debug = self._debug
        if debug:
            self._log_subprocess(what, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, args, shell, stdin, stdout, stderr, bufsize, **kwargs
        )
        if debug:
            logger.info("%s: %r", what, transport)
        return transport, protocol

    def _log_subprocess(self, msg: str, stdin: Any, stdout: Any, stderr: Any) -> None:
        info = [msg]
        if stdin is not None:
            info.append(f"stdin={_format_pipe(stdin)}")
        if stdout is not None and stderr == subprocess.STDOUT:
            info.append(f"stdout=stderr={_format_pipe(stdout)}")
        else:
            if stdout is not None:
                info.append(f"stdout={_format_pipe(stdout)}")
            if stderr is not None:
                info.append(f"stderr={_format_pipe(stderr)}")
        logger.debug(" ".join(info))

    async def _make_subprocess_transport(  # noqa: PLR0917 (asyncio's order)
        self,
        protocol: asyncio.BaseProtocol,
        args: Any,
        shell: bool,
        stdin: Any,
        stdout: Any,
        stderr: Any,
        bufsize: int,
        extra: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SubprocessTransport:
        self._check_closed()
        popen_kwargs = dict(
            args=args,
            shell=shell,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=False,
            bufsize=bufsize,
            **kwargs,
        )
        proc, pidfd = await self.start_child(popen_kwargs)
        waiter: asyncio.Future[None] = self.create_future()
        program = args if isinstance(args, (bytes, str)) else args[0]
        transport = SubprocessTransport(self, protocol, proc, program, waiter=waiter, extra=extra)
        self._children.watch(transport.get_pid(), transport._child_exited, pidfd)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transport.close()
            await transport._wait()
            raise
        return transport

    async def start_child(self, popen_kwargs: dict[str, Any]) -> _Started:
        """``subprocess.Popen(**popen_kwargs)``, run on a thread of its own.

        Returns the Popen and, where children are watched through pidfds, the
        child's pidfd for `ChildWatcher.watch`. Popen's exceptions (a missing
        program, a bad ``cwd``) are raised here as they are. See the module
        docstring for why a thread.
        """
        if signal.getsignal(signal.SIGCHLD) not in (signal.SIG_DFL, None):
            # Someone handles SIGCHLD (asyncio's FastChildWatcher, a program's
            # own handler): it may reap every child, ours included, before a
            # spawn thread's result reaches the loop and the child is
            # watched. Then the child starts here, as asyncio starts it, and
            # is watched before the loop runs again.
            return subprocess.Popen(**popen_kwargs), None
        # As asyncio, a cancelled caller returns only once the child it
        # started is killed and reaped (undo); if the loop is gone by then,
        # the spawn thread does that itself (undo_unwatched).
        return await self._in_thread(
            _popen,
            self._children,
            popen_kwargs,
            undo=self._abandon_started,
            undo_unwatched=_kill_and_wait,
            name="tideloop-spawn",
        )

    def _abandon_started(self, started: _Started) -> asyncio.Future[int]:
        return self._abandon_child(*started)

    def _abandon_child(
        self, proc: subprocess.Popen[bytes], pidfd: int | None
    ) -> asyncio.Future[int]:
        """Kill a child nobody wants any more; the future is done once it is reaped."""
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        try:
            proc.kill()  # not reaped yet: the pid is still this child's
        except ProcessLookupError:
            pass
        exited: asyncio.Future[int] = self.create_future()

        def reaped(pid: int, returncode: int) -> None:
            proc.returncode = returncode  # Popen's __del__ must not warn
            if not exited.done():
                exited.set_result(returncode)

        self._children.watch(proc.pid, reaped, pidfd)
        return exited


def _popen(children: ChildWatcher, popen_kwargs: dict[str, Any]) -> _Started:
    """On the spawn thread: start the child; Popen's errors are the caller's."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(**popen_kwargs)
    # At once, before a SIGCHLD handler elsewhere can reap the child.
    return proc, children.open_pidfd(proc.pid)


def _kill_and_wait(started: _Started) -> None:
    """On the spawn thread, its loop closed: nobody will watch this child."""
    proc, pidfd = started
    if pidfd is not None:
        os.close(pidfd)
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _format_pipe(fd: Any) -> str:
    if fd == subprocess.PIPE:
        return "<pipe>"
    if fd == subprocess.STDOUT:
        return "<stdout>"
    return repr(fd)
