"""``python -m tideloop.testing``: clean help, options checked, SimNetwork scenarios,
tapes never overwritten silently.

Run as a user runs it: a subprocess, in a directory of the test's own
holding the scenario's module.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from children import python_env, run_python

NETRACE = '''\
import asyncio


async def _exchange(net, order):
    async def handle(reader, writer):
        order.append(await reader.readline())
        writer.close()

    async def serve():
        async with await asyncio.start_server(handle, None, 80):
            await asyncio.sleep(5)

    server = net.spawn("web", serve())
    await asyncio.sleep(0.1)

    async def client(name):
        reader, writer = await asyncio.open_connection("web", 80)
        writer.write(name.encode() + b"\\n")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    for host in ("a", "b"):
        net.set_link(host, "web", latency=0.01)  # both lines arrive at one instant
    await asyncio.gather(net.spawn("a", client("a")), net.spawn("b", client("b")))
    await server


async def assumes_order(net):
    """Two hosts send a line each; the server assumes a's comes first."""
    order = []
    await _exchange(net, order)
    assert order == [b"a\\n", b"b\\n"], order


async def any_order(net):
    order = []
    await _exchange(net, order)
    assert sorted(order) == [b"a\\n", b"b\\n"], order


async def no_network():
    await asyncio.sleep(0)
'''


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "tideloop.testing", *args, cwd=cwd, env=python_env(cwd))


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "netrace.py").write_text(NETRACE)
    return tmp_path


def options(help_text: str) -> dict[str, str]:
    """Each option of an argparse help text, with its help (lines joined)."""
    found: dict[str, str] = {}
    current = None
    for line in help_text.split("options:", 1)[1].splitlines():
        match = re.match(r"^  (-[-\w]+(?:[ ,][^ ]+)*)(?:\s{2,}(.*))?$", line)
        if match:
            current = match.group(1).split(",")[-1].split()[0]
            found[current] = match.group(2) or ""
        elif current is not None and line.startswith("    "):
            found[current] += " " + line.strip()
        elif not line.strip():
            current = None
    return found


def test_the_help_is_for_users(here: Path) -> None:
    text = cli(here, "--help").stdout
    assert "Layer:" not in text and "``" not in text
    assert "MODULE:FUNCTION" in text and "SimNetwork" in text and "Exit status" in text
    for command in ("explore", "replay", "trace", "diff"):
        assert re.search(rf"^    {command}\s+\w", text, re.M), command


def test_every_explore_option_has_help_and_a_default(here: Path) -> None:
    text = cli(here, "explore", "--help").stdout
    found = options(text)
    assert {"--strategy", "--schedules", "--virtual-time", "--network-seed", "--tape"} <= set(found)
    for option, words in found.items():
        if option == "-h":
            continue
        assert words.strip(), option
        assert "default" in words, (option, words)
    assert "examples:" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--depth", "3"], "--depth is for --strategy pct: the random strategy does not use it"),
        (
            ["--strategy", "pct", "--bound", "1"],
            "--bound is for --strategy systematic: the pct strategy does not use it",
        ),
        (["--overwrite"], "--overwrite is for --tape FILE"),
    ],
)
def test_options_a_strategy_does_not_use_are_refused(
    here: Path, args: list[str], words: str
) -> None:
    done = cli(here, "explore", "netrace:any_order", *args)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr


def test_explore_runs_a_simnetwork_scenario_and_replays_its_tape(here: Path) -> None:
    found = cli(here, "explore", "netrace:assumes_order", "--network-seed", "3")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "AssertionError: [b'b\\n', b'a\\n']" in found.stdout
    assert "tape: assumes_order.tape.json" in found.stdout
    tape = json.loads((here / "assumes_order.tape.json").read_text())
    assert tape["network_seed"] == 3 and tape["virtual_time"] is True
    replayed = cli(here, "replay", "netrace:assumes_order", "assumes_order.tape.json")
    assert replayed.returncode == 1 and "the tape's schedule fails" in replayed.stdout
    fine = cli(here, "explore", "netrace:any_order", "--schedules", "100")
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "100 schedule(s) passed" in fine.stdout
    parallel = cli(here, "explore", "netrace:assumes_order", "-j", "2", "--tape", "parallel.json")
    assert parallel.returncode == 1, parallel.stdout + parallel.stderr
    assert json.loads((here / "parallel.json").read_text())["network_seed"] == 0
    wrong = cli(here, "explore", "netrace:no_network", "--network-seed", "1")
    assert wrong.returncode == 2 and "--network-seed is for a SimNetwork scenario" in wrong.stderr


def test_a_tape_is_never_overwritten_silently(here: Path) -> None:
    first = cli(here, "explore", "netrace:assumes_order")
    assert "tape: assumes_order.tape.json" in first.stdout
    before = (here / "assumes_order.tape.json").read_text()
    # The default name is taken: the next free one, and it says so.
    second = cli(here, "explore", "netrace:assumes_order", "--seed", "50")
    assert second.returncode == 1
    assert (
        "tape: assumes_order.tape.1.json (assumes_order.tape.json exists (another "
        "failure's tape): saved as assumes_order.tape.1.json)"
    ) in second.stdout
    assert (here / "assumes_order.tape.json").read_text() == before
    # A name given with --tape that exists: refused before anything runs.
    refused = cli(here, "explore", "netrace:assumes_order", "--tape", "assumes_order.tape.json")
    assert refused.returncode == 2
    assert "assumes_order.tape.json exists: give another --tape, or --overwrite" in (refused.stderr)
    assert (here / "assumes_order.tape.json").read_text() == before
    replaced = cli(
        here,
        "explore",
        "netrace:assumes_order",
        "--seed",
        "50",
        "--tape",
        "assumes_order.tape.json",
        "--overwrite",
    )
    assert replaced.returncode == 1 and "tape: assumes_order.tape.json" in replaced.stdout
