"""The wall clock and the host of a simulated run's code, process-wide.

Layer: testing (above ``_sim``, below ``_world``, whose `seeded_globals`
applies `install` for the duration of a simulated run, through a
`Patches`). What code reads as the time of day, in every form, and which
simulated host a thread runs on:

- ``time.time()`` and ``time.time_ns()`` read the wall clock of the host the
  calling code runs on (``SimNetwork.wall_time``: `EPOCH` plus the loop's
  time, moved by ``SimNetwork.set_clock``); ``time.localtime()``,
  ``gmtime()``, ``ctime()``, ``asctime()`` and ``strftime()`` without a time
  argument read it too. ``time.monotonic()`` is the loop's time, the same on
  every host (``_sim/clocks.py`` says why).
- ``datetime.datetime`` and ``datetime.date`` become `SimDatetime` and
  `SimDate`: subclasses whose ``now()``, ``utcnow()``, ``today()`` read that
  wall clock, and that any real ``datetime``/``date`` is an instance of (so
  ``isinstance`` checks keep working both ways). They replace the
  ``datetime`` module's attributes and every module's own reference
  (``from datetime import datetime``, through `Patches.everywhere`). They
  are named ``datetime.datetime`` and ``datetime.date`` (reprs read as
  ever), and every date and datetime pickles as before, real ones included
  (a ``copyreg`` reducer while installed). ``utcnow()`` warns as the
  running Python's does.
- **The host of a thread.** Code on a host runs in a task spawned there (a
  context variable says which host). An executor job (``run_in_executor``,
  ``asyncio.to_thread``, any ``ThreadPoolExecutor.submit``) runs on the host
  of the code that submitted it, and a ``threading.Thread`` on the host of
  the code that started it, for the whole of its run.

Invariant: outside a run (no hook installed), `SimDatetime` and `SimDate`
read the real clock, exactly like the classes they extend.
"""

from __future__ import annotations

import concurrent.futures
import copyreg
import datetime as _datetime_module
import functools
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ._patching import Patches
from ._sim import SimNetwork
from ._sim.kernel import HOST

_REAL_DATETIME = _datetime_module.datetime
_REAL_DATE = _datetime_module.date

#: The wall clock of the running simulated run (None: no run; the real one).
_wall: Callable[[], float] | None = None


def _now() -> float:
    wall = _wall
    return time.time() if wall is None else wall()


class _DateType(type):
    """Makes a real ``date`` an instance of `SimDate`."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _REAL_DATE)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _REAL_DATE)


class _DatetimeType(_DateType):
    """Makes a real ``datetime`` an instance of `SimDatetime`."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _REAL_DATETIME)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _REAL_DATETIME)


class SimDate(_REAL_DATE, metaclass=_DateType):
    """``datetime.date`` whose ``today()`` reads the simulated wall clock."""

    __slots__ = ()

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(_now())

    def __reduce_ex__(self, protocol: Any) -> Any:
        # By the name the module has for it now: a pickle made in a run is
        # a plain ``datetime.date`` pickle, and one made after it too.
        return (_datetime_module.date, _REAL_DATE.__reduce_ex__(self, protocol)[1])

    def __repr__(self) -> str:
        return repr(_REAL_DATE(self.year, self.month, self.day))


class SimDatetime(_REAL_DATETIME, SimDate, metaclass=_DatetimeType):
    """``datetime.datetime`` whose ``now()``, ``today()`` and ``utcnow()`` read
    the simulated wall clock."""

    __slots__ = ()

    @classmethod
    def now(cls, tz: _datetime_module.tzinfo | None = None) -> Any:
        return cls.fromtimestamp(_now(), tz)

    @classmethod
    def today(cls) -> Any:
        return cls.fromtimestamp(_now())

    @classmethod
    def utcnow(cls) -> Any:
        # Whatever the running Python says of utcnow() (3.12 deprecates it),
        # said again from the caller's line.
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            _REAL_DATETIME.utcnow()
        for warning in said:
            warnings.warn(warning.message, warning.category, stacklevel=2)
        value = _REAL_DATETIME.fromtimestamp(_now(), _datetime_module.UTC)
        return cls(*value.timetuple()[:6], value.microsecond)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_datetime_module.datetime, _REAL_DATETIME.__reduce_ex__(self, protocol)[1])

    def __repr__(self) -> str:
        return repr(_REAL_DATETIME.combine(self, self.timetz()))


