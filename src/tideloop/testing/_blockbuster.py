"""blockbuster and tideloop: the blocking calls tideloop makes on purpose.

Layer: testing (nothing in the loop imports it). blockbuster fails a blocking
call (``os.stat``, ``os.sendfile``, ``time.sleep``...) made on a thread that
runs an event loop, unless a frame on the call's stack is one it was told may
block; its defaults name asyncio's own frames (``asyncio/base_events.py``
``sendfile``, ``asyncio/unix_events.py`` ``_stop_serving``...). tideloop makes
some of the same calls from its own frames; `allow_tideloop` tells a
``BlockBuster`` so, and the pytest plugin does it for every ``BlockBuster``
made while it is loaded (anyio's and aiohttp's suites make their own).

Invariant: every entry is a call asyncio makes too, from the frame named
beside it, on the loop's thread, where tideloop cannot avoid it. The calls
tideloop can make elsewhere it makes elsewhere: a child starts on a thread of
its own (``Popen`` reads its exec-error pipe there) unless a SIGCHLD handler
is installed, and a Unix server's
stale-socket check and bind run on a helper thread.
"""

from __future__ import annotations

from types import CodeType
from typing import Any, Final

#: blockbuster's function name -> (file suffix, functions) that may call it.
ALLOWANCES: Final[dict[str, tuple[tuple[str, frozenset[str]], ...]]] = {
    # The point of sendfile (asyncio: base_events.sendfile and
    # unix_events._sock_sendfile_native_impl).
    "os.sendfile": (("tideloop/_transports/sendfile.py", frozenset({"_step"})),),
    # A child started while a SIGCHLD handler is installed starts on the
    # loop's thread, so that it is watched before such a handler can reap it;
    # Popen then reads its exec-error pipe there (asyncio: base_events
    # subprocess_exec and subprocess_shell, for every child).
    "os.read": (("tideloop/_transports/subprocess.py", frozenset({"start_child"})),),
    # Server.close() removes its socket file before returning, so that the
    # path can be bound again at once (asyncio: unix_events._stop_serving).
    "os.stat": (("tideloop/_net/server.py", frozenset({"_stop_serving"})),),
    "os.unlink": (("tideloop/_net/server.py", frozenset({"_stop_serving"})),),
    # Joining the helper thread that joined the executor's threads, once it
    # has reported (asyncio: base_events.shutdown_default_executor).
    "threading.Lock.acquire": (("tideloop/_core/executor.py", frozenset({"shutdown_default"})),),
    "threading.Lock.acquire_lock": (
        ("tideloop/_core/executor.py", frozenset({"shutdown_default"})),
    ),
}


def is_checking_wrapper(code: CodeType) -> bool:
    """Whether *code* is blockbuster's checking wrapper, the function it puts
    in place of each blocking call (the call is its ``func``). Told by its
    code: ``functools.wraps`` copies its ``__module__`` onto whatever wraps
    it (aiofiles' coroutine functions)."""
    return code.co_name == "wrapper" and code.co_filename.endswith("blockbuster.py")


def allow_tideloop(blockbuster: Any) -> None:
    """Let *blockbuster* (a ``blockbuster.BlockBuster``) accept tideloop's frames
    where it accepts asyncio's (see `ALLOWANCES`)."""
    functions = blockbuster.functions
    for name, entries in ALLOWANCES.items():
        function = functions.get(name)
        if function is None:
            continue
        for filename, callers in entries:
            function.can_block_in(filename, set(callers))


def patch_blockbuster_class(cls: Any) -> None:
    """Make every ``BlockBuster`` built from now on call `allow_tideloop` on itself."""
    if getattr(cls, "_tideloop_allowed", False):
        return
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        allow_tideloop(self)

    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__
    cls._tideloop_allowed = True
