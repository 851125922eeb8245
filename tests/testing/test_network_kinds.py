"""SimNetwork beyond TCP: UDP, Unix sockets, sockets the program made, sendfile, link faults.

Each test runs a small program on the simulated network (virtual time) and
checks what it observes. Where a behaviour is asyncio's own (an error and
its errno, what a datagram protocol is told), the same program also runs on
the stdlib loop over the real loopback, and both must observe the same.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from typing import Any

import pytest

from tideloop.testing import SimNetwork, SimSocket

from certs import CA
from sim_support import cancelled, open_for, sim_run


class Datagrams(asyncio.DatagramProtocol):
    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.received: list[tuple[bytes, Any]] = []
        self.errors: list[OSError] = []
        self.transport: asyncio.DatagramTransport | None = None
        self.arrived = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.DatagramTransport)
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received.append((data, addr))
        self.arrived.set()
        if self.echo:
            assert self.transport is not None
            self.transport.sendto(b"re: " + data, addr)

    def error_received(self, exc: Exception) -> None:
        assert isinstance(exc, OSError)
        self.errors.append(exc)
        self.arrived.set()


# -- UDP -------------------------------------------------------------------


def test_udp_request_and_reply_with_simulated_addresses() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        served: list[Datagrams] = []

        def answering() -> Datagrams:
            served.append(Datagrams(echo=True))
            return served[-1]

        dns = loop.create_datagram_endpoint(answering, local_addr=("0.0.0.0", 53))
        server = net.spawn("dns", open_for(dns, 10))
        await asyncio.sleep(0.1)
        transport, proto = await loop.create_datagram_endpoint(Datagrams, remote_addr=("dns", 53))
        sockname = transport.get_extra_info("sockname")
        transport.sendto(b"who is db?")
        await proto.arrived.wait()
        transport.close()
        await cancelled(server)
        return [
            sockname,
            transport.get_extra_info("peername"),
            proto.received,
            served[0].received,
        ]

    net = SimNetwork(latency=(0.01, 0.01))
    sockname, peername, received, served = sim_run(net, main)
    dns, client = net.address("dns"), net.address("client")
    assert sockname == (client, 49152)
    assert peername == (dns, 53)
    assert received == [(b"re: who is db?", (dns, 53))]
    assert served == [(b"who is db?", (client, 49152))]


async def unreachable_port(host: str, port: int) -> list[Any]:
    """Send from a connected UDP endpoint to a port nobody has: what the protocol hears."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Datagrams, remote_addr=(host, port))
    transport.sendto(b"anyone?")
    await asyncio.wait_for(proto.arrived.wait(), 5)
    transport.close()
    await asyncio.sleep(0)
    return [(type(e), e.errno) for e in proto.errors]


def test_udp_port_unreachable_is_reported_as_on_a_real_network() -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    free_port = probe.getsockname()[1]
    probe.close()
    real = asyncio.run(unreachable_port("127.0.0.1", free_port))

    async def main(net: SimNetwork) -> list[Any]:
        net.host("quiet")
        return await unreachable_port("quiet", 9999)

    simulated = sim_run(SimNetwork(), main)
    assert real == simulated == [(ConnectionRefusedError, errno.ECONNREFUSED)]


def udp_burst(seed: int, **link: Any) -> tuple[list[int], list[Any]]:
    async def main(net: SimNetwork) -> list[int]:
        loop = asyncio.get_running_loop()
        net.set_link("client", "sink", **link)
        got: list[Datagrams] = []

        def receiving() -> Datagrams:
            got.append(Datagrams())
            return got[-1]

        sink = loop.create_datagram_endpoint(receiving, local_addr=("0.0.0.0", 9000))
        server = net.spawn("sink", open_for(sink, 30))
        await asyncio.sleep(0.1)
        transport, _ = await loop.create_datagram_endpoint(Datagrams, remote_addr=("sink", 9000))
        for i in range(200):
            transport.sendto(i.to_bytes(2, "big"))
            await asyncio.sleep(0.001)
        await asyncio.sleep(1)
        transport.close()
        await cancelled(server)
        return [int.from_bytes(data, "big") for data, _ in got[0].received]

    net = SimNetwork(seed=seed)
    return sim_run(net, main), net.log


