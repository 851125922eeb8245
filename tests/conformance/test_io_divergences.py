"""tideloop's side of the datagram and subprocess divergences (``divergences.py``).

Each test runs on tideloop only (``@pytest.mark.divergence``) and asserts the
behaviour tideloop chose; ``test_divergences.py`` shows the stdlib differs.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

import tideloop

from divergence_support import (
    datagrams_after_an_empty_one,
    recording_policy_watcher,
    spawn_with_failing_read_pipe,
    udp_endpoint_transport,
    unix_datagram_buffer_sizes,
)
from ipc_support import wait_until_zombie


@pytest.mark.divergence("zero-length-datagrams")
def test_an_empty_datagram_is_sent(loop: asyncio.AbstractEventLoop) -> None:
    assert loop.run_until_complete(datagrams_after_an_empty_one(loop)) == [b"", b"after"]


@pytest.mark.divergence("datagram-transport-class-3.11")
def test_datagram_transport_class(loop: asyncio.AbstractEventLoop) -> None:
    transport = loop.run_until_complete(udp_endpoint_transport(loop))
    assert isinstance(transport, asyncio.DatagramTransport)
    assert isinstance(transport, asyncio.Transport)  # as asyncio's own


@pytest.mark.divergence("datagram-buffer-size-drains")
def test_datagram_buffer_size_returns_to_zero(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    header = 8 if sys.version_info >= (3, 13) else 0
    queued, size = loop.run_until_complete(unix_datagram_buffer_sizes(loop, tmp_path))
    assert queued > 0 and queued % (1000 + header) == 0  # asyncio's unit per version
    assert size == 0


@pytest.mark.divergence("own-child-watcher")
def test_the_policy_child_watcher_is_not_used(loop: asyncio.AbstractEventLoop) -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("child watchers are gone")

    async def main() -> int:
        proc = await asyncio.create_subprocess_exec("true")
        return await proc.wait()

    with recording_policy_watcher() as used:
        assert loop.run_until_complete(main()) == 0
        assert used == []


@pytest.mark.divergence("send-signal-never-reaps")
def test_signalling_a_child_that_just_exited_keeps_its_status(
    loop: asyncio.AbstractEventLoop,
) -> None:
    code = "import time; time.sleep(0.2); raise SystemExit(7)"

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code)
        # Block the loop until the child is a zombie (so the watcher cannot
        # reap it first), then signal it.
        wait_until_zombie(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.terminate()
        assert await proc.wait() == 7  # not 255: the watcher still reaped it

    loop.run_until_complete(main())


@pytest.mark.divergence("subprocess-pipe-failure-no-hang")
def test_a_pipe_that_fails_to_connect_fails_the_spawn(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        with pytest.raises(OSError, match="planted failure"):
            await asyncio.wait_for(spawn_with_failing_read_pipe(loop), 10)

    loop.run_until_complete(main())


@pytest.mark.tideloop_only
def test_thread_child_watcher_fallback(loop_name: str) -> None:
    """Where pidfds are unavailable a thread per child waits for it."""
    loop = tideloop.new_event_loop(poller=loop_name.removeprefix("tideloop-"))
    loop._children.use_pidfd = False  # as on a kernel without pidfd_open

    async def main() -> tuple[int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print('hi'); raise SystemExit(3)", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out

    try:
        assert loop.run_until_complete(main()) == (3, b"hi\n")
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
