"""Pop consumption over remoting: the broker's POP_MESSAGE, ACK_MESSAGE,
BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME requests (RocketMQ 5.x brokers).

A popped message is invisible to the rest of its group until it is acked or its
invisible time ends; then the broker delivers it again from the group's pop retry topic
(``%RETRY%<group>_<topic>``, or ``%RETRY%<group>+<topic>`` with retry v2). What settles
a message is its *check point* (the ``POP_CK`` string, our ``receipt_handle``), which the
client builds from the pop answer, as the Java client does::

    ckStartOffset popTime invisibleTime reviveQid retryMark brokerName queueId offset

``retryMark`` is 0 for the topic itself, 1/2 for its retry topic (v1/v2). The broker
finds the check point an ack belongs to by (start offset, pop time, queue) and sets the
bit ``offset - ckStartOffset``.

A message popped from the group's retry topic comes, by default
(``popResponseReturnActualRetryTopic=false``, 5.x), under the topic it was sent to, with
its real check point in its ``POP_CK`` property; that one is taken as it is (as the Java
client does), since the topic no longer tells the retry mark: a check point built from
it names mark 0, the broker answers SUCCESS to its ack and renewal, and the message
comes back every invisible time until the dead-letter queue. Only a retried message
(``reconsume_times`` > 0) can carry it, so the others' properties stay unparsed.

A ChangeInvisibleTime acks the old check point and writes a new one *for this message
alone*, starting at its own offset; so the new receipt handle's start offset is the
message's offset (the answer carries only the new pop time and invisible time). Acking a
renewed message with the old start offset names a bit of a check point that does not
exist: the broker answers SUCCESS and the message comes back (the defect of the 5.x
Proxy, apache/rocketmq#9583; tests/integration/test_remoting_pop.py shows the remoting
path is right).

A batch ack names each message by its bit ``offset - ckStartOffset``, so it cannot name
a message below its check point's start, and the broker does give such check points: a
5.x broker whose stored pop offset is wrong for the queue (OFFSET_TOO_SMALL,
OFFSET_OVERFLOW_BADLY, OFFSET_FOUND_NULL; seen after a broker SIGKILL and restart) reads
again from the corrected offset but keeps the stale one as the check point's start, in
``startOffsetInfo`` and ``POP_CK`` alike (PopMessageProcessor.popMsgFromQueue). Such a
message (``CheckPoint.batchable`` false) is acked with ACK_MESSAGE; the broker answers
SUCCESS but cannot find it in its check point (PopCheckPoint.indexOfAck), so it comes
back after its invisible time: delivered twice, never lost.

Request codes above 32767 need the JSON header, which is the only one we send.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from aiorocket.client.broker import response_error
from aiorocket.errors import ConfigError
from aiorocket.message import RETRY_TOPIC_PREFIX
from aiorocket.protocol.message_codec import UndecodableRecord, decode_messages
from aiorocket.received import PopMessage

if TYPE_CHECKING:
    from aiorocket.client.broker import BrokerClient
    from aiorocket.protocol.command import RemotingCommand

__all__ = [
    "ACK_MESSAGE",
    "BATCH_ACK_MESSAGE",
    "BATCH_ACK_SPAN",
    "CHANGE_MESSAGE_INVISIBLETIME",
    "POP_MESSAGE",
    "CheckPoint",
    "PopRequests",
    "PopResult",
    "PoppedUndecodable",
    "group_config",
    "group_retry_max_times",
    "pop_retry_topic",
]

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
BATCH_ACK_MESSAGE = 200151
#: answers of a pop that found nothing (long poll over, or the broker's poll queue full)
_PULL_NOT_FOUND = 19
_POLLING_FULL = 209
_POLLING_TIMEOUT = 210
#: the revive queue id of an orderly pop's check points (KeyBuilder.POP_ORDER_REVIVE_QUEUE)
ORDER_REVIVE_QUEUE = 999
#: where a group with no pop progress starts (ConsumeInitMode)
INIT_MODE_FIRST, INIT_MODE_LAST = 0, 1
#: the property a retried message's check point comes in (MessageConst.PROPERTY_POP_CK)
PROPERTY_POP_CK = "POP_CK"
#: the bits a batch ack sets per check point at most: 0 .. BATCH_ACK_SPAN - 1 (a check
#: point's messages lie within one pop's read, far closer than this; a farther one is
#: acked alone rather than in a bitmap of that size)
BATCH_ACK_SPAN = 1 << 15


def _retry_mark(stored_topic: str) -> str:
    """0: the topic itself; 1 / 2: the group's pop retry topic, v1 / v2."""
    if not stored_topic.startswith(RETRY_TOPIC_PREFIX):
        return "0"
    return "2" if "+" in stored_topic else "1"


