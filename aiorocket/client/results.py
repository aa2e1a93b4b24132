"""Results of broker operations: pulls and sends.

The send result is shared with the gRPC transport, so it is defined in the neutral core
(``aiorocket._send_result``) and re-exported here.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiorocket._send_result import SendResult, SendStatus
from aiorocket.message import MessageExt
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
    """One pull's answer. (``BrokerClient.pull`` makes it by position: its fields' order
    is read there.)"""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    #: records that could not be decoded (only with ``pull(..., keep_undecodable=True)``)
    undecodable: list[UndecodableRecord] = field(default_factory=list)
    #: the body length every message has, when the decoder read them all as records laid
    #: out alike (``decode_messages``' summary); -1: not known
    body_len: int = -1
    #: the messages' queue offsets in order, when the decoder read them with their
    #: records (``decode_messages``' ``offsets``); None: not known
    offsets: Sequence[int] | None = None
