"""Each registered divergence still describes a real difference, on this Python.

If the stdlib changes to match tideloop, the check for that entry fails and
the entry (and its special-casing) should go. An entry that holds only for
some Pythons (``Divergence.holds``) is checked on those; on the others its
marked tests run on the stdlib loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import io
import os
import random
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import tideloop

from divergence_support import (
    Starved,
    closed_server,
    datagrams_after_an_empty_one,
    drain,
    equal_deadline_order,
    native_sendfile_to_nobody,
    reads_of_queued_data,
    recording_policy_watcher,
    sendfile_fallback_to_a_slow_peer,
    spawn_with_failing_read_pipe,
    stdlib_loop,
    udp_endpoint_transport,
    unix_datagram_buffer_sizes,
    unix_server_binds_while_the_loop_runs,
    unread_pair,
    writelines_pauses,
)
from divergences import DIVERGENCES
from ipc_support import until as ipc_until
from ipc_support import wait_until_zombie

IS_PYPY = sys.implementation.name == "pypy"


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
    with contextlib.closing(stdlib_loop()) as loop:
        assert equal_deadline_order(loop) != list(range(20))


def _order_of_close_fraction_deadlines(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Schedule "later" first, then "earlier" a 1e-30 s before it (the same float)."""
    from fractions import Fraction

    order: list[str] = []
    when = Fraction(loop.time()) + Fraction(1, 100)
    loop.call_at(when + Fraction(1, 10**30), order.append, "later")
    loop.call_at(when, order.append, "earlier")
    loop.call_at(float(when) + 0.01, loop.stop)
    loop.run_forever()
    return order


def check_timer_deadline_as_float() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        assert _order_of_close_fraction_deadlines(loop) == ["earlier", "later"]


def check_handle_get_context() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        handle = loop.call_soon(lambda: None)
        assert not hasattr(handle, "get_context")


def _sleep_timer_sees(loop: asyncio.AbstractEventLoop) -> str | None:
    """What a context variable set before it reads in asyncio.sleep()'s timer's context."""
    from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")

    def arm() -> asyncio.TimerHandle:
        var.set("sleeper")
        return loop.call_later(1, _set_result_unless_cancelled, loop.create_future(), None)

    timer = contextvars.copy_context().run(arm)
    timer.cancel()
    return timer._context.get(var)  # type: ignore[attr-defined, no-any-return]


def check_sleep_timer_bare_context() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        assert _sleep_timer_sees(loop) == "sleeper"


def check_factory_task_name() -> None:
    async def main() -> str:
        lp = asyncio.get_running_loop()
        lp.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
        task = lp.create_task(asyncio.sleep(0))
        await task
        return task.get_name()

    with contextlib.closing(stdlib_loop()) as loop:
        assert loop.run_until_complete(main()) == "None"
    assert tideloop.run(main()) != "None"


def check_executor_timeout() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
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


def check_call_at_non_numbers() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        handle = loop.call_at("soon", lambda: None)  # type: ignore[arg-type]
        handle.cancel()


# ----------------------------------------------------------------------
# Networking


def check_accept_out_of_resources() -> None:
    loop = stdlib_loop()
    reports: list[dict[str, object]] = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx))
    real = socket.socket()

    with real, contextlib.closing(loop):
        loop._accept_connection(asyncio.Protocol, Starved(real), backlog=5)  # type: ignore[attr-defined]
        # asyncio: once per backlog slot (3.13.x and later: one more), in one event
        assert len(reports) >= 5


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

    with contextlib.closing(loop):
        loop.run_until_complete(main())
        assert seen[0] is not None  # asyncio: inside a task


def check_write_copies_mutable_buffers() -> None:
    loop = stdlib_loop()
    a, b = unread_pair()

    async def main() -> bytes:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        buf = bytearray(b"A" * (1024 * 1024))
        transport.write(buf)
        assert transport.get_write_buffer_size() > 0
        buf[:] = b"B" * len(buf)
        data = await drain(loop, b, len(buf))
        transport.close()
        await asyncio.sleep(0)
        return data

    with b, contextlib.closing(loop):
        assert b"B" in loop.run_until_complete(main())  # asyncio sent the mutation
    # Its own sendfile() fallback reuses the buffer it writes from: a slow peer
    # gets later blocks in place of earlier ones.
    loop = stdlib_loop()
    a, b = unread_pair()
    data = random.Random(23).randbytes(1024 * 1024)
    with b, contextlib.closing(loop):
        received = loop.run_until_complete(sendfile_fallback_to_a_slow_peer(loop, a, b, data))
        assert len(received) == len(data)
        assert received != data  # asyncio: bytes of a later block


