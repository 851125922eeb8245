"""The fd I/O layer: the fd registry and the sock_* methods.

Layer: fd I/O, above the core. Imports flow down only (core, pollers).

    registry.py  FdLoop: fd -> reader/writer callbacks, add_reader & co
    sock.py      SockLoop(FdLoop): sock_recv, sock_sendall, sock_connect, ...
"""
