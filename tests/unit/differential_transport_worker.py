"""A worker for the transports' differential test: runs transport programs, prints their traces.

Started by ``test_differential.py`` twice, with and without
``TIDELOOP_PURE=1`` (one process per core). It reads one program per line
(JSON) on stdin and writes its trace (JSON) on stdout, until stdin closes.

A program drives one transport of tideloop's, over real sockets, against a
raw socket the worker holds (the peer): a stream transport (TCP or a Unix
socket pair; a `Protocol` or a `BufferedProtocol`, which may be swapped or
made to fail) or a datagram transport (UDP, connected or not). Each
operation is followed by a settling step (a few loop iterations, then the
peer reads what arrived), so what the kernel hands over is the same in both
runs; the socket buffers have fixed sizes for the same reason. The trace
lists every protocol callback with its data, every exception-handler call,
every error an API call raised (type and message), the transport's state
after each step, and every byte the peer received.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
from typing import Any

from differential_support import TRACE, call, serve

import tideloop

BUFSIZE = 64 * 1024


def pattern(seed: int, size: int) -> bytes:
    """*size* bytes that differ from step to step (so misplaced bytes show)."""
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def digest(data: bytes | bytearray | memoryview) -> list[Any]:
    raw = bytes(data)
    return [len(raw), hashlib.sha256(raw).hexdigest()[:12]]


def exc_info(exc: BaseException | None) -> Any:
    return None if exc is None else [type(exc).__name__, str(exc)]


class Failing:
    """Which protocol callback fails next (set by a step), once."""

    def __init__(self) -> None:
        self.which: str | None = None

    def check(self, name: str) -> None:
        if self.which == name:
            self.which = None
            raise ValueError(f"{name} fails")


class Plain(asyncio.Protocol):
    def __init__(self, fail: Failing, keep_open: bool) -> None:
        self.fail = fail
        self.keep_open = keep_open

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        TRACE.append(["made"])

    def data_received(self, data: bytes) -> None:
        TRACE.append(["data", type(data).__name__, *digest(data)])
        self.fail.check("data_received")

    def eof_received(self) -> bool:
        TRACE.append(["eof"])
        self.fail.check("eof_received")
        return self.keep_open

    def pause_writing(self) -> None:
        TRACE.append(["pause_writing"])
        self.fail.check("pause_writing")

    def resume_writing(self) -> None:
        TRACE.append(["resume_writing"])

    def connection_lost(self, exc: Exception | None) -> None:
        TRACE.append(["lost", exc_info(exc)])


class Buffered(asyncio.BufferedProtocol, Plain):
    def __init__(self, fail: Failing, keep_open: bool, size: int, kind: str) -> None:
        Plain.__init__(self, fail, keep_open)
        self.kind = kind
        self.buf = bytearray(size)

    def get_buffer(self, sizehint: int) -> Any:
        TRACE.append(["get_buffer", sizehint])
        self.fail.check("get_buffer")
        if self.kind == "empty":
            return bytearray()
        if self.kind == "readonly":
            return bytes(len(self.buf))
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        TRACE.append(["updated", nbytes, *digest(self.buf[:nbytes])])
        self.fail.check("buffer_updated")


def make_data(kind: str, data: bytes) -> Any:
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    if kind == "mv_int":  # itemsize 4: lengths count bytes
        return memoryview(data[: len(data) // 4 * 4]).cast("i")
    if kind == "mv_strided":
        return memoryview(data)[::2]
    if kind == "mv_released":
        view = memoryview(data)
        view.release()
        return view
    if kind == "str":
        return data.decode("latin-1")
    if kind == "none":
        return None
    return data


async def settle() -> None:
    for _ in range(6):
        await asyncio.sleep(0)


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        b = socket.create_connection(listener.getsockname())
        a, _ = listener.accept()
    return a, b


def fixed_buffers(*socks: socket.socket) -> None:
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFSIZE)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFSIZE)


async def stream_program(family: str, proto_kind: str, ops: list[list[Any]]) -> None:
    loop = asyncio.get_running_loop()
    a, b = tcp_pair() if family == "tcp" else socket.socketpair()
    fixed_buffers(a, b)
    b.setblocking(False)
    fail = Failing()

    def make(kind: str) -> asyncio.BaseProtocol:
        if kind.startswith("buffered"):
            _, size, how = kind.split(":")
            return Buffered(fail, True, int(size), how)
        return Plain(fail, kind == "keep_open")

    transport, _ = await loop.connect_accepted_socket(lambda: make(proto_kind), a)
    draining = True
    received = bytearray()
    peer_open = True
    try:
        for step, op in enumerate(ops):
            kind = op[0]
            TRACE.append(["step", step, op])
            if kind == "write":
                call("write", transport.write, make_data(op[2], pattern(step, op[1])))
            elif kind == "write_kw":
                call("write_kw", transport.write, data=pattern(step, op[1]))
            elif kind == "writelines":
                call(
                    "writelines",
                    transport.writelines,
                    [pattern(step * 10 + i, n) for i, n in enumerate(op[1])],
                )
            elif kind == "write_eof":
                call("write_eof", transport.write_eof)
            elif kind == "pause_reading":
                call(kind, transport.pause_reading)
            elif kind == "resume_reading":
                call(kind, transport.resume_reading)
            elif kind == "limits":
                call(kind, transport.set_write_buffer_limits, high=op[1])
            elif kind == "fail":
                fail.which = op[1]
            elif kind == "set_protocol":
                transport.set_protocol(make(op[1]))
            elif kind == "drain":
                draining = op[1]
            elif kind == "close":
                transport.close()
            elif kind == "abort":
                transport.abort()
            elif kind == "peer_send" and peer_open:
                # What a TCP peer's send() takes at once depends on timing
                # beyond a buffer's worth.
                data = pattern(1000 + step, op[1] if family == "unix" else min(op[1], 40_000))
                try:
                    b.send(data)
                except OSError as exc:
                    TRACE.append(["peer_send", type(exc).__name__])
            elif kind == "peer_shutdown" and peer_open:
                b.shutdown(socket.SHUT_WR)
            elif kind == "peer_close" and peer_open:
                if op[1] and family == "tcp":  # a reset
                    b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                b.close()
                peer_open = False
            await settle()
            # The peer reads until nothing more comes: what it holds then
            # is what the transport could send, whatever the timing.
            rounds = 0
            while draining and peer_open and rounds < 200:
                rounds += 1
                got = 0
                while True:
                    try:
                        chunk = b.recv(1 << 20)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        TRACE.append(["peer_recv", type(exc).__name__])
                        break
                    if not chunk:
                        break
                    got += len(chunk)
                    received.extend(chunk)
                await settle()
                if not got:
                    break
            size = transport.get_write_buffer_size()
            TRACE.append(
                [
                    "state",
                    # With a peer that does not read, how much TCP took before
                    # it stopped depends on timing; a Unix socket's does not.
                    size if family == "unix" or draining else size > 0,
                    transport.is_closing(),
                    transport.is_reading(),
                    len(received),
                ]
            )
    finally:
        transport.abort()
        await settle()
        if peer_open:
            b.close()
    TRACE.append(["received", *digest(received)])


class Dgram(asyncio.DatagramProtocol):
    def __init__(self, fail: Failing) -> None:
        self.fail = fail

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        TRACE.append(["made"])

    def datagram_received(self, data: bytes, addr: Any) -> None:
        # The port is the peer's (its number differs from run to run).
        TRACE.append(
            ["datagram", *digest(data), type(addr).__name__, addr[0], len(addr), list(addr[2:])]
        )
        self.fail.check("datagram_received")

    def error_received(self, exc: Exception) -> None:
        TRACE.append(["error_received", exc_info(exc)])

    def connection_lost(self, exc: Exception | None) -> None:
        TRACE.append(["lost", exc_info(exc)])


async def datagram_program(connected: bool, family: str, ops: list[list[Any]]) -> None:
    loop = asyncio.get_running_loop()
    fam, host = (socket.AF_INET6, "::1") if family == "inet6" else (socket.AF_INET, "127.0.0.1")
    a = socket.socket(fam, socket.SOCK_DGRAM)
    b = socket.socket(fam, socket.SOCK_DGRAM)
    a.bind((host, 0))
    b.bind((host, 0))
    b.setblocking(False)
    here = a.getsockname()
    if connected:
        a.connect(b.getsockname())
    fail = Failing()
    transport, _ = await loop.create_datagram_endpoint(lambda: Dgram(fail), sock=a)
    # A port nothing listens on (refused: an ICMP error for a connected socket).
    with socket.socket(fam, socket.SOCK_DGRAM) as gone:
        gone.bind((host, 0))
        dead = gone.getsockname()
    peer = b.getsockname()
    got: list[Any] = []
    try:
        for step, op in enumerate(ops):
            kind = op[0]
            TRACE.append(["step", step, op])
            if kind == "sendto":
                targets = {
                    "none": None,
                    "omit": None,
                    "peer": peer,  # the socket module's tuple (4 items for IPv6)
                    "peer2": peer[:2],  # (host, port)
                    "peer_list": list(peer),  # not a tuple: the socket module decides
                    "peer_name": ("localhost", peer[1]),  # a name: looked up
                    "peer_scope": (f"{peer[0]}%lo", peer[1]),  # a scope in the host
                    "bad_port": (peer[0], 70000),
                    "dead": dead,
                }
                target = targets.get(op[2], ("256.1.1.1", 1))
                args = [make_data(op[3], pattern(step, op[1]))]
                if op[2] != "omit":
                    args.append(target)
                call("sendto", transport.sendto, *args)
            elif kind == "sendto_kw":
                call("sendto_kw", transport.sendto, pattern(step, op[1]), addr=b.getsockname())
            elif kind == "peer_send":
                b.sendto(pattern(1000 + step, op[1]), here)
            elif kind == "fail":
                fail.which = op[1]
            elif kind == "close":
                transport.close()
            elif kind == "abort":
                transport.abort()
            await settle()
            while True:
                try:
                    data, _ = b.recvfrom(1 << 16)
                except BlockingIOError:
                    break
                got.append(digest(data))
            TRACE.append(
                ["state", transport.get_write_buffer_size(), transport.is_closing(), len(got)]
            )
    finally:
        transport.abort()
        await settle()
        b.close()
    TRACE.append(["peer_got", got])


def run(request: dict[str, Any]) -> list[Any]:
    TRACE.clear()
    loop = tideloop.new_event_loop()
    loop.set_debug(request["debug"])
    loop.slow_callback_duration = 1e9

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        TRACE.append(["handler", context["message"], exc_info(context.get("exception"))])

    loop.set_exception_handler(handler)
    try:
        if request["kind"] == "stream":
            main = stream_program(request["family"], request["protocol"], request["ops"])
        else:
            main = datagram_program(
                request["connected"], request.get("family", "inet"), request["ops"]
            )
        try:
            loop.run_until_complete(main)
        except Exception as exc:  # the program's own mistake: in the trace, to compare
            TRACE.append(["program failed", type(exc).__name__, str(exc)])
    finally:
        loop.close()
    return list(TRACE)


if __name__ == "__main__":
    from tideloop._transports import native

    serve(native.NATIVE, run)
