"""What a send returns, on either transport (``SendResult``, ``SendStatus``).

In the neutral core because both the remoting producer and the gRPC one build it:
neither transport's package imports the other's. Public as ``aiorocket.producer.SendResult``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiorocket.message import MessageQueue

__all__ = ["SendResult", "SendStatus"]


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
    #: a timer (``deliver_time_ms``) message's handle for ``Producer.recall`` before its
    #: delivery time (RocketMQ 5.3.2+ brokers), else None
    recall_handle: str | None = None
