"""Typed messages of the ``apache.rocketmq.v2`` gRPC API (betterproto dataclasses).

Written by hand from the public protocol definitions (service.proto, definition.proto
of apache/rocketmq-apis): only the messages and fields a client sends or reads. Field
numbers are the wire contract; names follow the definitions so that the API reads like
the upstream documentation. Unknown fields a newer Proxy sends are skipped on decode.

``google.protobuf.Timestamp``/``Duration`` fields are typed ``datetime``/``timedelta``:
betterproto converts them. Proto3 ``optional`` fields are ``optional=True`` (presence is
kept, ``None`` when absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import betterproto

if TYPE_CHECKING:
    # betterproto.Enum emulates IntEnum; mypy reads its conditional base as plain int.
    from enum import IntEnum as _Enum
else:
    _Enum = betterproto.Enum

__all__ = [
    "UA",
    "AckMessageEntry",
    "AckMessageRequest",
    "AckMessageResponse",
    "AckMessageResultEntry",
    "Address",
    "AddressScheme",
    "Assignment",
    "Broker",
    "ChangeInvisibleDurationRequest",
    "ChangeInvisibleDurationResponse",
    "ClientType",
    "Code",
    "CustomizedBackoff",
    "DeadLetterQueue",
    "Digest",
    "DigestType",
    "Encoding",
    "EndTransactionRequest",
    "EndTransactionResponse",
    "Endpoints",
    "ExponentialBackoff",
    "FilterExpression",
    "FilterType",
    "ForwardMessageToDeadLetterQueueRequest",
    "ForwardMessageToDeadLetterQueueResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Language",
    "LiteSubscriptionAction",
    "Message",
    "MessageQueue",
    "MessageType",
    "Metric",
    "NotifyClientTerminationRequest",
    "NotifyClientTerminationResponse",
    "NotifyUnsubscribeLiteCommand",
    "OffsetOption",
    "Permission",
    "PrintThreadStackTraceCommand",
    "Publishing",
    "QueryAssignmentRequest",
    "QueryAssignmentResponse",
    "QueryRouteRequest",
    "QueryRouteResponse",
    "ReceiveMessageRequest",
    "ReceiveMessageResponse",
    "ReconnectEndpointsCommand",
    "RecoverOrphanedTransactionCommand",
    "Resource",
    "RetryPolicy",
    "SendMessageRequest",
    "SendMessageResponse",
    "SendResultEntry",
    "Settings",
    "Status",
    "Subscription",
    "SubscriptionEntry",
    "SyncLiteSubscriptionRequest",
    "SyncLiteSubscriptionResponse",
    "SystemProperties",
    "TelemetryCommand",
    "ThreadStackTrace",
    "TransactionResolution",
    "TransactionSource",
    "VerifyMessageCommand",
    "VerifyMessageResult",
    "oneof",
]


def oneof(message: betterproto.Message, group: str) -> tuple[str, Any]:
    """(field name, value) of the set member of a oneof, ("", None) when none is set.

    betterproto raises AttributeError when an unset member of a oneof is read, so
    oneofs are always read through this.
    """
    return betterproto.which_one_of(message, group)


# -- enums ---------------------------------------------------------------------------


class ClientType(_Enum):
    CLIENT_TYPE_UNSPECIFIED = 0
    PRODUCER = 1
    PUSH_CONSUMER = 2
    SIMPLE_CONSUMER = 3
    PULL_CONSUMER = 4
    LITE_PUSH_CONSUMER = 5
    LITE_SIMPLE_CONSUMER = 6


class FilterType(_Enum):
    FILTER_TYPE_UNSPECIFIED = 0
    TAG = 1
    SQL = 2


class MessageType(_Enum):
    MESSAGE_TYPE_UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


class Permission(_Enum):
    PERMISSION_UNSPECIFIED = 0
    NONE = 1
    READ = 2
    WRITE = 3
    READ_WRITE = 4


class AddressScheme(_Enum):
    ADDRESS_SCHEME_UNSPECIFIED = 0
    IPv4 = 1
    IPv6 = 2
    DOMAIN_NAME = 3


class Encoding(_Enum):
    ENCODING_UNSPECIFIED = 0
    IDENTITY = 1
    GZIP = 2


class DigestType(_Enum):
    DIGEST_TYPE_UNSPECIFIED = 0
    CRC32 = 1
    MD5 = 2
    SHA1 = 3


class TransactionResolution(_Enum):
    TRANSACTION_RESOLUTION_UNSPECIFIED = 0
    COMMIT = 1
    ROLLBACK = 2


class TransactionSource(_Enum):
    SOURCE_UNSPECIFIED = 0
    SOURCE_CLIENT = 1
    SOURCE_SERVER_CHECK = 2


class Language(_Enum):
    LANGUAGE_UNSPECIFIED = 0
    JAVA = 1
    CPP = 2
    DOT_NET = 3
    GOLANG = 4
    RUST = 5
    PYTHON = 6


class Code(_Enum):
    """Status codes of the v2 API (a subset the client names; others stay ints)."""

    CODE_UNSPECIFIED = 0
    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_ACCESS_POINT = 40001
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    ILLEGAL_OFFSET = 40019
    ILLEGAL_LITE_TOPIC = 40020
    INVALID_CLIENT_PROPERTIES = 40021
    UNAUTHORIZED = 40100
    PAYMENT_REQUIRED = 40200
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    OFFSET_NOT_FOUND = 40404
    REQUEST_TIMEOUT = 40800
    PAYLOAD_TOO_LARGE = 41300
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    PRECONDITION_FAILED = 42800
    TOO_MANY_REQUESTS = 42900
    LITE_TOPIC_QUOTA_EXCEEDED = 42901
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 42902
    REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500
    VERSION_UNSUPPORTED = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
    FAILED_TO_CONSUME_MESSAGE = 60000


# -- shared types (definition.proto) ------------------------------------------------


@dataclass(eq=False, repr=False)
class Resource(betterproto.Message):
    resource_namespace: str = betterproto.string_field(1)
    name: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class Address(betterproto.Message):
    host: str = betterproto.string_field(1)
    port: int = betterproto.int32_field(2)


@dataclass(eq=False, repr=False)
class Endpoints(betterproto.Message):
    scheme: AddressScheme = betterproto.enum_field(1)
    addresses: list[Address] = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class Broker(betterproto.Message):
    name: str = betterproto.string_field(1)
    id: int = betterproto.int32_field(2)
    endpoints: Endpoints = betterproto.message_field(3)


@dataclass(eq=False, repr=False)
class MessageQueue(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    id: int = betterproto.int32_field(2)
    permission: Permission = betterproto.enum_field(3)
    broker: Broker = betterproto.message_field(4)
    accept_message_types: list[MessageType] = betterproto.enum_field(5)


@dataclass(eq=False, repr=False)
class FilterExpression(betterproto.Message):
    type: FilterType = betterproto.enum_field(1)
    expression: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class SubscriptionEntry(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    expression: FilterExpression = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class Digest(betterproto.Message):
    type: DigestType = betterproto.enum_field(1)
    checksum: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class DeadLetterQueue(betterproto.Message):
    topic: str = betterproto.string_field(1)
    message_id: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class SystemProperties(betterproto.Message):
    tag: str | None = betterproto.string_field(1, optional=True)
    keys: list[str] = betterproto.string_field(2)
    message_id: str = betterproto.string_field(3)
    body_digest: Digest = betterproto.message_field(4)
    body_encoding: Encoding = betterproto.enum_field(5)
    message_type: MessageType = betterproto.enum_field(6)
    born_timestamp: datetime = betterproto.message_field(7)
    born_host: str = betterproto.string_field(8)
    store_timestamp: datetime | None = betterproto.message_field(9, optional=True)
    store_host: str = betterproto.string_field(10)
    delivery_timestamp: datetime | None = betterproto.message_field(11, optional=True)
    receipt_handle: str | None = betterproto.string_field(12, optional=True)
    queue_id: int = betterproto.int32_field(13)
    queue_offset: int | None = betterproto.int64_field(14, optional=True)
    invisible_duration: timedelta | None = betterproto.message_field(15, optional=True)
    delivery_attempt: int | None = betterproto.int32_field(16, optional=True)
    message_group: str | None = betterproto.string_field(17, optional=True)
    trace_context: str | None = betterproto.string_field(18, optional=True)
    orphaned_transaction_recovery_duration: timedelta | None = betterproto.message_field(
        19, optional=True
    )
    dead_letter_queue: DeadLetterQueue | None = betterproto.message_field(20, optional=True)
    lite_topic: str | None = betterproto.string_field(21, optional=True)
    priority: int | None = betterproto.int32_field(22, optional=True)


@dataclass(eq=False, repr=False)
class Message(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    user_properties: dict[str, str] = betterproto.map_field(
        2, betterproto.TYPE_STRING, betterproto.TYPE_STRING
    )
    system_properties: SystemProperties = betterproto.message_field(3)
    body: bytes = betterproto.bytes_field(4)


@dataclass(eq=False, repr=False)
class Assignment(betterproto.Message):
    message_queue: MessageQueue = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class Status(betterproto.Message):
    code: Code = betterproto.enum_field(1)
    message: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class UA(betterproto.Message):
    language: Language = betterproto.enum_field(1)
    version: str = betterproto.string_field(2)
    platform: str = betterproto.string_field(3)
    hostname: str = betterproto.string_field(4)


@dataclass(eq=False, repr=False)
class ExponentialBackoff(betterproto.Message):
    initial: timedelta = betterproto.message_field(1)
    max: timedelta = betterproto.message_field(2)
    multiplier: float = betterproto.float_field(3)


@dataclass(eq=False, repr=False)
class CustomizedBackoff(betterproto.Message):
    next: list[timedelta] = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class RetryPolicy(betterproto.Message):
    max_attempts: int = betterproto.int32_field(1)
    exponential_backoff: ExponentialBackoff | None = betterproto.message_field(
        2, group="strategy"
    )
    customized_backoff: CustomizedBackoff | None = betterproto.message_field(3, group="strategy")


@dataclass(eq=False, repr=False)
class Publishing(betterproto.Message):
    topics: list[Resource] = betterproto.message_field(1)
    max_body_size: int = betterproto.int32_field(2)
    validate_message_type: bool = betterproto.bool_field(3)


@dataclass(eq=False, repr=False)
class Subscription(betterproto.Message):
    group: Resource | None = betterproto.message_field(1, optional=True)
    subscriptions: list[SubscriptionEntry] = betterproto.message_field(2)
    fifo: bool | None = betterproto.bool_field(3, optional=True)
    receive_batch_size: int | None = betterproto.int32_field(4, optional=True)
    long_polling_timeout: timedelta | None = betterproto.message_field(5, optional=True)
    #: lite push consumers: how many lite topics one client may subscribe to
    lite_subscription_quota: int | None = betterproto.int32_field(6, optional=True)
    #: lite push consumers: the longest lite topic name
    max_lite_topic_size: int | None = betterproto.int32_field(7, optional=True)


@dataclass(eq=False, repr=False)
class Metric(betterproto.Message):
    on: bool = betterproto.bool_field(1)
    endpoints: Endpoints | None = betterproto.message_field(2, optional=True)


@dataclass(eq=False, repr=False)
class Settings(betterproto.Message):
    client_type: ClientType | None = betterproto.enum_field(1, optional=True)
    access_point: Endpoints | None = betterproto.message_field(2, optional=True)
    backoff_policy: RetryPolicy | None = betterproto.message_field(3, optional=True)
    request_timeout: timedelta | None = betterproto.message_field(4, optional=True)
    publishing: Publishing | None = betterproto.message_field(5, group="pub_sub")
    subscription: Subscription | None = betterproto.message_field(6, group="pub_sub")
    user_agent: UA = betterproto.message_field(7)
    metric: Metric = betterproto.message_field(8)


# -- service messages (service.proto) -----------------------------------------------


@dataclass(eq=False, repr=False)
class QueryRouteRequest(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    endpoints: Endpoints = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class QueryRouteResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    message_queues: list[MessageQueue] = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class SendMessageRequest(betterproto.Message):
    messages: list[Message] = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class SendResultEntry(betterproto.Message):
    status: Status = betterproto.message_field(1)
    message_id: str = betterproto.string_field(2)
    transaction_id: str = betterproto.string_field(3)
    offset: int = betterproto.int64_field(4)
    recall_handle: str = betterproto.string_field(5)


@dataclass(eq=False, repr=False)
class SendMessageResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    entries: list[SendResultEntry] = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class QueryAssignmentRequest(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    group: Resource = betterproto.message_field(2)
    endpoints: Endpoints = betterproto.message_field(3)


@dataclass(eq=False, repr=False)
class QueryAssignmentResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    assignments: list[Assignment] = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class ReceiveMessageRequest(betterproto.Message):
    group: Resource = betterproto.message_field(1)
    message_queue: MessageQueue = betterproto.message_field(2)
    filter_expression: FilterExpression = betterproto.message_field(3)
    batch_size: int = betterproto.int32_field(4)
    invisible_duration: timedelta | None = betterproto.message_field(5, optional=True)
    auto_renew: bool = betterproto.bool_field(6)
    long_polling_timeout: timedelta | None = betterproto.message_field(7, optional=True)
    attempt_id: str | None = betterproto.string_field(8, optional=True)


@dataclass(eq=False, repr=False)
class ReceiveMessageResponse(betterproto.Message):
    status: Status | None = betterproto.message_field(1, group="content")
    message: Message | None = betterproto.message_field(2, group="content")
    delivery_timestamp: datetime | None = betterproto.message_field(3, group="content")


@dataclass(eq=False, repr=False)
class AckMessageEntry(betterproto.Message):
    message_id: str = betterproto.string_field(1)
    receipt_handle: str = betterproto.string_field(2)
    lite_topic: str | None = betterproto.string_field(3, optional=True)


@dataclass(eq=False, repr=False)
class AckMessageRequest(betterproto.Message):
    group: Resource = betterproto.message_field(1)
    topic: Resource = betterproto.message_field(2)
    entries: list[AckMessageEntry] = betterproto.message_field(3)


@dataclass(eq=False, repr=False)
class AckMessageResultEntry(betterproto.Message):
    message_id: str = betterproto.string_field(1)
    receipt_handle: str = betterproto.string_field(2)
    status: Status = betterproto.message_field(3)


@dataclass(eq=False, repr=False)
class AckMessageResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    entries: list[AckMessageResultEntry] = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class ForwardMessageToDeadLetterQueueRequest(betterproto.Message):
    group: Resource = betterproto.message_field(1)
    topic: Resource = betterproto.message_field(2)
    receipt_handle: str = betterproto.string_field(3)
    message_id: str = betterproto.string_field(4)
    delivery_attempt: int = betterproto.int32_field(5)
    max_delivery_attempts: int = betterproto.int32_field(6)
    lite_topic: str | None = betterproto.string_field(7, optional=True)


@dataclass(eq=False, repr=False)
class ForwardMessageToDeadLetterQueueResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class RecallMessageRequest(betterproto.Message):
    topic: Resource | None = betterproto.message_field(1, optional=True)
    recall_handle: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class RecallMessageResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    message_id: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class HeartbeatRequest(betterproto.Message):
    group: Resource | None = betterproto.message_field(1, optional=True)
    client_type: ClientType = betterproto.enum_field(2)


@dataclass(eq=False, repr=False)
class HeartbeatResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class EndTransactionRequest(betterproto.Message):
    topic: Resource = betterproto.message_field(1)
    message_id: str = betterproto.string_field(2)
    transaction_id: str = betterproto.string_field(3)
    resolution: TransactionResolution = betterproto.enum_field(4)
    source: TransactionSource = betterproto.enum_field(5)
    trace_context: str = betterproto.string_field(6)


@dataclass(eq=False, repr=False)
class EndTransactionResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class PrintThreadStackTraceCommand(betterproto.Message):
    nonce: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class ReconnectEndpointsCommand(betterproto.Message):
    """The server asks the client to move to a new connection (rocketmq-apis#92: a
    Proxy rebalancing its connections)."""

    nonce: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class ThreadStackTrace(betterproto.Message):
    nonce: str = betterproto.string_field(1)
    thread_stack_trace: str | None = betterproto.string_field(2, optional=True)


@dataclass(eq=False, repr=False)
class VerifyMessageCommand(betterproto.Message):
    nonce: str = betterproto.string_field(1)
    message: Message = betterproto.message_field(2)


@dataclass(eq=False, repr=False)
class VerifyMessageResult(betterproto.Message):
    nonce: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class RecoverOrphanedTransactionCommand(betterproto.Message):
    message: Message = betterproto.message_field(1)
    transaction_id: str = betterproto.string_field(2)


@dataclass(eq=False, repr=False)
class NotifyUnsubscribeLiteCommand(betterproto.Message):
    """The server dropped this client's subscription to ``lite_topic``."""

    lite_topic: str = betterproto.string_field(1)


