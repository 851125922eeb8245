"""The net layer: connecting and serving.

Layer: net, above transports (`tideloop._transports`). Imports flow down
only: never from signals or the public loop module.

    connect.py  ConnectMethods: create_connection (RFC 8305), Unix, accepted sockets
    server.py   Server; Listeners (component); ServerMethods: create_server,
                create_unix_server, accepting
"""
