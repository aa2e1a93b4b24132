"""The pure parts of the admin's plans: which topic change strands messages, and how a
DLQ read skips and pages across its queues (offsets, not a fixed window)."""

from __future__ import annotations

import anyio

from aiorocket.admin import TopicChange, TopicSettings
from aiorocket.admin._dlq import DeadLetterAdmin, _Span
from aiorocket.message import MessageExt, MessageQueue


def change(before: tuple[int, int], after: tuple[int, int]) -> TopicChange:
    return TopicChange("broker-a", TopicSettings(*before), TopicSettings(*after))


def test_fewer_read_queues_strand_fewer_write_queues_drain() -> None:
    assert change((16, 16), (8, 8)).strands
    assert change((16, 16), (8, 8)).stranded() == "broker-a queues 8..15 would no longer be read"
    assert not change((16, 16), (16, 8)).strands  # a drain: queues 8..15 still read
    assert change((16, 8), (8, 16)).strands  # new messages to queues nobody reads
    assert not change((8, 8), (16, 16)).strands
    assert TopicSettings(4, 2, 4, True, {"message.type": "FIFO"}).describe() == (
        "4 read / 2 write queues, perm r, order, type FIFO"
    )


class _Reader(DeadLetterAdmin):
    """Reads offsets as messages: each one's body is ``queue:offset``."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:9876")
        self.reads: list[tuple[int, int, int, int]] = []

    async def _read(
        self, addr: str, mq: MessageQueue, start: int | None, end: int | None, limit: int
    ) -> list[MessageExt]:
        assert start is not None and end is not None
        self.reads.append((mq.queue_id, start, end, limit))
        stop = min(end, start + limit)
        return [
            MessageExt(mq.topic, b"%d:%d" % (mq.queue_id, o), {}, queue_id=mq.queue_id,
                       queue_offset=o, commit_log_offset=0)
            for o in range(start, stop)
        ]  # fmt: skip


def test_a_dlq_read_skips_whole_queues_by_offset_and_pages_past_a_thousand() -> None:
    spans = [_Span(MessageQueue("%DLQ%g", "broker-a", q), "a", 0, first, end)
             for q, (first, end) in enumerate([(0, 600), (100, 700), (5, 5)])]  # fmt: skip
    reader = _Reader()
    everything = anyio.run(reader._read_spans, spans, 0, None)
    assert len(everything) == 1200  # past the old window of 1,000
    reader.reads.clear()
    page = anyio.run(reader._read_spans, spans, 1019, 10)
    assert [m.body for m in page][:2] == [b"1:519", b"1:520"] and len(page) == 10
    assert reader.reads == [(1, 519, 700, 10)]  # queue 0 skipped without reading it
