"""Synchronous handlers that overrun consume_timeout: their threads are capped (real broker)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import ConfigError
from aiorocket.message import Message
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from .helpers import eventually, one_queue_topic, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_timed_out_sync_handler_threads_are_capped_and_new_calls_wait(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("threads"), unique_name("g")
    await one_queue_topic(rocketmq, topic, group)
    hang = threading.Event()
    calls: list[tuple[int, int]] = []  # (offset, reconsume times), in call order

    def handle(msg: ConsumerMessage) -> None:  # a plain function: run in a thread
        calls.append((msg.queue_offset, msg.reconsume_times))
        if msg.queue_offset == 0 and msg.reconsume_times == 0:
            hang.wait(60)  # stuck in something no timeout can interrupt

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_concurrency=1,
                        consume_timeout=0.3, max_abandoned_threads=1, retry_delay_level=1,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        long_poll_timeout=2.0, pull_request_timeout=12.0)  # fmt: skip
    consumer.subscribe(topic)
    try:
        with capture_logs() as logs:
            async with consumer:
                async with ClientInstance(rocketmq.namesrv_addr) as client:
                    sent = await send_many(client, topic, [Message(topic, b"m")] * 3)
                    await wait_dispatched(client, topic, sent)
                # The first call times out and its thread is abandoned: the cap (1) is
                # reached, so the next message waits instead of taking a new thread.
                await eventually(lambda: any(e["event"] == "handler_threads_capped" for e in logs)
                                 or len(calls) > 1)  # fmt: skip
                assert calls == [(0, 0)]
                assert consumer.abandoned_threads == 1
                hang.set()  # the stuck thread returns at last: the others go on
                await eventually(lambda: {(1, 0), (2, 0), (0, 1)} <= set(calls))
                assert consumer.abandoned_threads == 0
                assert consumer.abandoned_threads_total == 1
    finally:
        hang.set()
    events = [e["event"] for e in logs]
    assert events.count("handler_thread_abandoned") == 1
    assert events.count("handler_threads_capped") == 1


def test_max_abandoned_threads_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_abandoned_threads"):
        Consumer("g", "127.0.0.1:9876", max_abandoned_threads=0)
