"""Remoting frames: length prefix, serialize type + header length, header, body.

Layout (all big-endian):

```text
int32 total length L (4 + header length + body length; not counting itself)
int32 (serialize type << 24) | header length
header: JSON (type 0) or the ROCKETMQ binary form (type 1)
body
```

Encoding always uses JSON (the binary form cannot carry request codes above 32767);
decoding accepts both, because a broker answers in *its* configured serialize type.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from aiorocket.errors import FrameTooLargeError, ProtocolError
from aiorocket.protocol.command import RemotingCommand

__all__ = [
    "MAX_FRAME_LENGTH",
    "MAX_SKIPPED_FRAME_LENGTH",
    "SERIALIZE_JSON",
    "SERIALIZE_ROCKETMQ",
    "FrameDecoder",
    "check_frame_length",
    "decode_frame",
    "encode_binary_header",
    "encode_command",
    "encode_command_binary",
    "encode_header",
    "use_orjson",
]

MAX_FRAME_LENGTH = 16 * 1024 * 1024
#: An answer above MAX_FRAME_LENGTH but at most this long is skipped (its header decoded,
#: its body read and thrown away) instead of closing the connection; anything longer is
#: taken for garbage.
MAX_SKIPPED_FRAME_LENGTH = 1024 * 1024 * 1024
_MAX_SKIPPED_HEADER = 64 * 1024
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

# Language codes by ordinal (LanguageCode.java), for the binary header form.
_LANGUAGES = (
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
    "NODE_JS",
)

_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hbhii")


def _json_dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _json_loads(data: bytes) -> Any:
    return json.loads(data)


_Dumps = Callable[[dict[str, Any]], bytes]
_Loads = Callable[[bytes], Any]

try:  # optional accelerated JSON; the pure path is first-class and tested too
    import orjson

    HAVE_ORJSON = True
    _dumps: _Dumps = orjson.dumps
    _loads: _Loads = orjson.loads
except ImportError:  # pragma: no cover - exercised when orjson is absent
    HAVE_ORJSON = False
    _dumps = _json_dumps
    _loads = _json_loads


def use_orjson(enabled: bool) -> None:
    """Switch between orjson and the standard library (tests exercise both paths)."""
    global _dumps, _loads
    if enabled and HAVE_ORJSON:
        import orjson

        _dumps, _loads = orjson.dumps, orjson.loads
    else:
        _dumps, _loads = _json_dumps, _json_loads


def encode_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": cmd.language,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    return _dumps(header)


def encode_command(cmd: RemotingCommand) -> bytes:
    """The complete frame, length prefix included."""
    header = encode_header(cmd)
    body = cmd.body
    total = 4 + len(header) + len(body)
    if total > MAX_FRAME_LENGTH:
        raise FrameTooLargeError(
            f"frame of {total} bytes exceeds the {MAX_FRAME_LENGTH} byte limit"
        )
    return b"".join((_TWO_INTS.pack(total, (SERIALIZE_JSON << 24) | len(header)), header, body))


def check_frame_length(length: int) -> None:
    """Validate a length prefix before reading the frame it announces."""
    if length < 4 or length > MAX_FRAME_LENGTH:
        raise FrameTooLargeError(
            f"frame length {length} outside the allowed range 4..{MAX_FRAME_LENGTH}"
        )


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame *without* its 4-byte length prefix (its body is left in ``frame``,
    or in a copy of it when not ``bytes``, until read: ``RemotingCommand.body_in_place``)."""
    data = frame if type(frame) is bytes else bytes(frame)
    return _decode_at(data, 0, len(data))


