"""Helpers the deployment tests share (tests/deploy): everything they start listens on
loopback."""

import socket


def free_port():
    """A TCP port free on 127.0.0.1 now (the caller binds it next)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
