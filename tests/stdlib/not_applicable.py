"""The reviewed list of upstream tests that cannot apply to a third-party loop.

A test is listed here only if it tests the stdlib's *implementation* rather
than asyncio's behaviour, in one of these ways (the categories):

- ``MOCKS_INTERNALS``: it patches stdlib internals
  (``mock.patch('asyncio.base_events...')``, ``loop._selector = Mock()``,
  ``loop._process_events = Mock()``) and asserts on the mocks;
- ``PRIVATE_STATE``: it reads or sets private attributes or methods of the
  stdlib loop classes (``loop._selector``, ``loop._ready``, ``_scheduled``,
  ``loop._make_socket_transport``, ...);
- ``STDLIB_LOOP``: it builds a stdlib loop on purpose (and, where the test
  itself applies to any loop, a variant class in `variants.py` runs it on the
  loop under test);
- ``STDLIB_CLASS``: it unit-tests a stdlib implementation class directly
  (``_SelectorSocketTransport``, ``BaseSubprocessTransport``, a child
  watcher...) with no loop of ours involved;
- ``REPLACED``: a class that builds a stdlib loop on purpose and whose tests
  run anyway, on the loop under test, as a variant class (`variants.py`).
  These are not lost tests: the report counts them apart from ``n/a``.

Listed tests are run in neither the tideloop nor the stdlib run, so the two
columns of the report stay comparable. Everything not listed counts. A test
that fails because tideloop *behaves* differently is a failure, not an entry
here: when in doubt, leave it out.

Patterns (`fnmatch`) are used only where a whole class is of one kind.
An entry may be limited to some Python minor versions (``pythons``).
"""

from __future__ import annotations

import fnmatch
import selectors
import sys
from dataclasses import dataclass
from enum import Enum


class Category(Enum):
    MOCKS_INTERNALS = "mocks stdlib internals"
    PRIVATE_STATE = "reads or sets private state of stdlib loop classes"
    STDLIB_LOOP = "builds a stdlib loop on purpose"
    STDLIB_CLASS = "unit-tests a stdlib implementation class"
    #: A STDLIB_LOOP class whose tests run anyway, as a variant (variants.py).
    REPLACED = "builds a stdlib loop on purpose; runs as its Tideloop* variant instead"


@dataclass(frozen=True)
class Entry:
    pattern: str
    category: Category
    reason: str
    #: Python minor versions ("3.11", ...) the entry applies to; empty = all.
    pythons: tuple[str, ...] = ()

    def applies(self, minor: str) -> bool:
        return not self.pythons or minor in self.pythons


M = Category.MOCKS_INTERNALS
P = Category.PRIVATE_STATE
L = Category.STDLIB_LOOP
C = Category.STDLIB_CLASS
R = Category.REPLACED


def _selector_classes(module: str) -> list[Entry]:
    """The per-selector classes of *module* that exist on this platform."""
    variants = "the Tideloop<poller>EventLoopTests variants"
    return [
        Entry(
            f"{module}.{cls}EventLoopTests.*",
            R,
            f"asyncio.SelectorEventLoop(selectors.{sel}()) by design; the same tests run on "
            f"the loop under test as {variants} (see variants.py)",
        )
        for cls, sel in (
            ("EPoll", "EpollSelector"),
            ("Poll", "PollSelector"),
            ("Select", "SelectSelector"),
            ("Kqueue", "KqueueSelector"),
        )
        if hasattr(selectors, sel)
    ]


def _variant_original(test_class: str, variant: str, how: str) -> Entry:
    return Entry(
        f"{test_class}.*",
        R,
        f"{how} by design; the same tests run on the loop under test as {variant}",
    )


