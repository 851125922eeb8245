"""Shared fixtures for the integration tests that run real libraries on the loops.

The loops come from the root conftest: a test that takes ``loop``,
``loop_factory`` or ``loop_name`` runs once per loop (the stdlib's selector
loop and tideloop with each poller), and the same test must pass on all of
them. This file adds what several library tests share:

* `tls_ca`: a throwaway certificate authority (trustme, in memory), and
  `server_ssl_context` (a certificate for localhost / 127.0.0.1 / ::1) and
  `client_ssl_context` (verifying against that CA) built from it.
* `expect_missing_feature`: marks the running test as a strict expected
  failure *on tideloop only*, for features tideloop has not built yet (TLS,
  UDP, subprocesses). On the stdlib loop the same test must pass, which is
  the evidence that the test itself is right; on tideloop it must fail
  until the feature lands, and then the strict xfail turns into a failure
  that says "remove the mark".
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import pytest
import trustme


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    """A throwaway certificate authority, trusted by `client_ssl_context` only."""
    return trustme.CA()


@pytest.fixture
def server_ssl_context(tls_ca: trustme.CA) -> ssl.SSLContext:
    """Serves a certificate for localhost, 127.0.0.1 and ::1 signed by `tls_ca`."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("localhost", "127.0.0.1", "::1").configure_cert(ctx)
    return ctx


@pytest.fixture
def client_ssl_context(tls_ca: trustme.CA) -> ssl.SSLContext:
    """Verifies certificates (and host names) against `tls_ca`."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    tls_ca.configure_trust(ctx)
    return ctx


@pytest.fixture
def expect_missing_feature(request: pytest.FixtureRequest, loop_name: str) -> Callable[[str], None]:
    """Call with a reason: on tideloop the test becomes a strict expected failure."""

    def mark(reason: str) -> None:
        if loop_name.startswith("tideloop"):
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

    return mark