def test_udp_loss_duplication_and_reordering_come_from_the_seed() -> None:
    link = {"latency": (0.001, 0.01), "loss": 0.1, "duplicate": 0.05}
    numbers, log = udp_burst(5, **link)
    lost = {int(e[4].split()[0]) for e in log if e[1] == "lost"}
    assert lost == {2}  # every datagram is two bytes
    events = [e[1] for e in log]
    assert (
        len(numbers)
        == events.count("dgram")
        == 200 - events.count("lost") + (len(numbers) - len(set(numbers)))
    )
    assert 0 < 200 - len(set(numbers)) < 40  # some lost, not most
    assert len(numbers) > len(set(numbers))  # some duplicated
    assert numbers != sorted(numbers)  # some reordered
    assert udp_burst(5, **link) == (numbers, log)  # the seed replays it all
    assert udp_burst(6, **link)[0] != numbers


def test_udp_without_faults_keeps_order_with_fixed_latency_and_partitions_drop() -> None:
    numbers, _ = udp_burst(1, latency=0.005)
    assert numbers == list(range(200))

    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_datagram_endpoint(Datagrams, local_addr=("0.0.0.0", 7))
        sender, _ = await loop.create_datagram_endpoint(Datagrams, remote_addr=("client", 7))
        net.partition("client", "client")
        sender.sendto(b"lost")
        await asyncio.sleep(1)
        net.heal()
        sender.sendto(b"found")
        await proto.arrived.wait()
        sender.close()
        transport.close()
        return [data for data, _ in proto.received]

    net = SimNetwork()
    assert sim_run(net, main) == [b"found"]
    assert [e[1] for e in net.log if e[1] in ("dropped", "dgram")] == ["dropped", "dgram"]


def test_udp_sock_methods_and_limits() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.setblocking(False)
        a.bind(("127.0.0.1", 0))  # in the kernel: adopted when handed to the loop
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b.setblocking(False)
        await loop.sock_sendto(b, b"x" * 10, ("client", a.getsockname()[1]))
        assert isinstance(b, SimSocket)
        data, source = await loop.sock_recvfrom(a, 4)  # truncated, as recvfrom does
        assert isinstance(a, SimSocket)
        with pytest.raises(OSError) as too_big:
            await loop.sock_sendto(b, b"x" * 70000, source)
        with pytest.raises(OSError) as no_peer:
            b.send(b"x")
        a.close()
        b.close()
        return [
            data,
            source == (net.address("client"), 49152),
            too_big.value.errno,
            no_peer.value.errno,
        ]

    assert sim_run(SimNetwork(), main) == [b"xxxx", True, errno.EMSGSIZE, errno.EDESTADDRREQ]


# -- Unix sockets ------------------------------------------------------------