ENTRIES: list[Entry] = [
    # ================================================================ originals of variants
    # (STDLIB_LOOP; see variants.py: the same tests run on tideloop under the variant's name)
    *_selector_classes("test_events"),
    *_selector_classes("test_sock_lowlevel"),
    *_selector_classes("test_sendfile"),
    _variant_original(
        "test_events.UnixPipeObjectSupportTests",
        "TideloopUnixPipeObjectSupportTests",
        "asyncio.SelectorEventLoop() in setUp",
    ),
    _variant_original(
        "test_buffered_proto.BufferedProtocolSelectorTests",
        "TideloopBufferedProtocolTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_server.SelectorStartServerTests",
        "TideloopStartServerTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_sslproto.SelectorStartTLSTests",
        "TideloopStartTLSTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_unix_events.SelectorEventLoopUnixSocketTests",
        "TideloopUnixSocketTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_unix_events.SelectorEventLoopSignalTests",
        "TideloopSignalTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_base_events.BaseEventLoopWithSelectorTests",
        "TideloopLoopWithSelectorTests",
        "asyncio.SelectorEventLoop()",
    ),
    _variant_original(
        "test_base_events.BaseEventLoopTests",
        "TideloopBaseLoopTests",
        "base_events.BaseEventLoop() with a mocked _selector",
    ),
    _variant_original(
        "test_base_events.BaseLoopSockSendfileTests",
        "TideloopSockSendfileTests",
        "selector_events.BaseSelectorEventLoop()",
    ),
    _variant_original(
        "test_runners.RunTests",
        "TideloopRunTests",
        "a BaseEventLoop with mocked _selector/_process_events/_write_to_self",
    ),
    _variant_original(
        "test_runners.RunnerTests",
        "TideloopRunnerTests",
        "a BaseEventLoop with mocked _selector/_process_events/_write_to_self",
    ),
    *[
        _variant_original(
            f"test_pep492.{cls}",
            f"Tideloop{cls}",
            "a BaseEventLoop with mocked _selector/_process_events",
        )
        for cls in ("LockTests", "StreamReaderTests", "CoroutineTests")
    ],
    # ================================================================ test_base_events
    Entry(
        "test_base_events.BaseEventTests.*",
        C,
        "tests base_events._ipaddr_info, a private helper of the stdlib loop",
    ),
    Entry(
        "test_base_events.TestSelectorUtils.*",
        C,
        "tests base_events._set_nodelay, a private helper of the stdlib loop",
    ),
    Entry(
        "test_base_events.TideloopBaseLoopTests.test_not_implemented",
        C,
        "asserts that BaseEventLoop's private transport factories (_make_socket_transport, "
        "...) raise NotImplementedError",
    ),
    *[
        Entry(
            f"test_base_events.TideloopBaseLoopTests.{name}",
            P,
            f"reads or calls {what} of the stdlib loop",
        )
        for name, what in (
            ("test__add_callback_handle", "loop._add_callback, loop._ready and loop._scheduled"),
            (
                "test__add_callback_cancelled_handle",
                "loop._add_callback, loop._ready and loop._scheduled",
            ),
            ("test_call_later", "loop._scheduled (the public part of the test passes)"),
            ("test__run_once", "loop._run_once, loop._scheduled and the mocked loop._selector"),
            ("test__run_once_schedule_handle", "loop._run_once, loop._scheduled and loop._ready"),
            (
                "test__run_once_cancelled_event_cleanup",
                "loop._scheduled and loop._timer_cancelled_count",
            ),
        )
    ],
    Entry(
        "test_base_events.TideloopBaseLoopTests.test_custom_run_forever_integration",
        M,
        "drives loop._run_forever_setup/_run_once/_run_forever_cleanup by hand, relying on "
        "the mocked loop._selector.select returning at once (a real poller blocks: nothing is "
        "ready), and counts calls of a mocked loop._process_events",
        pythons=("3.13", "3.14", "3.15"),
    ),
    Entry(
        "test_base_events.TideloopBaseLoopTests.test_run_forever_pre_stopped",
        M,
        "asserts on the mocked loop._selector.select (called once with 0)",
    ),
    Entry(
        "test_base_events.TideloopBaseLoopTests.test_single_selecter_event_callback_after_stopping",
        M,
        "feeds events through a mocked loop._selector.select and replaces loop._process_events",
    ),
    *[
        Entry(
            f"test_base_events.TideloopBaseLoopTests.{name}",
            L,
            f"builds {what} inside the test",
        )
        for name, what in (
            ("test_check_thread", "a second base_events.BaseEventLoop()"),
            ("test_create_task", "a base_events.BaseEventLoop subclass"),
            ("test_default_exc_handler_broken", "a base_events.BaseEventLoop subclass"),
        )
    ],
    Entry(
        "test_base_events.TideloopSockSendfileTests.test__sock_sendfile_native_failure",
        P,
        "calls loop._sock_sendfile_native and expects BaseSelectorEventLoop's refusal",
    ),
    Entry(
        "test_base_events.TideloopSockSendfileTests.test_sock_sendfile_no_fallback",
        L,
        "expects SendfileNotAvailableError because BaseSelectorEventLoop has no native "
        "sendfile; a loop with native sendfile (tideloop, SelectorEventLoop) sends the file",
    ),
    # @patch_socket replaces asyncio.base_events.socket, the socket module as the stdlib
    # loop sees it; the tests script mock sockets and assert on them. On another loop the
    # patch does nothing and the tests open real sockets to the addresses they name.
    *[
        Entry(
            f"test_base_events.TideloopLoopWithSelectorTests.{name}",
            M,
            "@patch_socket: mocks asyncio.base_events.socket and asserts on the mock",
        )
        for name in (
            "test_create_connection_multiple_errors",
            "test_create_connection_timeout",
            "test_create_connection_multiple_errors_local_addr",
            "test_create_connection_ipv6_scope",
            "test_create_connection_ip_addr",
            "test_create_connection_no_inet_pton",
            "test_create_connection_service_name",
            "test_create_connection_bluetooth",
            "test_create_server_nosoreuseport",
            "test_create_server_soreuseport_only_defined",
            "test_create_server_cant_bind",
            "test_create_datagram_endpoint_no_addrinfo",
            "test_create_datagram_endpoint_socket_err",
            "test_create_datagram_endpoint_setblk_err",
            "test_create_datagram_endpoint_cant_bind",
            "test_create_datagram_endpoint_nosoreuseport",
            "test_create_datagram_endpoint_ip_addr",
        )
    ],
    Entry(
        "test_base_events.TideloopLoopWithSelectorTests.test_create_connection_ssl_server_hostname_default",
        M,
        "replaces loop._make_ssl_transport with a mock and asserts on its call arguments",
    ),
    Entry(
        "test_base_events.TideloopLoopWithSelectorTests.test_accept_connection_retry",
        P,
        "calls loop._accept_connection directly",
    ),
    Entry(
        "test_base_events.TideloopLoopWithSelectorTests.test_accept_connection_exception",
        P,
        "calls loop._accept_connection directly and asserts on mocked loop._remove_reader",
    ),
    # ================================================================ test_selector_events
    *[
        Entry(f"test_selector_events.{cls}.*", C, what)
        for cls, what in (
            (
                "BaseSelectorEventLoopTests",
                "unit tests of BaseSelectorEventLoop (a subclass with mocked self-pipe and "
                "selector), mostly through its private methods",
            ),
            ("SelectorTransportTests", "unit tests of selector_events._SelectorTransport"),
            (
                "SelectorSocketTransportTests",
                "unit tests of selector_events._SelectorSocketTransport with mock sockets",
            ),
            (
                "SelectorSocketTransportBufferedProtocolTests",
                "unit tests of selector_events._SelectorSocketTransport with mock sockets",
            ),
            (
                "SelectorDatagramTransportTests",
                "unit tests of selector_events._SelectorDatagramTransport with mock sockets",
            ),
        )
    ],
    # ================================================================ test_proactor_events
    *[
        Entry(f"test_proactor_events.{cls}.*", C, what)
        for cls, what in (
            (
                "ProactorSocketTransportTests",
                "unit tests of the Windows proactor transports with a mocked proactor",
            ),
            (
                "ProactorDatagramTransportTests",
                "unit tests of the Windows proactor datagram transport with a mocked proactor",
            ),
            (
                "BaseProactorEventLoopTests",
                "unit tests of BaseProactorEventLoop with a mocked proactor",
            ),
            ("ProactorEventLoopUnixSockSendfileTests", "builds asyncio.ProactorEventLoop"),
        )
    ],
    # ================================================================ test_unix_events
    # @mock.patch('asyncio.unix_events.signal'): the scenario (set_wakeup_fd or
    # signal.signal failing, handlers installed into a mock) exists only inside the mock;
    # on another loop the real signal module is used. tideloop's signal error handling is
    # covered by tests/conformance/test_signals.py.
    *[
        Entry(
            f"test_unix_events.TideloopSignalTests.{name}",
            M,
            "mocks asyncio.unix_events.signal and asserts on the mock",
        )
        for name in (
            "test_add_signal_handler_setup_error",
            "test_add_signal_handler",
            "test_add_signal_handler_install_error",
            "test_add_signal_handler_install_error2",
            "test_add_signal_handler_install_error3",
            "test_remove_signal_handler",
            "test_remove_signal_handler_2",
            "test_remove_signal_handler_cleanup_error",
            "test_remove_signal_handler_error",
            "test_remove_signal_handler_error2",
            "test_close",
        )
    ],
    # The signal handlers live in a SignalWatcher component, not in loop attributes;
    # the behaviour these poke at (invalid signals, a signal nobody handles) is covered
    # through the public API by tests/conformance/test_signals.py.
    Entry(
        "test_unix_events.TideloopSignalTests.test_check_signal",
        P,
        "calls the stdlib loop's private loop._check_signal()",
    ),
    Entry(
        "test_unix_events.TideloopSignalTests.test_handle_signal_no_handler",
        P,
        "calls the stdlib loop's private loop._handle_signal()",
    ),
    Entry(
        "test_unix_events.TideloopSignalTests.test_handle_signal_cancelled_handler",
        P,
        "plants a handle in the stdlib loop's private loop._signal_handlers dict",
    ),
    Entry(
        "test_unix_events.TideloopSignalTests.test_close_on_finalizing",
        M,
        "mocks asyncio.unix_events.signal and asyncio.unix_events.sys (is_finalizing)",
    ),
    Entry(
        "test_unix_events.TideloopUnixSocketTests.test_create_unix_server_bind_error",
        M,
        "mocks asyncio.unix_events.socket to make bind() fail",
    ),
    Entry(
        "test_unix_events.SelectorEventLoopUnixSockSendfileTests.test_sock_sendfile_not_available",
        M,
        "mocks asyncio.unix_events.os to remove os.sendfile",
    ),
    *[
        Entry(
            f"test_unix_events.SelectorEventLoopUnixSockSendfileTests.{name}",
            P,
            "calls loop._sock_sendfile_native_impl and inspects loop._selector",
        )
        for name in (
            "test_sock_sendfile_cancel1",
            "test_sock_sendfile_cancel2",
            "test_sock_sendfile_blocking_error",
            "test_sock_sendfile_os_error_first_call",
            "test_sock_sendfile_os_error_next_call",
            "test_sock_sendfile_exception",
        )
    ],
    Entry(
        "test_unix_events.UnixReadPipeTransportTests.*",
        C,
        "unit tests of unix_events._UnixReadPipeTransport with a TestLoop and a mocked os",
    ),
    Entry(
        "test_unix_events.UnixWritePipeTransportTests.*",
        C,
        "unit tests of unix_events._UnixWritePipeTransport with a TestLoop and a mocked os",
    ),
    Entry(
        "test_unix_events.AbstractChildWatcherTests.*",
        C,
        "tests asyncio.AbstractChildWatcher, an API of the stdlib loop's subprocess support",
    ),
    Entry(
        "test_unix_events.BaseChildWatcherTests.*",
        C,
        "tests unix_events.BaseChildWatcher._do_waitpid",
    ),
    Entry(
        "test_unix_events.SafeChildWatcherTests.*",
        C,
        "unit tests of SafeChildWatcher with a TestLoop and a mocked os.waitpid",
    ),
    Entry(
        "test_unix_events.FastChildWatcherTests.*",
        C,
        "unit tests of FastChildWatcher with a TestLoop and a mocked os.waitpid",
    ),
    Entry(
        "test_unix_events.PolicyTests.test_get_default_child_watcher",
        P,
        "reads policy._watcher and mocks asyncio.unix_events.can_use_pidfd (the other "
        "PolicyTests, which use the public child-watcher API, count)",
    ),
    # ================================================================ test_subprocess
    Entry(
        "test_subprocess.SubprocessTransportTests.*",
        C,
        "unit tests of base_subprocess.BaseSubprocessTransport (a subclass with a mocked "
        "Popen) through its private methods",
    ),
    Entry(
        "test_subprocess.GenericWatcherTests.test_create_subprocess_fails_with_inactive_watcher",
        M,
        "mocks the policy's child watcher (is_active() returns False) and expects the loop to "
        "consult it; tideloop's loops watch their own children with pidfds (divergence "
        "own-child-watcher in tests/divergences.py)",
    ),
    # ================================================================ test_sslproto
    Entry(
        "test_sslproto.SslProtoHandshakeTests.*",
        C,
        "unit tests of sslproto.SSLProtocol, the stdlib loop's TLS implementation, with "
        "mocked transports and SSL objects",
    ),
    Entry(
        "test_sslproto.*.test_create_connection_ssl_failed_certificate_no_cycles",
        M,
        "finds the transport by patching sslproto.SSLProtocol.connection_made, which tideloop's "
        "TLS layer does not use; the same property (no cycle keeps the transport after a "
        "failed handshake) is checked through start_tls by the next test, and by "
        "tests/conformance/test_tls_start_tls.py::test_failed_start_tls_leaves_no_cycle",
        pythons=("3.14", "3.15"),
    ),
    # ================================================================ test_ssl
    Entry(
        "test_ssl.TestSSL.test_remote_shutdown_receives_trailing_data",
        P,
        "fills the write backlog through writer.transport._test__append_write_backlog(), a "
        "test hook of sslproto._SSLProtocolTransport (plaintext queued without write(), so "
        "without flow control or encryption); the scenario through write() (the peer sends "
        "close_notify, or TCP FIN, while megabytes are still queued, and must get them all) "
        "is tests/conformance/test_tls_errors.py::test_peer_ends_first_while_we_still_send",
    ),
    Entry(
        "test_ssl.TestSSL.test_remote_shutdown_receives_trailing_data_on_slow_socket",
        P,
        "the slow-socket version of the above (3.14): it fills the backlog through the same "
        "_test__append_write_backlog() hook and replaces the selector transport's _sock "
        "once its private _read_ready_cb is None (a stdlib bug, gh-115514); the scenario is "
        "tests/conformance/test_tls_errors.py::test_peer_ends_first_while_we_still_send",
        pythons=("3.13", "3.14", "3.15"),
    ),
    # ================================================================ test_futures
    *[
        Entry(
            f"test_futures.{cls}.{test}",
            L,
            "a Future on SimpleEvilEventLoop, a BaseEventLoop subclass the test defines "
            "(its call_soon mutates the future's callbacks): tests the C Future against "
            "hostile loops, not the loop",
            pythons=("3.13", "3.14", "3.15"),
        )
        for cls in (
            "CFutureDoneCallbackTests",
            "CSubFutureDoneCallbackTests",
            "PyFutureDoneCallbackTests",
        )
        for test in (
            "test_evil_call_soon_list_mutation",
            "test_use_after_free_on_fut_callback_0_with_evil__getattribute__",
            "test_use_after_free_on_fut_context_0_with_evil__getattribute__",
        )
    ],
    # ================================================================ test_base_events
    Entry(
        "test_base_events.*.test_create_connection_transport_error_closes_sock",
        M,
        "patches asyncio.base_events.socket so that create_connection() makes a Mock socket; "
        "tideloop makes its sockets in its own module. The behaviour (the socket is closed "
        "when the protocol factory fails) is checked with sock= by the test before it, and "
        "by tests/conformance/test_net_connect.py::test_socket_closed_when_no_transport_is_made",
        pythons=("3.14", "3.15"),
    ),
    *[
        Entry(
            f"test_base_events.TideloopBaseLoopTests.test_create_connection_happy_eyeballs{v}",
            L,
            "builds asyncio.SelectorEventLoop() on purpose (3.15, gh-151540) and mocks its "
            "_add_reader/_add_writer and the socket module; the happy eyeballs race itself is "
            "tested on tideloop in tests/conformance/test_net_connect.py",
            pythons=("3.15",),
        )
        for v in ("", "_ipv4_only")
    ],
    Entry(
        "test_base_events.*.test_create_connection_happy_eyeballs_empty_exceptions",
        M,
        "replaces asyncio.staggered.staggered_race with a mock that returns no winner and no "
        "exceptions; tideloop races connections with its own RFC 8305 code, which always "
        "reports the attempts' errors",
        pythons=("3.13", "3.14", "3.15"),
    ),
    # ================================================================ test_subprocess
    *[
        Entry(
            f"test_subprocess.{test}",
            P,
            "reads loop._watcher, the 3.14 stdlib loop's child watcher object (its class, or "
            "its _threads); tideloop's loops watch children with their own ChildWatcher "
            "(pidfd, or a thread that waits without reaping: gh-127049 holds there too)",
            pythons=("3.14", "3.15"),
        )
        for test in (
            "SubprocessPidfdWatcherTests.test_watcher_implementation",
            "SubprocessThreadedWatcherTests.test_watcher_implementation",
            "SubprocessThreadedWatcherTests.test_pid_not_reaped_before_exit_published",
        )
    ],
    # ================================================================ test_events
    Entry(
        "test_events.Tideloop*EventLoopTests.test_timeout_rounding",
        P,
        "replaces loop._run_once and reads loop._selector and loop._clock_resolution; the "
        "behaviour checked (12 iterations for 5 sleeps) was verified by hand on tideloop",
    ),
    *[
        Entry(
            f"test_events.Tideloop*EventLoopTests.test_create_server_multiple_hosts_{v}",
            M,
            "mocks asyncio.base_events.socket (fake sockets for unroutable hosts) and "
            "loop._start_serving/_stop_serving",
        )
        for v in ("ipv4", "ipv6")
    ],
    # ================================================================ test_runners
    Entry(
        "test_runners.TideloopRunTests.test_asyncio_run_debug",
        M,
        "mocks asyncio.coroutines._is_debug_mode, which only the stdlib loop's constructor "
        "reads (the debug=True/False part of the test passes)",
    ),
    Entry(
        "test_runners.TideloopRunTests.test_loop_factory_default_event_loop",
        L,
        "asserts that asyncio.EventLoop (3.13+) builds a SelectorEventLoop, i.e. tests the "
        "stdlib's choice of default loop class (the injection points it at tideloop)",
        pythons=("3.13", "3.14", "3.15"),
    ),
    # ================================================================ test_tasks
    Entry(
        "test_tasks.CoroutineGatherTests.test_issue46672",
        M,
        "mocks asyncio.base_events.BaseEventLoop.call_exception_handler and asserts on it",
    ),
]


