"""An accept burst that runs the process out of file descriptors (EMFILE), in-process.

The test lowers this process's RLIMIT_NOFILE soft limit (restored in a
``finally``) so that only a few of a burst of queued connections can be
accepted. The promises held (issue 27, "nothing is lost"):

- the server reports the failure as the stdlib loop does, through the
  exception handler: message ``socket.accept() out of system resource``, an
  ``OSError`` with errno EMFILE and the ``socket`` (how many times differs by
  design: divergence ``accept-out-of-resources``, asyncio repeats it up to
  `backlog` times per attempt);
- it does not spin while starved: under 0.3 s of CPU in a 0.5 s window;
- once fds free up, every queued connection is accepted and served in turn,
  and a later connection too; nothing is left open or registered.

Runs on the stdlib loop, tideloop with every poller, and uvloop where
installed (libuv's "EMFILE trick" accepts and drops the queued connections
instead: an expected failure there, not run because the loop then hangs in
close()).
"""

from __future__ import annotations

import asyncio
import asyncio.constants
import errno
import fcntl
import resource
import socket
import sys
import time
from typing import Any

import pytest
from fault_support import run

N_CLIENTS = 12
HEADROOM = 3  # free fd numbers below the lowered limit: a few accepts, then EMFILE


def limit_leaving(free: int) -> int:
    """The RLIMIT_NOFILE under which exactly *free* fd numbers are unused (opens no fd)."""
    unused = 0
    n = 0
    while True:
        try:
            fcntl.fcntl(n, fcntl.F_GETFD)
        except OSError:
            unused += 1
            if unused > free:
                return n
        n += 1


class Answer(asyncio.Protocol):
    """Answers the first data with ``ok:<data>`` and closes (freeing its fd)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"ok:" + data)
        self.transport.close()


async def ask(loop: asyncio.AbstractEventLoop, sock: socket.socket, i: int) -> bytes:
    await loop.sock_sendall(sock, b"%d" % i)
    answer = b""
    while data := await loop.sock_recv(sock, 100):
        answer += data
    return answer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux fd semantics")
@pytest.mark.fault_xfail(
    "uvloop",
    reason="uvloop: libuv's EMFILE trick accepts and closes the queued connections "
    "(they are dropped, not served); the test's failure then leaves uvloop's "
    "server open and closing that loop hangs, so it is not run there",
    run=False,
)
def test_accept_burst_under_emfile(
    fault_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = fault_loop
    monkeypatch.setattr(asyncio.constants, "ACCEPT_RETRY_DELAY", 0.1)
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: reports.append(ctx))
    figures: dict[str, float] = {}

    async def main() -> None:
        server = await loop.create_server(Answer, "127.0.0.1", 0, backlog=100)
        addr = server.sockets[0].getsockname()[:2]
        clients: list[socket.socket] = []
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            # The burst: all connected (queued in the backlog) before the loop accepts.
            for _ in range(N_CLIENTS):
                clients.append(socket.create_connection(addr, timeout=5))
                clients[-1].setblocking(False)
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(HEADROOM), hard))
            cpu0 = time.process_time()
            await asyncio.sleep(0.5)  # starved: accept() keeps failing
            figures["starved_cpu_s"] = time.process_time() - cpu0
            figures["reports_in_window"] = len(reports)
            # Each answered connection frees the fd the next accept needs.
            t0 = time.monotonic()
            for i, client in enumerate(clients):
                assert await asyncio.wait_for(ask(loop, client, i), 5) == b"ok:%d" % i
            figures["serve_all_s"] = time.monotonic() - t0
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for client in clients:
                client.close()
        # A later connection is served too.
        late = socket.socket()
        late.setblocking(False)
        try:
            await loop.sock_connect(late, addr)
            assert await asyncio.wait_for(ask(loop, late, 99), 5) == b"ok:99"
        finally:
            late.close()
        # Let the retries still scheduled run before closing: asyncio's would
        # re-register the closed socket and fail ("Exception in callback
        # BaseSelectorEventLoop._start_serving"), the stdlib bug the divergence
        # names; tideloop cancels them on close.
        await asyncio.sleep(2 * asyncio.constants.ACCEPT_RETRY_DELAY)
        server.close()
        await server.wait_closed()

    run(loop, main())
    print(f"\n{loop.__class__.__module__}: {figures}, {len(reports)} reports")
    assert reports, "accept() ran out of fds and the exception handler was not told"
    for ctx in reports:
        assert ctx.get("message") == "socket.accept() out of system resource", ctx
        exc = ctx.get("exception")
        assert type(exc) is OSError and exc.errno == errno.EMFILE, ctx
        assert "socket" in ctx, ctx
    assert figures["starved_cpu_s"] < 0.3, figures
