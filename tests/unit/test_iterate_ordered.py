"""``async for`` over a FIFO group keeps each message group in order
(aiorocket.consumer.iterate_ordered): a failed message is retried in place before the
group's next one, dead-lettered at its last attempt, and never acked by the loop that
failed it. A fake Proxy whose settings say FIFO; the real Proxy's case is
tests/integration/test_grpc_push.py::test_fifo_group_under_async_for_retries_in_place.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.grpc import _pb as pb
from aiorocket.testing.fake_grpc import FakeProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fifo_proxy() -> FakeProxy:
    """A fake Proxy whose settings say FIFO, as a Proxy's do for a FIFO group."""
    proxy = FakeProxy()
    proxy.fifo = True
    return proxy


def message(i: int) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="t"),
        system_properties=pb.SystemProperties(
            message_id=f"id{i}", receipt_handle=f"rh{i}", delivery_attempt=1,
            message_group="order-42", born_timestamp=datetime.now(timezone.utc),
        ),
        body=f"step-{i}".encode(),
    )


def seen_as(msg: ConsumerMessage) -> str:
    return f"{msg.body.decode()}#{msg.delivery_attempt}"  # type: ignore[attr-defined]


def fifo_consumer(proxy: FakeProxy, **settings: Any) -> Consumer:
    consumer = Consumer("g", proxy=proxy.endpoint, long_poll_timeout=1, **settings)
    consumer.subscribe("t")
    return consumer


async def test_a_failed_body_is_retried_before_the_groups_next_message() -> None:
    seen: list[str] = []
    async with fifo_proxy() as proxy, fifo_consumer(proxy) as consumer:
        proxy.messages = [message(1), message(2)]
        with anyio.fail_after(10):
            async for msg in consumer:
                seen.append(seen_as(msg))
                try:
                    async with msg:
                        if seen == ["step-1#1"]:
                            raise RuntimeError("step 1 failed once")
                except RuntimeError:
                    continue
                if msg.body == b"step-2":
                    break
        assert seen == ["step-1#1", "step-1#2", "step-2#1"]
        with anyio.fail_after(5):
            await proxy.wait_acks(2)
    assert proxy.acked == ["rh1", "rh2"] and proxy.invisible_changes == []


async def test_a_message_failed_twice_in_one_attempt_is_retried_once() -> None:
    """``msg.nack()`` inside ``async with msg:`` whose body then raises: one failure."""
    seen: list[str] = []
    async with fifo_proxy() as proxy, fifo_consumer(proxy) as consumer:
        proxy.messages = [message(1), message(2)]
        with anyio.fail_after(10):
            async for msg in consumer:
                seen.append(seen_as(msg))
                if msg.body == b"step-2":
                    await msg.ack()
                    break
                if msg.delivery_attempt == 1:
                    with pytest.raises(RuntimeError):
                        async with msg:
                            await msg.nack()
                            raise RuntimeError("failed, and said so twice")
    assert seen == ["step-1#1", "step-1#2", "step-2#1"]


async def test_the_last_attempt_goes_to_the_dead_letter_queue_then_the_group_moves_on() -> None:
    seen: list[str] = []
    async with fifo_proxy() as proxy, fifo_consumer(proxy, max_reconsume_times=1) as consumer:
        proxy.messages = [message(1), message(2)]
        with anyio.fail_after(10):
            async for msg in consumer:
                seen.append(seen_as(msg))
                if msg.body == b"step-1":
                    await msg.nack()
                    continue
                await msg.ack()
                break
    assert seen == ["step-1#1", "step-1#2", "step-2#1"]
    assert proxy.dead_lettered == ["rh1"] and proxy.acked == ["rh2"]


async def test_a_loop_that_failed_a_message_does_not_ack_it_when_another_retries_it() -> None:
    """Two loops; the one that failed step 1 is still busy after the retry's pause:
    step 1 comes back only once that loop asked past it (else that loop, moving on,
    would ack it while the other still handles it, and step 2 would start before
    step 1 ended), and is acked once, before step 2."""
    seen: list[str] = []
    failed = anyio.Event()

    async def loop(consumer: Consumer) -> None:
        async for msg in consumer.messages():
            seen.append(seen_as(msg))
            if seen_as(msg) == "step-1#1":
                await msg.nack()
                failed.set()
                await anyio.sleep(0.3)  # longer than the retry's pause
            elif seen_as(msg) == "step-1#2":
                await anyio.sleep(0.5)  # still handling when the first loop moves on
                seen.append("end step-1#2")
            else:
                await msg.ack()
                tg.cancel_scope.cancel()

    async with fifo_proxy() as proxy, fifo_consumer(proxy) as consumer:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(loop, consumer)
                tg.start_soon(loop, consumer)
                proxy.messages = [message(1), message(2)]
                await failed.wait()
        with anyio.fail_after(5):
            await proxy.wait_acks(2)
    assert seen == ["step-1#1", "step-1#2", "end step-1#2", "step-2#1"]
    assert proxy.acked == ["rh1", "rh2"]



async def test_a_dead_lettering_cut_by_the_close_neither_raises_nor_settles_twice() -> None:
    """The loop nacks its message at the last attempt; the dead-letter request is still
    out (the Proxy holds it) when the consumer closes, which releases the unsettled
    message (invisible time 0). The request then fails: no retry in place (the
    consumer is closed; its task group has stopped), nothing raised into the
    application, the message counted out of the cache once. Before, the late failure
    started the retry in the closed task group: RuntimeError from ``msg.nack()``."""
    errors: list[BaseException] = []

    async def nack(msg: ConsumerMessage) -> None:
        try:
            await msg.nack()
        except Exception as exc:
            errors.append(exc)

    async with fifo_proxy() as proxy:
        proxy.dead_letter_gate = asyncio.Event()
        proxy.dead_letter_refusal = GRPCError(Status.UNAVAILABLE, "fake: DLQ refused")
        consumer = fifo_consumer(proxy, max_reconsume_times=0)
        async with anyio.create_task_group() as tg:
            async with consumer:
                proxy.messages = [message(1)]
                with anyio.fail_after(10):
                    async for msg in consumer:
                        msg.hold()
                        break
                    tg.start_soon(nack, msg)
                    await proxy.dead_letter_started.wait()
            proxy.dead_letter_gate.set()
    assert errors == []
    assert proxy.invisible_changes == [("rh1", 0.0)]  # released by the close
    assert consumer._backend.runtime.budget.count == 0  # type: ignore[union-attr]
