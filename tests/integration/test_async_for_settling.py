"""``async for`` over a push consumer: no message is lost to cancellation, a message left
unsettled by ``break`` / a raising or cancelled body is released to the next loop, and a
held message that is never settled pauses its queue at the span limit, named in a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, dispatch
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from .helpers import eventually, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.2, "long_poll_timeout": 2.0, "pull_request_timeout": 12.0}


async def one_queue_with(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], n: int, **settings: Any
) -> tuple[Consumer, MessageQueue, list[bytes]]:
    """A consumer of a fresh one-queue topic holding ``n`` messages."""
    topic, group = unique_name("iter"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await rocketmq.create_group(group)
    bodies = [b"m%d" % i for i in range(n)]
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        results = await send_many(client, topic, [Message(topic, b) for b in bodies])
        await wait_dispatched(client, topic, results)
    first = ConsumeFromWhere.FIRST_OFFSET
    consumer = Consumer(group, rocketmq.namesrv_addr, consume_from_where=first, **FAST, **settings)
    consumer.subscribe(topic)
    return consumer, results[0].queue, bodies


async def wait_committed(consumer: Consumer, mq: MessageQueue, offset: int) -> None:
    async def reached() -> bool:
        return await consumer.committed(mq) == offset

    await eventually(reached, timeout=10)


async def finish_all(consumer: Consumer, seen: list[bytes], bodies: list[bytes]) -> None:
    """Iterate until every body was seen, acking the last one before leaving."""
    with anyio.fail_after(20):
        async for msg in consumer:
            seen.append(msg.body)
            if set(seen) == set(bodies):
                await msg.ack()
                break


async def test_cancelling_the_loop_at_its_checkpoint_loses_no_message(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    # one worker's burst between checkpoints (consume_concurrency x the handler's burst)
    consumer, mq, bodies = await one_queue_with(rocketmq, unique_name, 40, consume_concurrency=1)
    burst = dispatch._BURST
    seen: list[bytes] = []
    async with consumer:
        with anyio.CancelScope() as scope:
            async for msg in consumer:
                seen.append(msg.body)
                if len(seen) == burst - 1:
                    # Taking the next message passes the loop's checkpoint between
                    # bursts: the cancellation lands there, with messages queued.
                    assert consumer._iterated is not None and len(consumer._iterated.queue) > 0
                    scope.cancel()
        assert len(seen) == burst - 1
        await finish_all(consumer, seen, bodies)
        assert sorted(seen) == sorted(bodies)
        await wait_committed(consumer, mq, 40)


@pytest.mark.parametrize("leave", ["break", "raise", "cancel"])
async def test_the_message_a_loop_leaves_unsettled_is_released_to_the_next_loop(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], leave: str
) -> None:
    consumer, mq, bodies = await one_queue_with(rocketmq, unique_name, 10)
    first: list[bytes] = []
    async with consumer:
        with anyio.CancelScope() as scope:
            try:
                async for msg in consumer:
                    first.append(msg.body)
                    if len(first) < 4:
                        continue
                    if leave == "break":
                        break
                    if leave == "raise":
                        raise LookupError("the body failed")
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()  # cancelled in the body
            except LookupError:
                pass
        assert first == bodies[:4]
        second: list[bytes] = []
        await finish_all(consumer, second, bodies[3:])  # m3 comes again, with the rest
        assert sorted(second) == sorted(bodies[3:])
        # The commit point moved past m3: nothing stays pinned for the process lifetime.
        await wait_committed(consumer, mq, 10)


async def test_a_held_message_pauses_its_queue_at_the_span_limit_and_is_named_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    bound = 0.2
    consumer, mq, bodies = await one_queue_with(
        rocketmq, unique_name, 40,
        consume_concurrently_max_span=10, pull_batch_size=4, stall_warning_after=bound,
    )  # fmt: skip
    seen: list[ConsumerMessage] = []

    def stalls() -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == "queue_stalled_by_unsettled_message"]

    async def consume() -> None:
        async for msg in consumer:
            if not seen:
                msg.hold()  # taken by the application, never settled (yet)
            seen.append(msg)

    with capture_logs() as events:
        async with consumer, anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await eventually(lambda: bool(stalls()), timeout=10)
            (warning,) = stalls()
            assert (warning["queue"], warning["offset"]) == (mq.queue_id, 0)
            # Paused, not trickling: pulled no further than the span past the held one.
            assert len(seen) <= 10 + 4
            count = len(seen)
            await anyio.sleep(5 * bound)  # more bounds pass: no second warning, no pulls
            assert len(stalls()) == 1 and len(seen) == count
            await seen[0].ack()
            await eventually(lambda: len(seen) == 40, timeout=10)
            tg.cancel_scope.cancel()
    assert [m.body for m in seen] == bodies
