"""What the bench's tests share (no tests here): a harness configuration for a quick run.

`quick_config` is a ``bench.harness.Config`` that measures as little as a
test needs: the quick parameters, one repeat, no warm-up, no measured
duration, no CPU pinning. A test names only what it needs otherwise (a
warm-up to check it is passed on, an interpreter, a missing client).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench import harness

_QUICK = harness.Config(
    quick=True, repeats=1, warmup=0.0, duration=0.0, server_cpu=None, client_cpu=None
)


def quick_config(**fields: Any) -> harness.Config:
    """A quick run's configuration, with *fields* (``harness.Config``'s) set."""
    return dataclasses.replace(_QUICK, **fields)
