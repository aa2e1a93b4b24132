"""What a send returns, on either transport (``SendResult``, ``SendStatus``).

In the neutral core because both the remoting producer and the gRPC one build it:
neither transport's package imports the other's. Public as ``aiorocket.producer.SendResult``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from aiorocket.message import MessageQueue

__all__ = ["SendResult", "SendStatus", "results_of_batch", "send_result"]


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


# A frozen dataclass's __init__ goes through object.__setattr__ once per field, which
# made building a result 4x dearer than setting the slots (2.3 vs 0.6 µs, measured for
# issue 43): a send builds one a message, so both builders below fill ``_Unfrozen``.
_new = object.__new__


class _Unfrozen:
    """``SendResult``'s slots, in its order, without the frozen ``__setattr__``: a batch's
    results are filled in as these (plain slot stores, not a setter call each) and then
    become ``SendResult``s by ``__class__`` assignment, which Python allows between
    classes of the same slots; half the CPU of the setters, and every message of an
    auto-batched request gets one (benchmarks/README.md, "Goal 3, round 10")."""

    __slots__ = SendResult.__slots__

    status: SendStatus
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    offset_msg_id: str
    transaction_id: str | None
    recall_handle: str | None


def results_of_batch(
    result: SendResult, msg_ids: Sequence[str], offset_msg_ids: Sequence[str]
) -> list[SendResult]:
    """One result per message of a batch stored as ``result`` says: its own id and
    broker id, consecutive queue offsets (-1 when the broker gave none)."""
    status, queue, first, txn = (
        result.status,
        result.queue,
        result.queue_offset,
        result.transaction_id,
    )
    offsets = range(first, first + len(msg_ids)) if first >= 0 else repeat(-1)
    out: list[Any] = []
    append = out.append
    # not strict: ``offsets`` may be endless (``repeat``); the ids are as many
    for msg_id, offset_msg_id, offset in zip(msg_ids, offset_msg_ids, offsets, strict=False):
        r = _new(_Unfrozen)
        r.status = status
        r.msg_id = msg_id
        r.queue = queue
        r.queue_offset = offset
        r.offset_msg_id = offset_msg_id
        r.transaction_id = txn
        r.recall_handle = None
        r.__class__ = SendResult  # type: ignore[assignment]
        append(r)
    return out


def send_result(
    status: SendStatus, msg_id: str, queue: MessageQueue, queue_offset: int,
    offset_msg_id: str, transaction_id: str | None, recall_handle: str | None,
) -> SendResult:  # fmt: skip
    """``SendResult(...)`` filled in as an ``_Unfrozen`` (as ``results_of_batch`` does: a
    plain slot store a field, not a setter call): a broker's answer to each
    single-message send builds one."""
    r: Any = _new(_Unfrozen)
    r.status = status
    r.msg_id = msg_id
    r.queue = queue
    r.queue_offset = queue_offset
    r.offset_msg_id = offset_msg_id
    r.transaction_id = transaction_id
    r.recall_handle = recall_handle
    r.__class__ = SendResult
    return r  # type: ignore[no-any-return]
