"""The typed results of [`aiorocket.admin.Admin`][]."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiorocket.message import MessageQueue

__all__ = [
    "GroupDescription",
    "GroupLag",
    "Member",
    "OffsetChange",
    "QueueLag",
    "QueueRange",
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
