"""The broker's offset message id and the ``ip:port`` host strings it is made of.

A message's id is either the client's ``UNIQ_KEY`` (``aiorocket._unique_id``) or this
one, which the broker derives from where it stored the message. It is in the neutral core
because ``aiorocket.message.MessageExt`` computes it, below the wire codecs that also
read and write it (``aiorocket.protocol.message_codec``).
"""

from __future__ import annotations

import socket
import struct
from functools import lru_cache

__all__ = [
    "commit_log_offset_of",
    "decode_offset_message_id",
    "host_str",
    "offset_message_id",
    "pack_host",
]

_inet_ntoa = socket.inet_ntoa
_inet_ntop = socket.inet_ntop
_AF_INET6 = socket.AF_INET6


def host_str(ip: bytes, port: int) -> str:
    """IP bytes (4 or 16) and a port as ``"ip:port"`` / ``"[ipv6]:port"``."""
    if len(ip) == 4:
        return f"{_inet_ntoa(ip)}:{port}"
    return f"[{_inet_ntop(_AF_INET6, ip)}]:{port}"


@lru_cache(maxsize=1024)
def pack_host(host: str) -> bytes:
    """``"ip:port"`` / ``"[ipv6]:port"`` to IP bytes (4 or 16) + int32 port, as stored."""
    addr, sep, port_text = host.rpartition(":")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
    try:
        if not sep or not (port_text.isascii() and port_text.isdigit()):
            raise ValueError
        port = int(port_text)
        if port > 0xFFFF:
            raise ValueError
        family = _AF_INET6 if ":" in addr else socket.AF_INET
        return socket.inet_pton(family, addr) + port.to_bytes(4, "big")
    except (OSError, ValueError):
        raise ValueError(f"not a numeric 'ip:port' or '[ipv6]:port' address: {host!r}") from None


@lru_cache(maxsize=256)
def _host_hex(host: str) -> str:
    return pack_host(host).hex().upper()


def offset_message_id(store_host: str, commit_log_offset: int) -> str:
    """The broker's offset message id: hex of store IP + int32 port + int64 commit-log offset.

    32 hex chars for an IPv4 store host, 56 for IPv6. Raises ValueError for a host that
    is not a numeric ``ip:port``.
    """
    return f"{_host_hex(store_host)}{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def _raw(msg_id: str) -> bytes:
    if len(msg_id) not in (32, 56) or not msg_id.isascii():
        raise ValueError(f"not an offset message id: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"not an offset message id: {msg_id!r}") from None
    if len(raw) * 2 != len(msg_id):
        raise ValueError(f"not an offset message id: {msg_id!r}")
    return raw


def decode_offset_message_id(msg_id: str) -> tuple[str, int]:
    """Inverse of ``offset_message_id``: ``("ip:port", commit_log_offset)``."""
    raw = _raw(msg_id)
    ip_len = len(raw) - 12
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    return host_str(raw[:ip_len], port), offset


def commit_log_offset_of(msg_id: str) -> int:
    """``decode_offset_message_id(msg_id)[1]`` (same checks) without formatting the host:
    a half message's handle needs only the offset, once per message."""
    raw = _raw(msg_id)
    offset: int = _OFFSET.unpack_from(raw, len(raw) - 8)[0]
    return offset


_OFFSET = struct.Struct(">q")
