"""The remoting command: one request or response of the remoting protocol."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiorocket.errors import ProtocolError
from aiorocket.protocol.codes import CLIENT_VERSION, LANGUAGE, RemotingFlag, ResponseCode

__all__ = [
    "RemotingCommand",
]

# Plain ints: IntFlag arithmetic costs a microsecond per operation, on every frame.
_RESPONSE = int(RemotingFlag.RESPONSE)
_ONEWAY = int(RemotingFlag.ONEWAY)


class _ReceivedBody:
    """Where a received command's body is until it is first read (``RemotingCommand``)."""

    __slots__ = ("_body_end", "_body_start", "_chunk")
    _chunk: bytes
    _body_start: int
    _body_end: int


@dataclass(slots=True)
class RemotingCommand(_ReceivedBody):
    """A request or response: a header (code, opaque, flag, remark, ext fields) and a body.

    ``ext_fields`` values are always strings on the wire; callers convert numbers.

    A command the frame decoder made leaves its body in the bytes it was received in
    (``body_in_place``) until ``body`` is first read, which copies it out then, once:
    the pull and pop decoders read their messages from the received bytes themselves
    (benchmarks/README.md, "Round 12").
    """

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = LANGUAGE
    version: int = CLIENT_VERSION
    #: body bytes the frame decoder read and threw away: an answer over the frame limit
    #: (its header is kept, so the request it answers fails alone).
    skipped_body: int = field(default=0, compare=False, repr=False)

    @classmethod
    def request(
        cls, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        return cls(code=code, ext_fields=ext_fields if ext_fields is not None else {}, body=body)

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        return cls(
            code=code,
            opaque=request.opaque,
            flag=_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
        )

    @classmethod
    def not_supported(cls, request: RemotingCommand) -> RemotingCommand | None:
        """The answer to a request nobody here handles (None: a oneway gets none)."""
        if request.is_oneway:
            return None
        return cls.response_to(
            request,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request code {request.code} not supported by aiorocket",
        )

    def body_in_place(self) -> tuple[bytes, int, int]:
        """The body as ``(data, start, end)``, ``data[start:end]`` being the body: the
        bytes it was received in (shared with the frames around it), not copied, until
        ``body`` is read; ``(body, 0, len(body))`` after, or for a command built here.
        What is kept of it must be a copy (a slice), or it keeps all of ``data``."""
        try:
            body = _get_body(self)
        except AttributeError:  # deleted (``del cmd.body``): as the unread body's, below
            body = _UNREAD
        if body is _UNREAD:
            return self._chunk, self._body_start, self._body_end
        return body, 0, len(body)

    def leave_body_in(self, data: bytes, start: int, end: int) -> None:
        """Make the body ``data[start:end]``, copied out only when ``body`` is read (the
        frame decoder's; ``data`` is kept until then)."""
        # The slot holds a mark, not nothing: an empty slot's read raises, and a pull's
        # answer was read so once, an exception an answer (benchmarks/README.md,
        # "Round 18"). Only this module reads the slot itself.
        _set_body(self, _UNREAD)
        # (in _ReceivedBody's __slots__: mypy counts only the dataclass's own)
        self._chunk = data  # type: ignore[misc]
        self._body_start = start  # type: ignore[misc]
        self._body_end = end  # type: ignore[misc]

    @property
    def is_response(self) -> bool:
        return bool(self.flag & _RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & _ONEWAY)

    def ext_int(self, name: str, default: int | None = None) -> int:
        """An ext field as an int; missing (without default) or malformed: ProtocolError."""
        raw = self.ext_fields.get(name)
        if raw is None:
            if default is None:
                raise ProtocolError(f"response field {name!r} is missing (code {self.code})")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ProtocolError(f"response field {name!r} is not an integer: {raw!r}") from None


# ``body`` a property over its slot: read from the received bytes on first access
# (``leave_body_in``), then kept in the slot and the received bytes dropped.
_BODY_SLOT = RemotingCommand.__dict__["body"]
_get_body = _BODY_SLOT.__get__
_set_body = _BODY_SLOT.__set__
_del_body = _BODY_SLOT.__delete__


#: the body slot of a command whose body is still in the bytes it was received in
#: (``leave_body_in``); never seen outside this module
_UNREAD: bytes = object()  # type: ignore[assignment]


def _read_body(self: RemotingCommand) -> bytes:
    try:
        body: bytes = _get_body(self)
    except AttributeError:
        raise AttributeError("body") from None  # deleted, as a plain slot's
    if body is not _UNREAD:
        return body
    body = self._chunk[self._body_start : self._body_end]
    _set_body(self, body)
    del self._chunk
    return body


def _delete_body(self: RemotingCommand) -> None:
    _read_body(self)  # the received bytes dropped first, so that the deletion stays
    _del_body(self)


# (set: the slot, which ``body_in_place`` then prefers; the received bytes, if any, are
# left to the command's end: a check here would cost every request built)
setattr(RemotingCommand, "body", property(_read_body, _set_body, _delete_body))  # noqa: B010 (mypy)
