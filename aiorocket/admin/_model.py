"""The typed results of [`aiorocket.admin.Admin`][]."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from aiorocket.client.lite import LITE_BIND_TOPIC, LITE_QUOTA, LITE_SUB_MODEL
from aiorocket.message import MessageExt, MessageQueue

__all__ = [
    "BrokerStatus",
    "CustomizedRetry",
    "ExponentialRetry",
    "GroupConfig",
    "GroupDescription",
    "GroupLag",
    "GroupProgress",
    "Member",
    "OffsetChange",
    "ProducerClient",
    "QueueLag",
    "QueueRange",
    "ResendPlan",
    "Resent",
    "TopicChange",
    "TopicSettings",
    "TopicStats",
]


@dataclass(frozen=True, slots=True)
class QueueRange:
    """One queue of a topic: the offsets it holds and when it was last written."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    #: store time (epoch ms) of the newest message; 0 when the queue never held one
    last_store_ms: int

    @property
    def messages(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    queues: list[QueueRange]

    @property
    def messages(self) -> int:
        """Messages stored in all queues."""
        return sum(q.messages for q in self.queues)

    @property
    def last_store_ms(self) -> int:
        return max((q.last_store_ms for q in self.queues), default=0)


@dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue of a group: its committed offset, the queue's end, the difference."""

    queue: MessageQueue
    committed: int
    max_offset: int
    #: store time (epoch ms) of the last consumed message, 0 when unknown
    last_consumed_ms: int = 0

    @property
    def lag(self) -> int:
        return max(self.max_offset - max(self.committed, 0), 0)


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    queues: list[QueueLag]

    @property
    def total(self) -> int:
        return sum(q.lag for q in self.queues)

    def by_topic(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.queue.topic] = out.get(q.queue.topic, 0) + q.lag
        return out


@dataclass(frozen=True, slots=True)
class Member:
    """A connected member of a consumer group."""

    client_id: str
    address: str
    language: str
    version: int
    #: the queues it consumes, when it answered GET_CONSUMER_RUNNING_INFO
    assignment: list[MessageQueue] | None = None
    #: the retries it allows a failed message (its ``max_reconsume_times``, sent with
    #: each failed message: it wins over the group's ``retry_max_times`` for push and
    #: pull consumers), when it reported it
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    members: list[Member]
    #: topic -> filter expression
    subscriptions: dict[str, str] = field(default_factory=dict)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""


@dataclass(frozen=True, slots=True)
class OffsetChange:
    """A queue's committed offset before a reset and the offset it is (or would be) set to."""

    queue: MessageQueue
    old: int
    new: int


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker of the cluster and its figures (GET_BROKER_RUNTIME_INFO)."""

    cluster: str
    name: str
    #: 0 for the master, else a slave
    broker_id: int
    address: str
    #: e.g. ``V5_5_0``; "" when the broker did not answer
    version: str = ""
    #: messages stored per second (the broker's last-minute average)
    put_tps: float = 0.0
    #: messages sent to consumers per second
    get_tps: float = 0.0
    put_today: int = 0
    got_today: int = 0
    boot_ms: int = 0
    #: the error when the broker did not answer
    error: str = ""
    #: every figure the broker reported, as it reported it
    runtime: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExponentialRetry:
    """Retry delays that double (``multiplier``) from ``initial_ms`` up to ``max_ms``."""

    initial_ms: int = 5000
    max_ms: int = 7_200_000
    multiplier: int = 2


@dataclass(frozen=True, slots=True)
class CustomizedRetry:
    """Retry delays listed one per attempt (the delay levels' 1s 5s 10s ... 2h by default)."""

    delays_ms: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A consumer group's subscription group config on the brokers."""

    group: str
    #: the group may consume (off: its pulls are refused)
    consume_enable: bool = True
    #: broadcasting consumers are allowed
    broadcast_enable: bool = True
    #: FIFO: the group consumes each queue in order (the Proxy's FIFO consumption)
    orderly: bool = False
    #: deliveries after the first before a message goes to the DLQ
    retry_max_times: int = 16
    retry_queues: int = 1
    #: minutes a POP (Proxy) consumer may hold a message before it is redelivered
    consume_timeout_minutes: int = 15
    #: the retry schedule of POP (Proxy) consumers; None: the broker's default
    retry_policy: ExponentialRetry | CustomizedRetry | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    #: brokers holding this config
    brokers: tuple[str, ...] = ()
    #: every field the broker returned (the ones above included)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def lite_bind_topic(self) -> str | None:
        """A lite group's parent topic (RocketMQ 5.5+ ``lite.bind.topic``), else None."""
        return self.attributes.get(LITE_BIND_TOPIC) or None

    @property
    def lite_quota(self) -> int | None:
        """A lite group's lite subscriptions per client, where set
        (``lite.sub.client.quota``; the broker's default is 2000)."""
        raw = self.attributes.get(LITE_QUOTA)
        return int(raw) if raw is not None and raw.lstrip("-").isdigit() else None

    @property
    def lite_exclusive(self) -> bool:
        """A lite group whose lite topics each belong to one member (``lite.sub.model``
        Exclusive), not shared."""
        return self.attributes.get(LITE_SUB_MODEL, "").lower() == "exclusive"


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """One consumer group's position over all its topics."""

    group: str
    #: messages stored but not consumed yet, over all its queues
    lag: int
    #: topics it has offsets for (its retry topic included)
    topics: tuple[str, ...]
    #: connected members, -1 when unknown
    members: int
    #: store time (epoch ms) of the newest message it consumed, 0 when unknown
    last_consumed_ms: int = 0


@dataclass(frozen=True, slots=True)
class ProducerClient:
    """A producer connected to a broker."""

    group: str
    client_id: str
    address: str
    language: str
    version: int
    broker: str
    last_update_ms: int = 0


@dataclass(frozen=True, slots=True)
class Resent:
    """A dead-lettered message and where it went (or would go, in a dry run)."""

    msg_id: str
    dlq_offset_msg_id: str
    topic: str
    #: the new message's id; "" in a dry run
    new_msg_id: str = ""


_PERM_NAMES = {6: "rw", 4: "r", 2: "w", 0: "none"}


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's settings on one broker (its GET_TOPIC_CONFIG)."""

    read_queues: int
    write_queues: int
    #: PermName bits: 6 rw, 4 r, 2 w, 0 none
    perm: int = 6
    order: bool = False
    #: 5.x attributes, e.g. ``{"message.type": "FIFO"}``
    attributes: dict[str, str] = field(default_factory=dict)

    def replace(
        self, *, read_queues: int | None, write_queues: int | None, perm: int | None
    ) -> TopicSettings:
        """These settings with those given (not None) changed."""
        return replace(
            self,
            read_queues=self.read_queues if read_queues is None else read_queues,
            write_queues=self.write_queues if write_queues is None else write_queues,
            perm=self.perm if perm is None else perm,
        )

    def describe(self) -> str:
        text = (f"{self.read_queues} read / {self.write_queues} write queues, "
                f"perm {_PERM_NAMES.get(self.perm, self.perm)}")  # fmt: skip
        if self.order:
            text += ", order"
        kind = self.attributes.get("message.type")
        return f"{text}, type {kind}" if kind else text


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What ``Admin.update_topic`` changes (or would, in a dry run) on one broker."""

    broker: str
    before: TopicSettings
    after: TopicSettings

    @property
    def strands(self) -> bool:
        """Queues that hold (or will receive) messages are no longer read: fewer read
        queues than now, or than are written to."""
        return self.after.read_queues < max(self.before.read_queues, self.after.write_queues)

    def stranded(self) -> str:
        """Which queues of this broker are no longer read."""
        last = max(self.before.read_queues, self.after.write_queues) - 1
        first = self.after.read_queues
        return f"{self.broker} queues {first}..{last} would no longer be read"


@dataclass(slots=True)
class ResendPlan:
    """What ``Admin.resend`` sends: dead letters of ``group`` read by
    ``Admin.plan_resend``, and where they go."""

    group: str
    #: (dead letter, the topic it came from), in DLQ order
    letters: list[tuple[MessageExt, str]]
    #: ``%RETRY%<group>`` (only the group gets them); "" for the original topic
    target: str
    #: with ``target`` "": the other groups of the original topic(s), which get them too
    other_groups: list[str] = field(default_factory=list)
    #: dead letters after those planned, left for a later run (``limit`` / ``skip``)
    remaining: int = 0
    #: dead letters an earlier run resent (before each queue's resend mark), skipped
    already_resent: int = 0
    #: DLQ queue -> its resend mark once the plan is sent (``everything`` only)
    marks: dict[MessageQueue, int] = field(default_factory=dict)

    def resent(self) -> list[Resent]:
        """The plan as a dry run's result (no new message ids)."""
        return [Resent(m.msg_id, m.offset_msg_id, self.target or t) for m, t in self.letters]
