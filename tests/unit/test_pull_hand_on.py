"""A queue's next pull leaves before the handlers of the answer it follows run.

The wire sends the frames of one loop iteration in one ``call_soon``'d write
(aiorocket.remoting.wire.ProtocolWire). The pull task wakes the handler workers before
it writes its next pull; when that write was scheduled after the pull task's step, the
workers' bursts (up to 32 handler calls each) ran before it: the queue's next pull left
after its previous batch was handled, and messages stored meanwhile waited for it
(issue 43, goal 4). The read that brought the answer now schedules the write.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumerMessage
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.frame import FrameDecoder
from aiorocket.remoting.wire import ProtocolWire
from tests.unit.consumer_fakes import FakeBroker, FakeCluster, consumer_of, running

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

BATCH = 4


async def test_the_next_pull_is_on_the_wire_before_the_answers_handlers_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    #: (queue id, offset) of every pull handed to the socket
    sent: set[tuple[int, int]] = set()
    flush = ProtocolWire._flush

    def recording_flush(wire: ProtocolWire, frames: list[bytes], *stamp: Any) -> None:
        for cmd in FrameDecoder().feed(b"".join(frames)):
            if cmd.code == RequestCode.PULL_MESSAGE:
                ext = cmd.ext_fields
                sent.add((int(ext["queueId"]), int(ext["queueOffset"])))
        flush(wire, frames, *stamp)

    monkeypatch.setattr(ProtocolWire, "_flush", recording_flush)
    broker = FakeBroker("broker-a", 0)
    for queue_id in (0, 1):
        broker.add(queue_id, *(b"m%d" % i for i in range(3 * BATCH)))
    cluster = FakeCluster({"broker-a": [broker]})
    handled = 0
    late: list[tuple[int, int]] = []  # (queue id, offset) handled before the next pull left
    done = anyio.Event()

    async def handler(msg: ConsumerMessage) -> None:
        nonlocal handled
        # Answers hold BATCH messages from offset 0 on: the one of offset k is followed
        # by the pull of the answer's end.
        queue_id, offset = msg.queue.queue_id, msg.queue_offset
        if (queue_id, (offset // BATCH + 1) * BATCH) not in sent:
            late.append((queue_id, offset))
        handled += 1
        if handled == 6 * BATCH:
            done.set()

    settings: dict[str, Any] = {"pull_batch_size": BATCH}
    async with running(cluster), consumer_of(cluster, handler, **settings):
        with anyio.fail_after(20):
            await done.wait()
    assert late == []
