"""tideloop.testing.SimNetwork: hosts, simulated TCP under the production transports, faults.

Every test runs a small distributed program (servers spawned on named hosts,
clients on others) on virtual time, and checks what the program observes:
addresses, bytes, errors with their real errno, and the virtual times at which
things happen (exact, because latency is fixed or seeded).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import socket
import ssl
from typing import Any

import pytest

from tideloop import testing
from tideloop.testing import SimNetwork, SimSocket

from certs import CA
from sim_support import cancelled, echo_lines, open_for, serve, sim_run, stop


def test_hosts_names_addresses_and_an_echo() -> None:
    async def main(net: SimNetwork) -> None:
        server = net.spawn("db", serve(5432))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        info = await loop.getaddrinfo("db", 5432, type=socket.SOCK_STREAM)
        assert info == [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.1", 5432))
        ]
        reader, writer = await asyncio.open_connection("db", 5432)
        assert isinstance(writer.get_extra_info("socket")._sock, SimSocket)  # type: ignore[attr-defined]
        assert writer.get_extra_info("peername") == ("10.0.0.1", 5432)
        assert writer.get_extra_info("sockname") == (net.address("client"), 49152)
        writer.write(b"one\ntwo\n")
        assert await reader.readline() == b"echo one\n"
        assert await reader.readline() == b"echo two\n"
        writer.close()
        await writer.wait_closed()
        await stop(server)

    net = SimNetwork()
    sim_run(net, main)
    assert net.address("db") == "10.0.0.1" and net.address("client") == "10.0.0.2"


def test_localhost_is_the_host_itself_and_port_0_allocates() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        seen: list[Any] = []

        async def on_host() -> None:
            one = await asyncio.start_server(echo_lines, "127.0.0.1", 0)
            two = await asyncio.start_server(echo_lines, "localhost", 0)
            ports = [s.sockets[0].getsockname() for s in (one, two)]
            seen.append(ports)
            _reader, writer = await asyncio.open_connection("localhost", ports[1][1])
            seen.append(writer.get_extra_info("peername"))
            writer.close()
            await writer.wait_closed()
            with pytest.raises(OSError) as taken:
                await asyncio.start_server(echo_lines, "127.0.0.1", ports[0][1])
            seen.append(taken.value.errno)
            for server in (one, two):
                server.close()
                await server.wait_closed()

        await net.spawn("web", on_host())
        return seen

    net = SimNetwork()
    ports, peer, err = sim_run(net, main)
    web = net.address("web")
    assert ports[0][0] == ports[1][0] == web and ports[0][1] != ports[1][1]
    assert peer == (web, ports[1][1])
    assert err == errno.EADDRINUSE


def test_errors_have_the_real_errno() -> None:
    async def main(net: SimNetwork) -> None:
        net.host("db")
        with pytest.raises(ConnectionRefusedError) as refused:
            await asyncio.open_connection("db", 1)
        assert refused.value.errno == errno.ECONNREFUSED
        with pytest.raises(socket.gaierror) as unknown:
            await asyncio.open_connection("nowhere.example", 80)
        assert unknown.value.errno == socket.EAI_NONAME
        with pytest.raises(OSError) as unreachable:
            await asyncio.open_connection("10.9.9.9", 80)
        assert unreachable.value.errno == errno.ENETUNREACH
        # Ports by service name, from the simulation's own table.
        loop = asyncio.get_running_loop()
        info = await loop.getaddrinfo("db", "https", type=socket.SOCK_STREAM)
        assert info[0][4] == (net.address("db"), 443)
        with pytest.raises(socket.gaierror) as service:
            await loop.getaddrinfo("db", "no-such-service")
        assert service.value.errno == socket.EAI_SERVICE

    sim_run(SimNetwork(), main)


def test_latency_gives_exact_virtual_times() -> None:
    async def main(net: SimNetwork) -> list[float]:
        net.set_latency("client", "db", 0.05)
        server = net.spawn("db", serve(7000))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        reader, writer = await asyncio.open_connection("db", 7000)
        connected = loop.time() - t0
        writer.write(b"x\n")
        await reader.readline()
        round_trip = loop.time() - t0 - connected
        writer.close()
        await writer.wait_closed()
        await stop(server)
        return [round(connected, 9), round(round_trip, 9)]

    # SYN out and SYN-ACK back: two latencies; a request and its reply: two more.
    assert sim_run(SimNetwork(), main) == [0.1, 0.1]


def test_a_reader_that_stops_pauses_the_writer_and_nothing_is_lost() -> None:
    payload = os.urandom(3 * 1024 * 1024)

    async def main(net: SimNetwork) -> None:
        got_all = asyncio.get_running_loop().create_future()
        reading = asyncio.Event()

        async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reading.wait()
            data = await reader.read()
            got_all.set_result(hashlib.sha256(data).hexdigest())
            writer.close()
            await writer.wait_closed()

        server = net.spawn("sink", serve(9000, slow, limit=1 << 16))
        await asyncio.sleep(0)
        _reader, writer = await asyncio.open_connection("sink", 9000)
        writer.write(payload)
        drained = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(1.0)
        assert not drained.done()  # the window and the reader's buffer are full
        transport = writer.transport
        assert transport.get_write_buffer_size() > 2 * 1024 * 1024
        reading.set()
        await drained
        writer.write_eof()
        assert await got_all == hashlib.sha256(payload).hexdigest()
        writer.close()
        await writer.wait_closed()
        await stop(server)

    sim_run(SimNetwork(seed=5), main)


def test_half_close_reaches_the_server_which_still_replies() -> None:
    async def main(net: SimNetwork) -> bytes:
        async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            data = await reader.read()  # until EOF
            writer.write(b"%d bytes" % len(data))
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = net.spawn("db", serve(1234, count))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 1234)
        writer.write(b"abc" * 100)
        writer.write_eof()
        reply = await reader.read()
        writer.close()
        await writer.wait_closed()
        await stop(server)
        return reply

    assert sim_run(SimNetwork(), main) == b"300 bytes"


def test_a_partition_holds_messages_until_heal() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        net.set_latency("client", "db", 0.01)
        server = net.spawn("db", serve(80))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        net.partition("client", "db")
        writer.write(b"held\n")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 5)
        # A new connection cannot be made meanwhile either.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.open_connection("db", 80), 5)
        t0 = loop.time()
        net.heal()
        line = await reader.readline()
        waited = round(loop.time() - t0, 9)
        writer.close()
        await writer.wait_closed()
        await stop(server)
        return [line, waited]

    # After heal the request is retransmitted and answered: two latencies.
    assert sim_run(SimNetwork(), main) == [b"echo held\n", 0.02]


def test_a_one_way_partition() -> None:
    async def main(net: SimNetwork) -> None:
        server = net.spawn("db", serve(80))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        net.partition("db", "client", oneway=True)  # replies are held, requests pass
        writer.write(b"a\n")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 1)
        net.heal("db", "client")
        assert await reader.readline() == b"echo a\n"
        writer.close()
        await writer.wait_closed()
        await stop(server)

    sim_run(SimNetwork(), main)


def test_heal_one_host_or_one_direction() -> None:
    async def main(net: SimNetwork) -> None:
        server = net.spawn("db", serve(80))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        net.partition("client", "db")
        net.partition("db", "cache")
        writer.write(b"a\n")
        net.heal("client", "db", oneway=True)  # requests pass, replies still held
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 1)
        net.heal("db")  # every partition of db's
        assert await reader.readline() == b"echo a\n"
        assert net.partitions == frozenset()
        writer.close()
        await writer.wait_closed()
        await stop(server)

    sim_run(SimNetwork(), main)


def test_reset_reaches_both_ends() -> None:
    async def main(net: SimNetwork) -> list[str]:
        outcome: list[str] = []

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read(1)
            except ConnectionResetError as exc:
                outcome.append(f"server: {exc.errno}")
            writer.close()

        server = net.spawn("db", serve(80, hold))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        await asyncio.sleep(0.1)
        net.reset("client", "db")
        try:
            await reader.read(1)
        except ConnectionResetError as exc:
            outcome.append(f"client: {exc.errno}")
        writer.close()
        await asyncio.sleep(0.1)
        await stop(server)
        return sorted(outcome)

    assert sim_run(SimNetwork(), main) == [
        f"client: {errno.ECONNRESET}",
        f"server: {errno.ECONNRESET}",
    ]


def test_a_reset_is_reported_once_then_the_socket_reads_eof() -> None:
    """Through the loop's sock_* methods on a socket the network made: the send
    that meets the reset raises it, a later recv reads EOF (Linux's order)."""

    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        server = net.spawn("db", serve(80))
        await asyncio.sleep(0)
        sock = net.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        with sock:
            await loop.sock_connect(sock, (net.address("db"), 80))
            await loop.sock_sendall(sock, b"a\n")
            first = await loop.sock_recv(sock, 100)
            net.reset("client", "db")
            with pytest.raises(ConnectionResetError):
                await loop.sock_sendall(sock, b"b\n")
            after = await asyncio.wait_for(loop.sock_recv(sock, 100), 1)
        await stop(server)
        return [first, after]

    assert sim_run(SimNetwork(), main) == [b"echo a\n", b""]


def test_crash_and_restart_a_host() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        events: list[Any] = []
        server = net.spawn("db", serve(80))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        writer.write(b"1\n")
        events.append(await reader.readline())
        net.crash("db")
        with pytest.raises(ConnectionResetError):
            await reader.readline()
        writer.close()
        await asyncio.gather(server, return_exceptions=True)
        events.append(server.cancelled())
        # A crashed host answers nothing: a connect waits (here, times out).
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.open_connection("db", 80), 3)
        restarted = net.restart("db", serve(80))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        writer.write(b"2\n")
        events.append(await reader.readline())
        writer.close()
        await writer.wait_closed()
        await stop(restarted)
        return events

    assert sim_run(SimNetwork(), main) == [b"echo 1\n", True, b"echo 2\n"]


