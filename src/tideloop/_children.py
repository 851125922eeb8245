"""ChildWatcher: learns when a child process exits, and reaps it.

Layer: watchers, beside signals (the fd layer below, the transports above).
A component, not a transport: the Loop builds one, hands it the core loop
and the fd registry, and owns it (it is closed with the loop). The
subprocess transport asks it to `watch` each child it starts.

Facts / what this means for us:
- A child that exits stays a zombie until its parent reaps it with
  ``waitpid``; the exit status comes from that call. Every child we start
  must be reaped exactly once, by us.
- Linux >= 5.3 has pid file descriptors: ``os.pidfd_open(pid)`` gives an fd
  that turns readable when the process exits (PyPy has no os.pidfd_open:
  there it is called through libc). So a child is watched like a
  socket: no thread, no SIGCHLD handler, nothing shared between loops or
  with other code that starts processes. ``waitpid(pid, 0)`` then returns at
  once. A pidfd can be opened for a zombie (a child that already exited),
  so there is no race between starting a child and watching it.
- Elsewhere (older kernels, other systems, or where a seccomp policy
  refuses pidfd_open) a thread per child waits for it and tells the loop
  with ``call_soon_threadsafe``: asyncio's ThreadedChildWatcher. The thread
  waits with ``waitid(WEXITED | WNOWAIT)``, which does not reap: the pid
  stays reserved (a zombie) until the loop's thread reaps it and publishes
  the exit in one step, so a ``send_signal()`` in between can never reach a
  recycled pid (gh-127049). PyPy has no ``os.waitid``: there the thread
  calls libc's through ctypes (Linux). With no waitid at all the thread
  must reap; then it remembers the pid, under a lock `send_signal` takes
  too, until the exit is published. SIGCHLD handlers are not used at all:
  there is only one per process, it would conflict with other code, and it
  only works in the main thread.
- If someone else reaped the child first (a ``waitpid(-1)`` elsewhere in the
  program), the status is lost: asyncio then reports return code 255 with a
  warning, and so do we.
- asyncio on Python 3.11-3.13 uses the *policy's* child watcher, which a
  program may replace (deprecated since 3.12, gone in 3.14); tideloop's
  loops always use their own (``tests/divergences.py``,
  "own-child-watcher").

Invariants:
- A watched child's callback is called exactly once, in the loop's thread,
  with the child reaped; its pidfd (if any) is closed then.
- ``close()`` (the loop is closing) closes the pidfds of children still
  running; children that have already exited are reaped then, so that no
  zombie is left behind by a closing loop.
"""

from __future__ import annotations

import errno
import itertools
import os
import sys
import threading
from collections.abc import Callable
from typing import Final

from tideloop._core.errors import logger
from tideloop._core.handles import Handle
from tideloop._core.interfaces import LoopServices
from tideloop._fdio.registry import FdRegistry

#: ``callback(pid, returncode)``.
ExitCallback = Callable[[int, int], object]


def _libc_pidfd_open() -> Callable[[int, int], int] | None:
    """``pidfd_open(2)`` through libc's ``syscall()`` (ctypes), where os has none.

    Facts / what this means for us: PyPy has no ``os.pidfd_open``, but the
    system call is there (Linux >= 5.3), and its number, 434, is the same on
    every architecture but alpha (new system calls share one table since
    Linux 5.1). So PyPy watches children with pidfds too, like CPython: no
    thread per child, and the exit is seen in the same poll as a SIGCHLD
    (a program's own SIGCHLD handler that reaps every child, asyncio's
    FastChildWatcher, then runs after ours, as on CPython). The fd is
    close-on-exec, as os.pidfd_open's.
    """
    if sys.platform != "linux" or hasattr(os, "pidfd_open"):
        return None
    else:  # mypy checks platform-guarded code only as an if/else branch
        try:
            import ctypes

            syscall = ctypes.CDLL(None, use_errno=True).syscall
        except (ImportError, OSError, AttributeError):
            return None
        syscall.restype = ctypes.c_long

        def pidfd_open(pid: int, flags: int) -> int:
            fd = int(syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(flags)))
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))  # ESRCH: a ProcessLookupError
            return fd

        return pidfd_open


