"""What the aiohttp and uvicorn tests both serve and check (this module has no tests).

A test's *plan* is a list of ``(kind, key, size)`` requests: ``data`` and
``stream`` answer `make_body` (whole, or in chunks), ``digest`` the SHA-256
and length of the body the client uploads. `expected` is the answer each
request must get; `check_answers` fails on the first request that raised or
got another answer.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

#: One request: (kind, key, size).
Request = tuple[str, str, int]


def make_body(key: str, size: int) -> bytes:
    """The body served for *key*: *size* pseudo-random bytes seeded by the key."""
    return random.Random(f"{key}/{size}").randbytes(size)


def expected(kind: str, key: str, size: int) -> bytes:
    body = make_body(key, size)
    if kind == "digest":
        return f"{hashlib.sha256(body).hexdigest()}:{size}".encode()
    return body


def check_answers(plan: Sequence[Request], results: Sequence[object]) -> None:
    """*results* (``gather(..., return_exceptions=True)`` of *plan*) are the expected answers."""
    failures = [
        (item, r) for item, r in zip(plan, results, strict=True) if isinstance(r, BaseException)
    ]
    assert not failures, f"{len(failures)} requests failed, first: {failures[0]!r}"
    wrong = [item for item, r in zip(plan, results, strict=True) if r != expected(*item)]
    assert not wrong, f"{len(wrong)} wrong answers, first: {wrong[0]}"
