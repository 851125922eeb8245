"""TLS as a protocol layered over a stream transport: `TLSProtocol` and `SSLTransport`.

Layer: transports. This module uses nothing of tideloop: only the public
asyncio transport/protocol/loop API (``call_soon``, ``call_later``,
``create_future``, ``call_exception_handler``, ``get_debug``, ``time``) and
the ``ssl`` module's memory BIOs. So it runs on any asyncio loop, exactly as
asyncio's own ``sslproto.py`` is layered:

    app protocol  <->  SSLTransport (asyncio.Transport, plaintext)
                           |
                       TLSProtocol (asyncio.BufferedProtocol, ciphertext)
                           |
                       a stream transport (TCP or AF_UNIX, or another SSLTransport)

`TLSProtocol` is installed as the protocol of the lower transport (by
``create_connection``/``create_server``, or by ``set_protocol`` for
`start_tls`); it reads ciphertext straight into its own buffer
(``get_buffer``/``buffer_updated``), feeds it to an ``ssl.SSLObject`` through
an incoming ``ssl.MemoryBIO``, and writes what OpenSSL puts in the outgoing
BIO to the lower transport. The application sees `SSLTransport`
(``TLSProtocol._app_transport``). Semantics are asyncio's ``sslproto.py`` of
the running Python (3.11-3.13): the same states, exceptions and messages,
extra info, logging, exception-handler contexts, flow-control defaults and
timeouts. Where this module deliberately does better, the docstring of the
method says so (none of it changes what a correct program observes).

States (``_state``): UNWRAPPED -> HANDSHAKE -> WRAPPED -> FLUSHING ->
SHUTDOWN, and back to UNWRAPPED on abort or when the connection is lost.
The application's own state (``_app_state``): INIT -> CON_MADE [-> EOF] ->
CON_LOST; its ``connection_made`` comes after a successful handshake (or
never, for `start_tls`, whose protocol is already connected), its
``connection_lost`` only if it got ``connection_made`` and the handshake
had completed.

Invariants:
- ``_reading`` is True exactly while `_do_read` runs (it calls the
  application): a nested `_do_read` returns at once, and a shutdown begun
  inside it (the application closes in ``data_received``, or close_notify
  arrives) is finished by the outer call (``_flush_deferred``). So the
  application never sees nested ``data_received`` calls.
- Ciphertext leaves in one lower ``write()`` per burst: writes made while
  the application is being called from `_do_read` are encrypted at once but
  handed to the lower transport once, when the application returns (an
  ``abort()`` meanwhile hands them over first, as asyncio would already
  have). Outside a delivery, each ``write()``/``writelines()`` goes out at
  once (asyncio's latency).
- The write-buffer size the application sees is plaintext not yet
  encrypted plus ciphertext not yet handed to the lower transport (which
  holds it back while the lower transport has paused us); the lower
  transport's own buffer is governed by its own limits, as in asyncio.
- ``connection_lost`` of the application is called at most once, through
  ``call_soon`` (as asyncio does), with the exception the connection ended
  with; the handshake waiter always completes (result or exception) unless
  it was cancelled.
- Every handshake/shutdown timer is cancelled when the connection is lost.

Facts / what this means for us:
- TLS close_notify (RFC 8446 6.1) is the authenticated end of the stream.
  Reading it (``SSLObject.read`` returns b"") means EOF: the application's
  ``eof_received()`` runs (a true return value has no effect under TLS:
  asyncio logs a warning), then we answer with our close_notify
  (``unwrap()``) and close the lower transport. Our own ``close()`` sends
  close_notify after flushing, then waits at most ``ssl_shutdown_timeout``
  for the peer's before closing the socket anyway (TimeoutError "SSL
  shutdown timed out" to ``connection_lost``).
- Many peers (browsers, HTTP servers, load balancers) close TCP without
  close_notify, because HTTP frames its own messages and a close costs a
  round trip. The lower transport then reports EOF: we deliver what is
  still buffered, call ``eof_received()`` and close, promptly (uvloop waits
  for a close_notify that never comes). If the application has paused
  reading, we keep the connection half-open and deliver the rest, then the
  EOF, when it resumes: nothing is dropped.
- TLS 1.3 sends post-handshake messages: the server's NewSessionTicket(s)
  right after the handshake, KeyUpdate at any time. OpenSSL handles them
  inside ``read()``, which then raises SSLWantReadError without returning
  data (and may queue a reply in the outgoing BIO, which we flush). After
  the handshake, SSLWantReadError only ever means "need more bytes".
- With a memory BIO, ``read()`` after the BIO ran dry raises
  SSLWantReadError (an exception costs about a microsecond). OpenSSL reads
  a record from the BIO only when it needs one, so when the incoming BIO is
  empty and ``SSLObject.pending()`` is 0 no read can produce data: we stop
  there instead of provoking the exception on every delivery.
- SSLError is a subclass of OSError. As in asyncio, OSErrors (failed
  handshakes included) only reach the waiter and ``connection_lost``, with
  a debug-level log line when the loop is in debug mode; other exceptions
  (an application callback raising) go to the loop's exception handler.
- When the handshake fails we do not send the alert OpenSSL prepared:
  asyncio does not either, so the peer sees the same TCP close.

Performance: no per-event closures or allocations beyond the data itself.
Ciphertext is read into one buffer per connection (grown, up to 256 KiB,
only while reads fill it). Plaintext for a ``Protocol`` application is
decrypted into one scratch buffer per thread and copied out once per
delivery as ``bytes`` (a ``BufferedProtocol`` gets it decrypted straight
into its own buffer). Ciphertext produced by several writes leaves in one
lower ``write()``.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import threading
import warnings
from asyncio import constants
from asyncio.log import logger
from asyncio.transports import _FlowControlMixin
from collections.abc import Callable, Iterable
from typing import Any, Final

from tideloop._core.coreloop import CoreLoop

__all__ = ["SSLTransport", "TLSProtocol", "create_transport_context", "start_tls"]

# TLSProtocol._state
UNWRAPPED: Final = 0
HANDSHAKE: Final = 1
WRAPPED: Final = 2
FLUSHING: Final = 3
SHUTDOWN: Final = 4
_STATE_NAMES: Final = ("UNWRAPPED", "DO_HANDSHAKE", "WRAPPED", "FLUSHING", "SHUTDOWN")

# TLSProtocol._app_state
APP_INIT: Final = 0
APP_CON_MADE: Final = 1
APP_EOF: Final = 2
APP_CON_LOST: Final = 3

#: SSLObject errors that mean "feed me more bytes" (asyncio's SSLAgainErrors).
_AGAIN: Final = (ssl.SSLWantReadError, ssl.SSLSyscallError)

#: First size of a connection's ciphertext buffer: two full TLS records.
RECV_BUFFER_INITIAL: Final = 32 * 1024
#: The ciphertext buffer doubles while reads fill it, up to this (asyncio's
#: ``SSLProtocol.max_size``).
RECV_BUFFER_MAX: Final = 256 * 1024
#: Plaintext decrypted per delivery to a ``Protocol`` (the scratch's size).
SCRATCH_SIZE: Final = 256 * 1024
#: The largest TLS record on the wire (header, 2**14 bytes of plaintext and
#: TLS 1.2's maximum expansion; TLS 1.3 allows less).
RECORD_MAX: Final = 5 + 16384 + 2048

_BufferLike = bytes | bytearray | memoryview

#: What a released connection's receive buffer becomes.
_NO_BUFFER: Final = memoryview(b"")


def _released(*args: object) -> int:
    """Stands in for the SSL object's read/write/pending once released (never called)."""
    raise ssl.SSLZeroReturnError("the connection's TLS state was released")