def _pidfd_opener() -> Callable[[int, int], int] | None:
    if sys.platform != "linux":
        return None
    else:  # mypy checks platform-guarded code only as an if/else branch
        return os.pidfd_open if hasattr(os, "pidfd_open") else _libc_pidfd_open()


#: ``os.pidfd_open``, or libc's (PyPy), or None.
_PIDFD_OPEN: Final = _pidfd_opener()


def _can_use_pidfd() -> bool:
    if _PIDFD_OPEN is None:
        return False
    try:
        os.close(_PIDFD_OPEN(os.getpid(), 0))
    except OSError:
        return False  # too old a kernel, or refused by a seccomp policy
    return True


#: Whether this process can watch children with pidfds (checked once).
HAS_PIDFD: Final = _can_use_pidfd()


def _libc_waitid() -> Callable[[int, bool], bool] | None:
    """libc's ``waitid(P_PID, pid, WEXITED | WNOWAIT)`` through ctypes (Linux), or None.

    Facts / what this means for us: PyPy has no ``os.waitid``, but its ctypes
    calls libc with the GIL released, so a watcher thread can block in
    libc's waitid while the loop runs: PyPy then keeps the design above (the
    thread never reaps). Linux's numbers: P_PID is 1, WEXITED 4, WNOHANG 1,
    WNOWAIT 0x01000000; siginfo_t is 128 bytes and starts with si_signo,
    which waitid sets (to SIGCHLD) when it reports a child and leaves zero
    when, with WNOHANG, the child still runs. Other systems number these
    differently, so elsewhere this is None.
    """
    if sys.platform != "linux" or hasattr(os, "waitid"):
        return None
    else:  # mypy checks platform-guarded code only as an if/else branch
        try:
            import ctypes

            waitid = ctypes.CDLL(None, use_errno=True).waitid
        except (ImportError, OSError, AttributeError):
            return None
        waitid.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_int)
        waitid.restype = ctypes.c_int

        def wait_exited(pid: int, block: bool) -> bool:
            info = ctypes.create_string_buffer(128)
            options = 4 | 0x01000000 | (0 if block else 1)
            while waitid(1, pid, info, options) != 0:
                err = ctypes.get_errno()
                if err != errno.EINTR:
                    raise OSError(err, os.strerror(err))  # ECHILD: a ChildProcessError
            return info.raw[:4] != bytes(4)

        return wait_exited


#: ``os.waitid``'s stand-in where os has none (PyPy): see `_libc_waitid`.
_LIBC_WAITID: Final = _libc_waitid()
#: Whether a thread can wait for a child without reaping it (Linux): with
#: ``os.waitid``, or with libc's (PyPy).
HAS_WAITID: Final = sys.platform == "linux" and (hasattr(os, "waitid") or _LIBC_WAITID is not None)


def waitid_exited(pid: int, *, block: bool) -> bool:
    """Has child *pid* exited? ``waitid(WEXITED | WNOWAIT)``, which never reaps it.

    With *block*, waits until it has. Raises ChildProcessError if *pid* is
    not an unreaped child of ours. Only where `HAS_WAITID`.
    """
    if _LIBC_WAITID is not None:
        return _LIBC_WAITID(pid, block)
    if sys.platform == "linux":
        options = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        return os.waitid(os.P_PID, pid, options) is not None
    else:  # typeshed has no os.waitid for macOS; HAS_WAITID is False off Linux
        raise RuntimeError("waitid_exited() is for Linux only (HAS_WAITID)")


_thread_ids = itertools.count()