async def unix_errors(directory: str) -> list[Any]:
    seen: list[Any] = []
    for path in (os.path.join(directory, "nothing.sock"),):
        with pytest.raises(OSError) as missing:
            await asyncio.open_unix_connection(path)
        seen.append((type(missing.value), missing.value.errno))
    # A path bound but not listening.
    path = os.path.join(directory, "bound.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(asyncio.Protocol, sock=sock, start_serving=False)
    with pytest.raises(OSError) as refused:
        await asyncio.open_unix_connection(path)
    seen.append((type(refused.value), refused.value.errno))
    server.close()
    await server.wait_closed()
    return seen


def test_unix_errors_are_the_real_ones() -> None:
    with tempfile.TemporaryDirectory() as directory:
        real = asyncio.run(unix_errors(directory))

    async def main(net: SimNetwork) -> list[Any]:
        # The program binds its own socket in the kernel (a real directory),
        # then hands it to the loop: the path is then the host's.
        with tempfile.TemporaryDirectory() as directory:
            return await unix_errors(directory)

    simulated = sim_run(SimNetwork(), main)
    # Bound, and not listening: a listening server's socket listens at once
    # on both loops, so both refuse only a path with no server.
    assert real == simulated
    assert real[0] == (FileNotFoundError, errno.ENOENT)


def test_unix_sockets_live_in_their_hosts_namespace() -> None:
    path = "/run/tideloop-sim-test.sock"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = await reader.readline()
        writer.write(b"served on " + host)
        writer.close()

    async def ask(host: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(path)
        assert writer.get_extra_info("peername") == path
        writer.write(host + b"\n")
        reply = await reader.read()
        writer.close()
        await writer.wait_closed()
        return reply

    async def app(name: bytes, results: list[Any]) -> None:
        server = await asyncio.start_unix_server(handler, path)
        assert server.sockets[0].getsockname() == path
        with pytest.raises(OSError) as taken:
            await asyncio.start_unix_server(handler, path)
        results.append(taken.value.errno)
        results.append(await ask(name))
        server.close()
        await server.wait_closed()

    async def main(net: SimNetwork) -> list[Any]:
        results: list[Any] = []
        await net.spawn("a", app(b"a", results))
        await net.spawn("b", app(b"b", results))
        with pytest.raises(FileNotFoundError):
            await ask(b"client")  # the client host has no such path
        return results

    assert sim_run(SimNetwork(), main) == [
        errno.EADDRINUSE,
        b"served on a\n",
        errno.EADDRINUSE,
        b"served on b\n",
    ]
    assert not os.path.exists(path)  # nothing touched the real file system


# -- sockets the program made ---------------------------------------------------


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1000):
        writer.write(data)
    writer.close()


def test_a_programs_own_sockets_connect_serve_and_accept_in_the_simulation() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        ports: list[int] = []

        async def web() -> None:
            # Its own listening socket, bound in the kernel first: handed to
            # create_server, it serves on the simulated host, same port.
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            ports.append(listener.getsockname()[1])
            server = await asyncio.start_server(echo, sock=listener)
            # Adopted, it let go of the kernel's port: nothing real answers there.
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", ports[0]), timeout=5).close()
            # And one it accepts from itself, with sock_accept.
            raw = socket.socket()
            raw.setblocking(False)
            raw.bind(("0.0.0.0", 8080))
            raw.listen()
            ready.set()
            conn, peer = await loop.sock_accept(raw)
            assert isinstance(conn, SimSocket) and peer[0] == net.address("client")
            await loop.sock_sendall(conn, await loop.sock_recv(conn, 100))
            conn.close()
            raw.close()
            await asyncio.sleep(1)
            server.close()
            await server.wait_closed()

        server = net.spawn("web", web())
        await ready.wait()
        # The happy-eyeballs path (aiohappyeyeballs, aiohttp): its own socket,
        # sock_connect, then create_connection(sock=).
        own = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        own.setblocking(False)
        await loop.sock_connect(own, ("web", ports[0]))
        assert isinstance(own, SimSocket)
        reader, writer = await asyncio.open_connection(sock=own)
        writer.write(b"through my own socket")
        first = await reader.read(100)
        peer = writer.get_extra_info("peername")
        writer.close()
        await writer.wait_closed()
        other = socket.socket()
        other.setblocking(False)
        await loop.sock_connect(other, (net.address("web"), 8080))
        await loop.sock_sendall(other, b"raw")
        second = await loop.sock_recv(other, 100)
        other.close()
        await server
        return [first, peer, second]

    net = SimNetwork()
    first, peer, second = sim_run(net, main)
    assert first == b"through my own socket" and second == b"raw"
    assert peer[0] == net.address("web")


def test_sockets_connected_for_real_stay_real() -> None:
    async def main(net: SimNetwork) -> bytes:
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=a)
        assert type(a) is socket.socket  # not adopted: the kernel carries it
        b.sendall(b"kernel bytes\n")
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        b.close()
        return line

    assert sim_run(SimNetwork(), main) == b"kernel bytes\n"


def test_sendfile_falls_back_to_reads_and_writes_over_a_simulated_connection(
    tmp_path: Any,
) -> None:
    payload = os.urandom(300_000)
    path = tmp_path / "payload.bin"
    path.write_bytes(payload)

    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        received = bytearray()
        done = asyncio.Event()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.extend(await reader.read())
            writer.close()
            done.set()

        async def serve() -> None:
            server = await asyncio.start_server(sink, None, 9)
            await done.wait()
            server.close()
            await server.wait_closed()

        server = net.spawn("disk", serve())
        await asyncio.sleep(0.1)
        _, writer = await asyncio.open_connection("disk", 9)
        with open(path, "rb") as file:
            sent = await loop.sendfile(writer.transport, file)
        writer.close()
        await server
        # sock_sendfile, on a socket of the program's own.
        own = socket.socket()
        own.setblocking(False)
        received.clear()
        done.clear()
        server = net.spawn("disk", serve())
        await asyncio.sleep(0.1)
        await loop.sock_connect(own, ("disk", 9))
        with open(path, "rb") as file:
            sock_sent = await loop.sock_sendfile(own, file, 1000, 5000)
        own.close()
        await server
        return [sent, sock_sent, bytes(received)]

    sent, sock_sent, tail = sim_run(SimNetwork(), main)
    assert sent == len(payload) and sock_sent == 5000
    assert tail == payload[1000:6000]


# -- link faults -------------------------------------------------------------------