def check_writelines_flow_control() -> None:
    loop = stdlib_loop()
    a, b = unread_pair()
    with b, contextlib.closing(loop):
        assert loop.run_until_complete(writelines_pauses(loop, a)) == []  # asyncio: never paused


def check_getaddrinfo_literal_inline() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 80))
        assert loop._default_executor is not None  # type: ignore[attr-defined]
        loop.run_until_complete(loop.shutdown_default_executor())


def check_recv_size_adaptive() -> None:
    loop = stdlib_loop()
    a, b = socket.socketpair()
    with contextlib.closing(loop):
        queued, sizes = loop.run_until_complete(reads_of_queued_data(loop, a, b))
        assert queued > 64 * 1024
        # asyncio's very first read already asks for 256 KiB.
        assert sizes[0] > 64 * 1024


def check_sendfile_transport_closed() -> None:
    loop = stdlib_loop()
    loop.set_exception_handler(lambda lp, ctx: None)  # its InvalidStateError
    a, b = unread_pair()

    async def main() -> None:
        async with native_sendfile_to_nobody(loop, a) as (transport, task, _):
            transport.close()
            done, _ = await asyncio.wait([task], timeout=0.3)
            assert not done  # asyncio: never completes
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    with b, contextlib.closing(loop):
        loop.run_until_complete(main())


def check_sendfile_sets_file_position() -> None:

    loop = stdlib_loop()
    a, b = socket.socketpair()

    async def main() -> None:
        f = io.BytesIO(b"abcdef")  # no fileno: the fallback
        f.seek(3)
        assert await loop.sock_sendfile(a, f, 0) == 3  # asyncio: from the position, not 0
        a.close()
        assert b.recv(100) == b"def"

    with b, a, contextlib.closing(loop):
        loop.run_until_complete(main())


def check_serve_forever_closes_clients() -> None:
    from test_net_server import _cancel_serve_forever_with_a_hanging_client

    with contextlib.closing(stdlib_loop()) as loop:
        # asyncio: the cancelled serve_forever() waits for the client.
        assert not loop.run_until_complete(_cancel_serve_forever_with_a_hanging_client(loop))


def check_socket_closed_without_transport() -> None:
    loop = stdlib_loop()
    a, b = socket.socketpair()

    def factory() -> asyncio.Protocol:
        raise ZeroDivisionError

    with b, a, contextlib.closing(loop):
        with pytest.raises(ZeroDivisionError):
            loop.run_until_complete(loop.create_connection(factory, sock=a))
        assert a.fileno() != -1  # asyncio: left open


def check_start_serving_after_close() -> None:
    loop = stdlib_loop()

    async def main() -> None:
        server = await closed_server(loop)
        with pytest.raises(TypeError):
            await server.start_serving()

    with contextlib.closing(loop):
        loop.run_until_complete(main())


def check_zero_length_datagrams() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        # The empty one never left.
        assert loop.run_until_complete(datagrams_after_an_empty_one(loop)) == [b"after"]


def check_datagram_transport_class() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        transport = loop.run_until_complete(udp_endpoint_transport(loop))
        assert not isinstance(transport, asyncio.DatagramTransport)


def check_happy_eyeballs_no_refcycles() -> None:
    from net_support import refused_exception_holders

    with contextlib.closing(stdlib_loop()) as loop:
        holders = refused_exception_holders(loop, 0.25)
    assert any(isinstance(ref, list) for ref in holders), holders


def check_datagram_buffer_size_drains() -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.closing(stdlib_loop()) as loop:
        _, size = loop.run_until_complete(unix_datagram_buffer_sizes(loop, tmp))
        assert size > 0  # asyncio: never drains to 0


def check_own_child_watcher() -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()

    with recording_policy_watcher() as used, contextlib.closing(stdlib_loop()) as loop:
        loop.run_until_complete(main())
        assert len(used) == 1  # asyncio asked the policy's watcher


def check_send_signal_never_reaps() -> None:
    import subprocess
    import types
    from asyncio import base_subprocess

    popen = subprocess.Popen(["true"])
    try:
        wait_until_zombie(popen.pid)  # a zombie now
        fake = types.SimpleNamespace(_proc=popen, _check_proc=lambda: None)
        base_subprocess.BaseSubprocessTransport.send_signal(fake, signal.SIGTERM)  # type: ignore[arg-type]
        assert popen.returncode == 0  # Popen reaped it: a watcher would find nothing
    finally:
        popen.wait()


