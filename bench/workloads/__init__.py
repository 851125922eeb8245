"""Workload registry: every public module here that defines ``WORKLOAD``.

Add a workload by adding a module (see ``bench/api.py`` for the interface);
modules whose names start with ``_`` hold shared helpers and are skipped.
"""

from __future__ import annotations

import importlib
import pkgutil

from bench.api import Primitive, Server

__all__ = ["Workload", "all_workloads", "get"]

Workload = Primitive | Server


def all_workloads() -> list[Workload]:
    """Every workload: primitives, then echo servers, then HTTP servers; each group by name."""
    found: list[Workload] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        workload = getattr(module, "WORKLOAD", None)
        if not isinstance(workload, (Primitive, Server)):
            raise TypeError(f"bench/workloads/{info.name}.py defines no WORKLOAD")
        if workload.name != info.name:
            raise ValueError(
                f"bench/workloads/{info.name}.py: WORKLOAD.name is not the module name"
            )
        found.append(workload)
    found.sort(key=lambda w: (w.kind != "primitive", getattr(w, "client", ""), w.name))
    return found


def get(name: str) -> Workload:
    module = importlib.import_module(f"{__name__}.{name}")
    workload = module.WORKLOAD
    assert isinstance(workload, (Primitive, Server))
    return workload
