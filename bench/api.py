"""The workload interface: what one workload module declares.

A workload is one module in ``bench/workloads/`` that defines a module-level
``WORKLOAD``, an instance of one of the two classes below. Adding a workload
(UDP ping-pong, TLS echo, ...) means adding one such file; the harness finds
it by name, runs it under every loop, and reports it.

- `Primitive`: an ``async def run(n) -> Sample`` that exercises the loop
  in-process (callbacks, timers, tasks). The harness times it in a fresh
  worker process per loop and repeat, pinned to one CPU.
- `Server`: an ``async def start(address, params) -> asyncio.AbstractServer``
  that starts a server on the running loop. The harness runs it in a fresh
  process per loop and repeat, pinned to one CPU, and drives it from the
  other CPU with a compiled load generator: ``client="echo"`` is
  ``bench/clients/echo_client.c`` (params ``size`` and ``conns``),
  ``client="http"`` is ``wrk`` (param ``conns``); ``client="tls_echo"``
  and ``client="https"`` are the same over TLS (the echo client's TLS
  mode, wrk with an https URL), for a server started with ``ssl=``.

Workload modules import only asyncio, the stdlib, this module and the
packages they name in ``requires``: they must run unchanged on every loop.

A workload names in ``needs`` the loop features beyond TCP and the
scheduling primitives that it uses (`NEEDS`: Unix sockets, TLS, UDP,
subprocesses). Not every loop has them all (rloop 0.5 has neither Unix
sockets nor TLS): a loop that raises ``NotImplementedError`` for one is
reported as ``cannot run`` for that case, with what the workload needs and
which of the loop's functions raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "NEEDS",
    "Address",
    "Params",
    "Primitive",
    "Sample",
    "Server",
    "case_label",
    "needs_text",
]

#: Parameters of one case of a server workload, e.g. ``{"size": 1024, "conns": 10}``.
Params = Mapping[str, int]
#: Where a server listens: ``(host, port)`` for TCP, a filesystem path for Unix sockets.
Address = tuple[str, int] | str
#: The loop features a workload may need (its ``needs``), and how a reason names them.
NEEDS: dict[str, str] = {
    "unix": "Unix sockets",
    "tls": "TLS",
    "udp": "UDP",
    "subprocess": "subprocesses",
}


def _check_needs(name: str, needs: Sequence[str]) -> None:
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"{name}: unknown needs {unknown} (known: {', '.join(NEEDS)})")


def needs_text(needs: Sequence[str]) -> str:
    """``Unix sockets``, ``TLS and UDP``: the features *needs* names, for a reason."""
    names = [NEEDS[n] for n in needs]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


@dataclass(frozen=True, slots=True)
class Sample:
    """What a primitive's ``run`` returns: operations done, optional per-op latencies (ns)."""

    ops: int
    latencies_ns: Sequence[int] | None = None


@dataclass(frozen=True)
class Primitive:
    """An in-process workload: ``run(n)`` does about *n* operations and reports them."""

    name: str
    title: str
    unit: str  # what one op is, for the table header: "callbacks", "timers", ...
    run: Callable[[int], Coroutine[Any, Any, Sample]]
    quick_n: int
    full_n: int
    #: Sizes for a primitive whose cost depends on n itself (pending timers): the
    #: full run has one case per size, labelled ``<unit>=<n>``; quick runs quick_n.
    scale: Sequence[int] = ()
    needs: Sequence[str] = ()  # loop features beyond the primitives (NEEDS), e.g. "udp"
    kind: Literal["primitive"] = field(default="primitive", init=False)

    def __post_init__(self) -> None:
        _check_needs(self.name, self.needs)

    def cases(self, quick: bool) -> list[dict[str, int]]:
        if self.scale and not quick:
            return [{"n": n, self.unit: n} for n in self.scale]
        return [{"n": self.quick_n if quick else self.full_n}]


@dataclass(frozen=True)
class Server:
    """A server workload, driven over loopback by a compiled client on another CPU."""

    name: str
    title: str
    client: Literal["echo", "http", "tls_echo", "https"]
    family: Literal["tcp", "unix"]
    start: Callable[[Address, Params], Coroutine[Any, Any, asyncio.AbstractServer]]
    full: Sequence[Params]
    quick: Sequence[Params]
    requires: Sequence[str] = ()  # importable modules the server needs, e.g. "aiohttp"
    needs: Sequence[str] = ()  # loop features beyond TCP (NEEDS), e.g. "unix", "tls"
    kind: Literal["server"] = field(default="server", init=False)

    def __post_init__(self) -> None:
        _check_needs(self.name, self.needs)
        implied = {"unix": self.family == "unix", "tls": self.client in ("tls_echo", "https")}
        missing = [need for need, used in implied.items() if used and need not in self.needs]
        if missing:
            raise ValueError(f"{self.name}: its family or client needs {missing}: say so in needs")

    @property
    def unit(self) -> str:
        return "msgs" if self.client in ("echo", "tls_echo") else "reqs"

    def cases(self, quick: bool) -> list[dict[str, int]]:
        return [dict(p) for p in (self.quick if quick else self.full)]


def _size(n: int) -> str:
    return f"{n // 1024}KiB" if n % 1024 == 0 else f"{n}B"


def case_label(params: Mapping[str, int]) -> str:
    """A short human label for a case's parameters: ``1KiB x10``, ``x100``, ``n=100000``."""
    parts = []
    if "size" in params:
        parts.append(_size(params["size"]))
    if "conns" in params:
        parts.append(f"x{params['conns']}")
    parts.extend(f"{k}={v}" for k, v in params.items() if k not in ("size", "conns", "n"))
    return " ".join(parts)
