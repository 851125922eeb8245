"""The net layer: name resolution, connecting, servers.

Layer: net, above transports (`tideloop._transports`). Imports flow down
only: never from signals or the public loop module.

    dns.py      DnsLoop(TransportLoop): getaddrinfo/getnameinfo, literal-address fast path
    connect.py  ConnectLoop(DnsLoop): create_connection (RFC 8305), Unix, accepted sockets
    server.py   Server; NetLoop(ConnectLoop): create_server, create_unix_server, accepting
"""

from .server import NetLoop, Server

__all__ = ["NetLoop", "Server"]
