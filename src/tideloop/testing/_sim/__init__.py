"""The simulation: hosts, TCP, UDP, Unix sockets and faults, inside one loop, from a seed.

Layer: testing. `SimNetwork` is a ``tideloop._fdio.network.Network``: the loop
(``tideloop.testing.new_event_loop(network=net)``) asks it for every socket
it creates to connect or to serve, for names, and for readiness, and hands
it the sockets a program made itself (`SimNetwork.adopt`). It answers with
`SimSocket`, a ``socket.socket`` subclass whose ``connect``, ``accept``,
``send``, ``recv_into``, ``sendto``, ``shutdown``... move bytes through the
simulation instead of the kernel, so everything above the socket
(transports, flow control, streams, servers, TLS, ``sock_*``, sendfile's
fallback) is the production code.

The model (what a program can observe):

- **Hosts** are names; each gets an address from 10.0.0.0/8 in order of
  first use (``10.0.0.1``, ``10.0.0.2``...). ``getaddrinfo(name)`` resolves
  a host's name, ``localhost``, ``127.0.0.1`` and ``0.0.0.0`` mean the host
  the code runs on. Code runs on a host when it runs in a task
  `SimNetwork.spawn` started (or a task such a task started: the host is a
  context variable); anything else runs on the host ``"client"``.
- **TCP.** ``connect`` sends a SYN; after one link latency a listening
  socket answers (the connection is in its backlog, the connecting socket
  becomes writable one latency later), or the host answers with a reset
  (``ConnectionRefusedError``). Bytes sent arrive after the link's latency,
  in order and each once, in the pieces they were sent in (or in smaller
  ones: the link's *split*), whatever order the loop runs timers due at the
  same instant in (a schedule varies that order; see ``kernel``, "Delivery
  order"). A connection carries at most `WINDOW` bytes sent and not yet
  read by the peer: beyond that ``send`` raises ``BlockingIOError``, so a
  reader that stops reading pauses its writer, as over a real socket.
  ``shutdown(SHUT_WR)`` and ``close`` send a FIN (the peer reads EOF after
  the data); ``close`` with unread data sends a reset instead, as Linux
  does; data for a closed socket is answered with a reset. As on Linux, a
  reset leaves what arrived before it readable: then ``recv`` raises
  ``ConnectionResetError`` once (or, after the peer's FIN, reads EOF, and
  ``send`` raises ``BrokenPipeError``).
- **UDP.** A datagram arrives whole (truncated to the reader's buffer, as
  ``recvfrom`` does), after its own latency, so datagrams reorder whenever
  latencies overlap (those from one socket to one address that arrive at
  the same instant arrive in the order sent); a link may lose or duplicate them (*loss*,
  *duplicate*); a partition drops them. A datagram to a port nobody bound is
  answered by "port unreachable": a connected socket then reads
  ``ConnectionRefusedError`` once, as on Linux. At most `UDP_BUFFER` bytes
  wait in a socket; more are dropped.
- **Unix sockets** (``AF_UNIX``, ``SOCK_STREAM``) live in their host's own
  namespace of paths (nothing touches the real file system): ``bind`` takes
  a path until the socket closes, ``connect`` completes at once
  (``FileNotFoundError`` for no such path, ``ConnectionRefusedError`` for a
  path nobody listens on), and bytes move as over TCP.
- **Faults.** `SimNetwork.partition` holds every TCP segment between two
  hosts (one way or both) until `SimNetwork.heal`: TCP retransmits, so
  nothing is lost, it comes late; a SYN held long enough times the
  ``connect`` out in the program's own ``wait_for``; UDP datagrams are
  dropped. `SimNetwork.reset` resets every connection between two hosts
  (both ends read ``ConnectionResetError``). `SimNetwork.crash` stops a
  host: its tasks are cancelled, its sockets go silent, its peers get
  resets, its listeners vanish; `SimNetwork.restart` brings it back (same
  address) running a new task. `SimNetwork.set_link` gives a pair of hosts a
  latency range, a bandwidth (bytes a second: messages queue behind each
  other), UDP loss and duplication, and *split* (the probability that a TCP
  send arrives in several pieces).
- **One loop at a time.** Messages move on the loop's timers: what is in
  flight when that loop closes never arrives, in its run or a later one.
- **The seed decides.** Every latency, loss, duplication and split is drawn
  from the network's generator, seeded with *seed*: with virtual time (which
  `new_event_loop` turns on with a network) the same seed gives the same
  run, event for event (`SimNetwork.log`).
- **Sockets a program made** with ``socket.socket()`` and handed to the loop
  (``sock_connect``, ``sock_accept``, ``create_connection(sock=)``,
  ``create_server(sock=)``...) become simulated there: the loop calls
  `SimNetwork.adopt`, which turns the object into a `SimSocket` in place
  (its class changes; it keeps its fd as the placeholder). Sockets already
  connected for real (a ``socketpair``), of a ``socket.socket`` subclass, or
  of another family (IPv6, Unix datagram) stay the kernel's.
- **Clocks.** Each host reads its own wall clock (``time.time()``,
  ``datetime.now()``...), set by `SimNetwork.set_clock` (an offset and a
  drift); the loop's time, every host's timers and ``time.monotonic()``
  are one clock for all (``clocks`` says why).
- **Disks.** `SimNetwork.mount` gives a host a file system under a path:
  writes are durable after ``fsync``, names after their directory's; a
  crash loses or tears the rest (``disk`` is the model). Code reaches both
  through the calls a simulated run patches (``tideloop.testing._wallclock``,
  ``_files``): its host is its task's, or that of the code that started its
  thread or submitted its executor job.
- **Not simulated**: IPv6; names and addresses no host has are refused
  (``real="refuse"``: ``gaierror`` for names, ``ENETUNREACH`` for addresses)
  or left to the real network (``real="allow"``).

The parts, by role (each module's docstring says what it owns; imports
flow down this list):

- ``network``: `SimNetwork`, the test author's API (hosts, tasks on hosts,
  links, faults) and the object the loop is given;
- ``loop_side``: what the loop asks of a network (sockets, adoption, names,
  the poller wrapper that reports simulated readiness);
- ``sockets``: `SimSocket`, the socket object a program holds, which
  reaches the kernel model only through ``endpoints.Syscalls``;
- ``kernel``: the kernel model: hosts, the system calls, segments and
  datagrams and their arrival, the event log;
- ``fdtable``: its table of simulated fds and their readiness, which the
  poller wrapper reads;
- ``endpoints``: its records (hosts, endpoints) and the `Syscalls`
  interface; ``links``: what messages between hosts go through, and the
  partitions;
- ``clocks``: each host's wall-clock settings; ``disk``: each host's file
  systems, their calls and their crashes (below ``network``, beside the
  kernel model, which they do not touch).
"""

from .endpoints import UDP_BUFFER, WINDOW
from .links import DEFAULT_LATENCY
from .network import SimNetwork
from .sockets import SimSocket

__all__ = ["DEFAULT_LATENCY", "UDP_BUFFER", "WINDOW", "SimNetwork", "SimSocket"]
