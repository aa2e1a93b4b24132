"""Dead-lettered messages in [`aiorocket.admin.Admin`][]: read a group's DLQ and send
messages from it back to that group.

A resend goes to the group's retry topic ``%RETRY%<group>`` by default: its consumers
(remoting pull/push, which read their retry topic and restore the original topic from
``RETRY_TOPIC``) get the message again, and no other group of the original topic does.
POP consumers (a 5.x broker's POP, or gRPC through a Proxy) read no ``%RETRY%<group>``:
for them the only way back is the original topic (``to_topic``), which every group of it
gets, so the plan names those groups.

Resending is two steps, so that what a user confirms is what is sent: ``plan_resend``
reads the dead letters (paging through the whole DLQ: offsets, not a fixed window) and
``resend`` sends exactly those. A resend of ``everything`` stores a *resend mark* per DLQ
queue (the tools group ``TOOLS_CONSUMER``'s committed offset of that queue, past the last
message sent; marks stored earlier under ``aiorocket-admin-reader`` still count): the next
run starts there, so nothing is sent twice and a message dead-lettered
again (a new DLQ entry) is sent by the next run.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiorocket._unique_id import create_unique_id
from aiorocket.admin._model import ResendPlan, Resent
from aiorocket.admin._names import is_system_group
from aiorocket.admin._read import READER_GROUP, QueueReader
from aiorocket.errors import (
    ConfigError,
    ConsumerNotOnlineError,
    MessageNotFoundError,
    NoRouteError,
    RocketMQError,
    TopicNotExistError,
)
from aiorocket.message import (
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageQueue,
    dlq_topic,
    is_system_property,
    retry_topic,
)
from aiorocket.protocol.message_codec import encode_properties
from aiorocket.protocol.route import TopicRoute

__all__ = ["DeadLetterAdmin", "original_topic"]

_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
#: where resend marks were kept before they moved to the tools group: still read, so an
#: upgrade sends nothing twice
_LEGACY_MARK_GROUP = "aiorocket-admin-reader"
#: the producer group a resend names (producer groups are not stored by the broker); the
#: Java client's own, for sends made on a consumer's behalf
_RESEND_PRODUCER = "CLIENT_INNER_PRODUCER"


def original_topic(msg: MessageExt) -> str:
    """The topic a dead-lettered message was first sent to."""
    return msg.properties.get(_ORIGIN_TOPIC) or msg.properties.get(PROPERTY_RETRY_TOPIC) or ""


class _Span:
    """One DLQ queue's offsets to read, [first, end), and its oldest stored one."""

    __slots__ = ("addr", "end", "first", "mq", "oldest")

    def __init__(self, mq: MessageQueue, addr: str, oldest: int, first: int, end: int) -> None:
        self.mq, self.addr, self.oldest, self.first, self.end = mq, addr, oldest, first, end


