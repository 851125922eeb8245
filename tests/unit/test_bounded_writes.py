"""Bounded writes (PyPy): one vectored write from a transport's buffer takes a bounded amount.

PyPy copies a memoryview that starts past its object's first byte into a new
buffer on every write call, all of it (``_fdio/sock.py``); on PyPy the
transports therefore write at most ``WRITE_LIMIT`` bytes a call, taken from
the front of their buffer by `bounded_head`. On CPython the limit is none.
"""

from __future__ import annotations

import collections
from typing import Any

from tideloop._transports.base import bounded_head


def lengths(chunks: list[Any]) -> list[int]:
    return [len(c) for c in chunks]


def test_the_last_buffer_taken_is_cut_to_the_limit() -> None:
    tail = memoryview(b"x" * 100)[10:]  # 90 bytes, past its object's start
    buffer: collections.deque[Any] = collections.deque([b"a" * 30, tail, b"b" * 5])
    chunks = bounded_head(buffer, 1024, limit=100)
    assert lengths(chunks) == [30, 70]
    assert bytes(chunks[1]) == b"x" * 70
    assert list(buffer) == [b"a" * 30, tail, b"b" * 5]  # the buffer is not consumed


def test_small_buffers_go_together_up_to_iov_max() -> None:
    buffer: collections.deque[Any] = collections.deque([b"ab"] * 10)
    assert lengths(bounded_head(buffer, 4, limit=100)) == [2, 2, 2, 2]
    assert lengths(bounded_head(buffer, 1024, limit=100)) == [2] * 10
    assert lengths(bounded_head(buffer, 1024, limit=5)) == [2, 2, 1]


def test_a_buffer_of_exactly_the_limit() -> None:
    buffer: collections.deque[Any] = collections.deque([b"a" * 8, b"b"])
    chunks = bounded_head(buffer, 1024, limit=8)
    assert lengths(chunks) == [8]
    assert bytes(chunks[0]) == b"a" * 8
