"""A producer's trace records (``aiorocket._trace``): a ``Pub`` per stored send and an
``EndTransaction`` per ended transaction, the same from both transports (and per
check-back answered, over remoting: ``from_check``).

Recorded in ``Producer`` around its engine's calls, so each transport's engine knows
nothing of them. As Java's trace hook, only sends that returned a result are recorded
(a failed send has no message id to find it by; oneway sends have no result).
"""

from __future__ import annotations

import time

from aiorocket._message_id import decode_offset_message_id
from aiorocket._send_result import SendResult
from aiorocket._trace import (
    MSG_DELAY,
    MSG_NORMAL,
    MSG_TRANS_HALF,
    Tracer,
    end_transaction,
    now_ms,
    pub,
)
from aiorocket.message import Message
from aiorocket.producer.transaction import CheckRequest, TransactionState

__all__ = ["SendTrace"]

#: LocalTransactionState names, as the format spells them
_STATES = {
    TransactionState.COMMIT: "COMMIT_MESSAGE",
    TransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    TransactionState.UNKNOWN: "UNKNOW",
}


def store_host(result: SendResult) -> str:
    """The storing broker's address (from the offset message id), else its name (gRPC)."""
    try:
        return decode_offset_message_id(result.offset_msg_id)[0]
    except ValueError:
        return result.queue.broker_name


class SendTrace:
    """Records a producer's sends into its ``Tracer``."""

    __slots__ = ("group", "tracer")

    def __init__(self, tracer: Tracer, group: str) -> None:
        self.tracer = tracer
        self.group = group

    @staticmethod
    def clock() -> tuple[int, float]:
        """When a send begins: (wall ms for the record, monotonic for its cost)."""
        return now_ms(), time.monotonic()

    def sent(
        self, msg: Message, result: SendResult, began: tuple[int, float], *, half: bool = False
    ) -> None:
        cost = int((time.monotonic() - began[1]) * 1000)
        if half:
            kind = MSG_TRANS_HALF
        elif msg.delay_level or msg.deliver_time_ms is not None:
            kind = MSG_DELAY
        else:
            kind = MSG_NORMAL
        self.tracer.append(pub(
            group=self.group, topic=msg.topic, msg_id=result.msg_id, tags=msg.tags,
            keys=list(msg.keys), store_host=store_host(result), body_length=len(msg.body),
            cost_ms=cost, msg_type=kind, offset_msg_id=result.offset_msg_id,
            success=result.status.value == "SEND_OK", timestamp=began[0],
        ))  # fmt: skip

    def sent_batch(
        self, messages: list[Message], results: list[SendResult], began: tuple[int, float]
    ) -> None:
        for msg, result in zip(messages, results, strict=False):
            self.sent(msg, result, began)

    def checked(self, req: CheckRequest, state: TransactionState) -> None:
        """A broker's check-back answered (``from_check``), as Java's hook records it."""
        msg = req.message
        self.tracer.append(end_transaction(
            group=self.group, topic=msg.topic, msg_id=msg.msg_id, tags=msg.tags, keys=msg.keys,
            store_host=req.broker_addr, transaction_id=req.transaction_id or "",
            state=_STATES[state], from_check=True, timestamp=now_ms(),
        ))  # fmt: skip

    def ended(self, msg: Message, result: SendResult, state: TransactionState) -> None:
        self.tracer.append(end_transaction(
            group=self.group, topic=msg.topic, msg_id=result.msg_id, tags=msg.tags,
            keys=list(msg.keys), store_host=store_host(result),
            transaction_id=result.transaction_id or result.msg_id, state=_STATES[state],
            from_check=False, timestamp=now_ms(),
        ))  # fmt: skip
