"""The fd I/O layer: the fd registry, name resolution and the sock_* methods.

Layer: fd I/O, above the core. Imports flow down only (core, pollers).

    registry.py  FdRegistry (component): fd -> reader/writer handles, the poller's
                 interest set, fd -> transport; FdMethods: add_reader & co
    dns.py       Resolver (component); DnsMethods: getaddrinfo, getnameinfo
    sock.py      SockMethods: sock_recv, sock_sendall, sock_connect, ...
"""
