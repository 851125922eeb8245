"""The registry of deliberate differences between tideloop and the stdlib loop.

Principle 1 of the design: any observable difference from the stdlib loop of
the running Python is a bug, unless it is written down here with its reason.
A test of such a behaviour is marked ``@pytest.mark.divergence(key)`` and runs
on tideloop only; `tests/conformance/test_divergences.py` checks, for each
entry that can be observed from a test, that the stdlib loop really does
behave differently (so an entry cannot outlive its reason).
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import base_events, base_subprocess, selector_events, sslproto, unix_events
from dataclasses import dataclass

# Where the stdlib changed in a patch release, whether the running Python has
# the change is read off its own code, not guessed from a version number.


def _names(func: object) -> set[str]:
    """The global and attribute names *func*'s code uses, nested code included."""
    names: set[str] = set()
    codes = [func.__code__]  # type: ignore[attr-defined]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


#: Does this Python's own shutdown_default_executor bound its wait with the
#: timeout (3.12.x later releases, 3.13+)?
STDLIB_BOUNDED_EXECUTOR_SHUTDOWN = "timeouts" in _names(
    asyncio.BaseEventLoop.shutdown_default_executor
)
#: Does create_task() rename a factory's task, even to 'None' (3.13)?
STDLIB_RENAMES_FACTORY_TASKS = "set_name" in _names(base_events.BaseEventLoop.create_task)
#: Does happy eyeballs keep its exceptions in a functools.partial (a cycle)?
STDLIB_HAPPY_EYEBALLS_PARTIAL = "functools" in _names(base_events.BaseEventLoop.create_connection)
#: gh-119710 (3.12 and 3.13 patch releases, 3.14): Process.wait() returns when
#: the child exits, not when its pipes close too.
STDLIB_WAIT_RETURNS_AT_EXIT = "_exit_waiters" in _names(
    base_subprocess.BaseSubprocessTransport._process_exited
)
#: Does writelines() pause the protocol over the high-water mark (3.11, and
#: later 3.12 / 3.13 patch releases)?
STDLIB_WRITELINES_PAUSES = "_maybe_pause_protocol" in _names(
    selector_events._SelectorSocketTransport.writelines  # type: ignore[attr-defined]
)
#: Does sendfile() start at *offset* even when it is 0, and leave the file
#: position at offset + sent even when nothing was sent (3.13.x, 3.14)?
#: The fallback's first statement became ``if hasattr(file, 'seek')``.
STDLIB_SENDFILE_SETS_POSITION = (
    base_events.BaseEventLoop._sendfile_fallback.__code__.co_names[:1] == ("hasattr",)  # type: ignore[attr-defined]
)
#: Does a cancelled Server.serve_forever() close the server's connections
#: before waiting for them (3.13.x, 3.14)?
STDLIB_SERVE_FOREVER_CLOSES_CLIENTS = "close_clients" in _names(base_events.Server.serve_forever)


def _stdlib_closes_socket_without_transport() -> bool:
    """Does asyncio close the socket when its protocol factory fails (gh-153133, 3.14)?"""
    closed: list[bool] = []

    class Sock:
        def setblocking(self, flag: bool) -> None:
            pass

        def close(self) -> None:
            closed.append(True)

    def factory() -> None:
        raise ZeroDivisionError

    # The factory fails before the method touches its loop (self).
    coro = base_events.BaseEventLoop._create_connection_transport(  # type: ignore[attr-defined]
        None, Sock(), factory, None, None
    )
    try:
        coro.send(None)
    except ZeroDivisionError:
        pass
    finally:
        coro.close()
    return bool(closed)


STDLIB_CLOSES_SOCKET_WITHOUT_TRANSPORT = _stdlib_closes_socket_without_transport()


def _stores(func: object, name: str) -> int:
    """How many times *func*'s code assigns the local *name*."""
    import dis

    return len(
        [
            i
            for i in dis.get_instructions(func)  # type: ignore[arg-type]
            if i.opname.startswith("STORE_FAST") and name in str(i.argval)
        ]
    )