def _decode_at(data: bytes, start: int, end: int) -> RemotingCommand:
    """Decode the frame ``data[start:end]`` (its length prefix before ``start``); its body
    is left in ``data``, not copied: the pull decoder reads its messages from there
    (benchmarks/ceiling.py; benchmarks/README.md, "Round 12": the copy of each pull
    answer was ~1,200 of a message's ~27,000 instructions)."""
    size = end - start
    if size < 4:
        raise ProtocolError(f"frame of {size} bytes is shorter than its header length field")
    (mark,) = _INT.unpack_from(data, start)
    serialize_type = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > size - 4:
        raise ProtocolError(
            f"header length {header_len} exceeds the frame's remaining {size - 4} bytes"
        )
    body = start + 4 + header_len
    header = data[start + 4 : body]
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise ProtocolError(f"unknown serialize type {serialize_type}")
    if body < end:  # (an empty body, the usual error answer's, keeps nothing)
        cmd.leave_body_in(data, body, end)
    return cmd


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = _loads(header)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # deep nesting: recursion
        raise ProtocolError(f"frame header is not valid JSON: {exc}") from None
    # A broker's header, the common case, checked by exact types in one test (a
    # producer's plain send decodes one an answer: benchmarks/README.md, "The plain
    # send, round 1"); anything else (a missing or mistyped field, a non-string ext
    # value) is decoded, or refused, field by field below.
    if type(obj) is dict:
        code = obj.get("code")
        opaque = obj.get("opaque", 0)
        flag = obj.get("flag", 0)
        remark = obj.get("remark")
        ext = obj.get("extFields") or {}
        language = obj.get("language", "JAVA")
        version = obj.get("version", 0)
        if (
            type(code) is int
            and type(opaque) is int
            and type(flag) is int
            and (remark is None or type(remark) is str)
            and type(ext) is dict
            and type(language) is str
            and type(version) is int
            and _STR_ONLY.issuperset(map(type, ext.values()))
        ):
            return RemotingCommand(code, opaque, flag, remark, ext, b"", language, version)
    return _decode_json_object(obj)


def _decode_json_object(obj: Any) -> RemotingCommand:
    """A header that is not a broker's usual (``_decode_json_header``): each field
    checked and converted, or the frame refused."""
    if not isinstance(obj, dict):
        raise ProtocolError("frame header is not a JSON object")
    try:
        code = obj["code"]
        if not isinstance(code, int) or isinstance(code, bool):
            raise ProtocolError(f"frame header code is not an integer: {code!r}")
        opaque = obj.get("opaque", 0)
        flag = obj.get("flag", 0)
        if not isinstance(opaque, int) or not isinstance(flag, int):
            raise ProtocolError("frame header opaque/flag are not integers")
        remark = obj.get("remark")
        if remark is not None and not isinstance(remark, str):
            remark = str(remark)
        ext_raw = obj.get("extFields") or {}
        if not isinstance(ext_raw, dict):
            raise ProtocolError("frame header extFields is not an object")
        if _STR_ONLY.issuperset(map(type, ext_raw.values())):
            # a broker's values are all strings (its keys, as any JSON object's, are):
            # the object as parsed, checked in C, where a copy took a step of Python a
            # field (once a frame, a pull's answer among them: benchmarks/README.md,
            # "Round 17")
            ext = ext_raw
        else:
            ext = {
                str(k): v if isinstance(v, str) else _scalar_to_str(v) for k, v in ext_raw.items()
            }
        language = obj.get("language", "JAVA")
        version = obj.get("version", 0)
    except KeyError:
        raise ProtocolError("frame header has no code") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=str(language),
        version=version if isinstance(version, int) else 0,
    )


_STR_ONLY = frozenset({str})


def _scalar_to_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ProtocolError(f"extFields value is not a scalar: {value!r}")


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _INT.unpack_from(header, pos)
        pos += 4
        remark: str | None = None
        if remark_len > 0:
            remark = _take(header, pos, remark_len).decode()
            pos += remark_len
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > len(header):
            raise ProtocolError("binary header ext fields overrun the header")
        end = pos + ext_len
        ext: dict[str, str] = {}
        while pos < end:
            (key_len,) = struct.unpack_from(">h", header, pos)
            pos += 2
            key = _take(header, pos, key_len).decode()
            pos += key_len
            (val_len,) = _INT.unpack_from(header, pos)
            pos += 4
            val = _take(header, pos, val_len).decode()
            pos += val_len
            ext[key] = val
        if pos != end:
            raise ProtocolError("binary header ext fields overrun their length")
    except struct.error as exc:
        raise ProtocolError(f"binary header is truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header holds invalid UTF-8: {exc}") from None
    language = _LANGUAGES[lang] if 0 <= lang < len(_LANGUAGES) else "OTHER"
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=language,
        version=version,
    )


