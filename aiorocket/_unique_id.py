"""Client message ids (``UNIQ_KEY``), as the Java client's ``MessageClientIDSetter`` makes them.

Apart from [`aiorocket.protocol`][] because the id carries this host's address, which
takes a question to the operating system (``aiorocket._host``): the protocol package
does no I/O.
"""

from __future__ import annotations

import itertools
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
#
# The common case (the millisecond of the last id) takes no lock: an auto-batched send
# makes an id a message, and without the lock the id takes 30% fewer instructions
# (benchmarks/README.md, "Goal 3, round 11"). It reads the millisecond's state as one
# tuple (one global load: the thread that switches it publishes all three at once) and
# draws its sequence number from one process-wide counter (``next`` of an
# ``itertools.count`` is one C call: under the GIL no two threads draw the same number).
# Every id of a head carries ``number - base``, its number in [base, base + 0xFFFF]:
# distinct numbers, distinct ids; a later head is a later millisecond (switched under
# the lock), so a different string.
_uid_lock = threading.Lock()  # switching the millisecond (the slow path)
_uid_prefix = ""
_uid_month = (0, -1)  # (start of this month, start of the next one), local time, in ms
#: the sequence numbers of every id; a head's ids take theirs from its base on
_uid_next = itertools.count().__next__
#: (the millisecond of the current head, the head: the id's first 28 characters, the
#: counter's number of its first id); formatted once per millisecond, not per id
_uid_state = (-1, "", 0)
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
    now = time.time_ns() // 1_000_000
    ms, head, base = _uid_state  # before the number: a number drawn after its base
    if now == ms:
        n = _uid_next() - base
        if n <= 0xFFFF:
            return head + _HEX2[n >> 8] + _HEX2[n & 0xFF]
    return _switch(now)


def _start_afresh_in_a_forked_child() -> None:
    """A forked child is another process: its ids take a prefix of their own (its pid,
    new random bytes). Kept, the parent's prefix and millisecond state gave the child the
    very ids the parent makes in the same millisecond (an application that dedups by
    message id drops one of the two). The lock too: a thread of the parent may have held
    it at the fork, and no thread of the child will ever let it go."""
    global _uid_lock, _uid_prefix, _uid_month, _uid_next, _uid_state
    _uid_lock = threading.Lock()
    _uid_prefix = ""
    _uid_month = (0, -1)
    _uid_next = itertools.count().__next__
    _uid_state = (-1, "", 0)


if hasattr(os, "register_at_fork"):  # (not on Windows, which does not fork)
    os.register_at_fork(after_in_child=_start_afresh_in_a_forked_child)


def _switch(now: int) -> str:
    """The id that starts a head: a new millisecond ``now``, a clock that stepped back
    (the last head's millisecond goes on), or a full sequence (the next millisecond)."""
    global _uid_prefix, _uid_month, _uid_state
    with _uid_lock:
        last, head, base = _uid_state
        number = _uid_next()
        if now <= last:  # another thread switched, the clock went back, or a full sequence
            n = number - base
            if n <= 0xFFFF:
                return head + _HEX2[n >> 8] + _HEX2[n & 0xFF]
            now = last + 1  # never backwards; a full sequence borrows the next ms
        if now >= _uid_month[1]:
            if not _uid_prefix:
                fixed = _local_ipv4() + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4)
                _uid_prefix = fixed.hex().upper()
            _uid_month = _month_bounds(now)
        head = f"{_uid_prefix}{(now - _uid_month[0]) & 0xFFFFFFFF:08X}"
        _uid_state = (now, head, number)
        return f"{head}0000"
