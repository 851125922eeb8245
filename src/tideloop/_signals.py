"""Signals: the `SignalWatcher` component and ``add_signal_handler`` (Unix).

Layer: signals, above the fd layer (the watcher registers an internal reader
with the fd registry it is handed). `SignalMethods` is the loop's public
face of it.

Facts / what this means for us:

- Python runs signal handlers in the main thread, between bytecodes, and
  only if the main thread gets to run bytecode: a loop blocked in epoll_wait
  must be woken. ``signal.set_wakeup_fd(fd)`` makes the C-level handler write
  the signal number (one byte) to *fd*; we poll the read end and run the
  user's callback as an ordinary callback in the loop, never inside the
  signal handler. Only one wakeup fd exists per process.
- That fd must be non-blocking and must accept 1-byte writes, so it is a
  pipe, separate from the core's eventfd waker. It is created on the first
  ``add_signal_handler`` only.
- ``set_wakeup_fd`` raises ValueError outside the main thread; asyncio turns
  that into RuntimeError, and so do we (same for OSError).
- SIGKILL and SIGSTOP cannot be caught: ``signal.signal`` fails with EINVAL,
  reported as ``RuntimeError('sig N cannot be caught')``.
- Handlers are installed with ``siginterrupt(sig, False)`` (SA_RESTART), as
  asyncio does, to limit EINTR in blocking calls of other threads.

Semantics follow asyncio's unix_events, with one deliberate difference
(``tests/divergences.py``, "wakeup-fd-restored"): when the last handler is
removed (or the loop closes), the wakeup fd that was installed *before* ours
is restored, rather than reset to -1, so a loop nested in a program that
uses its own wakeup fd does not break it. We restore only if ours is still
the installed one, and only if the old fd is still open.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Protocol, TypeVarTuple, Unpack

from ._core.coreloop import CoreLoop
from ._core.debug import is_coroutine_function
from ._core.errors import logger
from ._core.handles import Handle
from ._core.interfaces import LoopServices
from ._fdio.registry import FdRegistry

_Ts = TypeVarTuple("_Ts")


def _noop_handler(signum: int, frame: FrameType | None) -> None:
    """Installed with signal.signal: it only makes Python write the wakeup fd."""


def _fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def check_signal(sig: int) -> None:
    if not isinstance(sig, int):
        raise TypeError(f"sig must be an int, not {sig!r}")
    if sig not in signal.valid_signals():
        raise ValueError(f"invalid signal number {sig}")


class SignalOwner(LoopServices, Protocol):
    """What the signal watcher needs of its loop: asyncio's way to queue a
    signal's handle (append to the ready queue, then wake the loop)."""

    def _add_callback_signalsafe(self, handle: asyncio.Handle) -> None: ...


class SignalWatcher:
    """The loop's signal handlers and the wakeup pipe that delivers them."""

    __slots__ = ("_fds", "_loop", "_saved_wakeup_fd", "_sig_rfd", "_sig_wfd", "handlers")

    def __init__(self, loop: SignalOwner, fds: FdRegistry) -> None:
        self._loop = loop
        self._fds = fds
        self.handlers: dict[int, asyncio.Handle] = {}
        self._sig_rfd = -1
        self._sig_wfd = -1
        # The wakeup fd that was installed before ours; None while ours isn't.
        self._saved_wakeup_fd: int | None = None

    @property
    def pipe_fd(self) -> int:
        """The read end of the wakeup pipe the loop watches (-1 while there is none)."""
        return self._sig_rfd

    def add(self, sig: int, handle: asyncio.Handle) -> None:
        self._open_signal_pipe()
        try:
            # Fails outside the main thread: call it before touching anything.
            previous = signal.set_wakeup_fd(self._sig_wfd)
        except (ValueError, OSError) as exc:
            if not self.handlers:
                self._close_signal_pipe()
            raise RuntimeError(str(exc))  # noqa: B904 (asyncio chains it implicitly)
        if self._saved_wakeup_fd is None:
            self._saved_wakeup_fd = previous

        self.handlers[sig] = handle
        try:
            signal.signal(sig, _noop_handler)
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self.handlers[sig]
            if not self.handlers:
                self._restore_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig} cannot be caught")  # noqa: B904
            raise

    def remove(self, sig: int) -> bool:
        try:
            del self.handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig} cannot be caught")  # noqa: B904
            raise
        if not self.handlers:
            self._restore_wakeup_fd()
        return True

    def _handle_signal(self, sig: int) -> None:
        handle = self.handlers.get(sig)
        if handle is None:
            return  # removed after the byte was written
        if handle._cancelled:
            self.remove(sig)
        else:
            self._loop._add_callback_signalsafe(handle)

    def _read_signals(self) -> None:
        while True:
            try:
                data = os.read(self._sig_rfd, 4096)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            if not data:
                return
            for signum in data:
                self._handle_signal(signum)

    # ------------------------------------------------------------------

    def _open_signal_pipe(self) -> None:
        if self._sig_rfd >= 0:
            return
        if hasattr(os, "pipe2"):
            rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        else:
            rfd, wfd = os.pipe()
            os.set_blocking(rfd, False)
            os.set_blocking(wfd, False)
        self._sig_rfd, self._sig_wfd = rfd, wfd
        self._fds.add_internal_reader(rfd, Handle(self._read_signals, (), self._loop, None))

    def _close_signal_pipe(self) -> None:
        if self._sig_rfd < 0:
            return
        self._fds.remove_internal_reader(self._sig_rfd)
        os.close(self._sig_rfd)
        os.close(self._sig_wfd)
        self._sig_rfd = self._sig_wfd = -1

    def _restore_wakeup_fd(self) -> None:
        saved = self._saved_wakeup_fd
        if saved is None:
            return
        self._saved_wakeup_fd = None
        restore = saved if saved != self._sig_wfd and _fd_is_open(saved) else -1
        try:
            current = signal.set_wakeup_fd(restore)
            if current != self._sig_wfd:
                # Someone replaced ours meanwhile: theirs stays.
                signal.set_wakeup_fd(current)
        except (ValueError, OSError) as exc:
            logger.info("set_wakeup_fd(%d) failed: %s", restore, exc)

    def close(self) -> None:
        """The loop is closing: remove every handler, give the wakeup fd back."""
        try:
            if not sys.is_finalizing():
                for sig in list(self.handlers):
                    self.remove(sig)
            elif self.handlers:
                warnings.warn(
                    f"Closing the loop {self._loop!r} on interpreter shutdown "
                    f"stage, skipping signal handlers removal",
                    ResourceWarning,
                    source=self._loop,
                )
                self.handlers.clear()
        finally:
            self._close_signal_pipe()


class SignalMethods(CoreLoop):
    """``add_signal_handler``, ``remove_signal_handler``."""

    _signals: SignalWatcher

    def add_signal_handler(
        self, sig: int, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts
    ) -> None:
        if asyncio.iscoroutine(callback) or is_coroutine_function(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        check_signal(sig)
        self._check_closed()
        self._signals.add(sig, Handle(callback, args, self, None))

    def remove_signal_handler(self, sig: int) -> bool:
        check_signal(sig)
        return self._signals.remove(sig)
