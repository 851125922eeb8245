"""How large a simulated run tideloop.testing.SimNetwork carries: hosts x connections.

Not a loop benchmark: one run of `scenario` on a `SimNetwork`, on virtual
time. *hosts* hosts each serve a line echo on port 80; ten client hosts
open *connections* connections spread over the servers, in waves of at most
*wave* open at once; on every connection the client waits a virtual second,
sends its number and checks the echo. Prints the wall and CPU seconds, the
simulated events, and the virtual time the run covered.

Each simulated socket holds one real placeholder fd (so its fd number is
unique in the process): both ends of a connection are in this process, so
*wave* connections need about 2 x *wave* fds, under ``ulimit -n``.

    .ci-venvs/3.11/bin/python -m bench.sim_scale    # 100 hosts, 10,000 connections
    .ci-venvs/3.11/bin/python -m bench.sim_scale --hosts 10 --connections 1000
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

from tideloop import testing


async def scenario(net: testing.SimNetwork, hosts: int, connections: int, wave: int) -> int:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(echo, None, 80, backlog=wave)
        try:
            await asyncio.sleep(3600)
        finally:
            server.close()

    servers = [net.spawn(f"h{i}", serve()) for i in range(hosts)]
    await asyncio.sleep(0.01)

    async def client(i: int) -> int:
        reader, writer = await asyncio.open_connection(f"h{i % hosts}", 80)
        await asyncio.sleep(1)  # the whole wave is open at once
        writer.write(b"%d\n" % i)
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        return int(line)

    async def clients(ids: range) -> list[int]:
        return await asyncio.gather(*(client(i) for i in ids))

    echoed: list[int] = []
    for start in range(0, connections, wave):
        stop = min(connections, start + wave)
        groups = [net.spawn(f"c{j}", clients(range(start + j, stop, 10))) for j in range(10)]
        for replies in await asyncio.gather(*groups):
            echoed.extend(replies)
    if sorted(echoed) != list(range(connections)):
        raise AssertionError("an echo was lost or wrong")
    for task in servers:
        task.cancel()
    await asyncio.gather(*servers, return_exceptions=True)
    return len(echoed)


def measure(hosts: int, connections: int, wave: int, seed: int = 1) -> dict[str, Any]:
    net = testing.SimNetwork(seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    virtual: list[float] = []

    async def main() -> int:
        done = await scenario(net, hosts, connections, wave)
        virtual.append(asyncio.get_running_loop().time())
        return done

    echoed = testing.run(main(), network=net)
    return {
        "hosts": hosts,
        "connections": echoed,
        "wave": wave,
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "events": len(net.log),
        "virtual_s": round(virtual[0], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--connections", type=int, default=10_000)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    parser.add_argument(
        "--wave",
        type=int,
        default=min(5000, (limit - 200) // 2),
        help="connections open at once (default: 5000, or what ulimit -n allows)",
    )
    args = parser.parse_args()
    print(measure(args.hosts, args.connections, args.wave))


if __name__ == "__main__":
    main()
