"""Each registered divergence still describes a real difference, on this Python.

If the stdlib changes to match tideloop, the check for that entry fails and
the entry (and its special-casing) should go.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import tideloop

from divergences import DIVERGENCES, STDLIB_BOUNDED_EXECUTOR_SHUTDOWN


def stdlib_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop()


def check_wakeup_fd_restored() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    loop = stdlib_loop()
    try:
        previous = signal.set_wakeup_fd(a.fileno())
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        loop.remove_signal_handler(signal.SIGUSR1)
        assert signal.set_wakeup_fd(previous) == -1  # asyncio resets, tideloop restores
    finally:
        loop.close()
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        a.close()
        b.close()


def check_equal_deadline_fifo() -> None:
    loop = stdlib_loop()
    try:
        order: list[int] = []
        when = loop.time() + 0.005
        for i in range(20):
            loop.call_at(when, order.append, i)
        loop.call_at(when + 0.005, loop.stop)
        loop.run_forever()
        assert order != list(range(20))
    finally:
        loop.close()


def check_handle_get_context() -> None:
    loop = stdlib_loop()
    try:
        handle = loop.call_soon(lambda: None)
        has = hasattr(handle, "get_context")
        assert has is (sys.version_info >= (3, 12))
        if has:
            pytest.skip("no divergence on this Python: asyncio has Handle.get_context")
    finally:
        loop.close()


def check_factory_task_name() -> None:
    if sys.version_info[:3] != (3, 13, 0):
        pytest.skip("only Python 3.13.0 renames factory tasks to 'None'")

    async def main() -> str:
        lp = asyncio.get_running_loop()
        lp.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
        task = lp.create_task(asyncio.sleep(0))
        await task
        return task.get_name()

    loop = stdlib_loop()
    try:
        assert loop.run_until_complete(main()) == "None"
    finally:
        loop.close()
    assert tideloop.run(main()) != "None"


def check_executor_timeout() -> None:
    if STDLIB_BOUNDED_EXECUTOR_SHUTDOWN:
        pytest.skip("no divergence on this Python: asyncio bounds the wait too")
    loop = stdlib_loop()
    try:
        if sys.version_info < (3, 12):
            with pytest.raises(TypeError):
                loop.shutdown_default_executor(timeout=1)  # type: ignore[call-arg]
            return
        # Early 3.12: the wait outlives the timeout; released after 0.3 s, the
        # call returns only then, and without the warning.
        release = threading.Event()
        fut = loop.run_in_executor(None, release.wait)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loop.run_until_complete(loop.shutdown_default_executor(timeout=0.05))
        assert time.monotonic() - start >= 0.25
        timer.join()
        loop.run_until_complete(fut)
    finally:
        loop.close()


def check_call_at_non_numbers() -> None:
    loop = stdlib_loop()
    try:
        handle = loop.call_at("soon", lambda: None)  # type: ignore[arg-type]
        handle.cancel()
    finally:
        loop.close()


# ----------------------------------------------------------------------
# Networking


def check_accept_out_of_resources() -> None:
    import errno

    loop = stdlib_loop()
    reports: list[dict[str, object]] = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx))
    real = socket.socket()

    class Starved:
        def fileno(self) -> int:
            return real.fileno()

        def accept(self) -> tuple[socket.socket, object]:
            raise OSError(errno.EMFILE, "Too many open files")

    try:
        loop._accept_connection(asyncio.Protocol, Starved(), backlog=5)  # type: ignore[attr-defined]
        assert len(reports) == 5  # asyncio: once per backlog slot, in one event
    finally:
        loop.close()
        real.close()


def check_accept_without_task() -> None:
    loop = stdlib_loop()
    seen: list[object] = []

    def factory() -> asyncio.Protocol:
        seen.append(asyncio.current_task())
        return asyncio.Protocol()

    async def main() -> None:
        server = await loop.create_server(factory, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname())
        try:
            while not seen:
                await asyncio.sleep(0.001)
        finally:
            client.close()
            server.close()
            await asyncio.sleep(0.01)

    try:
        loop.run_until_complete(main())
        assert seen[0] is not None  # asyncio: inside a task
    finally:
        loop.close()


def _unread_pair(loop: asyncio.AbstractEventLoop) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    b.setblocking(False)
    return a, b


async def _drain(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        out += await loop.sock_recv(sock, 65536)
    return bytes(out)


def check_write_copies_mutable_buffers() -> None:
    if sys.version_info < (3, 12):
        pytest.skip("no divergence on this Python: asyncio 3.11 copies")
    loop = stdlib_loop()
    a, b = _unread_pair(loop)

    async def main() -> bytes:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        buf = bytearray(b"A" * (1024 * 1024))
        transport.write(buf)
        assert transport.get_write_buffer_size() > 0
        buf[:] = b"B" * len(buf)
        data = await _drain(loop, b, len(buf))
        transport.close()
        await asyncio.sleep(0)
        return data

    try:
        assert b"B" in loop.run_until_complete(main())  # asyncio sent the mutation
    finally:
        loop.close()
        b.close()


def check_writelines_flow_control() -> None:
    if sys.version_info < (3, 12):
        pytest.skip("no divergence on this Python: asyncio 3.11 pauses")
    loop = stdlib_loop()
    a, b = _unread_pair(loop)
    paused: list[bool] = []

    class P(asyncio.Protocol):
        def pause_writing(self) -> None:
            paused.append(True)

    async def main() -> None:
        transport, _ = await loop.connect_accepted_socket(P, a)
        transport.writelines([b"w" * (1024 * 1024)])
        assert transport.get_write_buffer_size() > 64 * 1024
        transport.abort()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
        assert paused == []  # asyncio: never paused
    finally:
        loop.close()
        b.close()


def check_getaddrinfo_literal_inline() -> None:
    loop = stdlib_loop()
    try:
        loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 80))
        assert loop._default_executor is not None  # type: ignore[attr-defined]
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def check_recv_size_64k() -> None:
    loop = stdlib_loop()
    a, b = socket.socketpair()
    sizes: list[int] = []

    class P(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            sizes.append(len(data))

    async def main() -> None:
        # Queue as much as the socket takes before the transport reads.
        b.setblocking(False)
        queued = 0
        try:
            while True:
                queued += b.send(b"r" * 65536)
        except BlockingIOError:
            pass
        b.close()
        assert queued > 64 * 1024
        transport, _ = await loop.connect_accepted_socket(P, a)
        while sum(sizes) < queued:
            await asyncio.sleep(0.001)
        transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
        assert max(sizes) > 64 * 1024
    finally:
        loop.close()


def check_sendfile_transport_closed() -> None:
    import tempfile

    loop = stdlib_loop()
    loop.set_exception_handler(lambda lp, ctx: None)  # its InvalidStateError
    a, b = _unread_pair(loop)

    async def main() -> None:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        with tempfile.TemporaryFile() as f:
            f.write(b"f" * (4 * 1024 * 1024))
            f.flush()
            f.seek(0)
            task = asyncio.ensure_future(loop.sendfile(transport, f))
            await asyncio.sleep(0.05)
            transport.close()
            done, _ = await asyncio.wait([task], timeout=0.3)
            assert not done  # asyncio: never completes
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        b.close()


def check_start_serving_after_close() -> None:
    loop = stdlib_loop()

    async def main() -> None:
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        server.close()
        await server.wait_closed()
        with pytest.raises(TypeError):
            await server.start_serving()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def check_zero_length_datagrams() -> None:
    if sys.version_info >= (3, 13):
        pytest.skip("no divergence on this Python: asyncio 3.13 sends empty datagrams")
    loop = stdlib_loop()
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)

    async def main() -> None:
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=receiver.getsockname()
        )
        transport.sendto(b"")
        transport.sendto(b"after")
        await asyncio.sleep(0.05)
        assert receiver.recv(100) == b"after"  # the empty one never left
        transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        receiver.close()


def check_datagram_transport_class() -> None:
    if sys.version_info >= (3, 12):
        pytest.skip("no divergence on this Python: asyncio 3.12+ has the base class")
    loop = stdlib_loop()

    async def main() -> None:
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        assert not isinstance(transport, asyncio.DatagramTransport)
        transport.close()
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def check_datagram_buffer_size_drains() -> None:
    if sys.version_info < (3, 13):
        pytest.skip("no divergence on this Python: asyncio before 3.13 counts payloads only")
    import tempfile

    loop = stdlib_loop()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "peer")
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        peer.bind(path)
        peer.setblocking(False)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.connect(path)

        async def main() -> int:
            transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=sock)
            for _ in range(50):
                transport.sendto(b"x" * 1000)
            received = 0
            while received < 50:
                await asyncio.sleep(0.005)
                try:
                    while True:
                        peer.recv(2000)
                        received += 1
                except BlockingIOError:
                    pass
            await asyncio.sleep(0.01)
            size = transport.get_write_buffer_size()
            transport.close()
            await asyncio.sleep(0)
            return size

        try:
            assert loop.run_until_complete(main()) > 0  # asyncio: never drains to 0
        finally:
            loop.close()
            peer.close()


def check_own_child_watcher() -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("no divergence on this Python: child watchers are gone")
    from asyncio import unix_events

    used: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Recording(unix_events.ThreadedChildWatcher):
            def add_child_handler(
                self, pid: int, callback: Callable[..., object], *a: object
            ) -> None:
                used.append(pid)
                super().add_child_handler(pid, callback, *a)

        policy = asyncio.get_event_loop_policy()
        old = policy._watcher  # type: ignore[attr-defined]
        watcher = Recording()
        policy._watcher = watcher  # type: ignore[attr-defined]
    loop = stdlib_loop()

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()

    try:
        loop.run_until_complete(main())
        assert len(used) == 1  # asyncio asked the policy's watcher
    finally:
        loop.close()
        policy._watcher = old  # type: ignore[attr-defined]


def check_send_signal_never_reaps() -> None:
    if sys.version_info >= (3, 13):
        pytest.skip("no divergence on this Python: asyncio 3.13 uses os.kill()")
    import subprocess
    import types
    from asyncio import base_subprocess

    popen = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)  # a zombie now
        fake = types.SimpleNamespace(_proc=popen, _check_proc=lambda: None)
        base_subprocess.BaseSubprocessTransport.send_signal(fake, signal.SIGTERM)  # type: ignore[arg-type]
        assert popen.returncode == 0  # Popen reaped it: a watcher would find nothing
    finally:
        popen.wait()


CHECKS: dict[str, Callable[[], None]] = {
    "wakeup-fd-restored": check_wakeup_fd_restored,
    "equal-deadline-fifo": check_equal_deadline_fifo,
    "handle-get-context-3.11": check_handle_get_context,
    "factory-task-name-3.13.0": check_factory_task_name,
    "executor-shutdown-timeout": check_executor_timeout,
    "call-at-rejects-non-numbers": check_call_at_non_numbers,
    "accept-out-of-resources": check_accept_out_of_resources,
    "accept-without-task": check_accept_without_task,
    "write-copies-mutable-buffers": check_write_copies_mutable_buffers,
    "writelines-flow-control": check_writelines_flow_control,
    "getaddrinfo-literal-inline": check_getaddrinfo_literal_inline,
    "recv-size-64k": check_recv_size_64k,
    "sendfile-transport-closed": check_sendfile_transport_closed,
    "start-serving-after-close": check_start_serving_after_close,
    "zero-length-datagrams": check_zero_length_datagrams,
    "datagram-transport-class-3.11": check_datagram_transport_class,
    "datagram-buffer-size-drains": check_datagram_buffer_size_drains,
    "own-child-watcher": check_own_child_watcher,
    "send-signal-never-reaps": check_send_signal_never_reaps,
}


def test_every_divergence_has_a_check() -> None:
    assert set(CHECKS) == set(DIVERGENCES)


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_stdlib_still_differs(key: str) -> None:
    CHECKS[key]()


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_divergence_is_documented_in_tests(key: str) -> None:
    """Every entry is named by at least one test outside this file."""
    tests_dir = Path(__file__).parent.parent
    sources = [p.read_text() for p in tests_dir.rglob("test_*.py") if p.name != Path(__file__).name]
    assert any(key in text for text in sources), f"no test mentions divergence {key!r}"
