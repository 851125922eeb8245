"""Fixtures of the conformance tests' TLS modules (``test_tls*.py``; see ``tls_support``).

`certs` makes the throwaway CAs and contexts once per module; `tls` is
parametrised over the two routes (asyncio's public ``ssl=`` API of the loop
under test, and tideloop's TLS module over the loop's plain transports), so
a test that takes it runs through both on every loop.
"""

from __future__ import annotations

import asyncio

import pytest

from tls_support import ROUTES, Certs, Route, make_certs


@pytest.fixture(scope="module")
def certs() -> Certs:
    return make_certs()


@pytest.fixture(params=ROUTES)
def tls(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> Route:
    return Route(request.param, loop)
