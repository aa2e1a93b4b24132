"""This host's address as peers see it: client ids and message ids carry it."""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ["local_ip", "local_ipv4", "make_client_id"]


def local_ipv4() -> str | None:
    """The IPv4 address of the interface the route out goes through, or None without a
    route. No packet is sent: ``connect()`` on a UDP socket only picks a route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 1))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def local_ip() -> str:
    """The address other peers would see us as; loopback when there is no route out."""
    return local_ipv4() or "127.0.0.1"


def make_client_id(instance_name: str | None = None) -> str:
    """``ip@instance``: unique per client object, so several consumers can share a process.

    Both transports name their clients this way (remoting heartbeats, the gRPC
    ``x-mq-client-id`` header), so it lives below either.
    """
    name = instance_name or f"{os.getpid()}#{secrets.token_hex(4)}"
    return f"{local_ip()}@{name}"