def check_subprocess_pipe_failure_no_hang() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        try:
            loop.run_until_complete(asyncio.wait_for(spawn_with_failing_read_pipe(loop), 1.0))
        except TimeoutError:
            hung = True  # asyncio before gh-119710
        except OSError:
            hung = False
        # The child was killed; its stdout pipe, which asyncio never wrapped, is
        # still open (asyncio 3.11-3.13): close it, and let the watcher reap it.
        left_open = False
        for obj in gc.get_objects():
            if isinstance(obj, subprocess.Popen) and obj.args == ("sleep", "30"):
                if obj.stdout is not None and not obj.stdout.closed:
                    left_open = True
                    obj.stdout.close()
                obj.wait()
        assert hung or left_open


def check_wait_returns_at_exit() -> None:
    loop = stdlib_loop()

    async def main() -> None:
        # sh exits after a line on stdin; the sleep it started keeps sh's
        # stdout open. The wait starts before the exit (a wait started after
        # it returns at once, in every version).
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            "sleep 30 & echo $!; read line",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdin is not None
        grandchild = int(await proc.stdout.readline())
        waiting = asyncio.ensure_future(proc.wait())
        await asyncio.sleep(0.05)
        proc.stdin.write(b"exit\n")
        try:
            with pytest.raises(TimeoutError):  # asyncio: wait() waits for the pipes too
                await asyncio.wait_for(asyncio.shield(waiting), 0.5)
        finally:
            os.kill(grandchild, signal.SIGKILL)
        assert await asyncio.wait_for(waiting, 5) == 0

    with contextlib.closing(loop):
        loop.run_until_complete(main())


# ----------------------------------------------------------------------
# TLS (asyncio's SSL transport on the stdlib loop; certificates from `certs`)


@functools.cache
def _certs() -> Any:
    from tls_support import make_certs

    return make_certs()