def _released_bytes(size: int) -> bytes:
    """Stands in for the SSL object's read into new bytes once released (never called)."""
    raise ssl.SSLZeroReturnError("the connection's TLS state was released")


class _Scratch(threading.local):
    """One plaintext scratch buffer per thread.

    Safe to share between the connections of a thread: it is filled and
    copied out within one synchronous step that runs no other code
    (``SSLObject.read`` releases the GIL, hence one per thread).
    """

    def __init__(self) -> None:
        self.view: memoryview = memoryview(bytearray(SCRATCH_SIZE))


_scratch: Final = _Scratch()


def create_transport_context(server_side: bool, server_hostname: str | None) -> ssl.SSLContext:
    """The context ``ssl=True`` means: verifying, with hostname checks if a name is known."""
    if server_side:
        raise ValueError("Server side SSL needs a valid SSLContext")
    context = ssl.create_default_context()
    if not server_hostname:
        context.check_hostname = False
    return context


def _flowcontrol_limits(high: int | None, low: int | None, kib: int) -> tuple[int, int]:
    if high is None:
        high = kib * 1024 if low is None else 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return high, low


class SSLTransport(_FlowControlMixin):
    """The application-facing transport of a TLS connection (asyncio's ``_SSLProtocolTransport``).

    It subclasses asyncio's ``_FlowControlMixin`` as asyncio's does: the
    stdlib loop's ``sendfile()`` fallback accepts only such transports, and
    reads ``_protocol_paused`` and ``_loop`` from them.

    Names kept as asyncio's, because code outside asyncio relies on them:
    the class name contains "ssl" (CPython's test_events checks that of a
    transport made with ``ssl=``), and the `TLSProtocol` is
    ``_ssl_protocol`` (libraries read ``transport._ssl_protocol._extra``
    or call its ``pause_writing()``; CPython's test_ssl does the latter).
    """

    __slots__ = ("__weakref__", "_closed", "_ssl_protocol")

    # Read by loops: start_tls() may stack TLS on this transport, and
    # loop.sendfile() must use its read()+write() fallback.
    _start_tls_compatible: bool = True
    _sendfile_compatible = constants._SendfileMode.FALLBACK

    _ssl_protocol: TLSProtocol
    _protocol_paused: bool  # _FlowControlMixin's slot; mirrors TLSProtocol._app_writing_paused

    def __init__(self, loop: asyncio.AbstractEventLoop, tls: TLSProtocol) -> None:
        self._closed = False  # first: __del__ reads it
        super().__init__(None, loop)
        self._ssl_protocol = tls

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SSLTransport {state} {self._ssl_protocol!r}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not self._closed:
            self._closed = True
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)

    # -- BaseTransport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._ssl_protocol._get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._ssl_protocol._set_app_protocol(protocol)

    def get_protocol(self) -> Any:
        return self._ssl_protocol._app_protocol

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush what was written, send close_notify, then close (asyncio's semantics).

        Called again on a closed transport, it releases the connection's
        TLS state (SSL object, context, buffers) once the connection is
        lost, so that an application protocol that keeps its transport
        does not keep them alive. asyncio drops its reference to the SSL
        protocol there instead, after which most of its transport's methods
        raise AttributeError; ours go on answering as a closed transport's
        (tests/divergences.py: ``tls-closed-twice``).
        """
        if not self._closed:
            self._closed = True
            self._ssl_protocol._start_shutdown()
        else:
            self._ssl_protocol._release()

    # -- ReadTransport

    def is_reading(self) -> bool:
        return not self._ssl_protocol._app_reading_paused

    def pause_reading(self) -> None:
        self._ssl_protocol._app_reading_paused = True

    def resume_reading(self) -> None:
        self._ssl_protocol._resume_reading()

    def set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Limits on ciphertext received but not yet decrypted (asyncio's SSL transport)."""
        tls = self._ssl_protocol
        tls._in_high, tls._in_low = _flowcontrol_limits(
            high, low, constants.FLOW_CONTROL_HIGH_WATER_SSL_READ
        )
        tls._control_ssl_reading()

    def get_read_buffer_limits(self) -> tuple[int, int]:
        return (self._ssl_protocol._in_low, self._ssl_protocol._in_high)

    def get_read_buffer_size(self) -> int:
        return self._ssl_protocol._incoming.pending

    # -- WriteTransport

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        tls = self._ssl_protocol
        tls._out_high, tls._out_low = _flowcontrol_limits(
            high, low, constants.FLOW_CONTROL_HIGH_WATER_SSL_WRITE
        )
        tls._control_app_writing()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._ssl_protocol._out_low, self._ssl_protocol._out_high)

    def get_write_buffer_size(self) -> int:
        tls = self._ssl_protocol
        return tls._outgoing.pending + tls._backlog_size

    def write(self, data: _BufferLike) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, got {type(data).__name__}")
        if data:
            self._ssl_protocol._write(data)

    def writelines(self, list_of_data: Iterable[_BufferLike]) -> None:
        self._ssl_protocol._writelines(list_of_data)

    def write_eof(self) -> None:
        """TLS has no half-close in asyncio: always NotImplementedError."""
        raise NotImplementedError

    def can_write_eof(self) -> bool:
        return False

    def abort(self) -> None:
        """Close at once: buffered data is lost; ``connection_lost(None)`` follows."""
        self._closed = True
        self._ssl_protocol._abort(None)

    def _force_close(self, exc: BaseException | None) -> None:
        # asyncio 3.13's spelling of abort-with-an-exception.
        self._closed = True
        self._ssl_protocol._abort(exc)


