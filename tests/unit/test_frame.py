"""Frame codec: round trips (both header forms, both JSON paths) and every broken case."""

from __future__ import annotations

import contextlib
import copy
import json
import pickle
import struct
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocket.errors import FrameTooLargeError, ProtocolError
from aiorocket.protocol import frame
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import (
    MAX_FRAME_LENGTH,
    MAX_SKIPPED_FRAME_LENGTH,
    FrameDecoder,
    decode_frame,
    encode_command,
    encode_command_binary,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | text,
    ext_fields=st.dictionaries(text, text, max_size=6),
    body=st.binary(max_size=300),
)


@pytest.fixture(params=[True, False], ids=["orjson", "stdlib-json"])
def json_impl(request: pytest.FixtureRequest) -> Iterator[None]:
    frame.use_orjson(request.param)
    yield
    frame.use_orjson(True)


def _same(a: RemotingCommand, b: RemotingCommand) -> None:
    assert (a.code, a.opaque, a.flag, a.ext_fields, a.body) == (
        b.code,
        b.opaque,
        b.flag,
        b.ext_fields,
        b.body,
    )
    assert (a.remark or None) == (b.remark or None)


@given(cmd=commands)
def test_json_round_trip(cmd: RemotingCommand) -> None:
    for use in (True, False):
        frame.use_orjson(use)
        data = encode_command(cmd)
        (length,) = struct.unpack(">i", data[:4])
        assert length == len(data) - 4
        _same(decode_frame(data[4:]), cmd)
    frame.use_orjson(True)


@given(cmd=commands)
def test_binary_header_round_trip(cmd: RemotingCommand) -> None:
    data = encode_command_binary(cmd)
    _same(decode_frame(data[4:]), cmd)


@given(cmds=st.lists(commands, min_size=1, max_size=5), cut=st.lists(st.integers(1, 50)))
def test_incremental_decoder_any_split(cmds: list[RemotingCommand], cut: list[int]) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    pos = 0
    for n in cut:
        out += decoder.feed(stream[pos : pos + n])
        pos += n
    out += decoder.feed(stream[pos:])
    assert len(out) == len(cmds)
    for a, b in zip(out, cmds, strict=True):
        _same(a, b)
    assert decoder.buffered == 0


@given(garbage=st.binary(max_size=200))
def test_garbage_raises_protocol_error_or_waits(garbage: bytes) -> None:
    decoder = FrameDecoder()
    with contextlib.suppress(ProtocolError):  # the only acceptable failure
        decoder.feed(garbage)


def test_oversized_length_rejected_before_buffering(json_impl: None) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">i", MAX_SKIPPED_FRAME_LENGTH + 1) + b"x")


def _oversized_prefix(cmd: RemotingCommand, body_len: int) -> bytes:
    """Length prefix and header of a frame whose body (not included) is ``body_len`` long."""
    header = frame.encode_header(cmd)
    return struct.pack(">ii", 4 + len(header) + body_len, len(header)) + header


def test_an_answer_over_the_limit_is_skipped_and_the_stream_goes_on(json_impl: None) -> None:
    decoder = FrameDecoder()
    answer = RemotingCommand(code=0, opaque=7, flag=1, ext_fields={"nextBeginOffset": "3"})
    body_len = MAX_FRAME_LENGTH
    after = encode_command(RemotingCommand(code=0, opaque=8, flag=1, body=b"next"))
    prefix = _oversized_prefix(answer, body_len)
    out = decoder.feed(prefix[:5])  # the header may arrive in pieces
    out += decoder.feed(prefix[5:] + bytes(100))
    [head] = out
    assert (head.opaque, head.ext_fields, head.body) == (7, {"nextBeginOffset": "3"}, b"")
    assert head.skipped_body == body_len
    chunk = bytes(1024 * 1024)
    left = body_len - 100
    while left > len(chunk):
        assert decoder.feed(chunk) == []
        assert decoder.buffered == 0  # thrown away as it arrives, never buffered
        left -= len(chunk)
    [nxt] = decoder.feed(chunk[:left] + after)
    assert (nxt.opaque, nxt.body, nxt.skipped_body) == (8, b"next", 0)


