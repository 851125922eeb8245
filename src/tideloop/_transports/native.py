"""Which transport paths run: the native twins of the per-message paths, or the pure ones.

Layer: transports. Decided once, at import, after the core's choice
(`tideloop._core.native`): the native transport module
(``tideloop._transports._native``, ``_native.c``) is used only where the
native core runs, since its read paths are called by the core's run phase
(a *twin*: ``_native.set_twin``) and it relies on what the core relies on
(the GIL; CPython). When it runs:

- ``SocketTransport._read_ready`` and ``DatagramTransport._read_ready``
  stay the methods every read Handle calls; the core's run phase calls
  their twins instead, without a frame (a Handle run any other way, by
  debug mode or the timed run phase, calls the pure method);
- ``SocketTransport.write`` and ``DatagramTransport.sendto`` become native
  methods of the classes that do the common case themselves and call the
  pure methods (``_write_pure``/``_write_tail``, ``_sendto_pure``/``_queue``)
  for everything else;
- ``FdTransport.is_closing`` and ``WriteFlowControl.get_write_buffer_size``
  become native methods that read their slot (asyncio's streams ask
  ``is_closing()`` once per ``drain()``).

The ``install_*`` functions are called by base.py, stream.py and
datagram.py once their classes exist.

Invariant: whichever runs, a transport's observable behaviour is the same
(every test runs on both builds; ``tests/unit/test_differential.py``
compares them byte for byte).
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

from tideloop._core import native as _core_native

__all__ = ["NATIVE", "install_base", "install_datagram", "install_stream", "transports"]


def _load() -> ModuleType | None:
    if _core_native.core is None:
        return None
    try:
        from . import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    mod: ModuleType = _native
    return mod


transports = _load()
#: True when the transports' native paths run.
NATIVE = transports is not None


def install_base(base: type[Any], flow: type[Any]) -> None:
    """Give FdTransport and WriteFlowControl their native slot readers, if they run here."""
    if transports is None:
        return
    base.is_closing, flow.get_write_buffer_size = transports.configure_base(base, flow)


def install_stream(cls: type[Any], large_read_size: int) -> None:
    """Give *cls* (SocketTransport) its native write and read twin, if they run here."""
    if transports is None or _core_native.core is None:
        return
    write = transports.configure_stream(
        cls, socket.socket, cls._read_ready, cls._write_pure, large_read_size
    )
    cls.write = write
    _core_native.core.set_twin(cls._read_ready, transports.stream_read_ready)


def install_datagram(cls: type[Any], udp_read_size: int) -> None:
    """Give *cls* (DatagramTransport) its native sendto and read twin, if they run here."""
    if transports is None or _core_native.core is None:
        return
    sendto = transports.configure_datagram(cls, cls._read_ready, cls._sendto_pure, udp_read_size)
    cls.sendto = sendto
    _core_native.core.set_twin(cls._read_ready, transports.datagram_read_ready)
