"""What a simulated run makes deterministic beyond the network, and the checks of it.

``tideloop.testing.sometimes`` (fault points from the seed), the seeded
``random``/``os.urandom``/``uuid4`` and virtual ``time`` of a simulated run
(and their restoration after it), ``check_determinism`` (same log twice and
in a fresh process; a nondeterministic scenario is caught and the first
divergent event named), and the ``tideloop_net`` pytest fixture.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import tideloop
from tideloop import testing
from tideloop.testing import NondeterminismError, SimNetwork, check_determinism, sometimes

from sim_support import cancelled, open_for

#: The tideloop under test: a child process imports it, not an installed copy.
TIDELOOP_SRC = os.path.dirname(os.path.dirname(tideloop.__file__))


async def flaky_service(net: SimNetwork) -> list[Any]:
    """A client retrying with jitter against a server whose replies sometimes fail."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readline()
        if sometimes(0.5):
            writer.close()  # a fault the test planted: drop the request
            return
        writer.write(b"ok " + request)
        writer.close()

    server = net.spawn("api", open_for(asyncio.start_server(handler, None, 80)))
    await asyncio.sleep(0.01)
    outcomes: list[Any] = []
    for i in range(8):
        request_id = str(uuid.uuid4())[:8]
        for _attempt in range(20):
            reader, writer = await asyncio.open_connection("api", 80)
            writer.write(f"{i} {request_id}\n".encode())
            reply = await reader.readline()
            writer.close()
            await writer.wait_closed()
            if reply:
                outcomes.append((reply.decode().strip(), round(time.time(), 6)))
                break
            await asyncio.sleep(random.uniform(0.01, 0.1))  # jitter
    await cancelled(server)
    return outcomes


def run_flaky(seed: int) -> tuple[list[Any], list[Any]]:
    net = SimNetwork(seed=seed)

    async def main() -> list[Any]:
        return await flaky_service(net)

    outcomes = testing.run(main(), network=net)
    return outcomes, net.log


def test_sometimes_fires_on_some_seeds_and_the_seed_replays_it() -> None:
    fired = {}
    for seed in range(12):
        outcomes, log = run_flaky(seed)
        assert [o[0].split()[1] for o in outcomes] == [str(i) for i in range(8)]
        fired[seed] = sum(1 for e in log if e[1] == "sometimes")
        assert run_flaky(seed) == (outcomes, log)  # request ids, jitter, times: all replayed
    assert 0 < sum(1 for n in fired.values() if n) < 12  # some seeds, not all


def test_sometimes_is_false_outside_a_simulated_run() -> None:
    async def main() -> list[bool]:
        return [sometimes(1.0) for _ in range(50)]

    assert not any(asyncio.run(main()))
    assert not any(testing.run(main(), virtual_time=True, seed=3))
    assert not sometimes(1.0)  # no loop at all
    net = SimNetwork(buggify=False)

    async def off() -> list[bool]:
        return [sometimes(1.0) for _ in range(50)]

    assert not any(testing.run(off(), network=net))


def test_globals_are_seeded_virtual_and_restored() -> None:
    state = random.getstate()
    real_urandom, real_time = os.urandom, time.time

    async def main() -> list[Any]:
        await asyncio.sleep(5)
        return [
            random.random(),
            os.urandom(8),
            uuid.uuid4(),
            time.time(),
            time.monotonic(),
            await asyncio.to_thread(time.monotonic),  # threads see it too
        ]

    first = testing.run(main(), network=SimNetwork(seed=9))
    assert testing.run(main(), network=SimNetwork(seed=9)) == first
    assert testing.run(main(), network=SimNetwork(seed=10))[:3] != first[:3]
    assert first[3] == testing.EPOCH + 5 and first[4] == first[5] == 5
    assert random.getstate() == state
    assert os.urandom is real_urandom and time.time is real_time
    # Opting out: the process's own sources stay.
    loose = testing.run(main(), network=SimNetwork(seed=9, urandom=False))
    assert loose[0] == first[0] and loose[1] != first[1]
    real = testing.run(main(), network=SimNetwork(seed=9, seed_globals=False))
    assert real[3] > 1e9 and real[3] != first[3]


def test_check_determinism_passes_in_process_and_in_a_fresh_one() -> None:
    log = check_determinism(flaky_service, seed=4, runs=2, fresh_process=True)
    assert any(e[1] == "data" for e in log)


_calls = {"n": 0}


async def drifting(net: SimNetwork) -> None:
    """Nondeterministic on purpose: its latency depends on how often it ran."""
    _calls["n"] += 1
    net.set_latency("client", "api", 0.001 * (1 + _calls["n"] % 2))

    server = net.spawn("api", open_for(asyncio.start_server(lambda r, w: w.close(), None, 80)))
    await asyncio.sleep(0)
    _, writer = await asyncio.open_connection("api", 80)
    writer.close()
    await writer.wait_closed()
    await cancelled(server)


def test_check_determinism_names_the_first_divergent_event() -> None:
    with pytest.raises(NondeterminismError) as caught:
        check_determinism(drifting, seed=1)
    message = str(caught.value)
    assert message.startswith("seed 1: run 2 diverged from run 1 at event #")
    assert "connect client->api" in message or "accept client->api" in message
    with pytest.raises(ValueError, match="module-level"):

        async def local(net: SimNetwork) -> None:
            pass

        check_determinism(local, fresh_process=True)


FIXTURE_SUITE = """\
import asyncio, random, time
import pytest

async def roundtrip():
    async def handler(reader, writer):
        writer.write(await reader.readline())
        writer.close()
    server = await asyncio.start_server(handler, None, 7)
    reader, writer = await asyncio.open_connection("localhost", 7)
    writer.write(b"hi\\n")
    line = await reader.readline()
    writer.close()
    server.close()
    await server.wait_closed()
    return line

def test_net_fixture(tideloop_net):
    tideloop_net.set_latency("client", "client", 0.25)
    async def main():
        line = await roundtrip()
        return line, asyncio.get_running_loop().time(), time.monotonic()
    line, now, mono = asyncio.run(main())
    assert line == b"hi\\n"
    assert now == mono == 1.0  # SYN, SYN-ACK, request, reply: 4 x 0.25 virtual s
    assert any(e[1] == "data" for e in tideloop_net.log)
    print("RANDOM", random.random())

@pytest.mark.asyncio
async def test_async_net_fixture(tideloop_net):
    # pytest-asyncio's loop gets the network too.
    assert await roundtrip() == b"hi\\n"
    assert asyncio.get_running_loop().time() > 0
    assert [e[1] for e in tideloop_net.log][:2] == ["connect", "accept"]
"""


def test_the_tideloop_net_fixture(tmp_path: Path) -> None:
    pytest.importorskip("pytest_asyncio")  # in the test extra: absent only by hand
    (tmp_path / "test_net.py").write_text(textwrap.dedent(FIXTURE_SUITE))
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([".", TIDELOOP_SRC]))
    env.pop("PYTEST_ADDOPTS", None)

    # Three pytest runs at once (each spends most of its time starting up).
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for args in ([], [], ["--tideloop-seed=5"])
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    for output in outputs:
        assert "2 passed" in output, output
    first, again, seeded = (
        next(line for line in output.splitlines() if "RANDOM" in line) for output in outputs
    )
    assert first == again != seeded
