"""The pop consumer's message: a ``ConsumerMessage`` with the pop state.

Handlers get the same type, and settle it the same way, on both transports
(``ack``/``nack``/``hold``/``async with``); over gRPC it also carries the receipt
handle that acks it (replaced by each renewal of its invisible time) and its delivery
attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import anyio

from aiorocket.grpc._received import ReceivedMessage
from aiorocket.message import MessageExt
from aiorocket.received import ConsumerMessage

__all__ = ["PopMessage", "handle_invisible_time", "pop_message"]

_EXT_FIELDS = tuple(f.name for f in fields(MessageExt))


@dataclass(slots=True, eq=False, repr=False)
class PopMessage(ConsumerMessage):
    receipt_handle: str = ""
    delivery_attempt: int = 1
    message_group: str | None = None
    message_id: str = ""
    #: set while a renewal of the invisible time is in flight: whatever else uses the
    #: receipt handle (ack, nack, dead-letter) waits for it, since the renewal replaces it
    _renewal: anyio.Event | None = None
    #: ack requests made for this message (the ack batcher's retries)
    _ack_tries: int = 0

    async def renewed(self) -> None:
        """Wait until no renewal of this message is in flight (its handle is current)."""
        while self._renewal is not None:
            await self._renewal.wait()

    def __repr__(self) -> str:
        state = "settled" if self._settled else "pending"
        return (
            f"PopMessage(topic={self.topic!r}, id={self.message_id!r}, tags={self.tags!r}, "
            f"attempt={self.delivery_attempt}, body={len(self.body)}B, {state})"
        )


def handle_invisible_time(receipt_handle: str) -> float | None:
    """The invisible time (seconds) a receipt handle was issued with, or None if the
    handle is not in the Apache Proxy's format (``startOffset retrieveTime invisibleTime
    reviveQueueId topicType brokerName queueId offset commitLogOffset``)."""
    parts = receipt_handle.split(" ")
    if len(parts) < 9:
        return None
    try:
        return int(parts[2]) / 1000
    except ValueError:
        return None


def pop_message(r: ReceivedMessage) -> PopMessage:
    msg = PopMessage(**{name: getattr(r, name) for name in _EXT_FIELDS})
    msg.receipt_handle = r.receipt_handle
    msg.delivery_attempt = r.delivery_attempt
    msg.message_group = r.message_group
    msg.message_id = r.message_id
    return msg