def test_a_request_over_the_limit_still_closes_the_stream() -> None:
    request = RemotingCommand(code=11, opaque=7)  # not a response: nothing waits for it
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(_oversized_prefix(request, MAX_FRAME_LENGTH))
    huge_header = struct.pack(">ii", MAX_FRAME_LENGTH + 10, 1 << 20)
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(huge_header)


def test_negative_and_tiny_lengths_rejected() -> None:
    for length in (-1, 0, 3):
        with pytest.raises(FrameTooLargeError):
            FrameDecoder().feed(struct.pack(">i", length))


def test_encode_refuses_frame_over_limit() -> None:
    with pytest.raises(FrameTooLargeError):
        encode_command(RemotingCommand(code=1, body=b"x" * MAX_FRAME_LENGTH))


def test_truncated_frame_waits_for_more() -> None:
    data = encode_command(RemotingCommand(code=11, ext_fields={"a": "b"}, body=b"body"))
    decoder = FrameDecoder()
    assert decoder.feed(data[:-1]) == []
    assert len(decoder.feed(data[-1:])) == 1


def test_header_length_beyond_frame() -> None:
    payload = struct.pack(">i", 100) + b"{}"
    with pytest.raises(ProtocolError, match="header length"):
        decode_frame(payload)


def test_header_not_json(json_impl: None) -> None:
    header = b"{not json"
    payload = struct.pack(">i", len(header)) + header
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode_frame(payload)


def test_header_json_but_not_object(json_impl: None) -> None:
    header = b"[1,2]"
    with pytest.raises(ProtocolError, match="not a JSON object"):
        decode_frame(struct.pack(">i", len(header)) + header)


def test_header_without_code(json_impl: None) -> None:
    header = b'{"opaque":1}'
    with pytest.raises(ProtocolError, match="no code"):
        decode_frame(struct.pack(">i", len(header)) + header)


def test_header_code_wrong_type(json_impl: None) -> None:
    header = b'{"code":"x"}'
    with pytest.raises(ProtocolError, match="code"):
        decode_frame(struct.pack(">i", len(header)) + header)


def test_unknown_serialize_type() -> None:
    with pytest.raises(ProtocolError, match="serialize type"):
        decode_frame(struct.pack(">i", (7 << 24) | 2) + b"{}")


def test_binary_header_truncated() -> None:
    good = encode_command_binary(RemotingCommand(code=1, remark="hi", ext_fields={"k": "v"}))
    header_len = struct.unpack(">i", good[4:8])[0] & 0xFFFFFF
    header = good[8 : 8 + header_len]
    for cut in range(len(header)):
        payload = struct.pack(">i", (1 << 24) | cut) + header[:cut]
        with pytest.raises(ProtocolError):
            decode_frame(payload)


def test_json_ext_values_coerced_to_strings(json_impl: None) -> None:
    header = b'{"code":0,"flag":1,"opaque":3,"extFields":{"n":5,"b":true}}'
    cmd = decode_frame(struct.pack(">i", len(header)) + header)
    assert cmd.ext_fields == {"n": "5", "b": "true"}
    assert cmd.is_response and cmd.opaque == 3


def test_json_ext_fields_of_strings_are_taken_as_parsed(json_impl: None) -> None:
    # A broker's extFields are all strings: taken as the parser made them, checked in C
    # (benchmarks/README.md, "Round 17"); one value of another type among them has every
    # value made a string, as before. Either way every key and value is a str.
    for fields, want in (
        (b'{"a":"1","nextBeginOffset":"42","e":""}', {"a": "1", "nextBeginOffset": "42", "e": ""}),
        (b'{"a":"1","n":5,"z":null}', {"a": "1", "n": "5", "z": ""}),
        (b"{}", {}),
    ):
        header = b'{"code":1,"opaque":2,"extFields":' + fields + b"}"
        cmd = decode_frame(struct.pack(">i", len(header)) + header)
        assert cmd.ext_fields == want
        assert all(type(k) is str and type(v) is str for k, v in cmd.ext_fields.items())


