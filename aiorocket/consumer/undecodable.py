"""Records of a pull answer that could not be decoded: dead-letter them, never stall.

A corrupt body, unknown compression bits or unreadable properties would otherwise fail
every pull of the queue at the same offset, for ever. Retrying such a record cannot
help (it fails the same way for every consumer), so it goes straight to the group's
dead-letter queue: CONSUMER_SEND_MSG_BACK names it by commit-log offset and the broker
copies the raw stored record into ``%DLQ%<group>``, where an operator can inspect it.
When that is impossible (broadcasting has no DLQ, the record's header is unreadable, or
the broker refuses), the record is skipped. A send-back that fails for want of the
broker (no master, a timeout, a lost connection) is no refusal: it raises, and the
queue pulls the same answer again later, its offset still before the record. Dead-
lettered or skipped, it is logged at ERROR with its topic, queue, offset and message
id, and counted (``ProcessQueue.undecodable_total``,
``Consumer.undecodable_messages``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocket.client.results import PullResult
from aiorocket.consumer.config import MessageModel
from aiorocket.message import PROPERTY_UNIQ_KEY
from aiorocket.protocol.message_codec import UndecodableRecord
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.settle import RemotingSettler
    from aiorocket.consumer.state import ConsumerState

__all__ = [
    "dead_letter_undecodable",
]


async def dead_letter_undecodable(
    state: ConsumerState,
    settler: RemotingSettler,
    pq: ProcessQueue,
    result: PullResult,
    offset: int,
    log: Logger,
) -> int:
    """Dead-letter or skip ``result.undecodable``; return the pull's next begin offset.

    Called before the pull's messages are recorded, so a cancellation here, or the
    RocketMQError raised when a send-back could not reach the broker, leaves the whole
    answer unrecorded: the queue is pulled again from ``offset``.
    """
    next_offset = result.next_begin_offset
    known = [m.queue_offset for m in result.messages]
    known += [
        r.queue_offset
        for r in result.undecodable
        if r.queue_offset is not None and r.queue_offset < next_offset
    ]
    for record in result.undecodable:
        queue_offset = record.queue_offset
        if queue_offset is None:
            # The record's length cannot be trusted, so neither can anything after it.
            # Pull again from the first offset not read; when that is this record
            # (it came first), skip exactly it.
            if known and max(known) >= offset:
                return max(known) + 1
            _report(state, pq, log, record, offset, "skipped")
            return offset + 1
        if queue_offset < offset:
            continue  # before the requested offset (inside a batch): not ours
        if queue_offset >= next_offset:  # framed, but its header is garbage
            _report(state, pq, log, record, None, "skipped")
            continue
        action = "skipped"
        # Without a readable store host and message id, the commit-log offset is not
        # to be trusted either: sending back the wrong message would be worse.
        possible = record.msg_id and state.config.message_model is MessageModel.CLUSTERING
        stub = _stub(pq, record) if possible else None
        if stub is not None and await settler.send_to_dead_letter(pq, stub, raise_unreachable=True):
            action = "dead_lettered"
        _report(state, pq, log, record, queue_offset, action)
    return next_offset


def _stub(pq: ProcessQueue, record: UndecodableRecord) -> ConsumerMessage:
    """What CONSUMER_SEND_MSG_BACK needs of the record: its commit-log offset and ids."""
    assert record.queue_offset is not None and record.commit_log_offset is not None
    return ConsumerMessage(
        pq.mq.topic,
        b"",
        {PROPERTY_UNIQ_KEY: record.msg_id} if record.msg_id else {},
        pq.mq.queue_id,
        record.queue_offset,
        record.commit_log_offset,
        store_host=record.store_host,
        broker_name=pq.mq.broker_name,
    )


def _report(
    state: ConsumerState,
    pq: ProcessQueue,
    log: Logger,
    record: UndecodableRecord,
    offset: int | None,
    action: str,
) -> None:
    pq.undecodable_total += 1
    state.undecodable_messages += 1
    log.error(
        "undecodable_message",
        offset=offset,
        msg_id=record.msg_id or None,
        action=action,
        error=record.error,
    )
