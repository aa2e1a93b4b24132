"""Lite topics over remoting (RocketMQ 5.5, RIP-83): the broker's POP_LITE_MESSAGE and
LITE_SUBSCRIPTION_CTL requests, and its NOTIFY_UNSUBSCRIBE_LITE.

A lite message is stored once in its parent topic (message type LITE) and dispatched to
its lite topic's own queue, the LMQ ``%LMQ%$<parent>$<lite topic>`` (queue 0): the
broker reads the ``__LITE_TOPIC`` property at the send, so the broker needs
``enableLmq`` and ``enableMultiDispatch`` (both off by default).

A client tells each broker of the parent topic which lite topics it consumes, for a
group bound to that parent (the group's ``lite.bind.topic``): LITE_SUBSCRIPTION_CTL.
A pop names only the client: the broker hands out messages of the LMQs it subscribed
and that have news, one lite topic at a time per group (the next messages of a lite
topic only once the popped ones are acked: FIFO per lite topic, as an orderly pop).

A 5.5.0 broker can lose a lite topic's event (apache/rocketmq#11191, fixed after 5.5.0):
a pop hands out the client's events one by one and skips a lite topic it already
visited in the same request; when an ack (or a new message) re-offers that lite topic
while the pop still runs, the re-offered event is dropped, and the lite topic waits for
its next message or ack, which may never come. TRIGGER_LITE_DISPATCH asks the broker
for a full dispatch of one client: an event for each of its lite topics that has
messages past the group's offset (``LiteEventDispatcher.doFullDispatchForClient``).

A popped message's check point (its ``receipt_handle``) is the orderly one of its
LMQ's queue 0: start and offset are the message's offset in the LMQ
(``INNER_MULTI_QUEUE_OFFSET``), revive queue 999. The ack (ACK_MESSAGE; the broker
refuses BATCH_ACK for lite) and the renewal (CHANGE_MESSAGE_INVISIBLETIME) name the
parent topic, queue 0 and the ``liteTopic``.

A record of a lite pop that cannot be decoded is set apart (``PopResult.undecodable``),
as a POP's is: the others are handed on. Its check point needs its LMQ offset and its
ack its lite topic, both from its properties; with either unreadable it cannot be
settled and comes back after its invisible time (blocking only its own lite topic).
The answer's delivery counts (``orderCountInfo``) are one per record in order, the
undecodable ones included.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection
from dataclasses import replace

from aiorocket.client.broker import response_error
from aiorocket.client.pop import PoppedUndecodable, PopRequests, PopResult
from aiorocket.errors import LiteQuotaExceededError
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.received import PopMessage

__all__ = [
    "GET_LITE_CLIENT_INFO",
    "LITE_BIND_TOPIC",
    "LITE_QUOTA",
    "LITE_SUBSCRIPTION_CTL",
    "LITE_SUB_MODEL",
    "NOTIFY_UNSUBSCRIBE_LITE",
    "POP_LITE_MESSAGE",
    "TRIGGER_LITE_DISPATCH",
    "LiteRequests",
    "lite_order_counts",
    "lmq_name",
]

POP_LITE_MESSAGE = 200070
LITE_SUBSCRIPTION_CTL = 200071
NOTIFY_UNSUBSCRIBE_LITE = 200073
#: one client's lite subscriptions on one broker (5.5.0 LiteManagerProcessor)
GET_LITE_CLIENT_INFO = 200077
#: the most lite topics GET_LITE_CLIENT_INFO lists (the 5.5.0 broker's own cap)
LITE_CLIENT_INFO_MAX = 10_000
TRIGGER_LITE_DISPATCH = 200079
#: the broker's refusal of a subscription over the group's per-client quota
LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 2018
#: group attributes of lite consumption (5.5 SubscriptionGroupAttributes): the parent
#: topic a lite group is bound to, and its lite subscriptions per client
LITE_BIND_TOPIC = "lite.bind.topic"
LITE_QUOTA = "lite.sub.client.quota"
#: ``Shared`` (default: members of the group share a lite topic) or ``Exclusive`` (a lite
#: topic belongs to the member that subscribed last; the broker unsubscribes the others)
LITE_SUB_MODEL = "lite.sub.model"
#: a lite message's offset in its LMQ (set by the broker's dispatch)
_LMQ_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
_ORDER_REVIVE_QUEUE = 999


def lmq_name(parent: str, lite_topic: str) -> str:
    """The queue (LMQ) a lite topic's messages are dispatched to."""
    return f"%LMQ%${parent}${lite_topic}"


def lite_order_counts(info: str | None, n: int) -> list[int]:
    """The pop answer's ``orderCountInfo`` of a lite pop: one delivery count per message,
    ``;``-separated, in the messages' order; zeros where the broker sent fewer."""
    parts = [p for p in (info or "").split(";") if p]
    counts = [int(p) if p.lstrip("-").isdigit() else 0 for p in parts[:n]]
    return counts + [0] * (n - len(counts))


