"""tideloop: a complete, drop-in asyncio event loop written in typed Python.

    import tideloop
    tideloop.run(main())
    # or: asyncio.run(main(), loop_factory=tideloop.new_event_loop)

Public API only; see ``tideloop._loop`` for how the loop is composed.
"""

from __future__ import annotations

from typing import Any

from ._console import install_from_environment as _install_console_from_environment
from ._core.metrics import LAG_BOUNDS, LoopMetrics, SlowCallback
from ._core.native import NATIVE
from ._entry import install, run
from ._loop import Loop, new_event_loop
from ._public import public_dir as _public_dir
from ._recorder import Recorder
from ._trace import trace

__all__ = [
    "LAG_BOUNDS",
    "NATIVE",
    "EventLoopPolicy",
    "Loop",
    "LoopMetrics",
    "Recorder",
    "SlowCallback",
    "__version__",
    "install",
    "new_event_loop",
    "run",
    "trace",
]

__version__ = "0.1.0"

# TIDELOOP_CONSOLE=PATH: a console socket for every loop (tideloop._console).
_install_console_from_environment()


def __getattr__(name: str) -> Any:
    # Built lazily: defining a policy subclass at import time would touch
    # names that Python 3.14 deprecates.
    if name == "EventLoopPolicy":
        from ._entry import policy_class

        return policy_class()
    raise AttributeError(f"module 'tideloop' has no attribute {name!r}")


def __dir__() -> list[str]:
    # dir(tideloop) lists the public API (and the module's own dunders and the
    # public submodules imported so far), not the names its code imports.
    return _public_dir(globals(), __all__, __name__)
