"""An HPACK encoder for a client whose request headers barely change (RFC 7541).

Every gRPC call sends about a dozen headers; all but a few (the request id, the
deadline, the signature's time stamp) are the same on every call of a client. h2's
default encoder (the ``hpack`` package) searches its tables linearly for each header and
logs as it goes: about a sixth of a single-message send's CPU (cProfile of 64 concurrent
sends), 40 µs per call against 6 for this encoder (``benchmarks/grpc_hpack.py``).
``StableHeaderEncoder`` keeps the answer: a constant header goes into the dynamic
table once and is afterwards one indexed byte or two, looked up in a dict; a header
named in ``volatile`` is sent as a literal that is never added to the table, so the
table stops changing after a client's first calls and no entry is ever evicted. What
does not fit in the table goes as a plain literal. The decoder on the other side is any
HPACK decoder: the tests decode every block with the ``hpack`` package's.

It stands in for ``H2Connection.encoder`` (``encode`` and ``header_table_size`` are
what h2 uses). ``RepeatingBlockDecoder`` is the other direction: the Proxy's answers
repeat the same few header blocks (``:status 200``, the content type, ``grpc-status 0``)
once its own table holds them, so a block that left the table as it was is remembered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hpack import Decoder
from hpack.table import HeaderTable

__all__ = ["VOLATILE_HEADERS", "RepeatingBlockDecoder", "StableHeaderEncoder"]

#: Headers whose value changes on every call: never indexed.
VOLATILE_HEADERS = frozenset(
    {b"grpc-timeout", b"x-mq-request-id", b"x-mq-date-time", b"authorization"}
)
#: Headers kept out of any compression context (RFC 7541 section 7.1.3).
_SENSITIVE = frozenset({b"authorization", b"x-mq-session-token"})

_STATIC_FULL: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAME: dict[bytes, int] = {}
for _i, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_FULL.setdefault((_name, _value), _i)
    _STATIC_NAME.setdefault(_name, _i)
_STATIC_COUNT = len(HeaderTable.STATIC_TABLE)
#: RFC 7541 section 4.1: an entry's size is its name and value plus 32.
_ENTRY_OVERHEAD = 32


def encode_int(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 section 5.1: ``value`` in a ``prefix_bits`` prefix whose other bits are
    ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes, prefix_bits: int, first: int) -> bytes:
    """A literal field (no Huffman coding): the name by static index when it has one."""
    index = _STATIC_NAME.get(name, 0)
    head = encode_int(index, prefix_bits, first)
    if not index:
        head += encode_int(len(name), 7, 0) + name
    return head + encode_int(len(value), 7, 0) + value


class StableHeaderEncoder:
    """Encodes header blocks; constant headers cost a dict lookup after the first call.

    Parameters
    ----------
    volatile:
        names whose values change from call to call: sent as literals, never indexed.
    """

    def __init__(self, volatile: frozenset[bytes] = VOLATILE_HEADERS) -> None:
        self._volatile = volatile
        self._max_size = 4096  # the peer's SETTINGS_HEADER_TABLE_SIZE (RFC default)
        self._resize = False
        self._reset_table()

    def _reset_table(self) -> None:
        #: insertion number of each header this encoder added to the dynamic table
        self._inserted: dict[tuple[bytes, bytes], int] = {}
        self._used = 0
        #: encoded form of each header as of the current table (cleared on insertion)
        self._encoded: dict[tuple[bytes, bytes], bytes] = {}

    @property
    def header_table_size(self) -> int:
        return self._max_size

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        # The peer changed SETTINGS_HEADER_TABLE_SIZE. The next block starts by emptying
        # the table (size 0) and then announcing the new size; entries are added anew.
        if value != self._max_size:
            self._max_size = value
            self._resize = True

    def encode(self, headers: Iterable[tuple[bytes, bytes]], huffman: bool = True) -> bytes:
        """One header block. ``huffman`` is accepted for h2's sake and ignored: the
        literals are short, and plain ones cost no CPU to write."""
        parts: list[bytes] = []
        if self._resize:
            self._resize = False
            self._reset_table()
            parts.append(encode_int(0, 5, 0x20))
            parts.append(encode_int(self._max_size, 5, 0x20))
        encoded = self._encoded
        for header in headers:
            pair = (header[0], header[1])
            done = encoded.get(pair)
            if done is None:
                indexable = getattr(header, "indexable", True)
                done = self._encode_new(pair, indexable)
            parts.append(done)
        return b"".join(parts)

    def _encode_new(self, pair: tuple[bytes, bytes], indexable: bool) -> bytes:
        name, value = pair
        if name in _SENSITIVE or not indexable:
            return _literal(name, value, 4, 0x10)  # never indexed
        if name in self._volatile:
            return _literal(name, value, 4, 0x00)  # without indexing
        static = _STATIC_FULL.get(pair)
        if static is not None:
            out = encode_int(static, 7, 0x80)
        elif pair in self._inserted:
            newest_first = len(self._inserted) - 1 - self._inserted[pair]
            out = encode_int(_STATIC_COUNT + 1 + newest_first, 7, 0x80)
        else:
            size = len(name) + len(value) + _ENTRY_OVERHEAD
            if self._used + size > self._max_size:
                return _literal(name, value, 4, 0x00)  # the table is full: never evict
            out = _literal(name, value, 6, 0x40)  # with incremental indexing
            self._inserted[pair] = len(self._inserted)
            self._used += size
            # Every cached dynamic index just moved by one.
            self._encoded.clear()
            return out
        self._encoded[pair] = out
        return out


class RepeatingBlockDecoder(Decoder):
    """``hpack.Decoder`` that remembers the headers of blocks that did not change the
    dynamic table: while the table stays as it is, the same bytes mean the same headers.
    Any block that changes the table (an insertion, a size update) forgets them all."""

    #: Distinct blocks remembered at most (the Proxy sends a handful).
    LIMIT = 256

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[tuple[bytes, bool], list[Any]] = {}

    def _table_state(self) -> tuple[int, int, object]:
        table = self.header_table
        entries = table.dynamic_entries
        return (len(entries), table.maxsize, entries[0] if entries else None)

    def decode(self, data: bytes, raw: bool = False) -> Any:
        key = (bytes(data), raw)
        known = self._blocks.get(key)
        if known is not None:
            return list(known)
        before = self._table_state()
        headers = list(super().decode(data, raw=raw))
        after = self._table_state()
        if after[0] != before[0] or after[1] != before[1] or after[2] is not before[2]:
            self._blocks.clear()
        else:
            if len(self._blocks) >= self.LIMIT:
                self._blocks.clear()
            self._blocks[key] = headers
        return list(headers)