#: Does a failed start_tls() drop its waiter, so that no cycle keeps the
#: transport alive (gh-159049: ``waiter = None`` on the error path)?
STDLIB_START_TLS_NO_CYCLE = _stores(base_events.BaseEventLoop.start_tls, "waiter") > 1
#: Does start_tls() move a StreamReader's buffered bytes into the TLS
#: protocol (gh-142352)?
STDLIB_START_TLS_TAKES_BUFFER = "_stream_reader" in _names(base_events.BaseEventLoop.start_tls) or (
    "_stream_reader" in base_events.BaseEventLoop.start_tls.__code__.co_consts
)
#: Does the TLS shutdown timeout stay armed (or start, when the peer began the
#: shutdown) until the connection is lost (3.14)?
STDLIB_TLS_SHUTDOWN_TIMEOUT_UNTIL_CLOSED = "call_later" in _names(
    sslproto.SSLProtocol._on_shutdown_complete  # type: ignore[attr-defined]
)
#: When connecting a new child's pipes fails, does asyncio close the child's
#: pipes (3.14: ``for raw_pipe in (proc.stdin, ...)``)?
STDLIB_CLOSES_PIPES_ON_CONNECT_FAILURE = (
    _stores(base_subprocess.BaseSubprocessTransport._connect_pipes, "raw_pipe") > 0
)
#: Does the datagram transport subtract the 8 header bytes it adds per queued
#: datagram (3.13 patch releases, 3.14)?
STDLIB_DATAGRAM_HEADER_FIXED = hasattr(
    selector_events._SelectorDatagramTransport,  # type: ignore[attr-defined]
    "_header_size",
)
#: Does the socket transport's writelines() drop data given once the
#: connection is lost (gh-136234)? Before 3.12 it is WriteTransport's, which
#: joins and calls write(), which drops it; 3.12's own has no such check
#: (fixed in later 3.13 releases).
STDLIB_WRITELINES_DROPS_WHEN_LOST = "writelines" not in vars(
    selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
) or "_conn_lost" in _names(selector_events._SelectorSocketTransport.writelines)  # type: ignore[attr-defined]
#: Has the stdlib's read-pipe transport an abort() (it has none: abort()
#: belongs to WriteTransport)?
STDLIB_READ_PIPE_ABORT = hasattr(unix_events._UnixReadPipeTransport, "abort")  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Divergence:
    what: str
    why: str
    #: The Pythons whose stdlib loop behaves differently, in words.
    versions: str = "all"
    #: Whether the running Python is one of them. Where it is not, the tests
    #: marked with this divergence run on the stdlib loop too (conftest.py),
    #: so they show that the two agree there.
    holds: bool = True
    #: The loops that differ, as named in loopwatch.FACTORIES (name prefixes):
    #: tideloop with every poller, unless a poller is named.
    loops: tuple[str, ...] = ("tideloop",)


