"""What several of the Python tests share."""
import socket


def free_port():
    """A loopback port nothing listens on now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