@dataclass(eq=False, repr=False)
class TelemetryCommand(betterproto.Message):
    status: Status | None = betterproto.message_field(1, optional=True)
    settings: Settings | None = betterproto.message_field(2, group="command")
    thread_stack_trace: ThreadStackTrace | None = betterproto.message_field(3, group="command")
    verify_message_result: VerifyMessageResult | None = betterproto.message_field(
        4, group="command"
    )
    recover_orphaned_transaction_command: RecoverOrphanedTransactionCommand | None = (
        betterproto.message_field(5, group="command")
    )
    print_thread_stack_trace_command: PrintThreadStackTraceCommand | None = (
        betterproto.message_field(6, group="command")
    )
    verify_message_command: VerifyMessageCommand | None = betterproto.message_field(
        7, group="command"
    )
    reconnect_endpoints_command: ReconnectEndpointsCommand | None = betterproto.message_field(
        8, group="command"
    )
    notify_unsubscribe_lite_command: NotifyUnsubscribeLiteCommand | None = (
        betterproto.message_field(9, group="command")
    )


@dataclass(eq=False, repr=False)
class NotifyClientTerminationRequest(betterproto.Message):
    group: Resource | None = betterproto.message_field(1, optional=True)


@dataclass(eq=False, repr=False)
class NotifyClientTerminationResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)