class _TLSRecorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.sizes: list[int] = []
        self.lost: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.sizes.append(len(data))

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class _TLSEcho(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _tls_pair(
    loop: asyncio.AbstractEventLoop,
    client: Callable[[], asyncio.BaseProtocol],
    server: Callable[[], asyncio.BaseProtocol] = _TLSEcho,
) -> tuple[asyncio.Server, Any, Any]:
    certs = _certs()
    srv = await loop.create_server(server, "127.0.0.1", 0, ssl=certs.server)
    port = srv.sockets[0].getsockname()[1]
    transport, protocol = await loop.create_connection(
        client, "127.0.0.1", port, ssl=certs.client, server_hostname="localhost"
    )
    return srv, transport, protocol


def _with_raw_tls_server(
    loop: asyncio.AbstractEventLoop,
    serve: Callable[[socket.socket], None],
    client: Callable[[int], Any],
) -> Any:
    """Run *client(port)* on *loop* against *serve(conn)* in a thread."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)

    def accept_and_serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(10)
        try:
            serve(conn)
        except OSError:
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=accept_and_serve)
    thread.start()
    try:
        return loop.run_until_complete(client(listener.getsockname()[1]))
    finally:
        thread.join(15)
        listener.close()


def check_tls_bytearray_get_buffer() -> None:
    from tls_support import payload

    loop = stdlib_loop()
    data = payload(1_000_000)
    got = bytearray()

    class Buffered(asyncio.BufferedProtocol):
        buf = bytearray(5000)  # smaller than a record: deliveries end mid-record

        def get_buffer(self, sizehint: int) -> bytearray:
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            got.extend(self.buf[:nbytes])

    async def main() -> None:
        srv, transport, _ = await _tls_pair(loop, Buffered)
        transport.write(data)
        for _ in range(1000):
            if len(got) >= len(data):
                break
            await asyncio.sleep(0.01)
        transport.close()
        srv.close()
        await srv.wait_closed()
        await asyncio.sleep(0.01)

    with contextlib.closing(loop):
        loop.run_until_complete(main())
        assert len(got) == len(data)  # asyncio counted every byte...
        assert got != data  # ...but some went into a copy of the buffer


def check_tls_paused_client_sends_finished() -> None:
    loop = stdlib_loop()
    outcome: list[str] = []

    def serve(conn: socket.socket) -> None:
        conn.settimeout(0.5)
        try:
            _certs().server.wrap_socket(conn, server_side=True).close()
            outcome.append("handshake completed")
        except OSError:
            outcome.append("handshake stalled")

    class PausedAtStart(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport.pause_reading()  # type: ignore[attr-defined]

    async def client(port: int) -> None:
        transport, _ = await loop.create_connection(
            PausedAtStart, "127.0.0.1", port, ssl=_certs().client, server_hostname="localhost"
        )
        while not outcome:
            await asyncio.sleep(0.01)
        transport.abort()
        await asyncio.sleep(0.01)

    with contextlib.closing(loop):
        _with_raw_tls_server(loop, serve, client)
        assert outcome == ["handshake stalled"]  # asyncio held back the client's Finished


def check_tls_writelines_type_check() -> None:
    loop = stdlib_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx))

    async def main() -> BaseException | None:
        srv, transport, client = await _tls_pair(loop, _TLSRecorder)
        transport.writelines([b"a", "text"])  # asyncio: no TypeError here
        if IS_PYPY:
            # PyPy's ssl module: SSLObject.write() takes a str, so the text
            # goes out (and the server echoes it) as if it were bytes.
            await ipc_until(lambda: bytes(client.data) == b"atext", 10)
            transport.close()
        exc = await asyncio.wait_for(client.lost, 10)
        srv.close()
        await srv.wait_closed()
        return exc  # type: ignore[no-any-return]

    with contextlib.closing(loop):
        exc = loop.run_until_complete(main())
        if IS_PYPY:
            assert exc is None
            assert reports == []
        else:
            assert isinstance(exc, TypeError)  # ...but the connection is aborted with it
            assert [ctx["message"] for ctx in reports] == ["Fatal error on SSL protocol"]


def check_tls_data_before_error() -> None:
    import ssl

    from tls_support import bio_server_handshake

    loop = stdlib_loop()

    def serve(conn: socket.socket) -> None:
        sslobj, _, outgoing = bio_server_handshake(conn, _certs().server)
        sslobj.write(b"hello")
        # One segment: a good record, then one that fails its integrity check.
        conn.sendall(outgoing.read() + b"\x17\x03\x03\x00\x20" + bytes(32))
        while conn.recv(65536):
            pass

    async def client(port: int) -> tuple[bytes, BaseException | None]:
        _, protocol = await loop.create_connection(
            _TLSRecorder, "127.0.0.1", port, ssl=_certs().client, server_hostname="localhost"
        )
        exc = await asyncio.wait_for(protocol.lost, 10)
        return bytes(protocol.data), exc

    with contextlib.closing(loop):
        data, exc = _with_raw_tls_server(loop, serve, client)
        assert isinstance(exc, ssl.SSLError)
        assert data == b""  # asyncio dropped b"hello"


def check_tls_delivery_at_most_256k() -> None:
    from tls_support import payload

    loop = stdlib_loop()
    total = 2 * 1024 * 1024

    class SendOnRequest(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(payload(total))

    async def main() -> list[int]:
        srv, transport, client = await _tls_pair(loop, _TLSRecorder, SendOnRequest)
        transport.set_read_buffer_limits(high=16 * 1024 * 1024)
        transport.pause_reading()
        transport.write(b"go")
        for _ in range(1000):
            if transport.get_read_buffer_size() >= total:
                break
            await asyncio.sleep(0.01)
        transport.resume_reading()
        for _ in range(1000):
            if len(client.data) >= total:
                break
            await asyncio.sleep(0.01)
        transport.close()
        await client.lost
        srv.close()
        await srv.wait_closed()
        return client.sizes  # type: ignore[no-any-return]

    with contextlib.closing(loop):
        sizes = loop.run_until_complete(main())
        assert sum(sizes) == total
        assert max(sizes) > 256 * 1024  # asyncio: one call for all of it


def check_start_tls_buffered_data() -> None:
    from test_tls_start_tls import streams_start_tls_after_buffering

    loop = stdlib_loop()
    # asyncio: the handshake waits for the hello
    with contextlib.closing(loop), pytest.raises(TimeoutError):
        loop.run_until_complete(streams_start_tls_after_buffering(loop, _certs(), 1.0))


def check_failed_tls_no_refcycles() -> None:
    import gc
    import weakref

    loop = stdlib_loop()
    certs = _certs()
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()

    def server() -> None:
        conn, _ = lsock.accept()
        try:
            certs.untrusted_server.wrap_socket(conn, server_side=True)
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=server)
    thread.start()

    async def main() -> weakref.ref[asyncio.BaseTransport]:
        transport, protocol = await loop.create_connection(asyncio.Protocol, *lsock.getsockname())
        ref = weakref.ref(transport)
        with pytest.raises(ssl.SSLCertVerificationError):
            await loop.start_tls(transport, protocol, certs.client, server_hostname="localhost")
        del transport
        return ref

    gc.collect()
    gc.disable()
    try:
        ref = loop.run_until_complete(main())
        assert ref() is not None  # asyncio: kept alive by a cycle
    finally:
        gc.enable()
        gc.collect()
        thread.join()
        lsock.close()
        loop.close()


def check_tls_shutdown_timeout_until_closed() -> None:
    from test_tls_errors import shutdown_against_a_peer_that_stops_reading

    from tls_support import Route

    with contextlib.closing(stdlib_loop()) as loop:
        route = Route("api", loop)
        with pytest.raises(TimeoutError):  # asyncio: connection_lost never comes
            route.run(shutdown_against_a_peer_that_stops_reading(route, _certs(), True))


def check_tls_closed_twice() -> None:
    loop = stdlib_loop()

    async def main() -> None:
        srv, transport, client = await _tls_pair(loop, _TLSRecorder)
        transport.close()
        await client.lost
        transport.close()
        with pytest.raises(AttributeError):
            transport.get_extra_info("cipher")
        with pytest.raises(AttributeError):
            transport.write(b"x")
        srv.close()
        await srv.wait_closed()

    with contextlib.closing(loop):
        loop.run_until_complete(main())


def check_unix_path_calls_off_loop() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        ran, _ = loop.run_until_complete(unix_server_binds_while_the_loop_runs(loop))
        assert ran == []  # asyncio: no other callback ran meanwhile


def check_loop_time_is_the_clock() -> None:
    with contextlib.closing(stdlib_loop()) as loop:
        assert loop.time.__self__ is loop  # asyncio: a bound method


def check_child_starts_off_loop() -> None:
    loop = stdlib_loop()
    gate = threading.Event()
    real_popen = subprocess.Popen

    def gated_popen(*args: Any, **kwargs: Any) -> Any:
        # Only a callback of the loop opens the gate: a Popen that blocks the
        # loop waits in vain.
        opened = gate.wait(0.5)
        kwargs.setdefault("env", {**os.environ, "OPENED": str(opened)})
        return real_popen(*args, **kwargs)

    async def main() -> bool:
        loop.call_soon(gate.set)
        with mock.patch("subprocess.Popen", gated_popen):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "import os; print(os.environ['OPENED'])",
                stdout=subprocess.PIPE,
            )
        out, _ = await proc.communicate()
        return out.strip() == b"True"

    with contextlib.closing(loop):
        assert loop.run_until_complete(main()) is False  # asyncio: the loop was blocked


def check_poll_accepts_fd_not_open() -> None:
    not_open = 10**6  # above any fd this process has open
    loop = stdlib_loop()  # its default selector: epoll on Linux
    with contextlib.closing(loop), pytest.raises(OSError):
        loop.add_reader(not_open, lambda: None)
    # What tideloop's poll poller does is what asyncio does with a PollSelector.
    poll_loop = asyncio.SelectorEventLoop(selectors.PollSelector())
    try:
        poll_loop.add_reader(not_open, lambda: None)
        assert poll_loop.remove_reader(not_open)
    finally:
        poll_loop.close()


def check_writelines_after_connection_lost() -> None:
    loop = stdlib_loop()
    a, b = socket.socketpair()

    async def main() -> None:
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        transport.abort()
        await asyncio.sleep(0)  # connection_lost()
        with pytest.raises((TypeError, AttributeError)):
            transport.writelines([b"x"])
        assert transport.get_write_buffer_size() == 1  # asyncio 3.12: kept for good

    with b, contextlib.closing(loop):
        loop.run_until_complete(main())


def check_read_pipe_abort() -> None:
    r, w = os.pipe()
    loop = stdlib_loop()

    async def main() -> None:
        pipe = os.fdopen(r, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(asyncio.Protocol, pipe)
        try:
            assert not hasattr(transport, "abort")
        finally:
            transport.close()
            await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        os.close(w)


def check_write_pipe_abort_when_closing() -> None:
    r, w = os.pipe()
    loop = stdlib_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    lost: list[BaseException | None] = []

    class P(asyncio.Protocol):
        def connection_lost(self, exc: BaseException | None) -> None:
            lost.append(exc)

    async def main() -> None:
        transport, _ = await loop.connect_write_pipe(P, os.fdopen(w, "wb", buffering=0))
        transport.close()
        transport.abort()  # asyncio: schedules connection_lost() once more
        for _ in range(3):
            await asyncio.sleep(0)
        with pytest.raises(AttributeError):
            transport.abort()  # asyncio: after connection_lost(), AttributeError

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        os.close(r)
    assert lost == [None]
    assert [type(e) for e in errors] == [AttributeError]  # the second connection_lost()


CHECKS: dict[str, Callable[[], None]] = {
    "wakeup-fd-restored": check_wakeup_fd_restored,
    "equal-deadline-fifo": check_equal_deadline_fifo,
    "timer-deadline-as-float": check_timer_deadline_as_float,
    "sleep-timer-bare-context": check_sleep_timer_bare_context,
    "handle-get-context-3.11": check_handle_get_context,
    "factory-task-name-3.13": check_factory_task_name,
    "executor-shutdown-timeout": check_executor_timeout,
    "call-at-rejects-non-numbers": check_call_at_non_numbers,
    "accept-out-of-resources": check_accept_out_of_resources,
    "accept-without-task": check_accept_without_task,
    "write-copies-mutable-buffers": check_write_copies_mutable_buffers,
    "writelines-flow-control": check_writelines_flow_control,
    "getaddrinfo-literal-inline": check_getaddrinfo_literal_inline,
    "recv-size-adaptive": check_recv_size_adaptive,
    "sendfile-transport-closed": check_sendfile_transport_closed,
    "sendfile-sets-file-position": check_sendfile_sets_file_position,
    "serve-forever-closes-clients": check_serve_forever_closes_clients,
    "socket-closed-without-transport": check_socket_closed_without_transport,
    "start-serving-after-close": check_start_serving_after_close,
    "zero-length-datagrams": check_zero_length_datagrams,
    "datagram-transport-class-3.11": check_datagram_transport_class,
    "datagram-buffer-size-drains": check_datagram_buffer_size_drains,
    "happy-eyeballs-no-refcycles": check_happy_eyeballs_no_refcycles,
    "own-child-watcher": check_own_child_watcher,
    "send-signal-never-reaps": check_send_signal_never_reaps,
    "subprocess-pipe-failure-no-hang": check_subprocess_pipe_failure_no_hang,
    "wait-returns-at-exit": check_wait_returns_at_exit,
    "tls-bytearray-get-buffer": check_tls_bytearray_get_buffer,
    "tls-paused-client-sends-finished": check_tls_paused_client_sends_finished,
    "tls-writelines-type-check": check_tls_writelines_type_check,
    "tls-data-before-error": check_tls_data_before_error,
    "tls-delivery-at-most-256k": check_tls_delivery_at_most_256k,
    "tls-closed-twice": check_tls_closed_twice,
    "unix-path-calls-off-loop": check_unix_path_calls_off_loop,
    "loop-time-is-the-clock": check_loop_time_is_the_clock,
    "child-starts-off-loop": check_child_starts_off_loop,
    "tls-shutdown-timeout-until-closed": check_tls_shutdown_timeout_until_closed,
    "start-tls-buffered-data": check_start_tls_buffered_data,
    "failed-tls-no-refcycles": check_failed_tls_no_refcycles,
    "poll-accepts-fd-not-open": check_poll_accepts_fd_not_open,
    "writelines-after-connection-lost": check_writelines_after_connection_lost,
    "read-pipe-abort": check_read_pipe_abort,
    "write-pipe-abort-when-closing": check_write_pipe_abort_when_closing,
}


def test_every_divergence_has_a_check() -> None:
    assert set(CHECKS) == set(DIVERGENCES)


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_stdlib_still_differs(key: str) -> None:
    entry = DIVERGENCES[key]
    if not entry.holds:
        pytest.skip(
            f"holds for {entry.versions}, not this Python: its marked tests run on the "
            "stdlib loop here"
        )
    CHECKS[key]()


@pytest.mark.parametrize("key", sorted(DIVERGENCES))
def test_divergence_is_documented_in_tests(key: str) -> None:
    """Every entry is named by at least one test outside this file."""
    tests_dir = Path(__file__).parent.parent
    sources = [p.read_text() for p in tests_dir.rglob("test_*.py") if p.name != Path(__file__).name]
    assert any(key in text for text in sources), f"no test mentions divergence {key!r}"