def test_closing_with_unread_data_resets_the_peer() -> None:
    async def main(net: SimNetwork) -> None:
        async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.transport.pause_reading()
            await asyncio.sleep(0.5)  # the request arrives, left in the socket
            writer.transport.abort()

        server = net.spawn("db", serve(80, rude))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 80)
        writer.write(b"never read\n")
        with pytest.raises(ConnectionResetError):
            await reader.read(10)
        writer.close()
        await stop(server)

    sim_run(SimNetwork(), main)


def test_tls_over_the_simulated_network() -> None:
    ca = CA()
    cert = ca.issue_cert("db")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)

    async def main(net: SimNetwork) -> bytes:
        server = net.spawn("db", serve(443, ssl=server_ctx))
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("db", 443, ssl=client_ctx)
        assert writer.get_extra_info("peercert")["subjectAltName"] == (("DNS", "db"),)
        writer.write(b"secret\n")
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        await stop(server)
        return line

    assert sim_run(SimNetwork(), main) == b"echo secret\n"


def run_chatter(seed: int) -> tuple[list[tuple[float, str, str, str, str]], list[bytes]]:
    async def main(net: SimNetwork) -> list[bytes]:
        servers = [net.spawn(f"s{i}", serve(80)) for i in range(3)]
        await asyncio.sleep(0)
        replies: list[bytes] = []

        async def client(i: int) -> None:
            reader, writer = await asyncio.open_connection(f"s{i % 3}", 80)
            for n in range(3):
                writer.write(b"%d.%d\n" % (i, n))
                replies.append(await reader.readline())
            writer.close()
            await writer.wait_closed()

        await asyncio.gather(*(net.spawn(f"c{i}", client(i)) for i in range(4)))
        await stop(*servers)
        return replies

    net = SimNetwork(seed=seed, latency=(0.001, 0.02))
    replies = sim_run(net, main)
    return net.log, replies


