"""The gRPC connection's HPACK encoder and decoder against the ``hpack`` package's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

hpack = pytest.importorskip("hpack")  # comes with the grpc extra (grpclib -> h2)

from aiorocket.grpc._hpack import (  # noqa: E402
    RepeatingBlockDecoder,
    StableHeaderEncoder,
    encode_int,
)

CONSTANT = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/apache.rocketmq.v2.MessagingService/SendMessage"),
    (b":authority", b"127.0.0.1:8081"),
    (b"te", b"trailers"),
    (b"content-type", b"application/grpc"),
    (b"x-mq-client-id", b"10.0.0.1@4242#1234567890"),
    (b"x-mq-language", b"PYTHON"),
]

names = st.sampled_from(
    [b"x-mq-request-id", b"grpc-timeout", b"x-a", b"x-b", b"user-agent", b"authorization"]
)
values = st.binary(min_size=0, max_size=60).map(lambda b: b.hex().encode())
blocks = st.lists(
    st.lists(st.one_of(st.sampled_from(CONSTANT), st.tuples(names, values)), max_size=20),
    min_size=1,
    max_size=30,
)


def _plain(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in headers]


@settings(max_examples=200, deadline=None)
@given(blocks, st.lists(st.sampled_from([0, 64, 256, 4096, 8192]), max_size=3))
def test_every_block_decodes_to_its_headers(
    sequence: list[list[tuple[bytes, bytes]]], sizes: list[int]
) -> None:
    encoder, decoder = StableHeaderEncoder(), hpack.Decoder()
    decoder.max_allowed_table_size = 8192
    for i, headers in enumerate(sequence):
        if sizes and i % 7 == 3:
            encoder.header_table_size = sizes.pop()  # the peer's SETTINGS changed
        block = encoder.encode(headers)
        assert _plain(decoder.decode(block, raw=True)) == headers
        assert decoder.header_table._current_size <= encoder.header_table_size


def test_constant_headers_are_one_byte_each_after_the_first_block() -> None:
    encoder, decoder = StableHeaderEncoder(), hpack.Decoder()
    first = encoder.encode(CONSTANT)
    decoder.decode(first, raw=True)
    request_id = (b"x-mq-request-id", b"0f8fad5b-d9cb-469f-a165-70867728950e")
    for _ in range(3):
        block = encoder.encode([*CONSTANT, request_id])
        assert _plain(decoder.decode(block, raw=True)) == [*CONSTANT, request_id]
        # eight indexed bytes, then the request id as a literal that is never indexed
        assert len(block) == len(CONSTANT) + 1 + 1 + len(b"x-mq-request-id") + 1 + 36
    assert (b"x-mq-request-id", request_id[1]) not in list(decoder.header_table.dynamic_entries)


def test_secrets_are_never_indexed() -> None:
    encoder, decoder = StableHeaderEncoder(), hpack.Decoder()
    auth = (b"authorization", b"MQv2-HMAC-SHA1 Credential=ak, Signature=00")
    (decoded,) = decoder.decode(encoder.encode([auth]), raw=True)
    assert isinstance(decoded, hpack.NeverIndexedHeaderTuple)
    assert len(decoder.header_table.dynamic_entries) == 0


def test_a_full_table_sends_literals_and_evicts_nothing() -> None:
    encoder, decoder = StableHeaderEncoder(), hpack.Decoder()
    encoder.header_table_size = decoder.header_table_size = 200
    many = [(b"x-%d" % i, b"v" * 40) for i in range(10)]
    for _ in range(2):
        assert _plain(decoder.decode(encoder.encode(many), raw=True)) == many
    # 200 bytes hold two entries of 44 + 32; the rest went as literals, nothing evicted
    assert list(decoder.header_table.dynamic_entries) == [many[1], many[0]]


def test_integer_encoding_follows_rfc_7541_c1() -> None:
    assert encode_int(10, 5, 0) == bytes([0b01010])
    assert encode_int(1337, 5, 0) == bytes([0b11111, 0b10011010, 0b00001010])
    assert encode_int(42, 8, 0) == bytes([42])


@settings(max_examples=100, deadline=None)
@given(blocks)
def test_the_repeating_block_decoder_agrees_with_hpack(
    sequence: list[list[tuple[bytes, bytes]]],
) -> None:
    # hpack's own encoder inserts everything and evicts: the table changes all the time.
    encoder = hpack.Encoder()
    encoder.header_table_size = 256
    ours, theirs = RepeatingBlockDecoder(), hpack.Decoder()
    for headers in sequence + sequence:
        block = encoder.encode(headers, huffman=False)
        assert _plain(ours.decode(block, raw=True)) == _plain(theirs.decode(block, raw=True))


def test_a_remembered_block_is_read_again_after_the_table_changed() -> None:
    decoder = RepeatingBlockDecoder()
    insert_a = b"\x40" + bytes([3]) + b"x-a" + bytes([1]) + b"1"  # x-a: 1, indexed
    newest = encode_int(62, 7, 0x80)  # the newest dynamic entry
    assert _plain(decoder.decode(insert_a, raw=True)) == [(b"x-a", b"1")]
    assert _plain(decoder.decode(newest, raw=True)) == [(b"x-a", b"1")]
    assert _plain(decoder.decode(newest, raw=True)) == [(b"x-a", b"1")]  # remembered
    insert_b = b"\x40" + bytes([3]) + b"x-b" + bytes([1]) + b"2"
    decoder.decode(insert_b, raw=True)
    assert _plain(decoder.decode(newest, raw=True)) == [(b"x-b", b"2")]
