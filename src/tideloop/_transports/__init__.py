"""The transports layer: one module per transport kind, with the methods that open it.

Layer: transports, above fd I/O (`tideloop._fdio`) and the watchers
(`tideloop._signals`, `tideloop._children`). Imports flow down only: this
package never imports the net layer. Transports are handed the core loop
(as `LoopServices`) and the fd registry; they never reach into the Loop.

The rule (``docs/architecture.md``, "One home per I/O kind"): a kind's
module holds its transport classes and the method group of the loop
methods that open it. Stream sockets are opened by the net layer above
(name resolution with happy eyeballs, TLS, listening); their transport and
the methods that build it live here, where TLS and sendfile use them.

    base.py        FdTransport: registration and lifecycle of fd transports;
                   WriteFlowControl: water marks, pause/resume_writing
    stream.py      SocketTransport: TCP and AF_UNIX streams; StreamMethods:
                   _make_socket_transport, _make_ssl_transport
    tls.py         TLSProtocol and SSLTransport over ssl.MemoryBIO; TlsMethods: start_tls
    datagram.py    DatagramTransport: UDP and AF_UNIX datagrams; DatagramMethods:
                   create_datagram_endpoint
    pipes.py       pipe and pty transports; PipeMethods: connect_read_pipe, connect_write_pipe
    subprocess.py  the subprocess transport; SubprocessMethods: subprocess_exec, _shell
    sendfile.py    os.sendfile() driver; SendfileMethods: sock_sendfile, sendfile
"""