def _minor() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def entries_for(minor: str | None = None) -> list[Entry]:
    minor = minor or _minor()
    return [e for e in ENTRIES if e.applies(minor)]


def entry_for(test_id: str, minor: str | None = None) -> Entry | None:
    """The entry that makes *test_id* (``module.Class.test``) not applicable, or None."""
    for entry in entries_for(minor):
        if fnmatch.fnmatchcase(test_id, entry.pattern):
            return entry
    return None


def reason_for(test_id: str, minor: str | None = None) -> str | None:
    """The reason *test_id* is not applicable, or None."""
    entry = entry_for(test_id, minor)
    return None if entry is None else f"{entry.category.value}: {entry.reason}"


def stale_entries(test_ids: set[str], minor: str) -> list[Entry]:
    """Entries for *minor* that match none of *test_ids* (all tests of a full run)."""
    return [
        e
        for e in entries_for(minor)
        if not any(fnmatch.fnmatchcase(t, e.pattern) for t in test_ids)
    ]


def main() -> None:
    """Print the list, grouped by category."""
    for category in Category:
        entries = [e for e in ENTRIES if e.category is category]
        print(f"{category.name} ({category.value}): {len(entries)} entries")
        for e in entries:
            only = f"  [{', '.join(e.pythons)}]" if e.pythons else ""
            print(f"  {e.pattern}{only}\n      {e.reason}")


if __name__ == "__main__":
    main()
