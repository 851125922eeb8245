"""SimNetwork's streams deliver every byte once and in order, whatever the schedule.

Every segment moves on a loop timer, and a schedule (``seed=``, which the
``tideloop_net`` fixture passes under ``--tideloop-seeds``) may run timers
with equal deadlines in any order, as asyncio may. A split send's pieces,
and sends close together under latency jitter, often arrive at the same
instant: the kernel model must deliver them in the order sent however their
timers tie (before the fix, ``b"hello\\n"`` split over a jittery link read as
``b"lhelo\\n"`` or ``b"h\\n"`` on 22 of 50 seeds). Datagrams reorder only where
their drawn latencies cross; messages of independent flows (two clients'
connection requests) still arrive at the same instant in either order, which
the schedule keeps exploring.

Each test runs many seeds on virtual time, so it takes well under a second
or two, and checks that the schedule did reorder tied timers in its runs
(the freedom the model must withstand was exercised). The last test compares
a reset with the kernel's, on the real loopback: what arrived before it
stays readable, as on Linux.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import random
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tideloop import testing
from tideloop.testing import DecisionLog, RandomStrategy, SimNetwork

from sim_support import serve, stop

PORT = 7000
UNIX_PATH = "/run/order.sock"


def schedule(seed: int) -> DecisionLog:
    """The decisions of a run perturbed by *seed* (what ``seed=seed`` uses)."""
    return DecisionLog(RandomStrategy(seed))


def tie_reorders(log: DecisionLog) -> int:
    """How many timers the schedule ran ahead of others due at the same instant."""
    return sum(1 for point in log.deviations if point[0] == "tie")


# ---------------------------------------------------------------------------
# The reported case


async def hello_over_a_split_link(net: SimNetwork) -> bytes:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    task = net.spawn("echo", serve(PORT, handle))
    await asyncio.sleep(0)
    net.set_link("client", "echo", latency=(0.01, 0.2), split=0.5)
    reader, writer = await asyncio.open_connection("echo", PORT)
    writer.write(b"hello\n")
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    await stop(task)
    return line


def test_a_split_line_arrives_whole_under_every_schedule() -> None:
    wrong: dict[int, bytes] = {}
    reordered = 0
    for seed in range(50):
        net = SimNetwork(seed=seed)
        log = schedule(seed)
        line = testing.run(hello_over_a_split_link(net), network=net, strategy=log)
        if line != b"hello\n":
            wrong[seed] = line
        reordered += tie_reorders(log) > 0
    assert wrong == {}
    # The schedule did run tied timers out of order in many of these runs.
    assert reordered >= 10


# ---------------------------------------------------------------------------
# Both directions of a stream, every byte


@dataclass
class Exchange:
    """What one run sends each way, and the link it goes over."""

    kind: str  # "tcp" or "unix"
    up: list[bytes]  # client -> server, in writes
    down: list[bytes]  # server -> client
    latency: tuple[float, float]
    split: float
    bandwidth: float | None = None
    #: After which of the client's writes to cut the link, and for how long
    #: (TCP only: held segments are delivered after the heal).
    partition: tuple[int, float] | None = None
    #: Seconds the client pauses after each write (0: none).
    pauses: tuple[float, ...] = ()


def exchange_for(seed: int, kind: str) -> Exchange:
    """A run's sends and link, drawn from *seed* (its own generator, not ``random``'s)."""
    rng = random.Random(f"order:{seed}:{kind}")

    def writes() -> list[bytes]:
        sizes = [
            rng.choice([1, 2, rng.randint(3, 100), rng.randint(100, 4000)])
            for _ in range(rng.randint(1, 8))
        ]
        if rng.random() < 0.1:
            sizes.append(300_000)  # beyond the window: the writer pauses
        return [rng.randbytes(n) for n in sizes]

    up, down = writes(), writes()
    low = rng.choice([0.0, 0.001, 0.01])
    high = low + rng.choice([0.0, 0.005, 0.2])
    partition = None
    if kind == "tcp" and rng.random() < 0.3:
        partition = (rng.randrange(len(up)), rng.choice([0.0, 0.01, 0.5]))
    return Exchange(
        kind,
        up,
        down,
        (low, high),
        split=rng.choice([0.3, 0.7, 1.0]),
        bandwidth=rng.choice([None, None, 1e6]),
        partition=partition,
        pauses=tuple(rng.choice([0.0, 0.0, 0.001, 0.05]) for _ in up),
    )


async def send_all(
    writer: asyncio.StreamWriter,
    chunks: list[bytes],
    after: Callable[[int], Awaitable[None]] | None = None,
) -> None:
    """Write *chunks* (draining after each; *after(i)* awaited after write i),
    then half-close."""
    for i, chunk in enumerate(chunks):
        writer.write(chunk)
        await writer.drain()
        if after is not None:
            await after(i)
    writer.write_eof()


async def run_exchange(net: SimNetwork, ex: Exchange) -> tuple[bytes, bytes]:
    """Run *ex*: what the server read and what the client read, each until EOF."""
    loop = asyncio.get_running_loop()
    server_read: asyncio.Future[bytes] = loop.create_future()
    box = "client" if ex.kind == "tcp" else "box"
    far = "srv" if ex.kind == "tcp" else "box"
    net.set_link(box, far, latency=ex.latency, split=ex.split, bandwidth=ex.bandwidth or 0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sending = asyncio.create_task(send_all(writer, ex.down))
            server_read.set_result(await reader.read())
            await sending
        finally:
            writer.close()

    listening: asyncio.Future[None] = loop.create_future()

    async def serve() -> None:
        if ex.kind == "tcp":
            server = await asyncio.start_server(handle, None, PORT)
        else:
            server = await asyncio.start_unix_server(handle, UNIX_PATH)
        listening.set_result(None)
        async with server:
            await server.serve_forever()

    async def after(i: int) -> None:
        if ex.partition is not None and ex.partition[0] == i:
            net.partition(box, far)
            loop.call_later(ex.partition[1], net.heal)
        if ex.pauses[i]:
            await asyncio.sleep(ex.pauses[i])

    async def client() -> bytes:
        if ex.kind == "tcp":
            reader, writer = await asyncio.open_connection(far, PORT)
        else:
            reader, writer = await asyncio.open_unix_connection(UNIX_PATH)
        try:
            sending = asyncio.create_task(send_all(writer, ex.up, after))
            got = await reader.read()
            await sending
            return got
        finally:
            writer.close()
            await writer.wait_closed()

    server = net.spawn(far, serve())
    await listening
    client_read = await net.spawn(box, client())
    up = await server_read
    await stop(server)
    return up, client_read


def mismatch(what: str, sent: bytes, got: bytes) -> str:
    """Where *got* first differs from *sent*, in words."""
    at = next((i for i, (a, b) in enumerate(zip(sent, got, strict=False)) if a != b), None)
    if at is None:
        at = min(len(sent), len(got))
    return f"{what}: {len(got)} of {len(sent)} bytes read, first difference at byte {at}"


def check_exchange(seed: int, kind: str) -> int:
    """Run seed *seed* of *kind*; the number of tied timers it reordered."""
    ex = exchange_for(seed, kind)
    net = SimNetwork(seed=seed)
    log = schedule(seed)
    up, down = testing.run(run_exchange(net, ex), network=net, strategy=log)
    sent_up, sent_down = b"".join(ex.up), b"".join(ex.down)
    link = f"seed {seed}: latency {ex.latency}, split {ex.split}, partition {ex.partition}"
    assert up == sent_up, f"{link}: " + mismatch("client to server", sent_up, up)
    assert down == sent_down, f"{link}: " + mismatch("server to client", sent_down, down)
    return tie_reorders(log)


def test_tcp_streams_keep_every_byte_in_order_both_ways() -> None:
    # Splits, jitter (a zero-latency link ties every piece), bandwidth,
    # partitions healed mid-stream, a write beyond the window, half-closes.
    reordered = sum(check_exchange(seed, "tcp") > 0 for seed in range(150))
    assert reordered >= 30


def test_unix_streams_keep_every_byte_in_order_both_ways() -> None:
    reordered = sum(check_exchange(seed, "unix") > 0 for seed in range(60))
    assert reordered >= 10


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["tcp", "unix"]),
    up=st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=6),
    down=st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=6),
    low=st.sampled_from([0.0, 0.0005, 0.01]),
    jitter=st.sampled_from([0.0, 0.001, 0.1]),
    split=st.floats(0.0, 1.0),
    bandwidth=st.sampled_from([None, 1e5, 1e7]),
    partition=st.none() | st.tuples(st.integers(0, 5), st.sampled_from([0.0, 0.01, 0.5])),
    pause=st.sampled_from([0.0, 0.0005, 0.02]),
    net_seed=st.integers(0, 2**32),
    schedule_seed=st.integers(0, 2**32),
)
def test_property_streams_are_exact_under_any_link_and_schedule(
    *,
    kind: str,
    up: list[bytes],
    down: list[bytes],
    low: float,
    jitter: float,
    split: float,
    bandwidth: float | None,
    partition: tuple[int, float] | None,
    pause: float,
    net_seed: int,
    schedule_seed: int,
) -> None:
    if partition is not None:
        # TCP only (a Unix socket's host talks to itself), after a write there is.
        partition = (partition[0] % len(up), partition[1]) if kind == "tcp" else None
    ex = Exchange(
        kind,
        up,
        down,
        (low, low + jitter),
        split,
        bandwidth=bandwidth,
        partition=partition,
        pauses=(pause,) * len(up),
    )
    net = SimNetwork(seed=net_seed)
    got_up, got_down = testing.run(
        run_exchange(net, ex), network=net, strategy=schedule(schedule_seed)
    )
    assert got_up == b"".join(up)
    assert got_down == b"".join(down)


# ---------------------------------------------------------------------------
# Datagrams, and independent flows


class Collect(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[bytes] = []

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.got.append(data)


async def burst(net: SimNetwork, count: int, latency: tuple[float, float]) -> list[bytes]:
    """*count* datagrams sent in one go from one socket to another: what arrived."""
    loop = asyncio.get_running_loop()
    net.set_link("client", "sink", latency=latency)
    bound: asyncio.Future[None] = loop.create_future()
    collect = Collect()

    async def sink() -> None:
        transport, _ = await loop.create_datagram_endpoint(
            lambda: collect, local_addr=("0.0.0.0", PORT)
        )
        bound.set_result(None)
        try:
            await asyncio.sleep(3600)
        finally:
            transport.close()

    task = net.spawn("sink", sink())
    await bound
    transport, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=("sink", PORT), family=socket.AF_INET
    )
    for i in range(count):
        transport.sendto(b"%d" % i)
    await asyncio.sleep(1)
    transport.close()
    await stop(task)
    return collect.got


def test_datagrams_arriving_at_one_instant_keep_their_order() -> None:
    # A fixed latency: the burst arrives at one instant, in the order sent.
    sent = [b"%d" % i for i in range(20)]
    reordered = 0
    for seed in range(40):
        net = SimNetwork(seed=seed)
        log = schedule(seed)
        got = testing.run(burst(net, 20, (0.01, 0.01)), network=net, strategy=log)
        assert got == sent, f"seed {seed}"
        reordered += tie_reorders(log) > 0
    assert reordered >= 10


def test_datagrams_reorder_where_their_latencies_cross_and_none_is_lost() -> None:
    sent = [b"%d" % i for i in range(20)]
    orders = set()
    for seed in range(20):
        net = SimNetwork(seed=seed)
        got = testing.run(burst(net, 20, (0.001, 0.05)), network=net, seed=seed)
        assert sorted(got) == sorted(sent), f"seed {seed}"
        orders.add(tuple(got))
    # The model still reorders them where the drawn latencies cross.
    assert any(order != tuple(sent) for order in orders)


async def two_clients_connect_at_once(net: SimNetwork) -> list[str]:
    """Two hosts connect to a server at the same instant: the order it accepts them in."""
    accepted: list[str] = []
    both: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername")[0])
        if len(accepted) == 2:
            both.set_result(None)
        await reader.read()
        writer.close()

    async def client() -> None:
        _, writer = await asyncio.open_connection("srv", PORT)
        await both
        writer.close()
        await writer.wait_closed()

    for host in ("a", "b"):
        net.set_link(host, "srv", latency=0.01)
    server = net.spawn("srv", serve(PORT, handle))
    await asyncio.sleep(0)
    await asyncio.gather(net.spawn("a", client()), net.spawn("b", client()))
    await stop(server)
    return ["a" if ip == net.address("a") else "b" for ip in accepted]


def test_independent_flows_still_arrive_in_either_order_at_one_instant() -> None:
    # Only messages of one flow are ordered: two clients' SYNs that arrive at
    # the same instant reach the listener's backlog in an order the schedule
    # chooses, as two real hosts' could.
    orders = set()
    for seed in range(30):
        net = SimNetwork(seed=seed)
        orders.add(tuple(testing.run(two_clients_connect_at_once(net), network=net, seed=seed)))
    assert orders == {("a", "b"), ("b", "a")}
    net = SimNetwork(seed=0)
    assert testing.run(two_clients_connect_at_once(net), network=net) == ["a", "b"]


async def connect_and_send(net: SimNetwork) -> tuple[socket.socket, socket.socket]:
    """A connection of the program's own sockets, with b"stale" 5 s from arriving."""
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.setblocking(False)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.socket()
    client.setblocking(False)
    try:
        (server, _), _ = await asyncio.gather(
            loop.sock_accept(listener),
            loop.sock_connect(client, ("127.0.0.1", listener.getsockname()[1])),
        )
    finally:
        listener.close()
    net.set_link("client", "client", latency=5.0)
    await loop.sock_sendall(client, b"stale")
    return client, server