class TLSProtocol(asyncio.BufferedProtocol):
    """TLS over a stream transport; the application talks to `_app_transport`.

    Constructed like asyncio's ``sslproto.SSLProtocol``. *waiter*, if given,
    gets None when the handshake has completed (after the application's
    ``connection_made``) or the exception that ended it. With
    ``call_connection_made=False`` (`start_tls`) the application protocol is
    taken as already connected: it never gets ``connection_made`` from us.
    """

    __slots__ = (
        "__weakref__",
        "_abort_exc",
        "_app_buffer_updated",
        "_app_buffered",
        "_app_get_buffer",
        "_app_protocol",
        "_app_reading_paused",
        "_app_state",
        "_app_transport",
        "_app_writing_paused",
        "_backlog",
        "_backlog_size",
        "_conn_lost",
        "_eof_received",
        "_extra",
        "_flush_deferred",
        "_handshake_start",
        "_handshake_timeout",
        "_handshake_timer",
        "_in_high",
        "_in_low",
        "_incoming",
        "_loop",
        "_out_high",
        "_out_low",
        "_outgoing",
        "_reading",
        "_recv_view",
        "_release_when_lost",
        "_server_hostname",
        "_server_side",
        "_shutdown_timeout",
        "_shutdown_timer",
        "_ssl_pending",
        "_ssl_read",
        "_ssl_read_bytes",
        "_ssl_reading_paused",
        "_ssl_write",
        "_ssl_writing_paused",
        "_sslobj",
        "_state",
        "_transport",
        "_waiter",
    )

    _app_protocol: Any  # duck-typed, as in asyncio
    _app_transport: SSLTransport | None
    _transport: Any  # the lower transport: any asyncio.Transport
    _backlog: collections.deque[_BufferLike]
    _app_get_buffer: Callable[[int], Any] | None
    _app_buffer_updated: Callable[[int], None] | None

    def __init__(  # noqa: PLR0917 (asyncio's SSLProtocol signature)
        self,
        loop: asyncio.AbstractEventLoop,
        app_protocol: asyncio.BaseProtocol,
        sslcontext: ssl.SSLContext | None,
        waiter: asyncio.Future[Any] | None,
        server_side: bool = False,
        server_hostname: str | None = None,
        call_connection_made: bool = True,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        if ssl_handshake_timeout is None:
            ssl_handshake_timeout = constants.SSL_HANDSHAKE_TIMEOUT
        elif ssl_handshake_timeout <= 0:
            raise ValueError(
                f"ssl_handshake_timeout should be a positive number, got {ssl_handshake_timeout}"
            )
        if ssl_shutdown_timeout is None:
            ssl_shutdown_timeout = constants.SSL_SHUTDOWN_TIMEOUT
        elif ssl_shutdown_timeout <= 0:
            raise ValueError(
                f"ssl_shutdown_timeout should be a positive number, got {ssl_shutdown_timeout}"
            )
        if not sslcontext:
            sslcontext = create_transport_context(server_side, server_hostname)

        self._loop = loop
        self._server_side = server_side
        self._server_hostname = server_hostname if server_hostname and not server_side else None
        self._extra: dict[str, Any] = {"sslcontext": sslcontext}
        self._waiter = waiter
        self._handshake_timeout: float = ssl_handshake_timeout
        self._shutdown_timeout: float = ssl_shutdown_timeout
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._shutdown_timer: asyncio.TimerHandle | None = None
        self._handshake_start = 0.0

        self._transport = None
        self._state = UNWRAPPED
        self._app_state = APP_INIT if call_connection_made else APP_CON_MADE
        self._conn_lost = 0
        self._abort_exc: BaseException | None = None
        self._eof_received = False
        self._reading = False
        self._flush_deferred = False
        self._release_when_lost = False

        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._recv_view = memoryview(bytearray(RECV_BUFFER_INITIAL))
        self._backlog = collections.deque()
        self._backlog_size = 0

        self._ssl_writing_paused = False  # the lower transport paused us
        self._app_writing_paused = False  # we paused the application
        self._out_high, self._out_low = _flowcontrol_limits(
            None, None, constants.FLOW_CONTROL_HIGH_WATER_SSL_WRITE
        )
        self._app_reading_paused = False  # the application paused us
        self._ssl_reading_paused = False  # we paused the lower transport
        self._in_high, self._in_low = _flowcontrol_limits(
            None, None, constants.FLOW_CONTROL_HIGH_WATER_SSL_READ
        )

        self._set_app_protocol(app_protocol)
        # May raise (e.g. check_hostname without server_hostname): before
        # the app transport exists, so nothing warns about it.
        self._sslobj: ssl.SSLObject | None = sslcontext.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=self._server_hostname,
        )
        # Hot path: SSLObject's read/write/pending are pure pass-throughs to
        # its C object (ssl.py, 3.11-3.13); call that directly when present,
        # saving a Python frame per call. Same signatures, same exceptions.
        raw: Any = getattr(self._sslobj, "_sslobj", None) or self._sslobj
        self._ssl_read: Callable[[int, memoryview], int] = raw.read
        self._ssl_read_bytes: Callable[[int], bytes] = raw.read  # the same, into new bytes
        self._ssl_write: Callable[[_BufferLike], int] = raw.write
        self._ssl_pending: Callable[[], int] = raw.pending
        self._app_transport = SSLTransport(loop, self)

    def __repr__(self) -> str:
        side = "server" if self._server_side else "client"
        return (
            f"<TLSProtocol {side} state={_STATE_NAMES[self._state]} transport={self._transport!r}>"
        )

    # ------------------------------------------------------------------
    # Small helpers

    def _set_app_protocol(self, app_protocol: Any) -> None:
        self._app_protocol = app_protocol
        if hasattr(app_protocol, "get_buffer") and isinstance(
            app_protocol, asyncio.BufferedProtocol
        ):
            self._app_buffered = True
            self._app_get_buffer = app_protocol.get_buffer
            self._app_buffer_updated = app_protocol.buffer_updated
        else:
            self._app_buffered = False
            self._app_get_buffer = self._app_buffer_updated = None

    def _wakeup_waiter(self, exc: BaseException | None = None) -> None:
        waiter = self._waiter
        if waiter is None:
            return
        self._waiter = None
        if not waiter.done():
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(None)

    @property
    def _sslcontext(self) -> ssl.SSLContext | None:
        # asyncio's SSLProtocol attribute: libraries (and aiohttp's tests)
        # read transport._ssl_protocol._sslcontext. None once the TLS state
        # is released (see tls-closed-twice in tests/divergences.py).
        context: ssl.SSLContext | None = self._extra.get("sslcontext")
        return context

    def _get_extra_info(self, name: str, default: Any = None) -> Any:
        extra = self._extra
        if name in extra:
            return extra[name]
        transport = self._transport
        if transport is not None:
            return transport.get_extra_info(name, default)
        return default

    def _abort_lower(self, exc: BaseException | None) -> None:
        """Abort the lower transport; its connection_lost then reports *exc*.

        asyncio passes the exception through the selector transport's private
        ``_force_close(exc)``; with the public ``abort()`` we remember it and
        substitute it in `connection_lost` - unless the lower transport had
        already scheduled its connection_lost (closing, nothing left to
        send), where ``_force_close`` would have done nothing either.
        """
        transport = self._transport
        if transport is None:
            return
        if exc is not None and (not transport.is_closing() or transport.get_write_buffer_size()):
            self._abort_exc = exc
        transport.abort()

    def _fatal_error(self, exc: BaseException, message: str = "Fatal error on transport") -> None:
        transport = self._transport
        if transport is not None:
            self._abort_lower(exc)
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=exc)
        elif not isinstance(exc, asyncio.CancelledError):
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": transport,
                    "protocol": self,
                }
            )

    # ------------------------------------------------------------------
    # The lower transport's protocol interface

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The lower connection exists: start the handshake."""
        if self._state != UNWRAPPED or self._transport is not None or self._sslobj is None:
            raise RuntimeError(
                f"cannot switch state from {_STATE_NAMES[self._state]} to DO_HANDSHAKE"
            )
        self._transport = transport
        loop = self._loop
        if loop.get_debug():
            logger.debug("%r starts SSL handshake", self)
            self._handshake_start = loop.time()
        self._state = HANDSHAKE
        self._handshake_timer = loop.call_later(self._handshake_timeout, self._on_handshake_timeout)
        self._do_handshake()

    def connection_lost(self, exc: BaseException | None) -> None:
        """The lower connection is gone: tell the application (once) and clean up."""
        if exc is None:
            exc = self._abort_exc
        self._abort_exc = None
        self._backlog.clear()
        self._backlog_size = 0
        if self._outgoing.pending:
            self._outgoing.read()
        self._conn_lost += 1
        app_transport = self._app_transport
        if app_transport is not None:
            app_transport._closed = True
        if self._state != HANDSHAKE and (self._app_state in (APP_CON_MADE, APP_EOF)):
            self._app_state = APP_CON_LOST
            self._loop.call_soon(self._app_protocol.connection_lost, exc)
        self._state = UNWRAPPED
        self._transport = None
        self._app_transport = None
        self._app_protocol = None
        self._app_get_buffer = self._app_buffer_updated = None
        self._wakeup_waiter(exc)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        if self._shutdown_timer is not None:
            self._shutdown_timer.cancel()
            self._shutdown_timer = None
        # Nothing reads into it any more; the application may keep us.
        self._recv_view = _NO_BUFFER
        if self._release_when_lost:
            self._drop_tls_state()

    def _release(self) -> None:
        """The application closed its transport again: drop the TLS state once lost."""
        self._release_when_lost = True
        if self._state == UNWRAPPED and self._transport is None:
            self._drop_tls_state()

    def _drop_tls_state(self) -> None:
        """Forget everything that holds the SSL object or its context.

        The transport then answers as a lost connection's does:
        ``get_extra_info()`` gives the default.
        """
        self._extra = {}
        self._sslobj = None
        self._ssl_read = self._ssl_write = self._ssl_pending = _released
        self._ssl_read_bytes = _released_bytes

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._recv_view
        if sizehint > len(view):
            view = self._recv_view = memoryview(bytearray(min(sizehint, RECV_BUFFER_MAX)))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        view = self._recv_view
        if nbytes == len(view):
            self._incoming.write(view)
            if nbytes < RECV_BUFFER_MAX:
                # Reads fill the buffer: read more per call from now on.
                self._recv_view = memoryview(bytearray(min(2 * nbytes, RECV_BUFFER_MAX)))
        else:
            self._incoming.write(view[:nbytes])
        if self._state == WRAPPED:
            self._do_read()  # the common case, without _process_incoming's dispatch
        else:
            self._process_incoming()

    def data_received(self, data: bytes) -> None:
        """For transports that do not use get_buffer(); also feeds bytes read elsewhere.

        ``tls.data_received(data)`` after ``connection_made`` hands the TLS
        layer ciphertext that the lower transport delivered before the switch.
        """
        self._incoming.write(data)
        self._process_incoming()

    def _process_incoming(self) -> None:
        state = self._state
        if state == WRAPPED:
            self._do_read()
        elif state == HANDSHAKE:
            self._do_handshake()
        elif state == FLUSHING:
            self._do_flush()
        elif state == SHUTDOWN:
            self._do_shutdown()

    def eof_received(self) -> bool | None:
        """The peer closed its sending side (TCP FIN), with or without close_notify."""
        self._eof_received = True
        try:
            if self._loop.get_debug():
                logger.debug("%r received EOF", self)
            state = self._state
            if state == HANDSHAKE:
                self._on_handshake_complete(ConnectionResetError())
            elif state == WRAPPED:
                self._state = FLUSHING
                if self._app_reading_paused:
                    # Keep what is buffered for when the application resumes.
                    return True
                self._do_flush()
            elif state == FLUSHING:
                self._do_write()
                self._state = SHUTDOWN
                self._do_shutdown()
            elif state == SHUTDOWN:
                self._do_shutdown()
        except Exception:
            transport = self._transport
            if transport is not None:
                transport.close()
            raise
        return None

    def pause_writing(self) -> None:
        """The lower transport's buffer is full: keep ciphertext in the outgoing BIO."""
        self._ssl_writing_paused = True

    def resume_writing(self) -> None:
        self._ssl_writing_paused = False
        self._process_outgoing()

    # ------------------------------------------------------------------
    # Handshake

    def _do_handshake(self) -> None:
        sslobj = self._sslobj
        if sslobj is None:
            return  # released: connection_made refuses to start
        try:
            sslobj.do_handshake()
        except _AGAIN:
            self._process_outgoing()
            return
        except ssl.SSLError as exc:
            self._on_handshake_complete(exc)
            return
        self._on_handshake_complete(None)

    def _on_handshake_timeout(self) -> None:
        self._handshake_timer = None
        if self._state == HANDSHAKE:
            self._fatal_error(
                ConnectionAbortedError(
                    f"SSL handshake is taking longer than {self._handshake_timeout} "
                    f"seconds: aborting the connection"
                )
            )

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        timer = self._handshake_timer
        if timer is not None:
            self._handshake_timer = None
            timer.cancel()
        sslobj = self._sslobj
        peercert: Any = None
        if handshake_exc is None and sslobj is not None:
            try:
                peercert = sslobj.getpeercert()
            except Exception as exc:
                handshake_exc = exc
        if handshake_exc is not None:
            self._state = UNWRAPPED
            if isinstance(handshake_exc, ssl.CertificateError):
                message = "SSL handshake failed on verifying the certificate"
            else:
                message = "SSL handshake failed"
            self._fatal_error(handshake_exc, message)
            self._wakeup_waiter(handshake_exc)
            return
        if sslobj is None:
            return  # released (the connection is over)
        self._state = WRAPPED
        loop = self._loop
        if loop.get_debug():
            elapsed = loop.time() - self._handshake_start
            logger.debug("%r: SSL handshake took %.1f ms", self, elapsed * 1e3)
        extra = self._extra
        extra["peercert"] = peercert
        extra["cipher"] = sslobj.cipher()
        extra["compression"] = sslobj.compression()
        extra["ssl_object"] = sslobj
        if self._app_state == APP_INIT:
            self._app_state = APP_CON_MADE
            self._app_protocol.connection_made(self._app_transport)
        self._wakeup_waiter()
        # Application data may have come with the last handshake flight; our
        # last flight (client Finished) and anything connection_made wrote
        # leave now.
        self._do_read()

    # ------------------------------------------------------------------
    # Shutdown

    def _start_shutdown(self) -> None:
        state = self._state
        if state in (FLUSHING, SHUTDOWN, UNWRAPPED):
            return
        if self._app_transport is not None:
            self._app_transport._closed = True
        if state == HANDSHAKE:
            self._abort(None)
            return
        self._state = FLUSHING
        self._shutdown_timer = self._loop.call_later(
            self._shutdown_timeout, self._on_shutdown_timeout
        )
        self._do_flush()

    def _on_shutdown_timeout(self) -> None:
        self._shutdown_timer = None
        if self._state in (FLUSHING, SHUTDOWN):
            self._abort_lower(TimeoutError("SSL shutdown timed out"))

    def _do_flush(self) -> None:
        """Deliver what is left (unless paused), then send close_notify."""
        if self._reading:
            # Called from inside a delivery: `_do_read` finishes it.
            self._flush_deferred = True
            return
        self._do_read()
        if self._state == FLUSHING:
            self._state = SHUTDOWN
            self._do_shutdown()

    def _do_shutdown(self) -> None:
        sslobj = self._sslobj
        try:
            if not self._eof_received and sslobj is not None:
                sslobj.unwrap()
        except _AGAIN:
            self._process_outgoing()
            return
        except ssl.SSLError as exc:
            self._on_shutdown_complete(exc)
            return
        self._process_outgoing()
        self._call_eof_received()
        self._on_shutdown_complete(None)

    def _on_shutdown_complete(self, shutdown_exc: BaseException | None) -> None:
        if shutdown_exc is not None:
            timer = self._shutdown_timer
            if timer is not None:
                self._shutdown_timer = None
                timer.cancel()
            self._fatal_error(shutdown_exc)
        elif self._transport is not None:
            # The lower transport's close() flushes its write buffer first,
            # which a peer that does not read can delay forever: the timeout
            # stays armed (or starts, when the peer began the shutdown) until
            # connection_lost (asyncio 3.14; earlier releases wait forever:
            # divergence tls-shutdown-timeout-until-closed).
            if self._shutdown_timer is None:
                self._shutdown_timer = self._loop.call_later(
                    self._shutdown_timeout, self._on_shutdown_timeout
                )
            self._loop.call_soon(self._transport.close)

    def _abort(self, exc: BaseException | None) -> None:
        state = self._state
        if (
            state not in (UNWRAPPED, HANDSHAKE)
            and self._outgoing.pending
            and not self._ssl_writing_paused
            and self._transport is not None
        ):
            # Ciphertext batched during a delivery: asyncio would already
            # have handed it to the lower transport (see the invariants).
            self._transport.write(self._outgoing.read())
        self._state = UNWRAPPED
        self._abort_lower(exc)

    # ------------------------------------------------------------------
    # Outgoing: application writes

    def _write(self, data: _BufferLike) -> None:
        """One non-empty buffer from SSLTransport.write()."""
        if self._state != WRAPPED or self._backlog:
            self._write_appdata((data,))
            return
        try:
            self._ssl_write(data)
        except _AGAIN:
            self._to_backlog(data, 0)
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")
            return
        if not self._reading:
            self._process_outgoing()
        elif (
            self._app_writing_paused
            or self._outgoing.pending + self._backlog_size >= self._out_high
        ):
            self._control_app_writing()  # flushed when the delivery returns

    def _writelines(self, list_of_data: Iterable[_BufferLike]) -> None:
        chunks: list[_BufferLike] = []
        for data in list_of_data:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"data: expecting a bytes-like instance, got {type(data).__name__}")
            if data:
                chunks.append(data)
        if not chunks:
            return
        if len(chunks) > 1 and self._state == WRAPPED:
            # One TLS record (or as few as the size needs) instead of one each.
            self._write_appdata((b"".join(chunks),))
        else:
            self._write_appdata(chunks)

    def _write_appdata(self, list_of_data: Iterable[_BufferLike]) -> None:
        state = self._state
        if state in (FLUSHING, SHUTDOWN, UNWRAPPED):
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("SSL connection is closed")
            self._conn_lost += 1
            return
        for data in list_of_data:
            self._to_backlog(data, 0)
        try:
            if self._state == WRAPPED:
                self._do_write()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    def _to_backlog(self, data: _BufferLike, offset: int) -> None:
        # Copy what the caller may change after write() returns.
        if type(data) is not bytes:
            view = memoryview(data)
            if view.itemsize != 1 or view.ndim != 1:
                view = view.cast("B")
            data = bytes(view[offset:])
        elif offset:
            data = data[offset:]
        self._backlog.append(data)
        self._backlog_size += len(data)

    def _do_write(self) -> None:
        """Encrypt the backlog (it only stalls on TLS 1.2 renegotiation), then flush."""
        backlog = self._backlog
        write = self._ssl_write
        try:
            while backlog:
                data = backlog[0]
                size = len(data)
                count = write(data)
                if count < size:
                    backlog[0] = memoryview(data)[count:]
                    self._backlog_size -= count
                else:
                    backlog.popleft()
                    self._backlog_size -= size
        except _AGAIN:
            pass
        if not self._reading:
            self._process_outgoing()
        else:
            self._control_app_writing()

    def _process_outgoing(self) -> None:
        """Hand all pending ciphertext to the lower transport in one write()."""
        if not self._ssl_writing_paused:
            outgoing = self._outgoing
            if outgoing.pending:
                transport = self._transport
                if transport is not None:
                    transport.write(outgoing.read())
        # _control_app_writing(), called only when it may act.
        if (
            self._app_writing_paused
            or self._outgoing.pending + self._backlog_size >= self._out_high
        ):
            self._control_app_writing()

    def _control_app_writing(self) -> None:
        # asyncio's comparisons (>= high pauses, <= low resumes), kept exactly.
        size = self._outgoing.pending + self._backlog_size
        if size >= self._out_high and not self._app_writing_paused:
            self._set_app_writing_paused(True)
            try:
                self._app_protocol.pause_writing()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                self._report_flow_error("protocol.pause_writing() failed", exc)
        elif size <= self._out_low and self._app_writing_paused:
            self._set_app_writing_paused(False)
            try:
                self._app_protocol.resume_writing()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                self._report_flow_error("protocol.resume_writing() failed", exc)

    def _set_app_writing_paused(self, paused: bool) -> None:
        self._app_writing_paused = paused
        if self._app_transport is not None:
            self._app_transport._protocol_paused = paused

    def _report_flow_error(self, message: str, exc: BaseException) -> None:
        self._loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": self._app_transport,
                "protocol": self,
            }
        )

    # ------------------------------------------------------------------
    # Incoming: decrypt and deliver

    def _do_read(self) -> None:
        if self._reading:
            return  # nested (the application called us back): the outer call goes on
        state = self._state
        if state not in (WRAPPED, FLUSHING):
            return
        self._reading = True
        try:
            if not self._app_reading_paused:
                if self._app_buffered:
                    self._read_buffered()
                else:
                    self._read_copied()
            self._reading = False
            # Ciphertext the application's writes produced meanwhile, and
            # replies to post-handshake messages (always, even when paused:
            # a client's Finished must not wait for the application).
            state = self._state
            if self._backlog and (state in (WRAPPED, FLUSHING)):
                self._do_write()
            elif state != UNWRAPPED:
                # _process_outgoing(), inlined: once per delivery.
                outgoing = self._outgoing
                if outgoing.pending and not self._ssl_writing_paused:
                    transport = self._transport
                    if transport is not None:
                        transport.write(outgoing.read())
                if self._app_writing_paused or (
                    outgoing.pending + self._backlog_size >= self._out_high
                ):
                    self._control_app_writing()
            # _control_ssl_reading(), called only when it may act.
            if self._state != UNWRAPPED and (
                self._ssl_reading_paused or self._incoming.pending >= self._in_high
            ):
                self._control_ssl_reading()
        except Exception as exc:
            self._reading = False
            self._fatal_error(exc, "Fatal error on SSL protocol")
        if self._flush_deferred:
            self._flush_deferred = False
            if self._state == FLUSHING:
                self._do_flush()

    def _read_copied(self) -> None:
        """Decrypt and deliver ``bytes`` to data_received(), at most SCRATCH_SIZE per call.

        The common case (a request, a message: at most one record waiting,
        no plaintext held by OpenSSL) takes one read() into new bytes sized
        by the ciphertext, an upper bound on its plaintext, delivered as it
        is. Otherwise, or if that read leaves more to decrypt, plaintext is
        gathered in this thread's scratch and copied out once per delivery.
        """
        read = self._ssl_read
        pending = self._ssl_pending
        incoming = self._incoming
        view = _scratch.view
        total = 0
        waiting = incoming.pending
        if waiting <= RECORD_MAX and not pending():
            if not waiting:
                return  # nothing can decrypt (an incomplete record stays in OpenSSL)
            try:
                data = self._ssl_read_bytes(waiting)
            except _AGAIN:
                return  # an incomplete record, or only post-handshake messages
            # An SSLError propagates: nothing was decrypted before it here.
            if not data:
                self._call_eof_received()
                self._start_shutdown()
                return
            if not incoming.pending and not pending():
                self._app_protocol.data_received(data)
                return
            total = len(data)  # more waiting: deliver this with it
            view[:total] = data
        size = len(view)
        while True:
            eof = False
            error: ssl.SSLError | None = None
            try:
                while True:
                    count = read(size - total, view[total:] if total else view)
                    if not count:
                        eof = True
                        break
                    total += count
                    if total == size or (not incoming.pending and not pending()):
                        break
            except _AGAIN:
                pass
            except ssl.SSLError as exc:
                error = exc  # deliver what came before it first
            if total:
                self._app_protocol.data_received(bytes(view[:total]))
            if error is not None:
                raise error
            if eof:
                self._call_eof_received()
                self._start_shutdown()
                return
            if total != size or self._app_reading_paused:
                return
            state = self._state
            if state not in (WRAPPED, FLUSHING):
                return
            if self._app_buffered:
                self._read_buffered()  # set_protocol() switched to a BufferedProtocol
                return
            total = 0

    def _read_buffered(self) -> None:
        """Decrypt straight into the application's buffer (BufferedProtocol)."""
        read = self._ssl_read
        pending = self._ssl_pending
        incoming = self._incoming
        while True:
            get_buffer = self._app_get_buffer
            buffer_updated = self._app_buffer_updated
            if get_buffer is None or buffer_updated is None:
                return  # the application switched protocol: the caller re-dispatches
            view = memoryview(get_buffer(incoming.pending))
            if view.itemsize != 1 or view.ndim != 1:
                view = view.cast("B")
            size = len(view)
            if not size:
                raise RuntimeError("get_buffer() returned an empty buffer")
            total = 0
            eof = False
            error: ssl.SSLError | None = None
            try:
                while True:
                    count = read(size - total, view[total:] if total else view)
                    if not count:
                        eof = True
                        break
                    total += count
                    if total == size or (not incoming.pending and not pending()):
                        break
            except _AGAIN:
                pass
            except ssl.SSLError as exc:
                error = exc
            view.release()
            if total:
                buffer_updated(total)
            if error is not None:
                raise error
            if eof:
                self._call_eof_received()
                self._start_shutdown()
                return
            if total != size or self._app_reading_paused:
                return
            state = self._state
            if state not in (WRAPPED, FLUSHING):
                return
            if not self._app_buffered:
                self._read_copied()  # set_protocol() switched to a Protocol
                return

    def _call_eof_received(self) -> None:
        try:
            if self._app_state == APP_CON_MADE:
                self._app_state = APP_EOF
                keep_open = self._app_protocol.eof_received()
                if keep_open:
                    logger.warning(
                        "returning true from eof_received() has no effect when using ssl"
                    )
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Error calling eof_received()")

    # ------------------------------------------------------------------
    # Read flow control

    def _resume_reading(self) -> None:
        if self._app_reading_paused:
            self._app_reading_paused = False
            self._loop.call_soon(self._on_resume_reading)

    def _on_resume_reading(self) -> None:
        state = self._state
        if state == WRAPPED:
            self._do_read()
        elif state == FLUSHING:
            self._do_flush()
        elif state == SHUTDOWN:
            self._do_shutdown()

    def _control_ssl_reading(self) -> None:
        transport = self._transport
        if transport is None:
            return
        size = self._incoming.pending
        if size >= self._in_high and not self._ssl_reading_paused:
            self._ssl_reading_paused = True
            transport.pause_reading()
        elif size <= self._in_low and self._ssl_reading_paused:
            self._ssl_reading_paused = False
            transport.resume_reading()


