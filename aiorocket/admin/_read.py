"""Reading stored messages by offset in [`aiorocket.admin.Admin`][]: one queue's offset
range (mqadmin printMsgByQueue), without a consumer group's offsets."""

from __future__ import annotations

from collections.abc import Iterable

from aiorocket.admin._core import AdminCore
from aiorocket.admin._names import TOOLS_GROUP
from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.results import PullStatus
from aiorocket.errors import ConfigError, GroupNotFoundError, TopicNotExistError
from aiorocket.message import MessageExt, MessageQueue

__all__ = ["READER_GROUP", "QueueReader"]

#: the group named by the admin's pulls (they commit nothing): the tools group every
#: broker has, so reading needs no group the operator did not create
READER_GROUP = TOOLS_GROUP


class QueueReader(AdminCore):
    async def read_queue(
        self,
        topic: str,
        broker: str,
        queue_id: int,
        start: int | None = None,
        end: int | None = None,
        *,
        limit: int = 1000,
    ) -> list[MessageExt]:
        """The messages of one queue from offset ``start`` (default: the oldest stored)
        up to, not including, ``end`` (default: the queue's end now), at most ``limit``,
        in offset order. Nothing is committed."""
        if (start is not None and start < 0) or (end is not None and end < 0) or limit < 1:
            raise ConfigError("offsets must be >= 0 and limit >= 1")
        route = await self.route(topic)
        mq = MessageQueue(topic, broker, queue_id)
        if mq not in route.read_queues():
            have = " ".join(f"{q.broker_name}:{q.queue_id}" for q in route.read_queues())
            raise TopicNotExistError(17, f"{topic} has no queue {broker}:{queue_id} ({have})")
        addr = route.master_addr(broker)
        if addr is None:
            raise TopicNotExistError(17, f"broker {broker} of {topic} has no master")
        return await self._read(addr, mq, start, end, limit)

    async def _read(
        self, addr: str, mq: MessageQueue, start: int | None, end: int | None, limit: int
    ) -> list[MessageExt]:
        lowest = await self.client.broker.get_min_offset(addr, mq)
        offset = lowest if start is None else max(start, lowest)
        stop = await self.client.broker.get_max_offset(addr, mq)
        if end is not None:
            stop = min(stop, end)
        found: list[MessageExt] = []
        while offset < stop and len(found) < limit:
            result = await self.client.broker.pull(
                addr, READER_GROUP, mq, offset, max_nums=32, sys_flag=PULL_SUBSCRIPTION,
                subscription="*", suspend_timeout_ms=0, timeout=self._timeout,
            )  # fmt: skip
            if result.status is not PullStatus.FOUND:
                break
            found += [m for m in result.messages if offset <= m.queue_offset < stop]
            offset = result.next_begin_offset
        return found[:limit]

    async def require_reader_group(self, brokers: Iterable[str]) -> None:
        """GroupNotFoundError naming the tools group and how to create it, if one of
        ``brokers`` (names) lacks it: every broker creates it at start, so only an
        operator's delete takes it away, and pulls through it would then fail forever."""
        masters = await self.masters()
        for name in sorted(set(brokers)):
            addr = masters.get(name)
            if addr is not None and READER_GROUP not in await self.requests.group_configs(addr):
                raise GroupNotFoundError(
                    26,
                    f"broker {name} has no consumer group {READER_GROUP} (the group every "
                    f"broker creates for tools, which reads use): create it with "
                    f"'aiorocket group create {READER_GROUP} --broker {name}'",
                )