@dataclass(eq=False, repr=False)
class ChangeInvisibleDurationRequest(betterproto.Message):
    group: Resource = betterproto.message_field(1)
    topic: Resource = betterproto.message_field(2)
    receipt_handle: str = betterproto.string_field(3)
    invisible_duration: timedelta = betterproto.message_field(4)
    message_id: str = betterproto.string_field(5)
    lite_topic: str | None = betterproto.string_field(6, optional=True)
    #: lite: the server does not count this postponement as a delivery attempt
    suspend: bool | None = betterproto.bool_field(7, optional=True)


@dataclass(eq=False, repr=False)
class ChangeInvisibleDurationResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
    receipt_handle: str = betterproto.string_field(2)


# -- lite topics (RIP-83, rocketmq-apis 2.1.0+; Apache RocketMQ 5.5.0) --------------


class LiteSubscriptionAction(_Enum):
    PARTIAL_ADD = 0
    PARTIAL_REMOVE = 1
    COMPLETE_ADD = 2
    COMPLETE_REMOVE = 3


@dataclass(eq=False, repr=False)
class OffsetOption(betterproto.Message):
    """Where a new lite subscription starts (one of the four)."""

    policy: int | None = betterproto.enum_field(1, group="offset_type")  # LAST/MIN/MAX
    offset: int | None = betterproto.int64_field(2, group="offset_type")
    tail_n: int | None = betterproto.int64_field(3, group="offset_type")
    timestamp: int | None = betterproto.int64_field(4, group="offset_type")


@dataclass(eq=False, repr=False)
class SyncLiteSubscriptionRequest(betterproto.Message):
    action: LiteSubscriptionAction = betterproto.enum_field(1)
    #: the parent (bind) topic
    topic: Resource = betterproto.message_field(2)
    group: Resource = betterproto.message_field(3)
    lite_topic_set: list[str] = betterproto.string_field(4)
    version: int | None = betterproto.int64_field(5, optional=True)
    offset_option: OffsetOption | None = betterproto.message_field(6, optional=True)


@dataclass(eq=False, repr=False)
class SyncLiteSubscriptionResponse(betterproto.Message):
    status: Status = betterproto.message_field(1)
