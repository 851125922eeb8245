"""The suite under blockbuster: a blocking call tideloop makes on a loop's thread fails its test.

``pytest --blockbuster`` runs every test with a ``blockbuster.BlockBuster``
active (the checker anyio's and aiohttp's suites run under), told about
tideloop's accepted frames as the pytest plugin tells every BlockBuster
(`tideloop.testing.allow_tideloop`). The suite's tests block on purpose in
many places: a blocking peer socket in a coroutine, ``time.sleep`` in a
callback to make it slow. Those calls are the test's, not the loop's, so a
call is checked only when **the loop made it**: walking up from the blocking
call past the standard library's own frames (``socket.create_connection``,
``subprocess.Popen``...), the first other frame is tideloop's. A call the
test's code makes, even from a callback tideloop runs, is let through.

asyncio's frames count as the standard library's: the stdlib loop's own
blocking calls (it stats files, starts children and joins threads on the
loop's thread) are attributed to the test that drove it, so the stdlib loop
is not checked here; tideloop is, wherever the suite runs it.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import tideloop
from tideloop.testing import allow_tideloop

_TIDELOOP = os.path.dirname(os.path.abspath(tideloop.__file__)) + os.sep
_STDLIB = tuple(
    {os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")}
)
_THIRD_PARTY = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and not any(part in filename for part in _THIRD_PARTY)


def made_by_tideloop(frame: FrameType | None, skip: tuple[str, ...]) -> bool:
    """Whether the first frame above *frame* that is neither in *skip* nor the
    standard library's is tideloop's."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip) and not _is_stdlib(filename):
            return filename.startswith(_TIDELOOP)
        frame = frame.f_back
    return False


def _loop_calls_only(original: Callable[..., bool], skip: tuple[str, ...]) -> Callable[..., bool]:
    def can_block(*args: Any, **kwargs: Any) -> bool:
        if original(*args, **kwargs):
            return True
        return not made_by_tideloop(sys._getframe(1), skip)

    return can_block


@contextmanager
def blockbuster_on_tideloop() -> Iterator[Any]:
    """A BlockBuster, active, that fails the blocking calls tideloop makes on a loop's thread."""
    import blockbuster

    checker = blockbuster.BlockBuster()
    allow_tideloop(checker)
    skip = (os.path.dirname(os.path.abspath(blockbuster.__file__)) + os.sep, __file__)
    for function in checker.functions.values():
        function.can_block_predicate = _loop_calls_only(function.can_block_predicate, skip)
    checker.activate()
    try:
        yield checker
    finally:
        checker.deactivate()