# Named as the classes they stand for: reprs read ``datetime.datetime(...)``,
# and pickle finds them as ``datetime.datetime`` while they are installed.
for _cls, _name in ((SimDate, "date"), (SimDatetime, "datetime")):
    _cls.__module__ = "datetime"
    _cls.__name__ = _cls.__qualname__ = _name


def _pickle_as(sim: type) -> Callable[[Any], Any]:
    """A copyreg reducer for a real date or datetime during a run: pickled as
    ``datetime.<name>`` (which then names *sim*), the same bytes as ever."""

    def reduce(value: Any) -> Any:
        return (sim, value.__reduce_ex__(2)[1])

    return reduce


def _restore_reducer(cls: type, reducer: Any) -> None:
    if reducer is None:
        copyreg.dispatch_table.pop(cls, None)
    else:
        copyreg.dispatch_table[cls] = reducer


def _on_host(host: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    # None (no host: "client") is set too: a pool's worker thread may have
    # been started from a host's code, and kept that host.
    token = HOST.set(host)
    try:
        return fn(*args, **kwargs)
    finally:
        HOST.reset(token)


def install(patches: Patches, net: SimNetwork, loop_time: Callable[[], float]) -> None:
    """Make the wall clock *net*'s, per host, and carry hosts into threads,
    until *patches* are undone (see the module docstring)."""
    global _wall

    def wall() -> float:
        return net.wall_time(now=loop_time())

    kin = ("localtime", "gmtime", "ctime", "asctime", "strftime")
    real = {name: getattr(time, name) for name in kin}

    def localtime(secs: float | None = None) -> time.struct_time:
        return real["localtime"](wall() if secs is None else secs)  # type: ignore[no-any-return]

    def gmtime(secs: float | None = None) -> time.struct_time:
        return real["gmtime"](wall() if secs is None else secs)  # type: ignore[no-any-return]

    def ctime(secs: float | None = None) -> str:
        return real["ctime"](wall() if secs is None else secs)  # type: ignore[no-any-return]

    def asctime(t: Any = None) -> str:
        return real["asctime"](localtime() if t is None else t)  # type: ignore[no-any-return]

    def strftime(format: str, t: Any = None) -> str:
        return real["strftime"](format, localtime() if t is None else t)  # type: ignore[no-any-return]

    patches.attribute(time, "time", wall)
    patches.attribute(time, "time_ns", lambda: int(wall() * 1e9))
    for name, fn in (
        ("localtime", localtime),
        ("gmtime", gmtime),
        ("ctime", ctime),
        ("asctime", asctime),
        ("strftime", strftime),
    ):
        patches.attribute(time, name, fn)

    previous = _wall
    _wall = wall

    def unhook() -> None:
        global _wall
        _wall = previous

    patches.attribute(_datetime_module, "datetime", SimDatetime)
    patches.attribute(_datetime_module, "date", SimDate)
    patches.everywhere(
        {
            id(_REAL_DATETIME): (_REAL_DATETIME, SimDatetime),
            id(_REAL_DATE): (_REAL_DATE, SimDate),
        }
    )
    for real_class, sim in ((_REAL_DATETIME, SimDatetime), (_REAL_DATE, SimDate)):
        previous_reducer = copyreg.dispatch_table.get(real_class)
        copyreg.pickle(real_class, _pickle_as(sim))
        patches.on_undo(functools.partial(_restore_reducer, real_class, previous_reducer))
    _carry_hosts(patches)
    patches.on_undo(unhook)


def _carry_hosts(patches: Patches) -> None:
    real_start = threading.Thread.start
    real_submit = concurrent.futures.ThreadPoolExecutor.submit

    def start(self: threading.Thread) -> None:
        host = HOST.get(None)
        if host is not None:
            self.run = functools.partial(_on_host, host, self.run)  # type: ignore[method-assign]
        real_start(self)

    def submit(
        self: concurrent.futures.ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        fn = functools.partial(_on_host, HOST.get(None), fn)
        return real_submit(self, fn, *args, **kwargs)

    patches.attribute(threading.Thread, "start", start)
    patches.attribute(concurrent.futures.ThreadPoolExecutor, "submit", submit)


__all__ = ["SimDate", "SimDatetime", "install"]
