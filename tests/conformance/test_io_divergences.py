"""tideloop's side of the datagram and subprocess divergences (``divergences.py``).

Each test runs on tideloop only (``@pytest.mark.divergence``) and asserts the
behaviour tideloop chose; ``test_divergences.py`` shows the stdlib differs.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import warnings
from pathlib import Path

import pytest

import tideloop

from ipc_support import wait_until_zombie


@pytest.mark.divergence("zero-length-datagrams")
def test_an_empty_datagram_is_sent(loop: asyncio.AbstractEventLoop) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(5)

    async def main() -> None:
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=receiver.getsockname()
        )
        transport.sendto(b"")
        transport.sendto(b"after")
        await asyncio.sleep(0.01)
        assert await loop.run_in_executor(None, receiver.recv, 100) == b""
        assert await loop.run_in_executor(None, receiver.recv, 100) == b"after"
        transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        receiver.close()


@pytest.mark.divergence("datagram-transport-class-3.11")
def test_datagram_transport_class(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        assert isinstance(transport, asyncio.DatagramTransport)
        assert isinstance(transport, asyncio.Transport)  # as asyncio's own
        transport.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())


@pytest.mark.divergence("datagram-buffer-size-drains")
def test_datagram_buffer_size_returns_to_zero(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = str(tmp_path / "peer")
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.bind(path)
    peer.setblocking(False)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.connect(path)
    header = 8 if sys.version_info >= (3, 13) else 0

    async def main() -> None:
        transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=sock)
        for _ in range(50):
            transport.sendto(b"x" * 1000)
        queued = transport.get_write_buffer_size()
        assert queued > 0 and queued % (1000 + header) == 0  # asyncio's unit per version
        received = 0
        while received < 50:
            await asyncio.sleep(0.005)
            try:
                while True:
                    assert peer.recv(2000) == b"x" * 1000
                    received += 1
            except BlockingIOError:
                pass
        await asyncio.sleep(0.01)
        assert transport.get_write_buffer_size() == 0
        transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        peer.close()


@pytest.mark.divergence("own-child-watcher")
def test_the_policy_child_watcher_is_not_used(loop: asyncio.AbstractEventLoop) -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("child watchers are gone")
    from asyncio import unix_events

    used: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Recording(unix_events.ThreadedChildWatcher):
            def add_child_handler(self, pid: int, callback: object, *args: object) -> None:
                used.append(pid)  # pragma: no cover (must not be called)

        policy = asyncio.get_event_loop_policy()
        old = policy._watcher  # type: ignore[attr-defined]
        policy._watcher = Recording()  # type: ignore[attr-defined]

    async def main() -> int:
        proc = await asyncio.create_subprocess_exec("true")
        return await proc.wait()

    try:
        assert loop.run_until_complete(main()) == 0
        assert used == []
    finally:
        policy._watcher = old  # type: ignore[attr-defined]


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
    async def failing(*args: object, **kwargs: object) -> None:
        raise OSError("planted failure")

    loop.connect_read_pipe = failing  # type: ignore[method-assign,assignment]

    async def main() -> None:
        with pytest.raises(OSError, match="planted failure"):
            await asyncio.wait_for(
                asyncio.create_subprocess_exec("sleep", "30", stdout=asyncio.subprocess.PIPE),
                10,
            )

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
