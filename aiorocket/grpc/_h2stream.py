"""A server-streaming call's reader on the client's own HTTP/2 connection
(``aiorocket.grpc._h2wire``): the ReceiveMessage stream.

grpclib's ``client.Stream`` cost a receive ~10 regex matches of its metadata, h2's
stream state machine and frame objects, and two deadline timers (benchmarks/README.md,
issue 43, goal 5b, round 8). Here the connection appends the stream's DATA to its
``UnaryCall`` record and wakes the reader (``_unary.notify``); the reader cuts the gRPC
messages off by their 5-byte prefix and checks the headers and trailers as grpclib's
``client.Stream`` did (``_unary.check_headers``/``check_trailers``), raising grpclib's
errors, so ``GrpcTransport._mapped`` maps them unchanged.

Every whole message that arrived is handed out before the stream's error (a reset, a
lost connection, an answer over ``MAX_REPLY``) is raised, and a reader cut off while
some had arrived unread (an asyncio cancellation) takes them with ``arrived``: what
came is the caller's to hand on or release.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from aiorocket.grpc._h2wire import WireCall
from aiorocket.grpc._unary import check_headers, check_trailers, cut_short, message_length

__all__ = ["WireStream"]

Rep = TypeVar("Rep")


class WireStream(Generic[Rep]):
    """The replies of one server-streaming call, read with ``async for``; the iteration
    ends when the stream ended with an OK status, and raises its error otherwise."""

    __slots__ = ("_answer", "_buf", "_checked", "_ended", "_loop", "_pos", "_type")

    def __init__(self, call: WireCall, reply_type: type[Rep]) -> None:
        self._answer = call.answer
        self._type = reply_type
        self._loop = asyncio.get_running_loop()
        #: the bytes taken off ``answer.data`` and not yet cut into messages, from ``_pos``
        self._buf = b""
        self._pos = 0
        #: the headers were checked (before the first message, as grpclib does)
        self._checked = False
        #: the end was read (its status checked): the iteration is over
        self._ended = False

    def pending(self) -> bool:
        """Bytes arrived that are not read yet (a message, or part of one)."""
        return self._answer.size > 0

    def __aiter__(self) -> WireStream[Rep]:
        return self

    async def __anext__(self) -> Rep:
        answer = self._answer
        while True:
            data = self._message()
            if data is not None:
                if not self._checked:
                    check_headers(answer.headers)
                    self._checked = True
                reply: Rep = self._type.FromString(data)  # type: ignore[attr-defined]
                return reply
            if answer.done.done():
                self._end()
            waiter = answer.waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                answer.waiter = None

    async def finish(self) -> None:
        """Read the stream to its end (its status checked), what is left unread dropped
        (the caller reads every message: this is for a block that left early)."""
        if not self._ended:
            async for _ in self:
                pass

    def arrived(self) -> list[Rep]:
        """The whole messages that arrived and were not read, without waiting and
        without the end's check: what a reader cut off (cancelled, its deadline) takes
        with it, instead of leaving them to the reset. A message that cannot be read
        (compressed, a corrupt reply) ends the list: the error the reader was cut off
        by stands (this runs as it propagates)."""
        replies: list[Rep] = []
        try:
            while (data := self._message()) is not None:
                if not self._checked:
                    check_headers(self._answer.headers)
                    self._checked = True
                replies.append(self._type.FromString(data))  # type: ignore[attr-defined]
        except Exception:  # the error the reader was cut off by is the one raised
            pass
        return replies

    def answered(self) -> bool:
        """The server ended the stream (its trailers, or a trailers-only answer): it
        wrote nothing after. Not so for a reset, a lost connection, or a stream the
        reader breaks off (cancelled, its deadline, a message it cannot read)."""
        done = self._answer.done
        return done.done() and not done.cancelled() and done.exception() is None

    def _message(self) -> bytes | None:
        """The next whole message's bytes, or None until it has all arrived."""
        answer = self._answer
        size = answer.size  # what arrived and was not taken: ``_buf[_pos:]`` and ``data``
        if size < 5:
            return None
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 5:
            buf, pos = self._fold(), 0
        length = message_length(buf, pos)
        end = pos + 5 + length
        if size < 5 + length:
            return None  # not all here: folded only once it is (no copy per frame)
        if len(buf) < end:
            buf, pos, end = self._fold(), 0, 5 + length
        self._pos = end
        answer.size = size - 5 - length
        return buf[pos + 5 : end]

    def _fold(self) -> bytes:
        """``_buf``'s rest and what arrived since, in one piece."""
        data = self._answer.data
        rest = self._buf[self._pos :]
        buf = data[0] if not rest and len(data) == 1 else b"".join([rest, *data])
        data.clear()
        self._buf, self._pos = buf, 0
        return buf

    def _end(self) -> None:
        """The stream ended, and every whole message was read: its error, a message cut
        short, or its status (``StopAsyncIteration`` when OK)."""
        self._ended = True
        answer = self._answer
        error = answer.done.exception()
        if error is not None:
            if answer.headers is not None and not self._checked:
                # The server's answer came before the reset: its HTTP status says why
                # (a 401 is UNAUTHENTICATED, grpc's mapping), as grpclib read it first.
                check_headers(answer.headers)
            raise error
        headers = check_headers(answer.headers)  # a trailers-only answer's status included
        if answer.size:
            raise cut_short(answer.size)
        if "grpc-status" not in headers:
            check_trailers(dict(answer.trailers or ()))
        raise StopAsyncIteration