def test_one_seed_replays_the_same_run() -> None:
    first = run_chatter(11)
    assert run_chatter(11) == first
    other = run_chatter(12)
    assert sorted(other[1]) == sorted(first[1])  # the same replies...
    assert other[0] != first[0]  # ...at other times, in another order


def test_real_fds_keep_working_beside_the_simulation() -> None:
    async def main(net: SimNetwork) -> list[Any]:
        loop = asyncio.get_running_loop()
        threaded = await loop.run_in_executor(None, sum, [1, 2, 3])
        r, w = os.pipe()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb", 0)
        )
        os.write(w, b"through a real pipe\n")
        line = await reader.readline()
        os.close(w)
        transport.close()
        await asyncio.sleep(0)
        return [threaded, line]

    assert sim_run(SimNetwork(), main) == [6, b"through a real pipe\n"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="real must be"):
        SimNetwork(real="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="latency"):
        SimNetwork(latency=(0.2, 0.1))
    net = SimNetwork()
    loop = testing.new_event_loop(network=net)
    try:
        with pytest.raises(RuntimeError, match="serves one loop"):
            testing.new_event_loop(network=net)
    finally:
        loop.close()


def test_a_hundred_hosts_and_a_thousand_connections_at_once() -> None:
    # bench/sim_scale.py runs the same shape with 10,000 connections.
    async def main(net: SimNetwork) -> list[int]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readline())
            writer.close()

        servers = [
            net.spawn(f"h{i}", open_for(asyncio.start_server(echo, None, 80, backlog=100)))
            for i in range(100)
        ]
        await asyncio.sleep(0.01)

        async def client(i: int) -> int:
            reader, writer = await asyncio.open_connection(f"h{i % 100}", 80)
            await asyncio.sleep(1)  # all thousand are open now
            writer.write(b"%d\n" % i)
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
            return int(line)

        echoed = await asyncio.gather(*(client(i) for i in range(1000)))
        await cancelled(*servers)
        return list(echoed)

    net = SimNetwork(seed=2)
    assert sim_run(net, main) == list(range(1000))
    accepted = {e[3] for e in net.log if e[1] == "accept"}
    assert len(accepted) == 100