def _reap(pid: int) -> int:
    """waitpid(pid) and the return code (255 if someone else reaped it)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        logger.warning(
            "child process pid %d exit status already read:  will report returncode 255", pid
        )
        return 255
    return os.waitstatus_to_exitcode(status)


class ChildWatcher:
    __slots__ = ("_fds", "_lock", "_loop", "_pidfds", "_reaped_early", "use_pidfd")

    def __init__(self, loop: LoopServices, fds: FdRegistry, *, use_pidfd: bool = HAS_PIDFD) -> None:
        self._loop = loop
        self._fds = fds
        self.use_pidfd = use_pidfd
        # pid -> pidfd, for children watched through pidfds and not yet reaped.
        self._pidfds: dict[int, int] = {}
        # Without waitid: pids a thread has reaped whose exit the loop has not
        # published yet, guarded by the lock `send_signal` takes.
        self._lock = threading.Lock()
        self._reaped_early: set[int] = set()

    def watched(self) -> set[int]:
        """The pids of the children watched through pidfds, not yet reaped."""
        return set(self._pidfds)

    def send_signal(self, pid: int, sig: int) -> None:
        """``os.kill(pid, sig)``, unless a watcher thread has reaped *pid* already."""
        with self._lock:
            if pid in self._reaped_early:
                return  # exited: its pid may belong to another process by now
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def open_pidfd(self, pid: int) -> int | None:
        """A pidfd for *pid* to give `watch` later, or None (no pidfds, or reaped).

        Any thread may call it: the spawn thread does, right after the child
        starts, so that a SIGCHLD handler that reaps every child (asyncio's
        FastChildWatcher, some programs') cannot take the exit status first.
        """
        if not (self.use_pidfd and _PIDFD_OPEN is not None):
            return None
        try:
            return _PIDFD_OPEN(pid, 0)
        except ProcessLookupError:
            return None

    def watch(self, pid: int, callback: ExitCallback, pidfd: int | None = None) -> None:
        """Call ``callback(pid, returncode)`` in the loop once *pid* has exited.

        *pidfd*, from `open_pidfd`, becomes the watcher's (it closes it).
        """
        if pidfd is None:
            pidfd = self.open_pidfd(pid)
        if pidfd is not None:
            self._pidfds[pid] = pidfd
            handle = Handle(self._exited, (pid, pidfd, callback), self._loop, None)
            self._fds.add_internal_reader(pidfd, handle)
            return
        # No pidfd (none here, or the child was reaped by someone else: the
        # thread then reports 255).
        thread = threading.Thread(
            target=self._wait_in_thread,
            args=(pid, callback),
            name=f"tideloop-waitpid-{next(_thread_ids)}",
            daemon=True,
        )
        thread.start()

    def _exited(self, pid: int, pidfd: int, callback: ExitCallback) -> None:
        self._fds.remove_internal_reader(pidfd)
        del self._pidfds[pid]
        os.close(pidfd)
        returncode = _reap(pid)
        if self._loop._debug:
            logger.debug("process %s exited with returncode %s", pid, returncode)
        callback(pid, returncode)

    def _wait_in_thread(self, pid: int, callback: ExitCallback) -> None:
        if HAS_WAITID:
            try:
                waitid_exited(pid, block=True)
            except ChildProcessError:
                pass  # reaped by someone else: _reap reports 255
            self._post(pid, self._reap_and_publish, pid, callback)
        else:
            # Not under the lock: send_signal() (which takes it) would block
            # until the child exits. What is left is the moment between the
            # reap and the add, in which its pid could be signalled.
            returncode = _reap(pid)
            with self._lock:
                self._reaped_early.add(pid)
            self._post(pid, self._publish, pid, returncode, callback)

    def _post(self, pid: int, func: Callable[..., object], *args: object) -> None:
        """Hand *func* to the loop's thread (from a watcher thread)."""
        loop = self._loop
        try:
            if not loop.is_closed():
                loop.call_soon_threadsafe(func, *args)
                return
        except RuntimeError:  # closed since the check
            pass
        logger.warning("Loop %r that handles pid %r is closed", loop, pid)
        if HAS_WAITID:
            _reap(pid)  # no zombie left behind

    def _reap_and_publish(self, pid: int, callback: ExitCallback) -> None:
        self._publish(pid, _reap(pid), callback)

    def _publish(self, pid: int, returncode: int, callback: ExitCallback) -> None:
        with self._lock:
            self._reaped_early.discard(pid)
        if self._loop._debug:
            logger.debug("process %s exited with returncode %s", pid, returncode)
        callback(pid, returncode)

    def close(self) -> None:
        for pid, pidfd in self._pidfds.items():
            self._fds.remove_internal_reader(pidfd)
            os.close(pidfd)
            try:
                os.waitpid(pid, os.WNOHANG)  # reap it if it has exited
            except ChildProcessError:
                pass
        self._pidfds.clear()
