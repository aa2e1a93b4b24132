"""Received messages over gRPC: a ``MessageExt`` plus what pop consumption needs.

``ReceivedMessage`` is what ``SimpleConsumer.receive`` returns: the stored
message as the remoting consumers see it (topic, body, properties with TAGS/KEYS/
UNIQ_KEY, queue id and offset, timestamps, ``reconsume_times``) and the pop state: the
``receipt_handle`` that acks it or changes its invisibility (replaced by each
successful change), ``delivery_attempt`` (1 on the first delivery), ``message_group``
and the time it becomes visible again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from aiorocket.grpc import _pb as pb
from aiorocket.grpc._convert import decode_body, properties_of
from aiorocket.message import MessageExt

if TYPE_CHECKING:
    from aiorocket.grpc._simple import SimpleConsumer

__all__ = ["ReceivedMessage", "message_ext"]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def _ms(ts: datetime | None) -> int:
    """Epoch milliseconds, exactly (no float rounding), 0 when absent."""
    return 0 if ts is None else (ts - _EPOCH) // _MS


@dataclass(slots=True, eq=False, repr=False)
class ReceivedMessage(MessageExt):
    """A message received by a ``SimpleConsumer`` (see the module docstring)."""

    receipt_handle: str = ""
    delivery_attempt: int = 1
    message_group: str | None = None
    message_id: str = ""
    #: epoch ms of the (scheduled) delivery time, for delayed messages; else 0.
    delivery_timestamp: int = 0
    _consumer: SimpleConsumer | None = None

    async def ack(self) -> None:
        """Acknowledge: the message is consumed and never delivered again."""
        if self._consumer is None:
            raise RuntimeError("this message was not received by a consumer")
        await self._consumer.ack(self)

    async def change_invisible_duration(self, seconds: float) -> None:
        """Make the message visible again ``seconds`` from now (a later retry)."""
        if self._consumer is None:
            raise RuntimeError("this message was not received by a consumer")
        await self._consumer.change_invisible_duration(self, seconds)

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, id={self.message_id!r}, "
            f"tags={self.tags!r}, attempt={self.delivery_attempt}, body={len(self.body)}B)"
        )


def message_ext(
    msg: pb.Message, *, broker_name: str, consumer: SimpleConsumer | None = None
) -> ReceivedMessage:
    """The ``ReceivedMessage`` of a decoded v2 ``Message`` (betterproto path)."""
    sp = msg.system_properties
    attempt = sp.delivery_attempt or 1
    return ReceivedMessage(
        topic=msg.topic.name,
        body=decode_body(msg.body, sp.body_encoding),
        properties=properties_of(
            msg.user_properties, sp.tag, sp.keys, sp.message_id, sp.message_group,
            sp.lite_topic,
        ),
        queue_id=sp.queue_id,
        queue_offset=sp.queue_offset or 0,
        commit_log_offset=0,
        born_timestamp=_ms(sp.born_timestamp),
        born_host=sp.born_host,
        store_timestamp=_ms(sp.store_timestamp),
        store_host=sp.store_host,
        reconsume_times=attempt - 1,
        broker_name=broker_name,
        receipt_handle=sp.receipt_handle or "",
        delivery_attempt=attempt,
        message_group=sp.message_group,
        message_id=sp.message_id,
        delivery_timestamp=_ms(sp.delivery_timestamp),
        _consumer=consumer,
    )
