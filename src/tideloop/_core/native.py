"""What the mypyc build compiles, and how a class opts out of being a native class.

Layer: core (imported by any layer; imports nothing of tideloop's).

tideloop's source is the same for both builds: ``pip install .`` installs it
as Python; ``TIDELOOP_COMPILE=1 pip install .`` compiles the hot modules
(``setup.py`` lists them) to C extensions with mypyc. In a compiled module,
every class is a mypyc *native* class by default: a C type with fixed
attributes, single inheritance, no ``__del__`` and no interpreted subclasses.
That is right for the loop's own components (timer queue, fd registry,
counters), whose attribute reads it makes cheap, and wrong for every class
that extends one of asyncio's (``AbstractEventLoop``, ``Handle``, the
transports): those must stay ordinary Python classes, because asyncio and
user code subclass them, set attributes on them, or rely on ``__del__``.

`python_class` marks them. mypyc compiles a class with a decorator it does
not know into a regular Python class (its methods are still compiled), and
in the pure build the decorator returns the class unchanged.

Invariant: every class in a compiled module that extends a class defined
outside tideloop, or that tideloop's uncompiled modules subclass, carries
`python_class` (``tests/unit/test_native.py`` checks it).
"""

from __future__ import annotations

from typing import Final, TypeVar

__all__ = ["MARK", "is_compiled", "python_class"]

_C = TypeVar("_C", bound=type)


#: The attribute `python_class` sets, so that tests can check the invariant.
MARK: Final = "__tideloop_python_class__"


def python_class(cls: _C) -> _C:
    """Keep *cls* an ordinary Python class in the compiled build (see module docstring)."""
    setattr(cls, MARK, True)
    return cls


def is_compiled(module_file: str | None) -> bool:
    """Whether the module loaded from *module_file* is a compiled extension."""
    return module_file is not None and not module_file.endswith(".py")