def pop_retry_topic(topic: str, group: str, mark: str) -> str:
    """The topic a check point with ``mark`` belongs to."""
    if mark == "1":
        return f"{RETRY_TOPIC_PREFIX}{group}_{topic}"
    if mark == "2":
        return f"{RETRY_TOPIC_PREFIX}{group}+{topic}"
    return topic


def _pairs(info: str | None) -> dict[str, str]:
    """``mark queue value;...`` (the pop answer's offset and count infos) by ``mark@queue``."""
    out: dict[str, str] = {}
    for one in (info or "").split(";"):
        parts = one.split(" ")
        if len(parts) == 3:
            out[f"{parts[0]}@{parts[1]}"] = parts[2]
    return out


@dataclass(slots=True, frozen=True)
class PoppedUndecodable:
    """A popped record that could not be decoded, and its check point (None when the
    record's queue, offset or topic could not be read, or are not among those the
    answer lists as popped: it cannot be settled)."""

    record: UndecodableRecord
    receipt_handle: str | None


@dataclass(slots=True)
class PopResult:
    """One pop's answer: the messages (none when the long poll ended empty)."""

    messages: list[PopMessage] = field(default_factory=list)
    #: messages left in the popped queues (the broker's estimate)
    rest: int = 0
    #: the broker's poll queue was full: it held no poll for us
    polling_full: bool = False
    #: records that could not be decoded (only with ``pop(..., keep_undecodable=True)``)
    undecodable: list[PoppedUndecodable] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class CheckPoint:
    """A receipt handle (``POP_CK``) read back."""

    start: int
    pop_time: int
    invisible_ms: int
    revive_qid: int
    mark: str
    broker_name: str
    queue_id: int
    offset: int

    @classmethod
    def parse(cls, handle: str) -> CheckPoint:
        """Raises ``ConfigError`` (not retriable) when ``handle`` is not a check point."""
        p = handle.split(" ")
        try:
            return cls(int(p[0]), int(p[1]), int(p[2]), int(p[3]), p[4], p[5], int(p[6]),
                       int(p[7]))  # fmt: skip
        except (ValueError, IndexError):
            raise ConfigError(f"not a remoting POP receipt handle: {handle!r}") from None

    @classmethod
    def given(cls, handle: str | None) -> CheckPoint | None:
        """The broker's check point (``POP_CK``), or None when absent or unreadable."""
        if not handle:
            return None
        try:
            ck = cls.parse(handle)
        except ConfigError:
            return None
        return ck if ck.mark in ("0", "1", "2") else None

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    @property
    def batchable(self) -> bool:
        """A batch ack can name this message: its offset is a bit of its check point's
        (not below its start, see the module docstring)."""
        return 0 <= self.offset - self.start < BATCH_ACK_SPAN

    def handle(self) -> str:
        return (
            f"{self.start} {self.pop_time} {self.invisible_ms} {self.revive_qid} {self.mark} "
            f"{self.broker_name} {self.queue_id} {self.offset}"
        )


