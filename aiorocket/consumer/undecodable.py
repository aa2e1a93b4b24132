"""Records of a pull or pop answer that could not be decoded: dead-letter them, never
stall.

A corrupt body, unknown compression bits or unreadable properties would otherwise fail
every pull of the queue at the same offset, for ever (a pop: every pop that meets the
record, with the good messages popped beside it). Retrying such a record cannot
help (it fails the same way for every consumer), so it goes straight to the group's
dead-letter queue: CONSUMER_SEND_MSG_BACK names it by commit-log offset and the broker
copies the raw stored record into ``%DLQ%<group>``, where an operator can inspect it.
When that is impossible (broadcasting has no DLQ, the record's header is unreadable, or
the broker refuses), the record is skipped. A send-back that fails for want of the
broker (no master, a timeout, a lost connection) is no refusal: it raises, and the
queue pulls the same answer again later, its offset still before the record (a pop
leaves the record, which comes back after its invisible time). Dead-lettered or
skipped, it is logged at ERROR with its topic, queue, offset and message id, and
counted (``ProcessQueue.undecodable_total``, ``Consumer.undecodable_messages``).

``dead_letter_undecodable`` is the pull path's; the pop path
(``aiorocket.consumer.pop.remoting_source``) settles each record with
``dead_letter_record`` and then acks it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
    "dead_letter_record",
    "dead_letter_undecodable",
    "report_undecodable",
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
            report_undecodable(state, log, record, offset, "skipped", pq=pq)
            return offset + 1
        if queue_offset < offset:
            continue  # before the requested offset (inside a batch): not ours
        if queue_offset >= next_offset:  # framed, but its header is garbage
            report_undecodable(state, log, record, None, "skipped", pq=pq)
            continue
        await dead_letter_record(
            state, log, record, pq.mq.topic, pq.mq.queue_id, pq.mq.broker_name,
            lambda stub: settler.send_to_dead_letter(pq, stub, raise_unreachable=True), pq=pq,
        )  # fmt: skip
    return next_offset


async def dead_letter_record(
    state: ConsumerState,
    log: Logger,
    record: UndecodableRecord,
    topic: str,
    queue_id: int,
    broker_name: str,
    forward: Callable[[ConsumerMessage], Awaitable[bool]],
    *,
    pq: ProcessQueue | None = None,
) -> bool:
    """Send framed ``record`` (of ``topic``'s queue ``queue_id`` on ``broker_name``)
    to the group's DLQ with ``forward`` (True: the broker took it), or skip it; log
    and count which. True: dead-lettered. ``forward`` raises when the broker could not
    be reached: then nothing is logged or counted (the record is met again)."""
    assert record.queue_offset is not None and record.commit_log_offset is not None
    action = "skipped"
    # Without a readable store host and message id, the commit-log offset is not
    # to be trusted either: sending back the wrong message would be worse.
    if record.msg_id and state.config.message_model is MessageModel.CLUSTERING:
        stub = ConsumerMessage(
            topic,
            b"",
            {PROPERTY_UNIQ_KEY: record.msg_id},
            queue_id,
            record.queue_offset,
            record.commit_log_offset,
            store_host=record.store_host,
            broker_name=broker_name,
        )
        if await forward(stub):
            action = "dead_lettered"
    report_undecodable(state, log, record, record.queue_offset, action, pq=pq)
    return action == "dead_lettered"


def report_undecodable(
    state: ConsumerState,
    log: Logger,
    record: UndecodableRecord,
    offset: int | None,
    action: str,
    *,
    pq: ProcessQueue | None = None,
) -> None:
    """Log ``record`` at ERROR (what became of it: ``action``) and count it."""
    if pq is not None:
        pq.undecodable_total += 1
    state.undecodable_messages += 1
    log.error(
        "undecodable_message",
        offset=offset,
        msg_id=record.msg_id or None,
        action=action,
        error=record.error,
    )