class LiteRequests(PopRequests):
    """The broker's pop requests with its lite ones (acks and renewals are the pop ones,
    with ``lite_topic``)."""

    async def sync_lite(
        self,
        addr: str,
        *,
        client_id: str,
        group: str,
        topic: str,
        action: str,
        lite_topics: Collection[str],
        offset: tuple[str, int] | None = None,
    ) -> None:
        """LITE_SUBSCRIPTION_CTL: ``action`` (PARTIAL_ADD, PARTIAL_REMOVE, COMPLETE_ADD,
        COMPLETE_REMOVE) of this client's lite subscriptions of ``topic`` on one broker;
        ``offset`` (type, value): where added ones start (the broker's OffsetOption)."""
        entry: dict[str, object] = {
            "action": action, "clientId": client_id, "group": group, "topic": topic,
            "liteTopicSet": sorted(lite_topics), "version": time.time_ns() // 1_000_000,
        }  # fmt: skip
        if offset is not None:
            entry["offsetOption"] = {"type": offset[0], "value": offset[1]}
        body = json.dumps({"subscriptionSet": [entry]}).encode()
        resp = await self.broker.call(addr, LITE_SUBSCRIPTION_CTL, {}, body)
        if resp.code == LITE_SUBSCRIPTION_QUOTA_EXCEEDED:
            raise LiteQuotaExceededError(
                f"the broker at {addr} refused more lite subscriptions of {topic!r} for "
                f"group {group!r}: {resp.remark or 'quota exceeded'}"
            )
        if resp.code != 0:
            raise response_error(resp, LITE_SUBSCRIPTION_CTL, addr)

    async def client_lite_topics(
        self, addr: str, *, group: str, topic: str, client_id: str
    ) -> frozenset[str] | None:
        """GET_LITE_CLIENT_INFO: the lite topics of ``topic`` the broker at ``addr`` holds
        subscribed for ``client_id``, or None if it knows no subscription of that client
        (it restarted, dropped the client as idle, or never heard of it) or lists only
        part of them. A 5.5.0 broker lists only the lite topics it keeps (those hashed to
        it, or whose queue it already has): the client's set is the union over the
        brokers of the parent topic (checked against 5.5.0)."""
        ext = {"parentTopic": topic, "group": group, "clientId": client_id,
               "maxCount": str(LITE_CLIENT_INFO_MAX)}  # fmt: skip
        resp = await self.broker.call(addr, GET_LITE_CLIENT_INFO, ext)
        if resp.code != 0:
            raise response_error(resp, GET_LITE_CLIENT_INFO, addr)
        info = json.loads(resp.body or b"{}")
        count = int(info.get("liteTopicCount", -1))
        names = info.get("liteTopicSet") or []
        if count < 0 or count > len(names):
            return None
        prefix = lmq_name(topic, "")
        return frozenset(n[len(prefix):] for n in names if n.startswith(prefix))

    async def trigger_dispatch(self, addr: str, *, group: str, client_id: str) -> None:
        """TRIGGER_LITE_DISPATCH: the broker re-offers this client's lite topics that have
        messages left (its full dispatch; later, if the client's event queue is busy)."""
        ext = {"group": group, "clientId": client_id}
        resp = await self.broker.call(addr, TRIGGER_LITE_DISPATCH, ext)
        if resp.code != 0:
            raise response_error(resp, TRIGGER_LITE_DISPATCH, addr)

    async def pop_lite(
        self,
        addr: str,
        *,
        client_id: str,
        group: str,
        topic: str,
        broker_name: str,
        max_nums: int,
        invisible_ms: int,
        poll_ms: int,
        timeout: float,
    ) -> PopResult:
        """POP_LITE_MESSAGE: up to ``max_nums`` messages of the lite topics this client
        subscribed on one broker, invisible for ``invisible_ms``; the broker holds the
        request up to ``poll_ms`` when there are none. Each message's ``lite_topic`` is
        set, its ``queue_offset`` is its offset in the lite topic's queue (id 0) and its
        ``receipt_handle`` the check point (see the module docstring)."""
        ext = {
            "clientId": client_id,
            "consumerGroup": group,
            "topic": topic,
            "maxMsgNum": str(max_nums),
            "invisibleTime": str(invisible_ms),
            "pollTime": str(poll_ms),
            "bornTime": str(time.time_ns() // 1_000_000),
            # The broker's FIFO check: a pop that repeats an attempt id gets the same
            # messages again; every pop here is a new attempt.
            "attemptId": uuid.uuid4().hex,
        }
        answer = await self.popped(
            addr, POP_LITE_MESSAGE, ext, broker_name, timeout, keep_undecodable=True
        )
        if isinstance(answer, PopResult):
            return answer
        resp, decoded, bad = answer
        pop_time = resp.ext_int("popTime")
        invisible = resp.ext_int("invisibleTime")

        def handle(offset: int) -> str:
            return (f"{offset} {pop_time} {invisible} {_ORDER_REVIVE_QUEUE} 0 {broker_name} 0 "
                    f"{offset}")  # fmt: skip

        counts = lite_order_counts(
            resp.ext_fields.get("orderCountInfo"), len(decoded) + len(bad)
        )
        if bad:  # the counts of the decoded records: those at the other places
            taken = {r.index for r in bad}
            counts = [c for i, c in enumerate(counts) if i not in taken]
        out: list[PopMessage] = []
        for m, count in zip(decoded, counts, strict=True):
            raw = m.properties.get(_LMQ_OFFSET, "")
            offset = int(raw) if raw.isdigit() else m.queue_offset
            m.queue_id = 0
            m.queue_offset = offset
            m.receipt_handle = handle(offset)
            m.topic = topic
            m.reconsume_times = max(count, 0)
            m.delivery_attempt = m.reconsume_times + 1
            m.message_group = m.lite_topic
            out.append(m)
        undecodable = []
        for r in bad:
            raw = r.properties.get(_LMQ_OFFSET, "")
            lite_topic = r.properties.get(PROPERTY_LITE_TOPIC)
            settleable = raw.isdigit() and bool(lite_topic)
            # Named as the LMQ's queue 0 at its offset: what the ack and the log name.
            r = replace(r, queue_id=0, queue_offset=int(raw) if raw.isdigit() else None)
            undecodable.append(PoppedUndecodable(r, handle(int(raw)) if settleable else None))
        return PopResult(out, undecodable=undecodable)