class _CheckPoints:
    """The check points of one pop answer's records (see the module docstring)."""

    def __init__(self, resp: RemotingCommand, broker_name: str) -> None:
        self.pop_time = resp.ext_int("popTime")
        self.invisible = resp.ext_int("invisibleTime")
        self.revive_qid = resp.ext_int("reviveQid")
        self.broker_name = broker_name
        self.starts = _pairs(resp.ext_fields.get("startOffsetInfo"))
        self.listed = _pairs(resp.ext_fields.get("msgOffsetInfo"))
        self.first: dict[str, int] = {}
        #: (the handle up to its offset, the retry mark) by (stored topic, queue)
        self._heads: dict[tuple[str, int], tuple[str, str]] = {}
        #: the check points of the answer's records so far (kept only when a record
        #: could not be decoded)
        self.claimed: set[str] = set()

    def unclaimed(self, ck: CheckPoint) -> bool:
        """``ck``, of an undecodable record, is one the answer lists as popped
        (``msgOffsetInfo``; without it, of a popped queue at or past its start) and no
        other record's: the queue and offset read from a bad record may be garbage, and
        an ack of them would settle another message."""
        if ck.handle() in self.claimed:
            return False
        self.claimed.add(ck.handle())
        key = f"{ck.mark}@{ck.queue_id}"
        listed = self.listed.get(key)
        if listed is not None:
            return str(ck.offset) in listed.split(",")
        start = self.starts.get(key)
        return start is not None and ck.offset >= int(start)

    def of(self, stored_topic: str, queue_id: int, offset: int, given: str | None) -> CheckPoint:
        """The check point of the record at ``offset`` of queue ``queue_id``: the one
        the broker gave (``POP_CK``), else built from the answer."""
        ck = CheckPoint.given(given)
        if ck is not None:
            return ck
        mark = _retry_mark(stored_topic)
        return CheckPoint(
            self._start(mark, queue_id, offset), self.pop_time, self.invisible,
            self.revive_qid, mark, self.broker_name, queue_id, offset,
        )  # fmt: skip

    def handle_of(
        self, stored_topic: str, queue_id: int, offset: int, given: str | None
    ) -> tuple[str, str]:
        """``of(...)``'s receipt handle and retry mark. Per message on the hot path: a
        record without ``given`` (every first delivery) builds no ``CheckPoint``."""
        if given is not None:
            ck = self.of(stored_topic, queue_id, offset, given)
            return ck.handle(), ck.mark
        # The records of one queue share all but the offset: its handle's head is made
        # once per queue (in the field order of CheckPoint.handle()).
        head = self._heads.get((stored_topic, queue_id))
        if head is None:
            mark = _retry_mark(stored_topic)
            start = self._start(mark, queue_id, offset)
            head = self._heads[stored_topic, queue_id] = (
                f"{start} {self.pop_time} {self.invisible} {self.revive_qid} {mark} "
                f"{self.broker_name} {queue_id} ", mark,
            )  # fmt: skip
        return head[0] + str(offset), head[1]

    def _start(self, mark: str, queue_id: int, offset: int) -> int:
        key = f"{mark}@{queue_id}"
        start_raw = self.starts.get(key)
        # Without startOffsetInfo (an old broker), the batch's first offset per queue.
        return int(start_raw) if start_raw is not None else self.first.setdefault(key, offset)


