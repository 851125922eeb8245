"""The fd I/O layer: the fds the loop watches, and the sockets under them.

Layer: fd I/O, above the core. Imports flow down only (core, pollers).

    registry.py  FdRegistry (component): fd -> reader/writer handles, the poller's
                 interest set, fd -> transport; FdMethods: add_reader & co
    sockets.py   Network (component protocol): where the loop's sockets come from,
                 the kernel's or a simulation's
    resolver.py  Resolver (component); DnsMethods: getaddrinfo, getnameinfo
                 (here because sock_connect resolves names)
    sock.py      SockMethods: sock_recv, sock_sendall, sock_connect, ...; socket helpers
"""
