"""Consumers: the push consumer engine, allocation strategies, offsets."""

from aiorocket.consumer.allocation import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    allocate_averagely,
)
from aiorocket.consumer.config import ConsumeFromWhere, ConsumerConfig, MessageModel
from aiorocket.consumer.consumer import BatchHandler, Consumer, MessageHandler
from aiorocket.consumer.dedup import Dedup, DedupStore, MemoryDedupStore
from aiorocket.consumer.engine import RebalanceListener
from aiorocket.consumer.pop.lite import LiteOffset
from aiorocket.consumer.pull_consumer import PullConsumer
from aiorocket.consumer.state import PullObserver
from aiorocket.consumer.stats import QueueStats
from aiorocket.received import ConsumerMessage
from aiorocket.results import RECONSUME_LATER, SUCCESS, ConsumeStatus, Reconsume
from aiorocket.shutdown import stop_on_signals

__all__ = [
    "RECONSUME_LATER",
    "SUCCESS",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AllocateStrategy",
    "BatchHandler",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "Consumer",
    "ConsumerConfig",
    "ConsumerMessage",
    "Dedup",
    "DedupStore",
    "LiteOffset",
    "MemoryDedupStore",
    "MessageHandler",
    "MessageModel",
    "PullConsumer",
    "PullObserver",
    "QueueStats",
    "RebalanceListener",
    "Reconsume",
    "allocate_averagely",
    "stop_on_signals",
]
