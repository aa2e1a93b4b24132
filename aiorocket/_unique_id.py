"""Client message ids (``UNIQ_KEY``), as the Java client's ``MessageClientIDSetter`` makes them.

Apart from [`aiorocket.protocol`][] because the id carries this host's address, which
takes a question to the operating system (``aiorocket._host``): the protocol package
does no I/O.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from aiorocket._host import local_ipv4

__all__ = ["create_unique_id"]

# create_unique_id state: MessageClientIDSetter layout, IP(4) pid(2) random(4) fixed once,
# then ms-since-start-of-month(4) and a 16-bit sequence. Java uses one global counter;
# here the sequence restarts each millisecond and the time part never goes backwards (a
# full sequence borrows the next millisecond), so ids cannot repeat within the process
# even if the wall clock steps back.
_uid_lock = threading.Lock()
_uid_prefix = ""
_uid_last_ms = -1
_uid_seq = 0
_uid_month = (0, -1)  # (start of this month, start of the next one), local time, in ms
#: the id's first 28 characters for ``_uid_last_ms`` (prefix and time part): formatted
#: once per millisecond, not per id (an auto-batched send makes one id per message)
_uid_head = ""
#: a byte as two uppercase hex digits: two look-ups cost half a format spec's parsing
_HEX2 = [f"{i:02X}" for i in range(256)]


def _month_bounds(ms: int) -> tuple[int, int]:
    lt = time.localtime(ms / 1000)
    year, month = lt.tm_year, lt.tm_mon
    nyear, nmonth = (year + 1, 1) if month == 12 else (year, month + 1)
    start = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(time.mktime((nyear, nmonth, 1, 0, 0, 0, 0, 0, -1)) * 1000)


def _local_ipv4() -> bytes:
    """This host's IPv4 address; without a route out, Java's createFakeIP (the low 4
    bytes of the time in ms)."""
    ip = local_ipv4()
    if ip is None:
        return (time.time_ns() // 1_000_000 & 0xFFFFFFFF).to_bytes(4, "big")
    return socket.inet_aton(ip)


def create_unique_id() -> str:
    """A new ``UNIQ_KEY`` (client message id): 32 uppercase hex chars, unique per process."""
    global _uid_prefix, _uid_last_ms, _uid_seq, _uid_month, _uid_head
    now = time.time_ns() // 1_000_000
    with _uid_lock:
        if now <= _uid_last_ms:
            seq = _uid_seq + 1
            if seq <= 0xFFFF:
                _uid_seq = seq
                return _uid_head + _HEX2[seq >> 8] + _HEX2[seq & 0xFF]
            ms = _uid_last_ms + 1  # a full sequence borrows the next millisecond
        else:
            ms = now
        _uid_last_ms, _uid_seq = ms, 0
        if ms >= _uid_month[1]:
            if not _uid_prefix:
                fixed = _local_ipv4() + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4)
                _uid_prefix = fixed.hex().upper()
            _uid_month = _month_bounds(ms)
        diff = (ms - _uid_month[0]) & 0xFFFFFFFF
        _uid_head = f"{_uid_prefix}{diff:08X}"
        return f"{_uid_head}0000"
