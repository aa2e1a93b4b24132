"""Message data types shared by producers, consumers and the wire codecs."""

from __future__ import annotations

import socket
import struct
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiorocket._message_id import offset_message_id

__all__ = [
    "DLQ_TOPIC_PREFIX",
    "KEY_SEPARATOR",
    "PROPERTY_CLUSTER",
    "PROPERTY_CORRELATION_ID",
    "PROPERTY_DELAY_LEVEL",
    "PROPERTY_KEYS",
    "PROPERTY_LITE_TOPIC",
    "PROPERTY_MAX_OFFSET",
    "PROPERTY_MAX_RECONSUME_TIMES",
    "PROPERTY_MESSAGE_TTL",
    "PROPERTY_MESSAGE_TYPE",
    "PROPERTY_MIN_OFFSET",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_PRIORITY",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_RECONSUME_TIME",
    "PROPERTY_REPLY_TO_CLIENT",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_SHARDING_KEY",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TRANSACTION_CHECK_TIMES",
    "PROPERTY_TRANSACTION_PREPARED",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT_STORE_MSG_OK",
    "REPLY_MESSAGE_TYPE",
    "RETRY_TOPIC_PREFIX",
    "SYSTEM_PROPERTIES",
    "Message",
    "MessageExt",
    "MessageQueue",
    "dlq_topic",
    "is_system_property",
    "retry_topic",
]

# Property names (apache/rocketmq MessageConst).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_DELAY_LEVEL = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
#: a priority message's priority (RocketMQ 5.4+)
PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"
#: a lite message's lite topic (RocketMQ 5.5+, a topic of message type LITE)
PROPERTY_LITE_TOPIC = "__LITE_TOPIC"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
# Request-reply (MessageConst's names; aiorocket.producer.reply): a request carries the
# first three, the broker adds CLUSTER to every stored message, a reply is MSG_TYPE=reply.
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_TYPE = "reply"

#: Properties the clients and brokers set for themselves (MessageConst's names): what an
#: operator's view shows apart from the application's own properties.
SYSTEM_PROPERTIES = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
    "EXTEND_UNIQ_INFO", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "INNER_NUM",
    "INNER_BASE", "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET",
    "__transactionId__", "TRANSACTION_CHECK_TIMES", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "__SHARDINGKEY", "PROPERTY_FORWARD_QUEUE_ID",
    "REDIRECT", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT",
    "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "__BORNHOST", "BORN_TIMESTAMP",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "__CRC32#",
    "_SYS_MSG_PRIORITY_", "__LITE_TOPIC",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
})  # fmt: skip


def is_system_property(name: str) -> bool:
    """A property the client or broker set (not the application's own)."""
    return name in SYSTEM_PROPERTIES or name.startswith("__RMQ.TRANSIENT.")