class PopRequests:
    """The broker's pop requests, on top of a ``BrokerClient``."""

    def __init__(self, broker: BrokerClient) -> None:
        self.broker = broker

    async def pop(
        self,
        addr: str,
        group: str,
        topic: str,
        broker_name: str,
        *,
        queue_id: int = -1,
        max_nums: int = 32,
        invisible_ms: int,
        poll_ms: int,
        init_mode: int = INIT_MODE_LAST,
        expression: str = "*",
        expression_type: str = "TAG",
        order: bool = False,
        timeout: float,
        keep_undecodable: bool = False,
    ) -> PopResult:
        """POP_MESSAGE: up to ``max_nums`` messages of ``topic`` on one broker (of one
        queue, or any with ``queue_id=-1``, then also from the group's retry topic),
        invisible for ``invisible_ms``; the broker holds the request up to ``poll_ms``
        when it finds nothing. Each message's ``receipt_handle`` is its check point and
        its topic is ``topic`` (a retried one's stored topic may be the retry topic).
        ``keep_undecodable``: records that cannot be decoded are listed in
        ``undecodable`` with their check points, instead of failing the pop."""
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "maxMsgNums": str(max_nums),
            "invisibleTime": str(invisible_ms),
            "pollTime": str(poll_ms),
            "bornTime": str(time.time_ns() // 1_000_000),
            "initMode": str(init_mode),
            "expType": expression_type,
            "exp": expression,
            "order": "true" if order else "false",
            "bname": broker_name,
        }
        answer = await self.popped(
            addr, POP_MESSAGE, ext, broker_name, timeout, keep_undecodable=keep_undecodable
        )
        if isinstance(answer, PopResult):
            return answer
        resp, messages, bad = answer
        checks = _CheckPoints(resp, broker_name)
        counts = _pairs(resp.ext_fields.get("orderCountInfo"))
        out: list[PopMessage] = []
        for m in messages:
            # Only a retried message can carry the broker's check point: the others'
            # properties are not parsed for it.
            given = m.properties.get(PROPERTY_POP_CK) if m.reconsume_times > 0 else None
            m.receipt_handle, mark = checks.handle_of(m.topic, m.queue_id, m.queue_offset, given)
            if bad:
                checks.claimed.add(m.receipt_handle)
            if order:
                key = f"{mark}@{m.queue_id}"
                count = counts.get(f"{mark}@qo{m.queue_id}%{m.queue_offset}") or counts.get(key)
                if count is not None and int(count) > 0:
                    m.reconsume_times = int(count)
            m.topic = topic
            m.delivery_attempt = m.reconsume_times + 1
            out.append(m)
        undecodable = []
        for r in bad:
            handle = None
            # Without its topic (then its properties were unreadable too), the record's
            # retry mark is unknown: a guess could name another message.
            if r.queue_id is not None and r.queue_offset is not None and r.topic:
                given = r.properties.get(PROPERTY_POP_CK)
                ck = checks.of(r.topic, r.queue_id, r.queue_offset, given)
                handle = ck.handle() if checks.unclaimed(ck) else None
            undecodable.append(PoppedUndecodable(r, handle))
        return PopResult(out, rest=resp.ext_int("restNum", 0), undecodable=undecodable)

    async def popped(
        self,
        addr: str,
        code: int,
        ext: dict[str, str],
        broker_name: str,
        timeout: float,
        *,
        keep_undecodable: bool = False,
    ) -> PopResult | tuple[RemotingCommand, list[PopMessage], list[UndecodableRecord]]:
        """One pop request (``code``): an empty ``PopResult`` when nothing came, else the
        answer and its messages, decoded. A record that cannot be decoded fails the whole
        pop with ``MessageDecodeError``, unless ``keep_undecodable``: then it is left out
        of the messages and listed apart."""
        resp = await self.broker.call(addr, code, ext, timeout=timeout)
        if resp.code in (_PULL_NOT_FOUND, _POLLING_TIMEOUT, _POLLING_FULL):
            return PopResult(polling_full=resp.code == _POLLING_FULL)
        if resp.code != 0:
            raise response_error(resp, code, addr)
        bad: list[UndecodableRecord] = []
        # read where it was received, not copied out first (benchmarks/README.md, "Round 12")
        data, start, end = resp.body_in_place()
        messages = decode_messages(
            data, broker_name=broker_name, message_class=PopMessage,
            undecodable=bad if keep_undecodable else None, start=start, end=end,
        )  # fmt: skip
        return resp, cast("list[PopMessage]", messages), bad  # decoded as message_class

    async def ack(
        self, addr: str, group: str, topic: str, handle: str, *, lite_topic: str | None = None
    ) -> None:
        """ACK_MESSAGE of one message of ``topic`` (of its ``lite_topic``: a lite
        message). The broker's error answer raises its typed error (``retriable`` as the
        code says: SYSTEM_BUSY is, MESSAGE_ILLEGAL for an order offset it no longer
        knows is not); an ack of what is acked already is answered with success."""
        ck = CheckPoint.parse(handle)
        ext = {
            "consumerGroup": group,
            "topic": pop_retry_topic(topic, group, ck.mark),
            "queueId": str(ck.queue_id),
            "extraInfo": handle,
            "offset": str(ck.offset),
            "bname": ck.broker_name,
        }
        if lite_topic is not None:
            ext["liteTopic"] = lite_topic
        resp = await self.broker.call(addr, ACK_MESSAGE, ext)
        if resp.code != 0:
            raise response_error(resp, ACK_MESSAGE, addr)

    async def batch_ack(
        self, addr: str, group: str, topic: str, handles: Sequence[str | CheckPoint]
    ) -> None:
        """BATCH_ACK_MESSAGE: every message of ``handles`` (one broker) in one request,
        as a bit set per check point; an error answer raises its typed error. Each
        handle must be ``CheckPoint.batchable`` (else ``ConfigError``, nothing sent): the
        others are acked with ``ack``. A handle may be given parsed already (a caller
        that checked ``batchable`` need not have it parsed twice)."""
        acks: dict[tuple[str, int, int, int], dict[str, object]] = {}
        bits: dict[tuple[str, int, int, int], int] = {}
        broker_name = ""
        for handle in handles:
            ck = CheckPoint.parse(handle) if isinstance(handle, str) else handle
            if not 0 <= ck.offset - ck.start < BATCH_ACK_SPAN:  # ck.batchable, inline
                raise ConfigError(f"a batch ack cannot name {handle!r}: ack it alone")
            broker_name = ck.broker_name
            key = (ck.mark, ck.queue_id, ck.start, ck.pop_time)
            if key not in acks:
                acks[key] = {
                    "c": group, "t": topic, "r": ck.mark, "so": ck.start, "q": ck.queue_id,
                    "rq": ck.revive_qid, "pt": ck.pop_time, "it": ck.invisible_ms,
                }  # fmt: skip
                bits[key] = 0
            bits[key] |= 1 << (ck.offset - ck.start)
        for key, ack in acks.items():
            n = bits[key]
            ack["b"] = base64.b64encode(n.to_bytes((n.bit_length() + 7) // 8, "little")).decode()
        body = json.dumps({"brokerName": broker_name, "acks": list(acks.values())}).encode()
        resp = await self.broker.call(addr, BATCH_ACK_MESSAGE, {}, body)
        if resp.code != 0:
            raise response_error(resp, BATCH_ACK_MESSAGE, addr)

    async def change_invisible_time(
        self,
        addr: str,
        group: str,
        topic: str,
        handle: str,
        invisible_ms: int,
        *,
        lite_topic: str | None = None,
    ) -> str:
        """CHANGE_MESSAGE_INVISIBLETIME: the message (of ``lite_topic``: a lite message)
        becomes visible ``invisible_ms`` from now; returns its new receipt handle (see
        the module docstring)."""
        ck = CheckPoint.parse(handle)
        ext = {
            "consumerGroup": group,
            "topic": pop_retry_topic(topic, group, ck.mark),
            "queueId": str(ck.queue_id),
            "extraInfo": handle,
            "offset": str(ck.offset),
            "invisibleTime": str(invisible_ms),
            "bname": ck.broker_name,
        }
        if lite_topic is not None:
            ext["liteTopic"] = lite_topic
        resp = await self.broker.call(addr, CHANGE_MESSAGE_INVISIBLETIME, ext)
        if resp.code != 0:
            raise response_error(resp, CHANGE_MESSAGE_INVISIBLETIME, addr)
        new = CheckPoint(
            ck.offset, resp.ext_int("popTime"), resp.ext_int("invisibleTime"),
            resp.ext_int("reviveQid"), ck.mark, ck.broker_name, ck.queue_id, ck.offset,
        )  # fmt: skip
        return new.handle()


async def group_config(broker: BrokerClient, addr: str, group: str) -> dict[str, Any] | None:
    """The group's SubscriptionGroupConfig on a broker (GET_SUBSCRIPTIONGROUP_CONFIG), or
    None. Asking creates the group where the broker auto-creates groups, as a pop would."""
    resp = await broker.call(addr, 352, {"group": group})
    if resp.code != 0 or not resp.body:
        return None
    config = json.loads(resp.body)
    return config if isinstance(config, dict) else None


async def group_retry_max_times(broker: BrokerClient, addr: str, group: str) -> int | None:
    """The group's ``retryMaxTimes`` on a broker, or None (see ``group_config``)."""
    value = (await group_config(broker, addr, group) or {}).get("retryMaxTimes")
    return int(value) if value is not None else None
