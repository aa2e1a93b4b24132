"""A unary call's answer and how it is read: the record ``WireConnection`` fills
(``aiorocket.grpc._h2wire``) and ``reply_of``, which reads the HTTP status, content type,
gRPC status (trailers, or a trailers-only answer) and the message as grpclib's
``client.Stream`` did and raises grpclib's errors, so ``GrpcTransport._mapped`` maps them
as it always has.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from grpclib.client import _H2_TO_GRPC_STATUS_MAP
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.metadata import decode_grpc_message

__all__ = [
    "MAX_REPLY",
    "UnaryCall",
    "check_headers",
    "check_trailers",
    "cut_short",
    "fail",
    "message_length",
    "notify",
    "reply_of",
]

#: The largest reply accepted (bytes of the gRPC message): a bigger one fails the call
#: instead of growing the buffer without bound. The Proxy's unary answers are a few KiB.
MAX_REPLY = 64 * 1024 * 1024

Rep = TypeVar("Rep")


class UnaryCall:
    """One call's answer, filled by its connection (``_h2wire``): a unary call's, or a
    server-streaming call's (``_h2stream``), whose reader takes ``data`` as it comes and
    subtracts what it took from ``size``."""

    __slots__ = ("data", "done", "headers", "size", "trailers", "waiter")

    def __init__(self, done: asyncio.Future[None]) -> None:
        #: settled once: when the stream ended (result) or broke (exception)
        self.done = done
        self.headers: list[tuple[str, str]] | None = None
        self.trailers: list[tuple[str, str]] | None = None
        self.data: list[bytes] = []
        #: the bytes of ``data`` not yet taken by a reader (all of them, for a unary call)
        self.size = 0
        #: a streaming reader waiting for more (``notify``); never set for a unary call
        self.waiter: asyncio.Future[None] | None = None


def notify(call: UnaryCall) -> None:
    """Something arrived for ``call`` (headers, data, its end): wake its reader."""
    waiter = call.waiter
    if waiter is not None:
        call.waiter = None
        if not waiter.done():
            waiter.set_result(None)


def fail(call: UnaryCall, exc: BaseException) -> None:
    """The call broke: its answer is ``exc`` (unless it was settled already)."""
    if not call.done.done():
        call.done.set_exception(exc)
    notify(call)


def reply_of(call: UnaryCall, reply_type: type[Rep]) -> Rep | None:
    """The reply of an ended call (None when it carried none), or the ``GRPCError`` its
    HTTP status, content type or gRPC status says (trailers, or a trailers-only answer),
    as grpclib's ``client.Stream`` reads them."""
    headers = check_headers(call.headers)  # a trailers-only answer's status included
    if "grpc-status" not in headers:
        check_trailers(dict(call.trailers or ()))
    data = call.data[0] if len(call.data) == 1 else b"".join(call.data)
    if not data:
        return None
    length = message_length(data, 0) if len(data) >= 5 else None
    if length is None or len(data) < 5 + length:
        raise cut_short(len(data))
    reply: Rep = reply_type.FromString(data[5 : 5 + length])  # type: ignore[attr-defined]
    return reply


def message_length(buf: bytes, pos: int) -> int:
    """The length the gRPC message prefix (5 bytes) at ``buf[pos]`` announces, or the
    ``GRPCError`` of a compressed message (none was offered): a unary reply's and a
    streaming call's (``_h2stream``) prefix reader."""
    if buf[pos]:
        raise GRPCError(Status.INTERNAL, "a compressed reply (no compression was offered)")
    return int.from_bytes(buf[pos + 1 : pos + 5], "big")


def cut_short(left: int) -> GRPCError:
    """The error of an answer that ended ``left`` bytes into a message (its prefix
    included): the rest never came."""
    return GRPCError(Status.INTERNAL, f"a reply cut short: {left} bytes of a message left")


def check_headers(raw: list[tuple[str, str]] | None) -> dict[str, str]:
    """The answer's headers as a dict, or the ``GRPCError`` their HTTP status, content
    type or (a trailers-only answer's) gRPC status says, as grpclib's ``client.Stream``
    reads them before the first message."""
    headers = dict(raw or ())
    http = headers.get(":status")
    if http != "200":
        status = _H2_TO_GRPC_STATUS_MAP.get(http or "", Status.UNKNOWN)
        raise GRPCError(status, f"Received :status = {http!r}")
    content_type = headers.get("content-type")
    if content_type is None:
        raise GRPCError(Status.UNKNOWN, "Missing content-type header")
    base, _, subtype = content_type.partition("+")
    if base != "application/grpc" or subtype not in ("", "proto"):
        raise GRPCError(Status.UNKNOWN, f"Invalid content-type: {content_type!r}")
    if "grpc-status" in headers:
        check_trailers(headers)
    return headers


def check_trailers(meta: dict[str, str]) -> None:
    """The ``GRPCError`` the trailers' gRPC status says (none when OK)."""
    raw = meta.get("grpc-status")
    if raw is None:
        raise GRPCError(Status.UNKNOWN, "Missing grpc-status header")
    try:
        status = Status(int(raw))
    except ValueError:
        raise GRPCError(Status.UNKNOWN, f"Invalid grpc-status: {raw!r}") from None
    if status is not Status.OK:
        message = meta.get("grpc-message")
        raise GRPCError(status, None if message is None else decode_grpc_message(message))
