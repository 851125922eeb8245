"""A leader lease that breaks when one host's clock is behind: a planted bug.

Plain asyncio (streams, a line protocol); the simulator is only the
network object the scenario is given (``SimNetwork``: ``spawn``,
``set_latency``, ``partition``, ``heal``, and ``set_clock`` for the
skewed run). The property is checked after every callback the loop runs
(``tideloop.testing.always``): at most one node acts as the leader.

- **The coordinator**, on host ``coord``, grants a lease: ``ACQUIRE node``
  is answered ``GRANTED expiry`` (the node holds it until *expiry*, the
  coordinator's ``time.time()`` plus `LEASE`; a holder's request renews it)
  or ``DENIED holder`` while another node's lease has not expired (by the
  coordinator's clock).
- **Two nodes**, ``n1`` and ``n2``, ask every `RENEW` seconds. A node acts
  as the leader while it believes its lease holds, stepping down `MARGIN`
  before it ends.
- At `CUT`, ``n1`` is cut off from the coordinator for `CUT_FOR` seconds
  (a partition): it cannot renew, and ``n2`` gets the lease once ``n1``'s
  has expired.
- **The planted bug** (``fixed=False``): a node believes its lease holds
  while its own ``time.time()`` is before the coordinator's *expiry*: two
  hosts' wall clocks compared. With every clock right, ``n1`` steps down
  `MARGIN` before the coordinator gives the lease away, and nothing ever
  fails. With ``n1``'s clock `SKEW` seconds behind (``set_clock("n1",
  offset=-SKEW)``), ``n1`` still acts as the leader for a while after
  ``n2`` has become one.
- **The fix** (``fixed=True``): a node measures its lease with its own
  ``time.monotonic()``, from when it *sent* the request: it ends no later
  than the coordinator's, whatever the wall clocks say.

``python -m scenarios.sim_lease`` runs each version with and without the
skew on tideloop's simulation and prints the outcome.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

PORT = 7300
COORD = "coord"
NODES = ("n1", "n2")
#: Seconds a lease lasts (by the coordinator's clock).
LEASE = 2.0
#: Seconds between a node's requests.
RENEW = 0.5
#: Seconds before its lease ends that a node steps down.
MARGIN = 0.2
#: When n1 is cut off from the coordinator, and for how long.
CUT, CUT_FOR = 3.0, 5.0
#: How far behind n1's wall clock is in the skewed runs.
SKEW = 1.5


class Network(Protocol):
    """What the scenario needs of a simulated network (``SimNetwork`` has it)."""

    def spawn(self, host: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def set_latency(self, a: str, b: str, low: float, high: float | None = None) -> None: ...

    def partition(self, a: str, b: str, *, oneway: bool = False) -> None: ...

    def heal(self, a: str | None = None, b: str | None = None) -> None: ...

    def set_clock(
        self, host: str, *, offset: float | None = None, drift: float | None = None
    ) -> None: ...


async def coordinator(ready: asyncio.Event) -> None:
    holder: list[Any] = [None, 0.0]  # node, expiry (coordinator's wall clock)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                node = line.decode().split()[1]
                now = time.time()
                if holder[0] in (None, node) or now >= holder[1]:
                    holder[:] = [node, now + LEASE]
                    writer.write(f"GRANTED {holder[1]!r}\n".encode())
                else:
                    writer.write(f"DENIED {holder[0]}\n".encode())
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, COORD, PORT)
    ready.set()
    try:
        await server.serve_forever()
    finally:
        server.close()


async def node(name: str, fixed: bool, leaders: dict[str, bool], until: float) -> None:
    """Ask for the lease every RENEW seconds, and lead while it holds."""
    reader, writer = await asyncio.open_connection(COORD, PORT)
    loop = asyncio.get_running_loop()
    lease_ends: float | None = None  # by the clock this version trusts

    def holds() -> bool:
        if lease_ends is None:
            return False
        clock = time.monotonic() if fixed else time.time()
        return clock < lease_ends - MARGIN

    async def watch() -> None:
        # Step down the moment the lease no longer holds.
        while True:
            leaders[name] = holds()
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        while loop.time() < until:
            sent = time.monotonic()
            writer.write(f"ACQUIRE {name}\n".encode())
            try:
                async with asyncio.timeout(RENEW):
                    reply = (await reader.readline()).decode().split()
            except TimeoutError:
                reply = []
            if reply and reply[0] == "GRANTED":
                # The bug: the coordinator's wall-clock expiry, read by ours.
                lease_ends = sent + LEASE if fixed else float(reply[1])
                leaders[name] = holds()
            await asyncio.sleep(max(0.0, sent + RENEW - time.monotonic()))
    finally:
        watcher.cancel()
        leaders[name] = False
        writer.close()


async def scenario(
    net: Network,
    *,
    fixed: bool,
    skew: float = 0.0,
    always: Callable[..., Callable[[], None]] | None = None,
) -> dict[str, bool]:
    """One run of `CUT` + `CUT_FOR` + a few seconds; *always* (default:
    ``tideloop.testing.always``) checks that at most one node leads."""
    if always is None:
        from tideloop.testing import always as tideloop_always

        always = tideloop_always
    for n in NODES:
        net.set_latency(n, COORD, 0.005, 0.02)
    if skew:
        net.set_clock("n1", offset=-skew)
    leaders = dict.fromkeys(NODES, False)
    stop = always(lambda: sum(leaders.values()) <= 1, name="at most one leader")
    ready = asyncio.Event()
    service = net.spawn(COORD, coordinator(ready))
    await ready.wait()
    until = CUT + CUT_FOR + 3.0
    nodes = [net.spawn("n1", node("n1", fixed, leaders, until))]
    await asyncio.sleep(0.3)  # n1 first: it leads until the cut
    nodes.append(net.spawn("n2", node("n2", fixed, leaders, until)))
    await asyncio.sleep(CUT - 0.3)
    net.partition("n1", COORD)
    await asyncio.sleep(CUT_FOR)
    net.heal("n1", COORD)
    try:
        await asyncio.gather(*nodes)
        await asyncio.sleep(0.1)  # the nodes' connections close
    finally:
        stop()
        service.cancel()
        await asyncio.gather(service, return_exceptions=True)
    return leaders


def main(argv: list[str]) -> int:
    from tideloop import testing

    for fixed in (False, True):
        for skew in (0.0, SKEW):
            net = testing.SimNetwork(seed=int(argv[0]) if argv else 0)
            try:
                testing.run(scenario(net, fixed=fixed, skew=skew), network=net)
            except testing.PropertyViolation as exc:
                print(f"fixed={fixed} skew={skew}: {exc}")
            else:
                print(f"fixed={fixed} skew={skew}: never two leaders")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