class DeadLetterAdmin(QueueReader):
    async def _dlq_spans(self, group: str, *, from_mark: bool) -> list[_Span]:
        """Each DLQ queue's stored offsets (from its resend mark with ``from_mark``)."""
        try:
            route = await self.client.namesrv.query_route(dlq_topic(group))
        except TopicNotExistError:
            await self._require_group(group)  # a misspelt group: GroupNotFoundError, not []
            return []
        spans = []
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                continue
            oldest = await self.client.broker.get_min_offset(addr, mq)
            end = await self.client.broker.get_max_offset(addr, mq)
            first = oldest
            if from_mark:
                mark = await self._mark(addr, mq)
                first = min(max(oldest, mark), end)
            spans.append(_Span(mq, addr, oldest, first, max(first, end)))
        return spans

    async def _mark(self, addr: str, mq: MessageQueue) -> int:
        """A DLQ queue's resend mark (0: none)."""
        mark = await self.client.broker.query_consumer_offset(addr, READER_GROUP, mq) or 0
        try:
            legacy = await self.client.broker.query_consumer_offset(addr, _LEGACY_MARK_GROUP, mq)
        except RocketMQError:  # that group does not exist here: no mark of it
            legacy = None
        return max(mark, legacy or 0)

    async def _read_spans(
        self, spans: list[_Span], skip: int, limit: int | None
    ) -> list[MessageExt]:
        """The messages of ``spans`` in order (queue by queue), after the first ``skip``,
        at most ``limit`` (None: all)."""
        found: list[MessageExt] = []
        for span in spans:
            if limit is not None and len(found) >= limit:
                break
            size = span.end - span.first
            if skip >= size:  # offsets are contiguous: skip whole queues without reading
                skip -= size
                continue
            want = span.end - span.first - skip if limit is None else limit - len(found)
            found += await self._read(span.addr, span.mq, span.first + skip, span.end, want)
            skip = 0
        return found

    async def dead_letters(
        self, group: str, *, limit: int | None = 1000, skip: int = 0
    ) -> list[MessageExt]:
        """The messages in ``group``'s dead-letter queue (``%DLQ%<group>``), oldest first
        per queue, after the first ``skip``, at most ``limit`` (None: every one); [] when
        the group never dead-lettered one, GroupNotFoundError when no broker has it (and
        it has no DLQ)."""
        if skip < 0 or (limit is not None and limit < 1):
            raise ConfigError("skip must be >= 0 and limit >= 1")
        return await self._read_spans(await self._dlq_spans(group, from_mark=False), skip, limit)

    async def plan_resend(
        self,
        group: str,
        *,
        msg_id: str | None = None,
        key: str | None = None,
        everything: bool = False,
        limit: int | None = None,
        skip: int = 0,
        again: bool = False,
        to_topic: bool = False,
    ) -> ResendPlan:
        """What ``resend`` would send of ``group``'s dead letters, read now: the one with
        ``msg_id`` (producer id or DLQ offset id), those with ``key``, or ``everything``
        not resent yet (from each DLQ queue's resend mark; ``again``: from the oldest),
        after the first ``skip``, at most ``limit``.

        The messages go to ``%RETRY%<group>`` (only this group gets them); a group that
        consumes by POP (or has no retry topic: gRPC through a Proxy) reads none there:
        ``ConfigError``, unless ``to_topic``: the original topic, whose other groups
        (``ResendPlan.other_groups``) get them too."""
        if sum((msg_id is not None, key is not None, everything)) != 1:
            raise ConfigError("resend one message (msg_id), those with a key, or everything")
        if skip < 0 or (limit is not None and limit < 1):
            raise ConfigError("skip must be >= 0 and limit >= 1")
        spans = await self._dlq_spans(group, from_mark=everything and not again)
        total = sum(s.end - s.first for s in spans)
        if everything:
            chosen = await self._read_spans(spans, skip, limit)
        else:
            letters = await self._read_spans(spans, 0, None)  # a search: the whole DLQ
            if msg_id is not None:
                picked = [m for m in letters if msg_id in (m.msg_id, m.offset_msg_id)]
            else:
                picked = [m for m in letters if key in m.keys]
            if not picked:
                what = f"id {msg_id}" if msg_id is not None else f"key {key!r}"
                raise MessageNotFoundError(f"no message with {what} in the DLQ of {group!r}")
            chosen = picked[skip:] if limit is None else picked[skip : skip + limit]
        letters_to = []
        for m in chosen:
            topic = original_topic(m)
            if not topic:
                raise ConfigError(f"message {m.msg_id} does not say which topic it came from")
            letters_to.append((m, topic))
        topics = sorted({t for _, t in letters_to})
        if to_topic:
            target, others = "", await self._other_groups(group, topics)
        else:
            target, others = await self._retry_target(group), []
        marks: dict[MessageQueue, int] = {}
        if everything and skip == 0:  # a skip leaves a gap: the mark must not pass it
            for m in chosen:
                mq = MessageQueue(m.topic, m.broker_name, m.queue_id)
                marks[mq] = max(marks.get(mq, 0), m.queue_offset + 1)
        return ResendPlan(
            group=group, letters=letters_to, target=target, other_groups=others,
            remaining=max(total - skip - len(chosen), 0) if everything else 0,
            already_resent=sum(s.first - s.oldest for s in spans), marks=marks,
        )  # fmt: skip

    async def _retry_target(self, group: str) -> str:
        """``%RETRY%<group>``, if the group's consumers read it."""
        topic = retry_topic(group)
        try:
            await self.client.namesrv.query_route(topic)
        except TopicNotExistError:
            raise ConfigError(
                f"group {group!r} has no retry topic {topic} (its consumers pop, e.g. through "
                "a Proxy): resend to the original topic instead (to_topic; CLI --to-topic), "
                "which every group of that topic gets"
            ) from None
        for addr in (await self.masters()).values():
            try:
                info = await self.requests.consumer_connections(addr, group)
            except ConsumerNotOnlineError:
                continue
            if info.get("consumeType") == "CONSUME_POP":
                raise ConfigError(
                    f"group {group!r} consumes by POP, which reads no {topic}: resend to the "
                    "original topic instead (to_topic; CLI --to-topic), which every group of "
                    "that topic gets"
                )
        return topic

    async def _other_groups(self, group: str, topics: Iterable[str]) -> list[str]:
        """The groups other than ``group`` that consume (or have offsets of) ``topics``."""
        found: set[str] = set()
        for topic in topics:
            route = await self.route(topic)
            for addr in route.group_addrs().values():
                found.update(await self.requests.topic_groups(addr, topic))
        return sorted(g for g in found if g not in (group, _LEGACY_MARK_GROUP)
                      and not is_system_group(g))  # fmt: skip

    async def resend(self, plan: ResendPlan) -> list[Resent]:
        """Send the plan's messages (body, tags, keys and the application's properties;
        the copies stay in the DLQ) and store its resend marks, those of what was sent
        when a send fails."""
        sent: list[Resent] = []
        done: dict[MessageQueue, int] = {}
        retry = await self.client.namesrv.query_route(plan.target) if plan.target else None
        try:
            for i, (m, topic) in enumerate(plan.letters):
                new_id = await self._send_copy(m, topic, plan.target, retry, i)
                sent.append(Resent(m.msg_id, m.offset_msg_id, plan.target or topic, new_id))
                mq = MessageQueue(m.topic, m.broker_name, m.queue_id)
                if mq in plan.marks:
                    done[mq] = m.queue_offset + 1
        finally:
            await self._store_marks(plan, done)
        return sent

    async def _store_marks(self, plan: ResendPlan, done: dict[MessageQueue, int]) -> None:
        route = await self.client.namesrv.query_route(dlq_topic(plan.group)) if done else None
        for mq, offset in done.items():
            assert route is not None
            addr = route.master_addr(mq.broker_name)
            if addr is not None:
                await self.client.broker.update_consumer_offset(addr, READER_GROUP, mq, offset)

    async def resend_dead_letters(
        self,
        group: str,
        *,
        msg_id: str | None = None,
        key: str | None = None,
        everything: bool = False,
        dry_run: bool = False,
        limit: int | None = None,
        skip: int = 0,
        again: bool = False,
        to_topic: bool = False,
    ) -> list[Resent]:
        """``plan_resend`` and, unless ``dry_run``, ``resend`` (in a dry run the result
        says what would be sent)."""
        plan = await self.plan_resend(
            group, msg_id=msg_id, key=key, everything=everything, limit=limit, skip=skip,
            again=again, to_topic=to_topic,
        )  # fmt: skip
        return plan.resent() if dry_run else await self.resend(plan)

    async def _send_copy(
        self, m: MessageExt, topic: str, target: str, retry: TopicRoute | None, n: int
    ) -> str:
        """Send body, tags, keys and the application's properties of ``m``: to ``topic``,
        or to the retry topic ``target`` saying ``topic`` (RETRY_TOPIC, which the consumer
        restores); a plain SEND_MESSAGE to the ``n``-th writable queue, round robin (the
        admin is no producer). The new message id."""
        user = {k: v for k, v in m.properties.items() if not is_system_property(k)}
        props = Message(target or topic, m.body, tags=m.tags, keys=m.keys, properties=user)
        wire = props.wire_properties()
        msg_id = wire[PROPERTY_UNIQ_KEY] = create_unique_id()
        if target:
            wire[PROPERTY_RETRY_TOPIC] = topic
        route = retry or await self.client.namesrv.get_route(topic)
        queues = route.write_queues()
        if not queues:
            raise NoRouteError(f"topic {target or topic!r} has no writable queue")
        mq = queues[n % len(queues)]
        addr = route.master_addr(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} of {target or topic!r} has no master")
        await self.client.broker.send_message(
            addr, mq, bytes(m.body), encode_properties(wire), producer_group=_RESEND_PRODUCER,
            msg_id=msg_id, reconsume_times=0 if target else None,
        )  # fmt: skip
        return msg_id
