"""The line protocol both differential workers speak (no tests here).

A worker (``differential_worker.py``, ``differential_transport_worker.py``)
is a process of its own that `serve`s: it writes one JSON line first,
``{"native": ...}`` (whether the core it runs is the native one, so that the
test can tell a pure-only build from a native one), then, for each request
it reads on stdin (one JSON line), the trace of running it (one JSON line),
flushed at once, until stdin closes. The worker imports this module from
its own folder (a script's folder is on its ``sys.path``).

A run appends what happens to `TRACE` (the worker clears it before each
run); `call` makes an API call and records its failure there, type and
message, so that the two cores' errors are compared too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

#: What the current run did, in order (JSON-able items).
TRACE: list[Any] = []


def call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Make an API call; record a failure's type and message (the result is the handle)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        TRACE.append(["error", what, type(exc).__name__, str(exc)])
        return None


def serve(native: bool, run: Callable[[Any], list[Any]]) -> None:
    """Answer each request on stdin with ``run(request)``, after saying *native*."""
    sys.stdout.write(json.dumps({"native": native}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        sys.stdout.write(json.dumps(run(json.loads(line))) + "\n")
        sys.stdout.flush()
