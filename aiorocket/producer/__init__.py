"""Producers: sending, ordered sending, batches, transactions, fault tolerance."""

from aiorocket.client.results import SendResult, SendStatus
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.producer import Producer
from aiorocket.producer.reply import create_reply
from aiorocket.producer.selectors import QueueSelector, hash_selector, java_hash
from aiorocket.producer.transaction import (
    LocalTransaction,
    TransactionChecker,
    TransactionResult,
    TransactionState,
)
from aiorocket.protocol.message_codec import CompressionType

__all__ = [
    "CompressionType",
    "LatencyFaultTolerance",
    "LocalTransaction",
    "Producer",
    "ProducerConfig",
    "QueueSelector",
    "SendResult",
    "SendStatus",
    "TransactionChecker",
    "TransactionResult",
    "TransactionState",
    "create_reply",
    "hash_selector",
    "java_hash",
]