def test_ext_int_errors() -> None:
    cmd = RemotingCommand(code=0, ext_fields={"x": "abc"})
    with pytest.raises(ProtocolError):
        cmd.ext_int("x")
    with pytest.raises(ProtocolError):
        cmd.ext_int("missing")
    assert cmd.ext_int("missing", 7) == 7


# ------------------------------- bodies left where they were received (Round 12)


def test_a_frame_within_one_read_leaves_its_body_in_that_read() -> None:
    """The decoder copies no body out of the read it came in: ``body_in_place`` names
    the read's own bytes until ``body`` is read, which copies the body out once and
    lets the read go; an empty body keeps nothing. Fails on the code before Round 12
    (each body was copied out of the read)."""
    first = RemotingCommand(code=0, opaque=1, flag=1, ext_fields={"k": "v"}, body=b"a" * 5000)
    empty = RemotingCommand(code=1, opaque=2, flag=1)
    chunk = encode_command(first) + encode_command(empty)
    baseline = sys.getrefcount(chunk)
    got, got_empty = FrameDecoder().feed(chunk)
    data, start, end = got.body_in_place()
    assert data is chunk and data[start:end] == first.body
    del data
    assert got_empty.body_in_place() == (b"", 0, 0)
    assert sys.getrefcount(chunk) == baseline + 1  # the command whose body is unread
    assert got.body == first.body and type(got.body) is bytes
    assert sys.getrefcount(chunk) == baseline  # read: the read is let go
    assert got.body_in_place() == (got.body, 0, 5000)
    assert got == first and got_empty == empty
    assert copy.copy(got) == first and pickle.loads(pickle.dumps(got)) == first


def test_a_body_assigned_before_it_is_read_is_the_body() -> None:
    [got] = FrameDecoder().feed(encode_command(RemotingCommand(code=0, body=b"received")))
    got.body = b"mine"
    assert got.body == b"mine" and got.body_in_place() == (b"mine", 0, 4)
    [got] = FrameDecoder().feed(encode_command(RemotingCommand(code=0, body=b"received")))
    del got.body
    with pytest.raises(AttributeError):
        got.body  # noqa: B018 - deleted, as a plain slot's


def test_a_frame_cut_across_reads_is_joined_once_and_the_next_one_read_in_place() -> None:
    """A frame cut across reads (its header or its body) is held as received and joined
    once, into bytes of exactly that frame (one cut in its length prefix: the few held
    bytes joined with the next read); the frame after it in the last read is read
    there. Every cut of two frames in two and three reads. Fails on the code before
    Round 12 (the held bytes were appended to a buffer, and each frame of a read after
    a cut copied out of it)."""
    a = RemotingCommand(code=0, opaque=1, flag=1, remark="r", body=bytes(range(256)) * 3)
    b = RemotingCommand(code=0, opaque=2, flag=1, ext_fields={"n": "1"}, body=b"next")
    stream = encode_command(a) + encode_command(b)
    first = len(encode_command(a))
    for cut in range(1, len(stream)):
        for cut2 in (cut, min(cut + 1, len(stream)), min(cut + 300, len(stream))):
            decoder = FrameDecoder()
            reads = [stream[:cut], stream[cut:cut2], stream[cut2:]]
            out: list[RemotingCommand] = []
            fed = 0
            for read in reads:
                out += decoder.feed(read)
                fed += len(read)
                assert decoder.buffered == fed - [0, first, len(stream)][len(out)]
            assert len(out) == 2
            for cmd, frame_start, frame_end in ((out[0], 0, first), (out[1], first, len(stream))):
                data, start, end = cmd.body_in_place()
                assert data[start:end] == (b.body if frame_start else a.body)
                cuts = [c for c in (cut, cut2) if frame_start < c < frame_end]
                if not cuts:  # read where it came (or in what the cut prefix before joined)
                    assert any(data is r for r in reads) or any(0 < c < 4 for c in (cut, cut2))
                elif all(c >= frame_start + 4 for c in cuts):
                    assert len(data) == frame_end - frame_start  # the frame joined
                else:
                    assert not any(data is r for r in reads)
            assert out == [a, b]


