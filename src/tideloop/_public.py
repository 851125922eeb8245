"""What ``dir()`` of a public package lists: its API, not what its code imports.

Layer: top (beside ``__init__``; ``tideloop`` and ``tideloop.testing`` use
it for their ``__dir__``). Invariant: the list is the package's own dunders,
its ``__all__``, and the public submodules imported so far; nothing else of
its globals (``annotations``, ``types``, the modules its code imports).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping


def public_dir(namespace: Mapping[str, object], exported: Iterable[str], package: str) -> list[str]:
    """``dir()`` of the package *package* whose globals are *namespace* and
    whose ``__all__`` is *exported*."""
    names = {n for n in namespace if n.startswith("__") and n.endswith("__")}
    names.update(exported)
    names.update(
        n
        for n, v in namespace.items()
        if isinstance(v, types.ModuleType)
        and not n.startswith("_")
        and v.__name__ == f"{package}.{n}"
    )
    return sorted(names)
