"""The transports layer: stream transports, flow control, sendfile.

Layer: transports, above fd I/O (`tideloop._fdio`). Imports flow down only:
this package never imports the net layer or signals.

    base.py      FlowControlTransport: water marks, pause/resume_writing
    stream.py    SocketTransport: TCP and AF_UNIX stream transport
    sendfile.py  os.sendfile() driver, the fallback protocol
    loop.py      TransportLoop(SockLoop): builds transports, sock_sendfile, sendfile
"""

from .loop import TransportLoop
from .stream import SocketTransport

__all__ = ["SocketTransport", "TransportLoop"]