@pytest.mark.parametrize(
    "header",
    [
        b'{"code":0,"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON",'
        b'"version":475,"extFields":{"nextBeginOffset":"12","minOffset":"0"}}',
        b'{"code":1,"opaque":7}',  # no extFields, language, version, flag
        b'{"code":1,"opaque":7,"extFields":{}}',
        b'{"code":1,"opaque":7,"extFields":null,"remark":null}',
        b'{"code":1,"opaque":7,"remark":"why","extFields":{"a":"b"}}',
        b'{"code":1,"opaque":true,"flag":1}',  # bools are ints to the checked path
        b'{"code":1,"opaque":7,"flag":false}',
        b'{"code":1,"opaque":7,"version":"475"}',  # not an int: 0
        b'{"code":1,"opaque":7,"version":true}',
        b'{"code":1,"opaque":7,"language":5}',  # made a string
        b'{"code":1,"opaque":7,"remark":12}',
        b'{"code":1,"opaque":7,"extFields":{"n":5,"b":false,"z":null,"s":"x"}}',
        b'{"code":1,"opaque":7,"extFields":""}',
        b'{"code":true}',
        b'{"code":1,"opaque":"7"}',
        b'{"code":1,"extFields":[1]}',
        b'{"code":1,"extFields":{"n":[1]}}',
        b'{"opaque":7}',
        b"[1]",
    ],
)
def test_a_header_decodes_as_the_checked_path_decodes_it(json_impl: None, header: bytes) -> None:
    """A guard ("Round 18": a broker's header is read by one test of its types): every
    header gives the command, or the error, that the field-by-field checks give."""
    import json

    def outcome(decode: object) -> object:
        try:
            cmd = decode()  # type: ignore[operator]
        except ProtocolError as exc:
            return ("error", str(exc))
        return (
            cmd.code, type(cmd.opaque), cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields,
            type(cmd.language), cmd.language, cmd.version, cmd.body, cmd.skipped_body,
        )  # fmt: skip

    fast = outcome(lambda: frame._decode_json_header(header))
    assert fast == outcome(lambda: frame._decode_json_object(json.loads(header)))


@pytest.mark.parametrize(
    "header",
    [
        {"code": 0, "opaque": 7, "flag": 1, "language": "JAVA", "version": 475,
         "extFields": {"msgId": "X", "queueId": "3"}},
        {"code": 0},  # every field but the code left out
        {"code": 0, "remark": "r", "extFields": None},
        {"code": 0, "opaque": True, "flag": 1},  # a bool opaque: not an int by type
        {"code": 0, "remark": 5, "extFields": {"n": 1, "b": True, "z": None}},
        {"code": 0, "language": 3, "version": "x"},
    ],
)  # fmt: skip
def test_a_usual_header_s_fast_decoding_matches_the_field_by_field_one(
    header: dict[str, object],
) -> None:
    """``_decode_json_header`` takes a broker's usual header by exact types in one test
    and leaves anything else to ``_decode_json_object``: the same command either way."""
    from aiorocket.protocol.frame import _decode_json_header, _decode_json_object

    raw = json.dumps(header).encode()
    decoded = _decode_json_header(raw)
    assert decoded == _decode_json_object(json.loads(raw))
    assert type(decoded.opaque) is type(header.get("opaque", 0))
