"""The pop consumer's message over gRPC: a ``PopMessage`` (the core's) made from a
received one.

Handlers get the same type, and settle it the same way, on both transports
(``ack``/``nack``/``hold``/``async with``); over gRPC it also carries the receipt
handle that acks it (replaced by each renewal of its invisible time) and its delivery
attempt.
"""

from __future__ import annotations

from dataclasses import fields

from aiorocket.grpc._received import ReceivedMessage
from aiorocket.message import MessageExt
from aiorocket.received import PopMessage

__all__ = ["PopMessage", "handle_invisible_time", "pop_message"]

_EXT_FIELDS = tuple(f.name for f in fields(MessageExt))


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