DIVERGENCES: dict[str, Divergence] = {
    "wakeup-fd-restored": Divergence(
        what="When the last signal handler is removed (or the loop closes), the wakeup fd "
        "installed before the loop's own is restored; asyncio resets it to -1.",
        why="A loop used inside a program (or beside another loop) that relies on its own "
        "signal.set_wakeup_fd must not silently disable it when it stops handling signals.",
    ),
    "equal-deadline-fifo": Divergence(
        what="Timers with the same deadline run in the order they were scheduled.",
        why="asyncio leaves the order undefined (heap order); a sequence number in the heap "
        "entry makes it deterministic at no cost. Programs cannot rely on asyncio's order, "
        "so nothing that works on asyncio breaks.",
    ),
    "timer-deadline-as-float": Divergence(
        what="Timers are ordered and fired by float(when). asyncio compares the when objects "
        "themselves, so two deadlines given as ints, Fractions or Decimals that differ by "
        "less than a float can tell apart run in asyncio's exact order but, on tideloop, in "
        "the order they were scheduled (equal floats). handle.when() still returns the "
        "object given.",
        why="Heap entries keyed by a float compare in C: scheduling a timer calls no Python "
        "__lt__, which is what keeps call_later cheap with many timers pending. The loop's "
        "clock is a float, so deadlines closer than a float's precision cannot be told "
        "apart by it anyway.",
    ),
    "sleep-timer-bare-context": Divergence(
        what="The timer asyncio.sleep() arms (call_later with asyncio's private "
        "futures._set_result_unless_cancelled and no context) runs in an empty context the "
        "loop keeps, not in a copy of the sleeping code's context; its get_context() says so.",
        why="That callback only sets the sleep's future; the task wakes up in its own "
        "context either way, and sleep() never hands its handle out. The copy was one "
        "GC-tracked object per sleep: 100k sleeping tasks run 5% faster without it "
        "(bench/, interleaved). One context per loop, as a context can be entered by one "
        "thread at a time.",
    ),
    "handle-get-context-3.11": Divergence(
        what="On Python 3.11, handles have get_context() (added to asyncio in 3.12).",
        why="Handles look the same on every supported Python (exception handlers and "
        "instrumentation read a handle's context); adding a method cannot break code "
        "written for 3.11.",
        versions="3.11",
        holds=sys.version_info < (3, 12),
    ),
    "factory-task-name-3.13": Divergence(
        what="On Python 3.13, create_task(coro) with a task factory and no name leaves "
        "the factory's name; asyncio 3.13 renames the task to 'None'.",
        why="A CPython 3.13 bug (create_task calls task.set_name(None)); 3.12 leaves the "
        "name and 3.14 passes the name to the factory instead. Copying a bug would only "
        "confuse users.",
        versions="3.13",
        holds=STDLIB_RENAMES_FACTORY_TASKS,
    ),
    "executor-shutdown-timeout": Divergence(
        what="shutdown_default_executor(timeout) stops waiting after *timeout* seconds, "
        "warns and leaves the threads behind, on every Python. asyncio 3.11 has no timeout "
        "argument, and early 3.12 releases (3.12.1 here) wait for the threads first and "
        "apply the timeout only to the final join, so a stuck executor hangs them.",
        why="A shutdown that hangs on a stuck executor thread is never wanted; the bounded "
        "wait is what later CPython releases do and what the argument is for. An extra "
        "optional argument cannot break 3.11 code.",
        versions="3.11, 3.12 before the bounded wait",
        holds=not STDLIB_BOUNDED_EXECUTOR_SHUTDOWN,
    ),
    "call-at-rejects-non-numbers": Divergence(
        what="call_at/call_later reject a deadline that is not a real number with TypeError "
        "at the call; asyncio accepts it and fails later, inside the timer heap.",
        why="asyncio's failure happens while pushing onto the heap and can leave a broken "
        "entry behind that breaks every later timer; failing early loses nothing.",
    ),
    # fd callbacks
    "poll-accepts-fd-not-open": Divergence(
        what="With the poll poller, add_reader()/add_writer() of an fd that is not open "
        "succeed (poll() reports the fd as POLLNVAL, a readiness event, when the loop next "
        "polls), as they do on asyncio's own loop with a selectors.PollSelector; the stdlib "
        "loop's default (epoll) selector, and tideloop's epoll poller, raise OSError(EBADF) "
        "at the call.",
        why="The poll poller keeps its fds in a table of its own and hands the table to "
        "poll(), as PollSelector does: nothing asks the kernel about an fd at registration. "
        "A check there (fcntl) would cost a system call per registration and make the poller "
        "differ from PollSelector, which the conformance suite pairs it with "
        "(test_closed_fd_registration).",
        loops=("tideloop-poll",),
    ),
    # Networking
    "accept-out-of-resources": Divergence(
        what="When accept() fails with EMFILE/ENFILE/ENOBUFS/ENOMEM, the server reports it "
        "once, stops polling and retries after ACCEPT_RETRY_DELAY; the retry is cancelled "
        "if the server closes. asyncio keeps looping up to `backlog` times per event, "
        "reporting and scheduling a retry each time (thousands of log entries per second "
        "starved), and its retry re-registers a socket that may be closed by then.",
        why="A server out of file descriptors must back off without spinning or flooding "
        "its log; the report, the delay and the recovery are asyncio's, only the "
        "repetition is gone.",
    ),
    "accept-without-task": Divergence(
        what="An accepted connection's protocol and transport are built in the accept "
        "callback (in a fresh copy of the context); asyncio builds them in a new task, so "
        "there protocol_factory() sees a current task and runs one iteration later.",
        why="A task (and a waiter future) per connection is the largest cost of accepting; "
        "connection_made() is still called from the loop, after the factory, as in asyncio.",
    ),
    "write-copies-mutable-buffers": Divergence(
        what="On Python 3.12+, write()/writelines() copy the unsent part of a bytearray or "
        "memoryview before returning; asyncio 3.12+ keeps a view of the caller's buffer, "
        "so changing the buffer afterwards changes what is sent. Its own loop.sendfile() "
        "fallback on a socket transport (a file without a fileno, such as BytesIO) reuses "
        "one buffer for every block, so a peer slower than the file receives later blocks' "
        "bytes in place of earlier ones.",
        why="What was written must be what is sent; 3.11 copies too. tideloop's sendfile "
        "fallback reuses its buffer as asyncio's does, which is safe only because write() "
        "copies.",
        versions="3.12+",
        holds=sys.version_info >= (3, 12),
    ),
    "writelines-flow-control": Divergence(
        what="On Python 3.12+, writelines() calls protocol.pause_writing() when the buffer "
        "goes over the high-water mark; asyncio 3.12+'s writelines() never does, so "
        "StreamWriter.drain() does not wait after writelines().",
        why="Flow control must not depend on which write method was used; 3.11 pauses too.",
        versions="3.12, 3.13 releases before the fix",
        holds=sys.version_info >= (3, 12) and not STDLIB_WRITELINES_PAUSES,
    ),
    "writelines-after-connection-lost": Divergence(
        what="writelines() on a TCP or Unix transport whose connection is lost drops the data, "
        "as write() does; asyncio 3.12's keeps it in the buffer (get_write_buffer_size() "
        "stays above 0 for good) and raises: TypeError ('NoneType' object is not callable) "
        "once the transport was closed, AttributeError (no '_add_writer') after an abort.",
        why="A stdlib bug (gh-136234: its writelines() has no check for a lost connection); "
        "3.11, whose writelines() calls write(), and later 3.13 releases drop the data.",
        versions="3.12 (3.12.1 here), 3.13 releases before gh-136234",
        holds=not STDLIB_WRITELINES_DROPS_WHEN_LOST,
    ),
    "getaddrinfo-literal-inline": Divergence(
        what="loop.getaddrinfo() for a literal IP address with a numeric port calls "
        "socket.getaddrinfo inline (with AI_NUMERICHOST|AI_NUMERICSERV, so it cannot "
        "block) instead of in the default executor; the result is the same.",
        why="A literal address cannot need DNS, so a thread hop buys nothing; asyncio skips "
        "getaddrinfo only on its connect/bind paths, which tideloop does too.",
    ),
    "recv-size-adaptive": Divergence(
        what="A stream transport with a Protocol reads at most 64 KiB per call until a read "
        "returns 32 KiB or more; then it reads up to 120 KiB (256 KiB on PyPy) until a read "
        "returns less "
        "than 32 KiB. A transport whose protocol is a StreamReaderProtocol (asyncio streams) "
        "and pipe transports always read at most 64 KiB. asyncio always reads up to 256 KiB, "
        "so its data_received() chunks can be larger than tideloop's.",
        why="recv(256 KiB) makes glibc map and unmap the buffer on every read, which costs "
        "several times the read itself for small messages (bench/: protocol echo); bulk data "
        "is read into a loop-wide buffer instead and copied out once (one read, one "
        "data_received() and one echo send per 100 KiB message, not two), into a bytes "
        "object small enough for glibc to serve from the heap. Streams copy every chunk into "
        "the StreamReader's buffer anyway, and bigger chunks grow that buffer past glibc's "
        "mmap threshold: 15-18 page faults per 100 KiB message instead of about 1. On PyPy, "
        "which frees a bytes object only at its next collection, heap-sized chunks pile up "
        "and glibc keeps their memory (a 1 GiB transfer grew the process by 90-480 MiB), "
        "so there bulk reads are asyncio's 256 KiB. TCP never promised chunk boundaries.",
    ),
    "sendfile-transport-closed": Divergence(
        what="Closing a transport while loop.sendfile() runs its os.sendfile() path makes "
        "sendfile() raise ConnectionError; asyncio removes the transfer's writer without "
        "completing it, so sendfile() never returns (and an InvalidStateError is logged).",
        why="A hang is never the intended behaviour.",
    ),
    "sendfile-sets-file-position": Divergence(
        what="sendfile()/sock_sendfile() read the file from *offset* even when it is 0, and "
        "leave the file's position at offset + bytes sent even when nothing was sent; "
        "asyncio before 3.13.x starts from the file's current position when offset is 0, "
        "and leaves the position alone when nothing was sent.",
        why="offset=0 says where to start; a file left at some other position must not "
        "change what is sent. Later releases do this too.",
        versions="3.11, 3.12, early 3.13 releases",
        holds=not STDLIB_SENDFILE_SETS_POSITION,
    ),
    "serve-forever-closes-clients": Divergence(
        what="On Python 3.13, a cancelled Server.serve_forever() closes the server's "
        "connections before it waits for them; asyncio 3.13.0 only closes the server, and "
        "its wait_closed() then waits for as long as a client keeps its connection open.",
        why="Cancelling serve_forever() (Ctrl+C) must end it; later 3.13 releases and 3.14 "
        "close the clients too (gh-123720). On 3.12 the server counts its connections "
        "without tracking them, as asyncio 3.12's does, so it cannot close them there.",
        versions="3.13 releases before gh-123720",
        holds=sys.version_info >= (3, 13) and not STDLIB_SERVE_FOREVER_CLOSES_CLIENTS,
    ),
    "socket-closed-without-transport": Divergence(
        what="When create_connection() (or connect_accepted_socket(), or the Unix variants) "
        "gets its socket connected but then fails to make the transport (the protocol "
        "factory raises, say), the socket is closed, a socket passed as sock= included; "
        "asyncio before 3.14 leaves it open (for the garbage collector to close, with a "
        "ResourceWarning).",
        why="A socket nobody owns is a leaked fd; 3.14 closes it too (gh-153133).",
        versions="3.11-3.13",
        holds=not STDLIB_CLOSES_SOCKET_WITHOUT_TRANSPORT,
    ),
    "start-serving-after-close": Divergence(
        what="Server.start_serving() on a closed server does nothing; asyncio raises "
        "TypeError ('NoneType' object is not iterable) from its internals.",
        why="The TypeError is an accident of asyncio's implementation, not an API.",
    ),
    # Pipes
    "read-pipe-abort": Divergence(
        what="Read-pipe transports (connect_read_pipe()) have abort(): it stops reading, "
        "closes the pipe and calls connection_lost(None), as close() does; asyncio's "
        "_UnixReadPipeTransport has no abort() (AttributeError), as abort() belongs to "
        "WriteTransport.",
        why="abort() comes with the transport base that tideloop's pipe and socket transports "
        "share; an extra method cannot break a program written for asyncio, and code that "
        "aborts whatever transport it holds (getattr(t, 'abort', t.close)) gets the same "
        "result either way.",
        holds=not STDLIB_READ_PIPE_ABORT,
    ),
    "write-pipe-abort-when-closing": Divergence(
        what="abort() on a write-pipe transport that is already closing does nothing, and "
        "connection_lost() is called once. asyncio's schedules its connection_lost "
        "callback again, which fails with AttributeError ('NoneType' object has no attribute "
        "'connection_lost') in the exception handler; once connection_lost() has run, "
        "abort() itself raises AttributeError (no '_remove_reader').",
        why="A stdlib bug (abort() calls _close() without checking _closing): asyncio's "
        "contract is one connection_lost() per transport, and its socket transports (and "
        "uvloop's pipes) make abort() of a closing transport do nothing.",
        versions="all (3.11-3.15 and PyPy 3.11 here)",
    ),
    # Datagrams and subprocesses
    "zero-length-datagrams": Divergence(
        what="On Python 3.11 and 3.12, DatagramTransport.sendto(b'') sends an empty datagram; "
        "asyncio before 3.13 returns without sending anything.",
        why="An empty datagram is a real datagram (protocols use them as keep-alives and "
        "probes); dropping it silently loses data. asyncio 3.13 sends it too.",
        versions="3.11, 3.12",
        holds=sys.version_info < (3, 13),
    ),
    "datagram-transport-class-3.11": Divergence(
        what="On Python 3.11, datagram transports are instances of asyncio.DatagramTransport; "
        "asyncio 3.11's are not (its class derives from the stream transport base only).",
        why="isinstance(transport, asyncio.DatagramTransport) should hold for a datagram "
        "transport; asyncio 3.12 fixed its class. Adding a base class breaks nothing.",
        versions="3.11",
        holds=sys.version_info < (3, 12),
    ),
    "datagram-buffer-size-drains": Divergence(
        what="On Python 3.13, a datagram transport's get_write_buffer_size() returns to 0 "
        "once its queue has drained; asyncio 3.13.0 adds 8 bytes per queued datagram but "
        "subtracts only the payload, so the size stays above 0 forever.",
        why="A buffer size that never drains breaks flow control (the protocol may stay "
        "paused) and anything that waits for the buffer to empty.",
        versions="3.13 releases before the fix",
        holds=sys.version_info >= (3, 13) and not STDLIB_DATAGRAM_HEADER_FIXED,
    ),
    "own-child-watcher": Divergence(
        what="On Python 3.11-3.13, tideloop's loops watch their children themselves (pidfd, "
        "or a thread per child where pidfds are unavailable); asyncio uses the policy's "
        "child watcher, which a program may replace with set_child_watcher().",
        why="Child watchers are deprecated since 3.12 and gone in 3.14; a per-loop pidfd "
        "watcher needs no thread, no SIGCHLD handler and nothing shared between loops.",
        versions="3.11-3.13",
        holds=sys.version_info < (3, 14),
    ),
    "send-signal-never-reaps": Divergence(
        what="On Python 3.11 and 3.12, send_signal()/terminate()/kill() on a subprocess "
        "signal it with os.kill(); asyncio goes through Popen.send_signal(), which reaps a "
        "child that has just exited, so the child watcher then finds no status and reports "
        "return code 255.",
        why="The exit status must not be lost to a race; asyncio 3.13 uses os.kill() too.",
        versions="3.11, 3.12",
        holds=sys.version_info < (3, 13),
    ),
    "wait-returns-at-exit": Divergence(
        what="Process.wait() (and the transport's wait) returns as soon as the child has "
        "exited, even while a grandchild that inherited its pipes keeps them open; asyncio "
        "before gh-119710 returns only once every pipe has closed too.",
        why="A hang for as long as some other process lives is never the intended behaviour; "
        "later 3.12 and 3.13 releases and 3.14 return at exit too. The pipes' data still "
        "arrives through the streams.",
        versions="3.11-3.13 releases before gh-119710",
        holds=not STDLIB_WAIT_RETURNS_AT_EXIT,
    ),
    "subprocess-pipe-failure-no-hang": Divergence(
        what="If connecting one of a new child's pipes fails (loop.connect_read_pipe raising), "
        "subprocess_exec raises that error once the child is killed and reaped, and closes "
        "the child's pipes; asyncio before gh-119710 kills the child but then waits forever "
        "for the pipe that never connected, and 3.13 releases after it leave that pipe open.",
        why="A hang is never the intended behaviour, nor a leaked fd; the error is "
        "asyncio's. 3.14 closes the pipes too.",
        versions="3.11-3.13",
        holds=not (STDLIB_WAIT_RETURNS_AT_EXIT and STDLIB_CLOSES_PIPES_ON_CONNECT_FAILURE),
    ),
    "happy-eyeballs-no-refcycles": Divergence(
        what="When every attempt of create_connection(happy_eyeballs_delay=...) fails, the "
        "exception it raises is freed by reference counting; the stdlib loop's staggered "
        "race keeps it in a list that a frame of its own traceback references, a cycle "
        "that only the garbage collector breaks.",
        why="Until a collection the cycle keeps the exception, its traceback and the locals "
        "of every frame in it alive (CPython PR 124859 is the upstream fix; anyio tests it).",
        # PyPy frees nothing by reference counting: a cycle is garbage like any other.
        versions="CPython 3.11-3.13 releases before PR 124859",
        holds=STDLIB_HAPPY_EYEBALLS_PARTIAL and sys.implementation.name != "pypy",
    ),
    # TLS
    "tls-bytearray-get-buffer": Divergence(
        what="A BufferedProtocol whose get_buffer() returns a bytearray receives TLS data "
        "intact; asyncio's SSL transport decrypts the rest of a delivery into buf[offset:], "
        "a copy of the bytearray, so it reports bytes (buffer_updated) that never reached "
        "the buffer and the data is corrupted.",
        why="get_buffer() may return any writable buffer; data must not be lost for its type.",
    ),
    "tls-paused-client-sends-finished": Divergence(
        what="A TLS client whose protocol pauses reading in connection_made() still sends "
        "its last handshake flight (TLS 1.3: its Finished); asyncio's SSL transport sends it "
        "only when it next reads or writes, so the server's handshake waits (until its "
        "timeout) for a client that is only pausing its reading.",
        why="Pausing reading must not stop the handshake, which the application has already "
        "been told has completed.",
    ),
    "failed-tls-no-refcycles": Divergence(
        what="When a TLS handshake fails (start_tls() or create_connection(ssl=...)), the "
        "exception raised holds no reference cycle through the transport: the transport "
        "is freed as soon as the caller drops it. asyncio before gh-159049 keeps it in a "
        "cycle (frame, waiter, exception, traceback) that only the garbage collector frees.",
        why="Until a collection the cycle keeps the transport, its socket object and the "
        "protocol alive; 3.14 breaks it too.",
        # PyPy frees nothing by reference counting: a cycle is garbage like any other.
        versions="CPython 3.11-3.13",
        holds=not STDLIB_START_TLS_NO_CYCLE and sys.implementation.name != "pypy",
    ),
    "start-tls-buffered-data": Divergence(
        what="A streams server's start_tls() hands what its StreamReader has buffered (the "
        "client's first TLS record, read with the STARTTLS line) to the TLS handshake; "
        "asyncio before gh-142352 leaves it in the reader, and the handshake waits for a "
        "record that already came.",
        why="The handshake would hang until its timeout; 3.14 (and late 3.13 releases) "
        "do this too.",
        versions="3.11-3.13 releases before gh-142352",
        holds=not STDLIB_START_TLS_TAKES_BUFFER,
    ),
    "tls-shutdown-timeout-until-closed": Divergence(
        what="ssl_shutdown_timeout bounds the whole TLS shutdown, up to connection_lost(): "
        "when close_notify has been exchanged (or the peer's EOF began the shutdown) but the "
        "lower transport still cannot flush what was written, because the peer does not "
        "read, the connection is aborted with TimeoutError when the timeout expires; asyncio "
        "before 3.14 cancels the timer once its close_notify is out and then waits for the "
        "flush forever.",
        why="A peer that stops reading must not keep a closing connection (and its buffers) "
        "forever; that is what the timeout is for, and 3.14 applies it so.",
        versions="3.11-3.13",
        holds=not STDLIB_TLS_SHUTDOWN_TIMEOUT_UNTIL_CLOSED,
    ),
    "tls-writelines-type-check": Divergence(
        what="writelines() on a TLS transport with an item that is not bytes-like raises "
        "TypeError at the call, and nothing of that call is sent; asyncio accepts it and "
        "fails later inside its SSL protocol, reporting 'Fatal error on SSL protocol' to the "
        "exception handler and aborting the connection (on PyPy, whose SSLObject.write() "
        "takes a str, it sends the text).",
        why="write() already raises TypeError for such data (in asyncio too); a type error "
        "belongs to the caller, not to the connection.",
    ),
    "tls-data-before-error": Divergence(
        what="Application data decrypted from the records that arrived before a bad one "
        "(a record failing its integrity check, a fatal alert) is delivered to "
        "data_received() before the connection is lost with the SSLError; asyncio drops the "
        "data decrypted in the same read pass.",
        why="Those records were authentic and complete; the peer sent them before the "
        "failure, as a plaintext connection would have delivered them before a reset.",
    ),
    "tls-delivery-at-most-256k": Divergence(
        what="A TLS Protocol receives at most 256 KiB per data_received() call: plaintext "
        "that piled up while reading was paused (up to the read buffer limit) is delivered "
        "in several calls; asyncio joins everything it can decrypt into one bytes object.",
        why="Bounded memory per delivery (one reused decryption buffer per thread, no joins); "
        "TCP never promised chunk boundaries, and plain stream transports bound their "
        "chunks too.",
    ),
    "tls-closed-twice": Divergence(
        what="After close() is called again on a TLS transport that is already closed, its "
        "methods go on answering as a closed transport's do (get_extra_info() gives the "
        "default for the TLS keys, write() is dropped with asyncio's 'SSL connection is "
        "closed' warnings); asyncio's raise AttributeError, because its transport dropped "
        "its reference to the SSL protocol.",
        why="asyncio drops the reference so that a protocol that keeps its transport does "
        "not keep the connection's TLS state alive; tideloop releases the same state (SSL "
        "object, context, buffers) without breaking the transport's API.",
    ),
    "unix-path-calls-off-loop": Divergence(
        what="create_unix_server(path) checks for a stale socket file, binds and reads the "
        "file's inode, and create_datagram_endpoint(AF_UNIX, local_addr=path) checks for a "
        "stale socket file, on a helper thread: the loop runs other callbacks meanwhile, "
        "start_serving=False included. asyncio makes these calls on the loop's thread.",
        why="No blocking call on the loop's thread (a stat on a slow or network filesystem "
        "stalls every callback); blockbuster flags them outside asyncio's own frames.",
    ),
    "loop-time-is-the-clock": Divergence(
        what="loop.time is the function of the loop's clock itself (time.monotonic on the "
        "real clock, the virtual clock's now() under virtual time), not a method bound to "
        "the loop; it returns what asyncio's does. Replacing it on the loop "
        "(mock.patch.object(loop, 'time'), an assignment) or overriding time() in a "
        "subclass moves the timers, as in asyncio; patching it on the loop's class does not.",
        why="asyncio.timeout() and wait_for() call loop.time(): as the clock's function it "
        "costs 154 ns a call on 3.11, a bound method behind the property that lets a "
        "replacement reach the scheduler 229 ns.",
    ),
    "child-starts-off-loop": Divergence(
        what="subprocess_exec()/subprocess_shell() (and create_subprocess_*) start the child "
        "with subprocess.Popen on a thread of their own; the loop runs other callbacks until "
        "the child has exec'd. asyncio calls Popen on the loop's thread, which blocks there "
        "until the exec succeeds or fails. Results and exceptions are the same; a spawn "
        "whose caller is cancelled meanwhile kills and reaps its child. While a SIGCHLD "
        "handler is installed (it may reap every child), the child starts on the loop's "
        "thread, as in asyncio.",
        why="No blocking call on the loop's thread: Popen waits for the exec by reading a "
        "pipe, milliseconds for a large parent or a slow filesystem, and blockbuster flags "
        "the read.",
    ),
}
