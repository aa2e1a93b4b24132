"""Admin operations for services and tools: topics, consumer groups, lag, offsets, messages.

```python
async with Admin("127.0.0.1:9876") as admin:
    lag = await admin.lag("orders-service")
    print(lag.total)
```

Every request goes to the NameServer or to the brokers directly over remoting, through
one connection pool (``ClientInstance``). Errors are
typed: [`TopicNotExistError`][aiorocket.errors.TopicNotExistError],
[`GroupNotFoundError`][aiorocket.errors.GroupNotFoundError],
[`AccessDeniedError`][aiorocket.errors.AccessDeniedError],
[`NameServerUnavailableError`][aiorocket.errors.NameServerUnavailableError],
[`MessageNotFoundError`][aiorocket.errors.MessageNotFoundError],
[`ConfigError`][aiorocket.errors.ConfigError] (bad arguments).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Collection
from typing import Any, Literal

from aiorocket._trace import TRACE_TOPIC
from aiorocket._trace import decode as decode_trace
from aiorocket.admin._cluster import ClusterAdmin
from aiorocket.admin._dlq import DeadLetterAdmin, original_topic
from aiorocket.admin._groups import GroupAdmin
from aiorocket.admin._lookup import KeyLookup, MessageLookup
from aiorocket.admin._model import (
    BrokerStatus,
    CustomizedRetry,
    ExponentialRetry,
    GroupConfig,
    GroupDescription,
    GroupLag,
    GroupProgress,
    Member,
    OffsetChange,
    ProducerClient,
    QueueLag,
    QueueRange,
    ResendPlan,
    Resent,
    TopicChange,
    TopicSettings,
    TopicStats,
)
from aiorocket.admin._names import TOOLS_GROUP, is_system_group, is_system_topic
from aiorocket.admin._topics import PERMISSIONS, TopicAdmin, TopicExistsError
from aiorocket.client.admin import REPULL_FIELD
from aiorocket.errors import (
    ConfigError,
    ConsumerNotOnlineError,
    MessageNotFoundError,
    RocketMQError,
)
from aiorocket.message import MessageExt, MessageQueue
from aiorocket.protocol import fastjson
from aiorocket.protocol.message_codec import decode_offset_message_id

__all__ = [
    "PERMISSIONS",
    "TOOLS_GROUP",
    "Admin",
    "BrokerStatus",
    "CustomizedRetry",
    "ExponentialRetry",
    "GroupConfig",
    "GroupDescription",
    "GroupLag",
    "GroupProgress",
    "KeyLookup",
    "Member",
    "OffsetChange",
    "ProducerClient",
    "QueueLag",
    "QueueRange",
    "ResendPlan",
    "Resent",
    "ResetTarget",
    "TopicChange",
    "TopicExistsError",
    "TopicSettings",
    "TopicStats",
    "is_system_group",
    "is_system_topic",
    "original_topic",
]

#: where ``Admin.reset_offset`` moves a group: the oldest stored message, the end
#: of each queue, or the first message stored at or after a time (an aware datetime or
#: epoch milliseconds).
ResetTarget = Literal["earliest", "latest"] | _dt.datetime | int


def _timestamp_ms(target: _dt.datetime | int) -> int:
    if isinstance(target, _dt.datetime):
        if target.tzinfo is None:
            raise ConfigError("give the reset time with a time zone (an aware datetime)")
        return int(target.timestamp() * 1000)
    if target < 0:
        raise ConfigError(f"timestamp {target} is negative")
    return target


def _assignment(running: dict[str, Any]) -> list[MessageQueue]:
    return sorted(fastjson.queue_of(k) for k in running.get("mqTable") or {})


def _max_reconsume(running: dict[str, Any]) -> int | None:
    """What decides a push/pull member's retries: the maxReconsumeTimes it sends back with
    each failed message (Java and aiorocket report it; -1: the client's default, 16)."""
    raw = (running.get("properties") or {}).get("maxReconsumeTimes")
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def topics_named_after_clusters(topics: list[str], brokers: dict[str, dict[int, str]]) -> set[str]:
    """Cluster names the NameServer lists as topics: X where X_REPLY_TOPIC is listed too."""
    suffix = "_REPLY_TOPIC"
    return {t[: -len(suffix)] for t in topics if t.endswith(suffix)}


class Admin(TopicAdmin, ClusterAdmin, GroupAdmin, DeadLetterAdmin, MessageLookup):
    """Admin operations against one RocketMQ cluster (through its NameServers).

    Parameters
    ----------
    namesrv:
        NameServer addresses (``"host:9876"``, ``"a:9876;b:9876"`` or a sequence);
        default: ``$AIOROCKET_NAMESRV_ADDR``.
    request_timeout:
        Seconds each request may take.
    credentials:
        ACL identity signing every request (an admin needs the rights of the requests).
    tls:
        Connect over TLS: True (system CAs) or an ``ssl.SSLContext``.
    """

    # -- topics ------------------------------------------------------------------------

    async def list_topics(self, *, include_system: bool = False) -> list[str]:
        """The topics the NameServers know, sorted; system topics only if asked for."""
        topics = await self.client.namesrv.list_topics()
        if include_system:
            return topics
        # The NameServer also lists each cluster's and broker's name, and <cluster>_REPLY_TOPIC.
        brokers = await self.brokers()
        return [
            t
            for t in topics
            if not is_system_topic(t)
            and t not in brokers
            and not t.endswith("_REPLY_TOPIC")
            and t not in topics_named_after_clusters(topics, brokers)
        ]

    async def topic_stats(self, topic: str) -> TopicStats:
        """Per queue: min and max offset and the newest message's store time."""
        route = await self.route(topic)
        queues: list[QueueRange] = []
        for name, addr in sorted(route.group_addrs().items()):
            stats = await self.requests.topic_stats(addr, topic)
            queues += [
                QueueRange(mq, s.min_offset, s.max_offset, s.last_update_ms)
                for mq, s in stats.items()
                if mq.broker_name == name
            ]
        queues.sort(key=lambda q: q.queue)
        return TopicStats(topic, queues)

    # -- groups --------------------------------------------------------------------------

    async def list_groups(self, *, include_system: bool = False) -> list[str]:
        """The consumer groups of every master broker, sorted."""
        groups: set[str] = set()
        for addr in (await self.masters()).values():
            groups.update(await self.requests.group_configs(addr))
        return sorted(g for g in groups if include_system or not is_system_group(g))

    async def describe_group(self, group: str, *, assignment: bool = True) -> GroupDescription:
        """Members (client id, address, language, version), subscriptions and model.

        With ``assignment`` each member is asked (through a broker) for the queues it
        consumes; a member that does not answer has ``assignment=None``.
        """
        known = await self._require_group(group)
        info: dict[str, Any] = {}
        broker_addr = ""
        for addr in known.values():
            try:
                info = await self.requests.consumer_connections(addr, group)
            except ConsumerNotOnlineError:
                continue
            broker_addr = addr
            break
        members: list[Member] = []
        for conn in info.get("connectionSet") or []:
            client_id = str(conn.get("clientId", ""))
            running = await self._running(broker_addr, group, client_id) if assignment else None
            members.append(
                Member(
                    client_id=client_id,
                    address=str(conn.get("clientAddr", "")),
                    language=str(conn.get("language", "")),
                    version=int(conn.get("version", 0)),
                    assignment=None if running is None else _assignment(running),
                    max_reconsume_times=None if running is None else _max_reconsume(running),
                )
            )
        members.sort(key=lambda m: m.client_id)
        subs = info.get("subscriptionTable") or {}
        return GroupDescription(
            group=group,
            members=members,
            subscriptions={str(t): str(s.get("subString", "*")) for t, s in sorted(subs.items())},
            consume_type=str(info.get("consumeType", "")),
            message_model=str(info.get("messageModel", "")),
            consume_from_where=str(info.get("consumeFromWhere", "")),
        )

    async def _running(self, broker_addr: str, group: str, client_id: str) -> dict[str, Any] | None:
        """The member's running info; None when it does not answer."""
        try:
            return await self.requests.consumer_running_info(broker_addr, group, client_id)
        except RocketMQError:
            return None

    async def consume_directly(
        self, group: str, client_id: str, msg_id: str, *, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Have the member ``client_id`` of ``group`` run its handler on the stored message
        ``msg_id`` (an offset message id): ConsumeMessageDirectlyResult as a dict
        (``consumeResult`` CR_SUCCESS, CR_LATER, CR_THROW_EXCEPTION; ``spentTimeMills``).
        Nothing is committed or sent back."""
        brokers = await self.brokers()
        by_addr = {addr: name for name, ids in brokers.items() for addr in ids.values()}
        try:
            addr, _ = decode_offset_message_id(msg_id)
        except ValueError:
            raise ConfigError(f"{msg_id!r} is not an offset message id") from None
        if addr not in by_addr:
            raise ConfigError(f"{msg_id!r} names {addr}, not a broker of this cluster")
        return await self.requests.consume_message_directly(
            addr, group, client_id, msg_id, timeout=timeout
        )

    async def lag(self, group: str, topic: str | None = None) -> GroupLag:
        """Per queue the committed and the max offset, and the lag (their difference).

        Without ``topic``, every topic the group has offsets for (its retry topic too).
        """
        known = await self._require_group(group)
        if topic is not None:
            await self.route(topic)  # TopicNotExistError for a topic that does not exist
        queues: list[QueueLag] = []
        for name, addr in sorted(known.items()):
            stats = await self.requests.consume_stats(addr, group, topic)
            queues += [
                QueueLag(mq, s.consumer_offset, s.broker_offset, s.last_timestamp_ms)
                for mq, s in stats.items()
                if mq.broker_name == name
            ]
        queues.sort(key=lambda q: q.queue)
        return GroupLag(group, queues)

    async def reset_offset(
        self,
        group: str,
        topic: str,
        to: ResetTarget | None = None,
        *,
        offset: int | None = None,
        queues: Collection[MessageQueue] | None = None,
        dry_run: bool = False,
    ) -> list[OffsetChange]:
        """Move ``group``'s committed offsets of ``topic`` to ``to`` (earliest, latest,
        a time), or to ``offset`` (each queue's own offset, kept within the queue's
        stored range), on every queue or only on ``queues``.

        Running consumers of the group adopt the new offsets (the broker hands them to
        their next pull and ignores their older commits); aiorocket members are told to
        pull again at once (``_renew_pulls``), others take it when their long poll
        ends. With ``dry_run`` nothing changes: the result says what would.
        """
        if (to is None) == (offset is None):
            raise ConfigError("reset to one of: 'earliest', 'latest', a time, or an offset")
        if isinstance(to, str) and to not in ("earliest", "latest"):
            raise ConfigError(f"reset to 'earliest', 'latest' or a time, not {to!r}")
        if offset is not None and offset < 0:
            raise ConfigError(f"offset must be >= 0, not {offset}")
        timestamp = None if to is None or isinstance(to, str) else _timestamp_ms(to)
        route = await self.route(topic)
        known = await self._require_group(group)
        wanted = None if queues is None else set(queues)
        if wanted is not None and (missing := wanted - set(route.read_queues())):
            raise ConfigError(f"{topic} has no queue {sorted(missing)[0]}")
        plan: list[tuple[str, OffsetChange]] = []
        for name, addr in sorted(route.group_addrs().items()):
            if name not in known:
                continue
            committed = await self.requests.consume_stats(addr, group, topic)
            ranges = await self.requests.topic_stats(addr, topic)
            for mq, rng in sorted(ranges.items()):
                if mq.broker_name != name or (wanted is not None and mq not in wanted):
                    continue
                if offset is not None:
                    new = min(max(offset, rng.min_offset), rng.max_offset)
                elif to == "earliest":
                    new = rng.min_offset
                elif to == "latest":
                    new = rng.max_offset
                else:
                    assert timestamp is not None
                    new = await self.client.broker.search_offset(addr, mq, timestamp)
                old = committed[mq].consumer_offset if mq in committed else -1
                plan.append((addr, OffsetChange(mq, old, new)))
        return await self._apply_resets(group, topic, known, plan, dry_run)

    async def clone_offsets(
        self, source: str, target: str, topic: str, *, dry_run: bool = False
    ) -> list[OffsetChange]:
        """Give ``target`` the committed offsets of ``source`` on ``topic`` (mqadmin
        cloneGroupOffset): each queue ``source`` has an offset for; running consumers
        of ``target`` adopt them as after ``reset_offset``."""
        route = await self.route(topic)
        have = await self._require_group(source)
        known = await self._require_group(target)
        plan: list[tuple[str, OffsetChange]] = []
        for name, addr in sorted(route.group_addrs().items()):
            if name not in known or name not in have:
                continue
            theirs = await self.requests.consume_stats(addr, source, topic)
            ours = await self.requests.consume_stats(addr, target, topic)
            for mq, stats in sorted(theirs.items()):
                if mq.broker_name == name and mq.topic == topic:
                    old = ours[mq].consumer_offset if mq in ours else -1
                    plan.append((addr, OffsetChange(mq, old, stats.consumer_offset)))
        return await self._apply_resets(target, topic, known, plan, dry_run)

    async def _apply_resets(
        self, group: str, topic: str, known: dict[str, str],
        plan: list[tuple[str, OffsetChange]], dry_run: bool,
    ) -> list[OffsetChange]:  # fmt: skip
        if not dry_run:
            for addr, change in plan:
                await self.requests.reset_offset(addr, group, change.queue, change.new)
            if plan:
                await self._renew_pulls(group, topic, known)
        return [change for _, change in plan]

    async def _renew_pulls(self, group: str, topic: str, known: dict[str, str]) -> None:
        """Ask each member of ``group`` (through a broker, the only way to a client) to
        send its pulls of ``topic`` in flight again: a held long poll would hand the reset
        over only when it ends (15 s). aiorocket members do (REPULL_FIELD); other clients
        just answer their running info. Best effort: the reset is stored either way."""
        told: set[str] = set()
        for addr in known.values():
            try:
                info = await self.requests.consumer_connections(addr, group)
            except RocketMQError:
                continue
            for conn in info.get("connectionSet") or []:
                client_id = str(conn.get("clientId", ""))
                if client_id in told:
                    continue
                told.add(client_id)
                with contextlib.suppress(RocketMQError):
                    await self.requests.consumer_running_info(
                        addr, group, client_id, extra={REPULL_FIELD: topic}
                    )

    # -- messages ------------------------------------------------------------------------

    async def get_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with this id: the broker's offset message id, or the producer's
        id (``UNIQ_KEY``, what ``SendResult.msg_id`` and the logs hold), looked up in
        ``topic``'s index, or without ``topic`` in every topic's."""
        brokers = await self.brokers()
        by_addr = {addr: name for name, ids in brokers.items() for addr in ids.values()}
        try:
            addr, offset = decode_offset_message_id(msg_id)
        except ValueError:
            addr, offset = "", -1
        if addr in by_addr:
            try:
                return await self.requests.view_message(addr, offset, by_addr[addr])
            except RocketMQError:
                pass  # not an offset id after all: look it up as a producer id
        if topic is None:
            found, searched = await self._unique_anywhere(msg_id)
            if found is None:
                raise MessageNotFoundError(
                    f"no message {msg_id} in the index of any of {searched} topics (an "
                    "offset message id of this cluster is found without it)"
                )
            return found
        msg = await self._unique_in(topic, msg_id)
        if msg is None:
            raise MessageNotFoundError(f"no message {msg_id} in topic {topic!r}")
        return msg

    async def message_trace(
        self, msg_id: str, trace_topic: str = TRACE_TOPIC, *, limit: int = 64
    ) -> list[dict[str, str]]:
        """The trace records of the message ``msg_id`` (its producer id, ``SendResult.msg_id``)
        in ``trace_topic``, by time: the trace messages indexed under the id, as
        ``mqadmin queryMsgTraceById`` reads them; each record a dict of its named fields
        (``aiorocket._trace.decode``), plus ``client_host`` (the writer's address)."""
        records: list[dict[str, str]] = []
        for trace in await self.find_messages(trace_topic, msg_id, limit=limit):
            for record in decode_trace(trace.body.decode("utf-8", "replace")):
                if record.get("msg_id") == msg_id:
                    record.setdefault("client_host", trace.born_host)
                    records.append(record)
        order = {"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}
        records.sort(key=lambda r: (int(r.get("timestamp") or 0), order.get(r["type"], 9)))
        return records