async def send_and_read(client: socket.socket, server: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(client, b"fresh")
    return await asyncio.wait_for(loop.sock_recv(server, 100), 60)


def test_a_later_loop_delivers_its_own_messages() -> None:
    # A network serves one loop at a time: what was in flight on a closed
    # loop's timers never arrives, and cannot take the place of what a
    # later loop's timers carry on the same connection.
    net = SimNetwork(seed=1)
    client, server = testing.run(connect_and_send(net), network=net)
    try:
        assert testing.run(send_and_read(client, server), network=net) == b"fresh"
    finally:
        client.close()
        server.close()


# ---------------------------------------------------------------------------
# A reset keeps what arrived before it (Linux's order), compared with the kernel


async def reply_then_reset(
    start: Callable[[Coroutine[Any, Any, None]], Any], host: str, *, fin: bool
) -> list[Any]:
    """A server replies and closes with the request unread (a reset; after a FIN
    if *fin*); what the client's reads and a send then see (bytes or errno)."""
    loop = asyncio.get_running_loop()
    port: asyncio.Future[int] = loop.create_future()

    async def server() -> None:
        listener = socket.socket()
        listener.setblocking(False)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port.set_result(listener.getsockname()[1])
        conn, _ = await loop.sock_accept(listener)
        listener.close()
        with conn:
            await asyncio.sleep(0.02)  # the request arrives, never read
            await loop.sock_sendall(conn, b"reply")
            if fin:
                conn.shutdown(socket.SHUT_WR)
            await asyncio.sleep(0.02)

    task = start(server())
    client = socket.socket()
    client.setblocking(False)
    seen: list[Any] = []
    with client:
        await loop.sock_connect(client, (host, await port))
        await loop.sock_sendall(client, b"request")
        await task
        await asyncio.sleep(0.1)  # the reply and the reset have arrived
        for op in ("recv", "recv", "recv", "send", "recv"):
            try:
                if op == "send":
                    seen.append(("sent", client.send(b"more")))
                else:
                    seen.append(client.recv(100))
            except OSError as exc:
                seen.append((op, exc.errno))
    return seen


def test_a_reset_leaves_what_arrived_before_it_readable_as_linux_does() -> None:
    # Linux (tcp_recvmsg, tcp_reset): the reply, then the reset once (or,
    # after a FIN, EOF: the error is EPIPE and only a send reports it), then
    # EOF; a send after it fails with EPIPE.
    expected = {
        False: [b"reply", ("recv", errno.ECONNRESET), b"", ("send", errno.EPIPE), b""],
        True: [b"reply", b"", b"", ("send", errno.EPIPE), b""],
    }
    for fin in (False, True):
        kernel = asyncio.run(reply_then_reset(asyncio.ensure_future, "127.0.0.1", fin=fin))
        net = SimNetwork(seed=0)
        simulated = testing.run(
            reply_then_reset(functools.partial(net.spawn, "srv"), "srv", fin=fin), network=net
        )
        assert [e[1] for e in net.log].count("rst") == 1
        assert (kernel, simulated) == (expected[fin], expected[fin]), f"fin={fin}"