def _take(buf: bytes, pos: int, length: int) -> bytes:
    if length < 0 or pos + length > len(buf):
        raise ProtocolError("binary header field overruns the header")
    return buf[pos : pos + length]


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header form; used by tests to build broker-style answers."""
    lang = _LANGUAGES.index(cmd.language) if cmd.language in _LANGUAGES else 7
    parts = [_BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode()
    parts.append(_INT.pack(len(remark)) + remark)
    ext = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + _INT.pack(len(v.encode())) + v.encode()
        for k, v in cmd.ext_fields.items()
    )
    parts.append(_INT.pack(len(ext)) + ext)
    return b"".join(parts)


def encode_command_binary(cmd: RemotingCommand) -> bytes:
    header = encode_binary_header(cmd)
    total = 4 + len(header) + len(cmd.body)
    return b"".join(
        (_TWO_INTS.pack(total, (SERIALIZE_ROCKETMQ << 24) | len(header)), header, cmd.body)
    )


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole commands out.

    A bad length prefix raises before any of the announced bytes are buffered, so a
    garbage stream cannot make us allocate 2 GiB. A *response* over the frame limit
    (up to ``MAX_SKIPPED_FRAME_LENGTH``) is not an error of the stream: its header
    comes out with an empty body and ``skipped_body`` set, and the body is thrown away
    as it arrives, so the connection and the other requests on it go on.

    No received byte is copied on the way to a command's body but a frame cut across
    reads, joined once when whole (benchmarks/ceiling.py; benchmarks/README.md, "Round
    12"): a frame within one read is decoded where it is, its body left in the read's
    bytes (``RemotingCommand.body_in_place``), which live as long as a command whose body
    has not been read; the start of a cut frame is kept as received until its end comes.
    """

    __slots__ = ("_held", "_need", "_parts", "_skip")

    def __init__(self) -> None:
        # the start of a frame not whole yet, its length prefix included, as received
        self._parts: list[bytes | memoryview] = []
        self._held = 0  # their length
        self._need = -1  # that frame's length with its prefix, once its prefix is whole
        self._skip = 0  # body bytes of an oversized answer still to throw away

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if type(data) is not bytes:
            data = bytes(data)  # (a copy: the commands' bodies are left in it)
        out: list[RemotingCommand] = []
        pos = 0
        if self._parts:
            need = self._need
            held = self._held + len(data)
            if need < 0:
                # a length prefix cut (or an oversized answer's header): read on from
                # them joined with this read (a copy of it: rare)
                data = b"".join((*self._parts, data))
                self._parts = []
                self._held = 0
            elif held < need:
                self._parts.append(data)
                self._held = held
                return out
            else:
                pos = need - self._held  # where the held frame ends in ``data``
                self._parts.append(memoryview(data)[:pos])
                frame = b"".join(self._parts)  # the cut frame's one copy
                self._parts = []
                self._held = 0
                self._need = -1
                out.append(_decode_at(frame, 4, need))
        end = len(data)
        while True:
            if self._skip:
                n = min(self._skip, end - pos)
                pos += n
                self._skip -= n
                if self._skip:
                    break
            if end - pos < 4:
                break
            (length,) = _INT.unpack_from(data, pos)
            if length > MAX_FRAME_LENGTH and length <= MAX_SKIPPED_FRAME_LENGTH:
                header = self._oversized_header(data, pos, length)
                if header is None:
                    break  # wait for the rest of its header
                out.append(header)
                pos += 4 + length - header.skipped_body
                self._skip = header.skipped_body
                continue
            check_frame_length(length)
            stop = pos + 4 + length
            if stop > end:
                self._need = 4 + length
                break
            out.append(_decode_at(data, pos + 4, stop))
            pos = stop
        if pos < end:  # the start of a frame: kept as received (a view keeps ``data``)
            self._parts.append(memoryview(data)[pos:] if pos else data)
            self._held = end - pos
        return out

    @staticmethod
    def _oversized_header(buf: bytes, pos: int, length: int) -> RemotingCommand | None:
        """The header of the over-limit frame at ``pos`` (None: not all here yet)."""
        if len(buf) - pos < 8:
            return None
        header_len = _INT.unpack_from(buf, pos + 4)[0] & 0xFFFFFF
        if header_len > _MAX_SKIPPED_HEADER or header_len > length - 4:
            check_frame_length(length)  # not an answer we can skip: reject it as before
        if len(buf) - pos < 8 + header_len:
            return None
        cmd = _decode_at(buf, pos + 4, pos + 8 + header_len)
        if not cmd.is_response:
            check_frame_length(length)  # only an answer fails alone; a request cannot
        cmd.skipped_body = length - 4 - header_len
        return cmd

    @property
    def buffered(self) -> int:
        """The bytes held of a frame not whole yet."""
        return self._held
