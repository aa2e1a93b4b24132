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


@dataclass(slots=True)
class RemotingCommand:
    """A request or response: a header (code, opaque, flag, remark, ext fields) and a body.

    ``ext_fields`` values are always strings on the wire; callers convert numbers.
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
