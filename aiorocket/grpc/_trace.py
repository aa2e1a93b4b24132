"""The gRPC transport's trace sender: a trace message (``aiorocket._trace``) sent to the
Proxy as a plain message (SendMessage), on the client's own connection.

The Proxy refuses system topics ("cannot access system topic"), ``RMQ_SYS_TRACE_TOPIC``
among them: over gRPC traces go to a topic of the user's (``trace_topic``), which the
tools read with ``-t`` (``mqadmin queryMsgTraceById -t <topic>``).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiorocket.errors import ProxyResponseError
from aiorocket.grpc._convert import prepare
from aiorocket.grpc._encode import FastSendResponse, encode_message, send_request
from aiorocket.grpc._transport import GrpcTransport, check_status
from aiorocket.message import Message

__all__ = ["GrpcTraceSender"]

#: the Proxy's default body limit (4 MiB); a trace message is at most 128 kB
_MAX_BODY = 4 * 1024 * 1024


class GrpcTraceSender:
    """``TraceSender`` over a client's ``GrpcTransport`` (one attempt per trace message)."""

    def __init__(self, transport: GrpcTransport) -> None:
        self._transport = transport

    async def send_trace(self, topic: str, body: bytes, keys: Sequence[str]) -> None:
        transport = self._transport
        out = prepare(Message(topic, body, keys=list(keys)), max_body_size=_MAX_BODY,
                      namespace=transport.namespace)  # fmt: skip
        request = send_request([encode_message(out)])
        resp = await transport.unary("SendMessage", request, FastSendResponse)
        check_status(resp.status, "SendMessage")
        for entry in resp.entries:
            check_status(entry.status, "SendMessage")
        if not resp.entries:
            raise ProxyResponseError(0, "no send result", rpc="SendMessage")
