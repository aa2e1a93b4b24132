"""Routes requests the server sends us (broker → client) to handlers by request code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiorocket.protocol.command import RemotingCommand
from aiorocket.remoting.connection import Connection

__all__ = [
    "CodeHandler",
    "RequestDispatcher",
]

CodeHandler = Callable[[Connection, RemotingCommand], Awaitable["RemotingCommand | None"]]


class RequestDispatcher:
    """A registry of per-code handlers; unknown codes get REQUEST_CODE_NOT_SUPPORTED.

    Several clients (a consumer and a producer) may share one pool, so handlers are
    registered and removed at run time rather than fixed at construction.
    """

    def __init__(self) -> None:
        self._handlers: dict[int, CodeHandler] = {}

    def register(self, code: int, handler: CodeHandler) -> None:
        self._handlers[code] = handler

    def unregister(self, code: int, handler: CodeHandler | None = None) -> None:
        """Remove ``code``'s handler (only if it is ``handler``, when given). Compared by
        equality: a bound method (``obj.on_request``) is a new object at each access, so
        the one passed here is never the one registered, only equal to it."""
        if handler is None or self._handlers.get(code) == handler:
            self._handlers.pop(code, None)

    async def __call__(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(request.code)
        if handler is None:
            return RemotingCommand.not_supported(request)
        return await handler(conn, request)
