"""The transports layer: stream transports, flow control, sendfile, TLS.

Layer: transports, above fd I/O (`tideloop._fdio`). Imports flow down only:
this package never imports the net layer or signals. Transports are handed
the core loop and the fd registry; they never reach into the Loop.

    base.py      FdTransport: registration and lifecycle of fd transports;
                 WriteFlowControl: water marks, pause/resume_writing
    datagram.py  DatagramTransport: UDP and AF_UNIX datagrams
    stream.py    SocketTransport: TCP and AF_UNIX stream transport
    factory.py   TransportMethods: builds transports from connected sockets
    sendfile.py  SendfileMethods: sock_sendfile, sendfile; os.sendfile() driver
"""