#: Prefixes of a consumer group's retry topic (``%RETRY%<group>``: failed messages come
#: back through it) and dead-letter topic (``%DLQ%<group>``), named by the broker.
RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    """The retry topic of consumer ``group``."""
    return f"{RETRY_TOPIC_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    """The dead-letter topic of consumer ``group``."""
    return f"{DLQ_TOPIC_PREFIX}{group}"


KEY_SEPARATOR = " "


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; the unit of ordering, offsets and rebalance."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(slots=True)
class Message:
    """A message to send.

    ``keys`` are indexed by the broker for lookup; ``tags`` is the single tag consumers
    filter on. ``delay_level`` (1..18 on a default broker) and ``deliver_time_ms`` (an
    absolute epoch-millisecond time, 5.x timer messages) postpone delivery.
    ``priority`` (0 and up, RocketMQ 5.4+, a topic of message type PRIORITY): POP
    consumers get higher priorities first (the broker stores priority ``p`` in queue
    ``min(p, queues - 1)`` and pops the highest queue first).
    ``lite_topic`` (RocketMQ 5.5+, ``topic`` of message type LITE): the lite topic within
    ``topic`` the message belongs to; lite consumers subscribe to lite topics (see
    docs/consumer/lite.md).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_time_ms: int | None = None
    flag: int = 0
    priority: int | None = None
    lite_topic: str | None = None

    def wire_properties(self) -> dict[str, str]:
        """User properties merged with the system properties that this message's fields imply."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(self.keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY_LEVEL] = str(self.delay_level)
        if self.deliver_time_ms is not None:
            props[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if self.priority is not None:
            props[PROPERTY_PRIORITY] = str(self.priority)
        if self.lite_topic is not None:
            props[PROPERTY_LITE_TOPIC] = self.lite_topic
        return props


class _StoredHead:
    """The slots of what a decoder left undecoded (``MessageExt`` below)."""

    __slots__ = ("_head", "_raw_properties")

    #: the record's fixed bytes, when the decoder left fields to read from them
    _head: bytes
    #: the record's properties as stored (validated), until ``properties`` is first read
    _raw_properties: bytes


@dataclass(slots=True, eq=False)
class MessageExt(_StoredHead):
    """A message as the broker stored it, decoded from a pull response.

    ``queue_offset`` is the logical offset within its queue (what consumers commit);
    ``commit_log_offset`` is the physical offset in the broker's commit log (what
    send-back and offset message ids use).
    """

    topic: str
    body: bytes
    properties: Mapping[str, str]
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    store_size: int = 0
    broker_name: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def lite_topic(self) -> str | None:
        """The lite topic of a lite message (RocketMQ 5.5+), else None."""
        return self.properties.get(PROPERTY_LITE_TOPIC)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def offset_msg_id(self) -> str:
        return offset_message_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """The client-assigned unique id (``UNIQ_KEY``), else the offset message id."""
        uniq = self.properties.get(PROPERTY_UNIQ_KEY)
        return uniq if uniq else self.offset_msg_id

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue={self.broker_name}:{self.queue_id}, "
            f"offset={self.queue_offset}, tags={self.tags!r}, body={len(self.body)}B)"
        )


# Fields read on first access (issue 43, goals 1-2; benchmarks/README.md, "Round 8").
# The pull decoder's usual record (V1, IPv4 hosts, uncompressed) leaves these slots empty
# and keeps the record's 88 fixed bytes, already bounds-checked, in ``_head``; each field
# is unpacked from them when first read, then kept in its slot. A handler seldom reads
# them, and unpacking and storing ten values a message (six of them new int or bytes
# objects) was ~2,000 of a message's ~30,800 instructions. A message built any other way
# (its ``__init__``) has every slot filled and no ``_head``.
_inet_ntoa = socket.inet_ntoa


def _int_at(fmt: str, offset: int) -> Callable[[bytes], Any]:
    unpack_from = struct.Struct(fmt).unpack_from
    return lambda head: unpack_from(head, offset)[0]


def _host_at(offset: int) -> Callable[[bytes], str]:
    def host(head: bytes) -> str:
        port = int.from_bytes(head[offset + 4 : offset + 8], "big", signed=True)
        return f"{_inet_ntoa(head[offset : offset + 4])}:{port}"

    return host


#: each deferred field and how it is read from the head (the offsets of ``_decode_usual``'s
#: record layout, aiorocket.protocol.message_codec)
_DEFERRED: dict[str, Callable[[bytes], Any]] = {
    "store_size": _int_at(">i", 0),
    "body_crc": _int_at(">i", 8),
    "flag": _int_at(">i", 16),
    "commit_log_offset": _int_at(">q", 28),
    "sys_flag": _int_at(">i", 36),
    "born_timestamp": _int_at(">q", 40),
    "born_host": _host_at(48),
    "store_timestamp": _int_at(">q", 56),
    "store_host": _host_at(64),
    "prepared_transaction_offset": _int_at(">q", 76),
}


def _deferred(name: str, decode: Callable[[bytes], Any], slot: Any) -> property:
    """The field ``name`` read from its ``slot``, else decoded from the head into it."""
    get, put = slot.__get__, slot.__set__

    def read(self: MessageExt) -> Any:
        try:
            return get(self)
        except AttributeError:
            pass
        try:
            head = self._head
        except AttributeError:
            raise AttributeError(name) from None
        value = decode(head)
        put(self, value)
        return value

    def delete(self: MessageExt) -> None:
        # every field read out and the head dropped first, so that the deleted field
        # stays deleted (reading it raises AttributeError, as it did)
        for other in _DEFERRED:
            getattr(self, other)
        if hasattr(self, "_head"):
            del self._head
        slot.__delete__(self)

    return property(read, put, delete, doc=f"The stored {name}.")


# The properties, likewise (issue 43, goals 1-2; benchmarks/README.md, "Round 9"): the
# pull decoder's usual record keeps its properties' raw bytes in ``_raw_properties`` and
# the ``StoredProperties`` over them (which parses them on first use, as before) is made
# when ``properties`` is first read: a second object a message, made and freed unread by
# most handlers, was ~700 of a message's ~28,400 instructions. The mapping's class is
# the decoder's (aiorocket.protocol.message_codec, a layer above: it sets this).
read_raw_properties: Callable[[bytes], Mapping[str, str]] | None = None


def _deferred_properties(slot: Any) -> property:
    """``properties`` read from its ``slot``, else made from the raw bytes into it."""
    get, put = slot.__get__, slot.__set__

    def read(self: MessageExt) -> Any:
        try:
            return get(self)
        except AttributeError:
            pass
        try:
            raw = self._raw_properties
        except AttributeError:
            raise AttributeError("properties") from None
        assert read_raw_properties is not None  # the decoder that left them set it
        value = read_raw_properties(raw)
        put(self, value)
        del self._raw_properties
        return value

    def delete(self: MessageExt) -> None:
        read(self)  # the raw bytes dropped first, so that the deletion stays
        slot.__delete__(self)

    return property(read, put, delete, doc="The stored properties.")


def _defaulted(default: Any, slot: Any) -> property:
    """A field read from its ``slot``, else ``default`` (which is not stored)."""
    get = slot.__get__

    def read(self: MessageExt) -> Any:
        try:
            return get(self)
        except AttributeError:
            return default

    return property(read, slot.__set__, slot.__delete__, doc="Unset: its default.")


def _slot_name(name: str) -> str:
    """The second name of a deferred field's slot: its own name is the property."""
    return f"_{name}"


