"""A slow (not dead) broker under the stall check, against the real cluster (issue 39).

broker-a of the shared cluster is reached through a ``FaultProxy`` that delays every
chunk: its answers take about a second while broker-b answers at once, so an attempt to
broker-a passes its stall bound (0.25 s here) while another broker answers. Abandoning
such an attempt is right only when another attempt replaces it; the last attempt of a
send, and a transactional half message (one attempt: a second one would be a second
transaction), wait for the slow broker's answer instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from aiorocket.client.results import SendResult
from aiorocket.errors import RequestTimeoutError
from aiorocket.message import Message, MessageExt
from aiorocket.producer import Producer, TransactionState
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.faultproxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

#: seconds the proxy adds to each chunk each way: an answer of broker-a takes ~1 s
SLOW = 0.5
BOTH = ("broker-a", "broker-b")


@asynccontextmanager
async def slow_broker_a(
    rocketmq: LocalRocketMQ, topic: str, group: str, brokers: tuple[str, ...] = BOTH,
    **settings: object,
) -> AsyncIterator[tuple[Producer, FaultProxy]]:  # fmt: skip
    """A producer whose broker-a is behind a proxy, the topic's brokers' latency known."""
    await rocketmq.create_topic(topic, queues=1, brokers=brokers)  # round robin alternates
    broker_a = rocketmq.broker_addrs["broker-a"]
    async with FaultProxy(broker_a) as proxy:
        producer = Producer(group, rocketmq.namesrv_addr, address_map={broker_a: proxy.address},
                            send_timeout=5, **settings)  # type: ignore[arg-type]  # fmt: skip
        async with producer:
            answered: set[str] = set()
            for _ in range(8):  # all answer: the stall check knows their latency
                answered.add((await producer.send(Message(topic, b"warm"))).queue.broker_name)
            assert answered == set(brokers)
            proxy.latency = SLOW
            yield producer, proxy


async def test_the_last_attempt_waits_for_a_slow_broker_instead_of_failing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    # Before: with retries=0 (the exactly-once sink's setting) the send that picked
    # broker-a was abandoned at its stall bound and raised BrokerStalledError, while
    # broker-a stored the message when its answer came.
    topic = unique_name("slow")
    async with slow_broker_a(rocketmq, topic, unique_name("pg"), retries=0) as (p, _):
        results: list[SendResult] = []
        for i in range(2):  # round robin: one of the two picks broker-a
            results.append(await p.send(Message(topic, b"m%d" % i)))
        assert "broker-a" in {r.queue.broker_name for r in results}
        assert p.stall_retries == 0
        # its answer was slow on the wire (write to read), not in the client: it counts
        assert p.fault.snapshot()["broker-a"].latency_ms >= 550


async def test_a_half_message_is_sent_once_to_a_slow_broker(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    # Before: the half message to broker-a was abandoned at its stall bound and sent
    # again to broker-b: both stored it, the local transaction ran and was ended on
    # broker-b only, and broker-a's copy was left to the check-back (which a checker
    # looking up the business transaction answers COMMIT: a duplicate).
    topic = unique_name("slowtx")

    async def checker(msg: MessageExt) -> TransactionState:
        return TransactionState.ROLLBACK

    ran_on: list[str] = []

    async def local(msg: Message, result: SendResult) -> TransactionState:
        ran_on.append(result.queue.broker_name)
        return TransactionState.ROLLBACK

    slow = slow_broker_a(rocketmq, topic, unique_name("pg"), transaction_checker=checker)
    async with slow as (p, _):
        for i in range(2):  # round robin: one of the two picks broker-a
            await p.send_in_transaction(Message(topic, b"t%d" % i), local)
        assert "broker-a" in ran_on  # the slow broker's half was kept and ended there
        assert p.stall_retries == 0  # and never sent again elsewhere


async def test_an_auto_batched_send_keeps_its_own_timeout_on_a_slow_broker(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    # Issue 39, item 7: a request shared by several sends ran under the earliest of their
    # deadlines, so "long" (5 s) failed at "short"'s 1.5 s while broker-a, merely slow,
    # answered the request at ~2 s.
    topic = unique_name("slowbatch")
    outcomes: dict[str, str] = {}
    settings = {"auto_batch": True, "batch_in_flight": 1}
    async with slow_broker_a(rocketmq, topic, unique_name("pg"), ("broker-a",), **settings) as (
        p, _,
    ):  # fmt: skip

        async def send(name: str, timeout: float) -> None:
            try:
                await p.send(Message(topic, name.encode()), timeout=timeout)
            except RequestTimeoutError:
                outcomes[name] = "timed out"
            else:
                outcomes[name] = "ok"

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "first", 5.0)  # the topic's one request, for ~1 s
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(send, "short", 1.5)  # these two queue, then share a request
            tg.start_soon(send, "long", 5.0)
        batcher = p.batcher
        assert batcher is not None and batcher.batches == 1
    assert outcomes == {"first": "ok", "short": "timed out", "long": "ok"}
