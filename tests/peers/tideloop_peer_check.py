"""A pytest plugin the peer runner loads into a peer's suite: which loops ran.

Counts the event loops made during the session: tideloop's (``tideloop``'s
``Loop``, however it was made: the policy that ``--tideloop`` installs, a
``loop_factory``, ``tideloop.testing``) and the stdlib's (every
``asyncio.BaseEventLoop``). Each process (xdist workers included) writes its
counts to ``$TIDELOOP_PEER_REPORT/<pid>.json`` at exit; the runner adds them
up and checks that the ``--tideloop`` run really ran on tideloop.

On virtual time it also gives the tests that talk to a peer the loop cannot
watch the autojump threshold the docs prescribe, as a user would mark them
(``$TIDELOOP_PEER_THRESHOLDS``: JSON, "file::function" -> seconds; the
runner's `THRESHOLDS`).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

_COUNTS = {"tideloop": 0, "stdlib": 0}


def _count_constructions(cls: Any, key: str) -> None:
    """Count every instance of *cls* (subclasses included) that is made."""
    if cls.__dict__.get("_tideloop_peer_counted", False):
        return
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _COUNTS[key] += 1
        original(self, *args, **kwargs)

    cls.__init__ = __init__
    cls._tideloop_peer_counted = True


def pytest_configure(config: pytest.Config) -> None:
    from tideloop._loop import Loop

    _count_constructions(Loop, "tideloop")
    _count_constructions(asyncio.BaseEventLoop, "stdlib")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marks: dict[str, float] = json.loads(os.environ.get("TIDELOOP_PEER_THRESHOLDS") or "{}")
    if not marks or not config.getoption("tideloop_virtual_time", default=False):
        return
    for item in items:
        # "file::function[params]" and "file::Class::function[params]".
        test = item.nodeid.split("[", 1)[0]
        seconds = marks.get(test)
        if seconds is not None:
            item.add_marker(pytest.mark.tideloop(autojump_threshold=seconds))


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get("TIDELOOP_PEER_REPORT")
    if folder:
        Path(folder, f"{os.getpid()}.json").write_text(json.dumps(_COUNTS))
