"""This host's address as peers see it: client ids and message ids carry it."""

from __future__ import annotations

import socket

__all__ = ["local_ipv4"]


def local_ipv4() -> str | None:
    """The IPv4 address of the interface the route out goes through, or None without a
    route. No packet is sent: ``connect()`` on a UDP socket only picks a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            return str(sock.getsockname()[0])
    except OSError:
        return None