def test_split_delivers_a_send_in_pieces_and_bandwidth_paces_it() -> None:
    class Pieces(asyncio.Protocol):
        def __init__(self) -> None:
            self.pieces: list[bytes] = []
            self.done = asyncio.get_running_loop().create_future()

        def data_received(self, data: bytes) -> None:
            self.pieces.append(data)

        def eof_received(self) -> None:
            self.done.set_result(asyncio.get_running_loop().time())

    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        protos: list[Pieces] = []

        def factory() -> Pieces:
            protos.append(Pieces())
            return protos[-1]

        server = net.spawn("far", open_for(loop.create_server(factory, None, 80), 60))
        await asyncio.sleep(0.1)
        net.set_link("client", "far", latency=0.0, split=1.0, bandwidth=100_000)
        transport, _ = await loop.create_connection(asyncio.Protocol, "far", 80)
        start = loop.time()
        transport.write(bytes(range(200)) * 250)  # 50,000 bytes
        transport.write_eof()
        finished = await protos[0].done
        transport.close()
        await cancelled(server)
        return [protos[0].pieces, round(finished - start, 6)]

    net = SimNetwork(seed=3)
    pieces, elapsed = sim_run(net, main)
    assert b"".join(pieces) == bytes(range(200)) * 250
    assert len(pieces) > 1
    assert any(e[1] == "split" for e in net.log)
    assert elapsed == 0.5  # 50,000 bytes at 100,000 bytes a second


def test_set_link_checks_its_arguments() -> None:
    net = SimNetwork()
    with pytest.raises(ValueError, match="loss must be a probability"):
        net.set_link("a", "b", loss=1.5)
    with pytest.raises(ValueError, match="bandwidth"):
        net.set_link("a", "b", bandwidth=-1)
    with pytest.raises(ValueError, match="latency"):
        net.set_link("a", "b", latency=(0.3, 0.1))
    with pytest.raises(ValueError, match="duplicate"):
        SimNetwork(duplicate=-0.1)


# -- TLS upgrades, and what stays real ------------------------------------------------


def test_start_tls_upgrades_a_simulated_connection() -> None:
    ca = CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("mail").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)

    async def smtp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"go ahead\n")
        await writer.drain()
        await writer.start_tls(server_ctx)
        writer.write(b"secure " + await reader.readline())
        await writer.drain()
        writer.close()

    async def main(net: SimNetwork) -> list[Any]:
        server = net.spawn("mail", open_for(asyncio.start_server(smtp, None, 25)))
        await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("mail", 25)
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"go ahead\n"
        await writer.start_tls(client_ctx, server_hostname="mail")
        writer.write(b"hello\n")
        line = await reader.readline()
        version = writer.get_extra_info("ssl_object").version()
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(1)  # the server's side of the TLS shutdown, too
        await cancelled(server)
        return [line, version]

    line, version = sim_run(SimNetwork(), main)
    assert line == b"secure hello\n" and version.startswith("TLS")


def test_real_allow_reaches_a_real_server_beside_simulated_hosts() -> None:
    # A real server on the machine (its own thread, plain sockets), on
    # 127.0.0.2: 127.0.0.1 means the simulated host itself.
    listener = socket.create_server(("127.0.0.2", 0))
    port = listener.getsockname()[1]

    def real_server() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"real " + conn.recv(100))

    thread = threading.Thread(target=real_server)
    thread.start()

    async def main(net: SimNetwork) -> list[Any]:
        async def sim_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"simulated " + await reader.read(100))
            writer.close()

        server = net.spawn("web", open_for(asyncio.start_server(sim_echo, None, 80)))
        await asyncio.sleep(0.01)
        replies = []
        for host, to in (("web", 80), ("127.0.0.2", port)):
            reader, writer = await asyncio.open_connection(host, to)
            writer.write(b"hi")
            replies.append(await reader.read())
            replies.append(type(writer.get_extra_info("socket")._sock).__name__)  # type: ignore[attr-defined]
            writer.close()
            await writer.wait_closed()
        # A child process and its pipes stay real too.
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print('from a child')", stdout=subprocess.PIPE
        )
        out, _ = await child.communicate()
        replies.append(out.strip())
        # And signals.
        loop = asyncio.get_running_loop()
        signalled: asyncio.Future[str] = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, signalled.set_result, "signal")
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            replies.append(await signalled)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        await cancelled(server)
        return replies

    try:
        replies = sim_run(SimNetwork(real="allow"), main)
    finally:
        thread.join(10)
        listener.close()
    assert replies == [
        b"simulated hi",
        "SimSocket",
        b"real hi",
        "socket",
        b"from a child",
        "signal",
    ]
    # The default refuses what no host has.

    async def refused(net: SimNetwork) -> None:
        await asyncio.open_connection("127.0.0.2", port)

    with pytest.raises(OSError) as caught:
        sim_run(SimNetwork(), refused)
    assert caught.value.errno == errno.ENETUNREACH