async def start_tls(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.BaseTransport,
    protocol: asyncio.BaseProtocol,
    sslcontext: ssl.SSLContext,
    *,
    server_side: bool = False,
    server_hostname: str | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> asyncio.Transport | None:
    """``loop.start_tls()`` with asyncio's semantics, on any loop's stream transport.

    Validates as asyncio does, then puts a `TLSProtocol` (which takes
    *protocol* as already connected) between *transport* and *protocol*,
    and returns the TLS transport once the handshake has completed (None if
    the connection was lost right after it, as asyncio). On failure or
    cancellation *transport* is closed and the exception raised.
    """
    if not isinstance(sslcontext, ssl.SSLContext):
        raise TypeError(
            f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}"
        )
    if not getattr(transport, "_start_tls_compatible", False):
        raise TypeError(f"transport {transport!r} is not supported by start_tls()")
    waiter: asyncio.Future[None] = loop.create_future()
    tls = TLSProtocol(
        loop,
        protocol,
        sslcontext,
        waiter,
        server_side,
        server_hostname,
        call_connection_made=False,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )
    lower: Any = transport
    # Pause first, so that nothing is read before connection_made has run.
    lower.pause_reading()
    if server_side and isinstance(protocol, asyncio.StreamReaderProtocol):
        # A streams server that read a STARTTLS line may already hold the
        # client's first TLS record in its StreamReader: it belongs to the
        # handshake (gh-142352; asyncio before 3.13.x/3.14 leaves it there and
        # the handshake waits forever: divergence start-tls-buffered-data).
        reader = getattr(protocol, "_stream_reader", None)
        buffered = None if reader is None else reader._buffer
        if buffered:
            tls._incoming.write(buffered)
            buffered.clear()
    lower.set_protocol(tls)
    connection_made = loop.call_soon(tls.connection_made, lower)
    resume = loop.call_soon(lower.resume_reading)
    try:
        await waiter
    except BaseException:
        lower.close()
        connection_made.cancel()
        resume.cancel()
        # The exception's traceback holds this frame: dropping the waiter
        # (which holds the exception) breaks the cycle that would keep the
        # transport alive until a garbage collection (gh-159049).
        del waiter, tls, lower, transport
        raise
    return tls._app_transport


class TlsMethods(CoreLoop):
    """``start_tls``: a TLS layer put between a stream transport and its protocol."""

    async def start_tls(
        self,
        transport: asyncio.BaseTransport,
        protocol: asyncio.BaseProtocol,
        sslcontext: ssl.SSLContext,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> asyncio.Transport | None:
        return await start_tls(
            self,
            transport,
            protocol,
            sslcontext,
            server_side=server_side,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
