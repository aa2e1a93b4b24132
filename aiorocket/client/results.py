"""Results of broker operations: pulls and sends."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from aiorocket.message import MessageExt, MessageQueue
from aiorocket.protocol.message_codec import UndecodableRecord

__all__ = [
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
]


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    #: records that could not be decoded (only with ``pull(..., keep_undecodable=True)``)
    undecodable: list[UndecodableRecord] = field(default_factory=list)


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a message landed.

    ``msg_id`` is the client-assigned id (UNIQ_KEY); ``offset_msg_id`` the broker's.
    """

    status: SendStatus
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    offset_msg_id: str = ""
    transaction_id: str | None = None