def _defer_fields(cls: type[MessageExt], defaults: Mapping[str, Any]) -> None:
    """Each deferred field's slot of ``cls`` under its second name, the field's own
    name a property over it. Python 3.10's ``dataclass(slots=True)`` declares every
    field's slot again in a subclass (3.11 leaves the base's), and a subclass's slot of
    the same name hides the base's property: the subclass gets its own properties."""
    for name, decode in _DEFERRED.items():
        slot = cls.__dict__.get(name)
        if slot is not None and not isinstance(slot, property):
            setattr(cls, _slot_name(name), slot)
            setattr(cls, name, _deferred(name, decode, slot))
    slot = cls.__dict__.get("properties")
    if slot is not None and not isinstance(slot, property):
        setattr(cls, _slot_name("properties"), slot)
        cls.properties = _deferred_properties(slot)  # type: ignore[assignment,misc]
    for name, default in defaults.items():
        slot = cls.__dict__.get(name)
        if slot is not None and not isinstance(slot, property):
            setattr(cls, _slot_name(name), slot)
            setattr(cls, name, _defaulted(default, slot))


#: the fields whose properties every class's ``__init__`` stores past
_STORED_PAST = frozenset({*_DEFERRED, "properties"})

#: each class's own unset defaults, as given to ``init_stores_slots``: a class gets its
#: own and its bases' (a subclass's slot of the same name needs the property again on
#: Python 3.10, see ``_defer_fields``), no other class's. When every call widened one
#: set, a class set up later with a field of such a name but no property over it had
#: its ``__init__`` store that field into a slot the class does not have.
_DEFAULTS: weakref.WeakKeyDictionary[type, Mapping[str, Any]] = weakref.WeakKeyDictionary()


def init_stores_slots(cls: type[MessageExt], defaults: Mapping[str, Any] | None = None) -> None:
    """Give ``cls`` the deferred fields' properties where its own slots would hide them
    (``_defer_fields``), and make its dataclass ``__init__`` store them straight into
    their slots (by their second names) rather than through the properties: a property's
    setter costs ~0.2 µs a field, ten a message built by ``__init__`` (gRPC, pop, the
    checked decoder). The generated code is ``self.<field> = <field>`` per field; only
    the attribute names it stores change.

    ``defaults``: fields of ``cls`` (and its subclasses) that read as the given value
    while their slot is unset, so that a decoder may leave them unset: the fields a
    message seldom changes (benchmarks/README.md, "Round 15")."""
    _DEFAULTS[cls] = dict(defaults or {})
    inherited: dict[str, Any] = {}
    for c in reversed(cls.__mro__):  # the nearest class's default wins
        inherited.update(_DEFAULTS.get(c, {}))
    stored_past = _STORED_PAST | inherited.keys()
    _defer_fields(cls, inherited)
    init = cls.__init__
    code = init.__code__
    init.__code__ = code.replace(
        co_names=tuple(_slot_name(n) if n in stored_past else n for n in code.co_names)
    )


init_stores_slots(MessageExt)
