"""Dead-lettered messages in [`aiorocket.admin.Admin`][]: read a group's DLQ and send
messages from it back to the topic they came from."""

from __future__ import annotations

from aiorocket._unique_id import create_unique_id
from aiorocket.admin._model import Resent
from aiorocket.admin._read import READER_GROUP, QueueReader
from aiorocket.errors import ConfigError, MessageNotFoundError, NoRouteError, TopicNotExistError
from aiorocket.message import (
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    dlq_topic,
    is_system_property,
)
from aiorocket.protocol.message_codec import encode_properties

__all__ = ["DeadLetterAdmin", "original_topic"]

_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"


def original_topic(msg: MessageExt) -> str:
    """The topic a dead-lettered message was first sent to."""
    return msg.properties.get(_ORIGIN_TOPIC) or msg.properties.get(PROPERTY_RETRY_TOPIC) or ""


class DeadLetterAdmin(QueueReader):
    async def dead_letters(self, group: str, *, limit: int = 1000) -> list[MessageExt]:
        """The messages in ``group``'s dead-letter queue (``%DLQ%<group>``), oldest first
        per queue, at most ``limit``; [] when the group never dead-lettered one."""
        try:
            route = await self.client.namesrv.query_route(dlq_topic(group))
        except TopicNotExistError:
            return []
        found: list[MessageExt] = []
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            if addr is not None and len(found) < limit:
                found += await self._read(addr, mq, None, None, limit - len(found))
        return found

    async def resend_dead_letters(
        self,
        group: str,
        *,
        msg_id: str | None = None,
        key: str | None = None,
        everything: bool = False,
        dry_run: bool = False,
        limit: int = 1000,
    ) -> list[Resent]:
        """Send dead-lettered messages of ``group`` again to their original topic: the
        one with ``msg_id`` (its producer id or DLQ offset id), those with ``key``, or
        ``everything``. Body, tags, keys and the application's properties are kept;
        the copies stay in the DLQ. With ``dry_run`` nothing is sent: the result says
        what would be."""
        if sum((msg_id is not None, key is not None, everything)) != 1:
            raise ConfigError("resend one message (msg_id), those with a key, or everything")
        letters = await self.dead_letters(group, limit=limit)
        if msg_id is not None:
            chosen = [m for m in letters if msg_id in (m.msg_id, m.offset_msg_id)]
        elif key is not None:
            chosen = [m for m in letters if key in m.keys]
        else:
            chosen = letters
        if not chosen and not everything:
            what = f"id {msg_id}" if msg_id is not None else f"key {key!r}"
            raise MessageNotFoundError(f"no message with {what} in the DLQ of {group!r}")
        plan = []
        for m in chosen:
            topic = original_topic(m)
            if not topic:
                raise ConfigError(f"message {m.msg_id} does not say which topic it came from")
            plan.append((m, topic))
        if dry_run:
            return [Resent(m.msg_id, m.offset_msg_id, topic) for m, topic in plan]
        return [
            Resent(m.msg_id, m.offset_msg_id, topic, await self._send_copy(m, topic, i))
            for i, (m, topic) in enumerate(plan)
        ]

    async def _send_copy(self, m: MessageExt, topic: str, n: int) -> str:
        """Send body, tags, keys and the application's properties of ``m`` to ``topic``
        (a plain SEND_MESSAGE to its ``n``-th writable queue, round robin: the admin is
        no producer); the new message id."""
        user = {k: v for k, v in m.properties.items() if not is_system_property(k)}
        props = Message(topic, m.body, tags=m.tags, keys=m.keys, properties=user)
        wire = props.wire_properties()
        msg_id = wire[PROPERTY_UNIQ_KEY] = create_unique_id()
        route = await self.client.namesrv.get_route(topic)
        queues = route.write_queues()
        if not queues:
            raise NoRouteError(f"topic {topic!r} has no writable queue")
        mq = queues[n % len(queues)]
        addr = route.master_addr(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} of {topic!r} has no master")
        await self.client.broker.send_message(
            addr, mq, bytes(m.body), encode_properties(wire), producer_group=READER_GROUP,
            msg_id=msg_id,
        )  # fmt: skip
        return msg_id
