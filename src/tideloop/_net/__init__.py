"""The net layer: opening stream sockets, by connecting and by serving.

Layer: net, above transports (`tideloop._transports`). Imports flow down
only: never from the public loop module.

    connect.py  ConnectMethods: create_connection (RFC 8305), Unix, accepted sockets
    server.py   Server; Listeners (component); ServerMethods: create_server,
                create_unix_server, accepting
"""
