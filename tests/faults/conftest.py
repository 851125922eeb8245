"""The loops the fault tests run on: the root conftest's, and uvloop where installed.

A test that takes `fault_loop` runs once per loop of the root conftest's
`loop` fixture (the stdlib's selector loop and tideloop with each poller)
and once more on uvloop when it can be imported (the ``bench`` extra): the
parameter is ``fault_loop_name``. The loop is watched exactly as the root
conftest's loops are (`_loop_watch`: an unexpected exception-handler call
or a registration left at close fails the test, and ``loop_errors`` /
``@pytest.mark.loop_errors`` work unchanged), pending tasks fail the test,
and the root conftest's ``no_leaks`` checks fds and threads after it (a
uvloop loop is made and closed at import, so that the pipe libuv opens once
per process is not counted against the first uvloop test).

``@pytest.mark.fault_xfail("tideloop", reason=...)`` turns the test into a
strict expected failure on the loops whose name starts with one of the given
prefixes only: a difference from the stdlib loop found by a fault test is
kept visible, not weakened away, and the mark must go once it is fixed.
``run=False`` (for a loop on which the test hangs) does not run it there.

A difference of tideloop's own that is deliberate is registered in
`divergences.py` instead, and its test is marked
``@pytest.mark.divergence(key)`` as elsewhere; but here it runs on every
fault loop and asserts what each does (tideloop's behaviour on the loops the
entry names, the stdlib's on its loop where the entry holds).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator

import pytest
from fault_support import FAULT_FACTORIES, HAVE_UVLOOP

import certs
from divergences import DIVERGENCES
from loopwatch import LoopWatch, finish

if HAVE_UVLOOP:
    # libuv opens a process-wide pipe (its signal pipe) with the first loop
    # and keeps it: open it now, or the first uvloop test "leaks" two fds.
    import uvloop

    uvloop.new_event_loop().close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fault_xfail(*prefixes, reason): a strict xfail on the fault loops named with a prefix",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fault_loop_name" in metafunc.fixturenames:
        metafunc.parametrize("fault_loop_name", list(FAULT_FACTORIES))
        # A divergence test runs on every fault loop here (it asserts each
        # loop's behaviour itself); its key must still be registered.
        marker = metafunc.definition.get_closest_marker("divergence")
        if marker is not None:
            assert marker.args[0] in DIVERGENCES, f"unknown divergence {marker.args[0]!r}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "fault_loop_name" not in callspec.params:
            continue
        name = str(callspec.params["fault_loop_name"])
        for marker in item.iter_markers("fault_xfail"):
            if name.startswith(tuple(marker.args)):
                reason = str(marker.kwargs.get("reason", "differs from the stdlib loop"))
                run = bool(marker.kwargs.get("run", True))
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason, run=run))


@pytest.fixture
def fault_loop(fault_loop_name: str, _loop_watch: LoopWatch) -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh loop of the kind named by ``fault_loop_name``, watched; closed after the test."""
    loop = _loop_watch.watch(FAULT_FACTORIES[fault_loop_name]())
    try:
        yield loop
    finally:
        finish(loop)


@pytest.fixture(scope="session")
def fault_tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts: a certificate for 127.0.0.1 from a throwaway CA."""
    ca = certs.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client)
    return server, client
