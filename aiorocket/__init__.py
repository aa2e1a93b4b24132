"""aiorocket: an asyncio-native (anyio) client and consumer framework for Apache RocketMQ.

Everything an application uses is importable from here: the consumers, the producer,
messages, handler results, allocation strategies and every error.

The clients are loaded on first use (PEP 562 ``__getattr__``), not when the package is:
every ``import aiorocket.<module>`` runs this file first, and a module low in the layers
(``aiorocket.protocol.frame``, ``aiorocket.errors``) must not drag the consumer and the
producer in with it (docs/architecture.md). Errors and message types are core modules,
loaded here at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aiorocket._version import __version__
from aiorocket.errors import (
    AccessDeniedError,
    BrokerResponseError,
    ClientClosedError,
    CommitFailedError,
    ConfigError,
    ConnectionClosedError,
    ConsumerNotOnlineError,
    DataLossError,
    FrameTooLargeError,
    GroupNotFoundError,
    GrpcStatusError,
    MessageDecodeError,
    MessageNotFoundError,
    MessageTooLargeError,
    NameServerUnavailableError,
    NoRouteError,
    ProtocolError,
    ProxyResponseError,
    ProxyUnavailableError,
    ReplyTimeoutError,
    RequestTimeoutError,
    ResponseTooLargeError,
    RocketMQError,
    ServiceNotAvailableError,
    SystemBusyError,
    TlsError,
    TopicNotExistError,
    UnsupportedBrokerFeatureError,
    UnsupportedTransportError,
)
from aiorocket.message import Message, MessageExt, MessageQueue

if TYPE_CHECKING:
    from aiorocket.consumer import (
        RECONSUME_LATER,
        SUCCESS,
        AllocateAveragely,
        AllocateAveragelyByCircle,
        AllocateByConfig,
        AllocateByMachineRoom,
        AllocateConsistentHash,
        AllocateMachineRoomNearby,
        AllocateStrategy,
        BatchHandler,
        ConsumeFromWhere,
        Consumer,
        ConsumerConfig,
        ConsumerMessage,
        ConsumeStatus,
        MessageHandler,
        MessageModel,
        PullConsumer,
        QueueStats,
        RebalanceListener,
        Reconsume,
        allocate_averagely,
        stop_on_signals,
    )
    from aiorocket.producer import (
        CompressionType,
        LocalTransaction,
        Producer,
        ProducerConfig,
        QueueSelector,
        SendResult,
        SendStatus,
        TransactionChecker,
        TransactionResult,
        TransactionState,
        hash_selector,
    )

#: The lazily loaded names, by the package that defines them (the same as imported above
#: for type checkers; tests/unit/test_layers.py checks that each of them resolves).
_LAZY: dict[str, tuple[str, ...]] = {
    "aiorocket.consumer": (
        "RECONSUME_LATER", "SUCCESS", "AllocateAveragely", "AllocateAveragelyByCircle",
        "AllocateByConfig", "AllocateByMachineRoom", "AllocateConsistentHash",
        "AllocateMachineRoomNearby", "AllocateStrategy", "BatchHandler", "ConsumeFromWhere",
        "Consumer", "ConsumerConfig", "ConsumerMessage", "ConsumeStatus", "MessageHandler",
        "MessageModel", "PullConsumer", "QueueStats", "RebalanceListener", "Reconsume",
        "allocate_averagely", "stop_on_signals",
    ),
    "aiorocket.producer": (
        "CompressionType", "LocalTransaction", "Producer", "ProducerConfig", "QueueSelector",
        "SendResult", "SendStatus", "TransactionChecker", "TransactionResult",
        "TransactionState", "hash_selector",
    ),
}  # fmt: skip
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "RECONSUME_LATER",
    "SUCCESS",
    "AccessDeniedError",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AllocateStrategy",
    "BatchHandler",
    "BrokerResponseError",
    "ClientClosedError",
    "CommitFailedError",
    "CompressionType",
    "ConfigError",
    "ConnectionClosedError",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "Consumer",
    "ConsumerConfig",
    "ConsumerMessage",
    "ConsumerNotOnlineError",
    "DataLossError",
    "FrameTooLargeError",
    "GroupNotFoundError",
    "GrpcStatusError",
    "LocalTransaction",
    "Message",
    "MessageDecodeError",
    "MessageExt",
    "MessageHandler",
    "MessageModel",
    "MessageNotFoundError",
    "MessageQueue",
    "MessageTooLargeError",
    "NameServerUnavailableError",
    "NoRouteError",
    "Producer",
    "ProducerConfig",
    "ProtocolError",
    "ProxyResponseError",
    "ProxyUnavailableError",
    "PullConsumer",
    "QueueSelector",
    "QueueStats",
    "RebalanceListener",
    "Reconsume",
    "ReplyTimeoutError",
    "RequestTimeoutError",
    "ResponseTooLargeError",
    "RocketMQError",
    "SendResult",
    "SendStatus",
    "ServiceNotAvailableError",
    "SystemBusyError",
    "TlsError",
    "TopicNotExistError",
    "TransactionChecker",
    "TransactionResult",
    "TransactionState",
    "UnsupportedBrokerFeatureError",
    "UnsupportedTransportError",
    "__version__",
    "allocate_averagely",
    "hash_selector",
    "stop_on_signals",
]
