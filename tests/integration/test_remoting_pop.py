"""POP consumption over remoting (``Consumer(..., consume_mode="pop")``), against the
brokers of the local cluster: no Proxy.

The same runtime as over gRPC (receivers, renewer, acks, settler, the shared delivery
strategies) with the brokers' POP_MESSAGE / BATCH_ACK_MESSAGE / ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME (aiorocket.client.pop). Issue 33.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.client.pop import CheckPoint, PopRequests
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.consumer.backend import PopBackend, remoting_source
from aiorocket.consumer.pop.remoting_source import RemotingSource
from aiorocket.consumer.pop.runtime import PopRuntime
from aiorocket.errors import UnsupportedTransportError
from aiorocket.integrations.health import consumer_health, is_live
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.received import PopMessage
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.helpers import eventually
from tests.integration.test_grpc_push import _dead_letters

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: the smallest invisible duration the consumer accepts: what the renewal tests use
INVISIBLE = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pop_consumer(
    rocketmq: LocalRocketMQ, group: str, topic: str, handler: Any = None, **settings: Any
) -> Consumer:
    consumer = Consumer(
        group, rocketmq.namesrv_addr, handler=handler, consume_mode="pop",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, long_poll_timeout=3, **settings,
    )  # fmt: skip
    consumer.subscribe(topic)
    return consumer


def runtime_of(consumer: Consumer) -> PopRuntime:
    runtime = cast(PopBackend, consumer._backend).runtime
    assert runtime is not None
    return runtime


async def send(rocketmq: LocalRocketMQ, topic: str, bodies: list[bytes], **kw: Any) -> None:
    async with Producer("pop-test-producer", rocketmq.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body), **kw)


async def test_ack_after_renewal_of_a_later_message_of_a_batch(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """apache/rocketmq#9583 (over the Proxy, an ack after ChangeInvisibleDuration of any
    but a batch's first message is ignored) does not hit remoting: the renewed message's
    check point starts at its own offset, and an ack with it holds. The control acks
    another renewed message as the Proxy does (the batch's start offset): the broker
    answers SUCCESS and the message comes back, so the test can tell the two apart."""
    topic, group = unique_name("rpop9583"), unique_name("g")
    broker = next(iter(rocketmq.broker_addrs))
    await rocketmq.create_topic(topic, queues=1, brokers=[broker])
    await send(rocketmq, topic, [b"first", b"right", b"wrong"])
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        addr = rocketmq.broker_addrs[broker]
        requests = PopRequests(client.broker)
        popped = await requests.pop(
            addr, group, topic, broker, invisible_ms=10_000, poll_ms=3000, init_mode=0,
            timeout=10,
        )  # fmt: skip
        first, right, wrong = popped.messages
        assert {CheckPoint.parse(m.receipt_handle).start for m in popped.messages} == {0}
        renewed = [
            await requests.change_invisible_time(addr, group, topic, m.receipt_handle, 10_000)
            for m in (right, wrong)
        ]
        assert CheckPoint.parse(renewed[0]).start == right.queue_offset == 1
        await requests.ack(addr, group, topic, renewed[0])  # raises on an error answer
        ck = CheckPoint.parse(renewed[1])
        proxy_like = replace(ck, start=0).handle()
        await requests.ack(addr, group, topic, proxy_like)  # accepted, yet ignored
        await requests.batch_ack(addr, group, topic, [first.receipt_handle])
        back: list[bytes] = []
        with anyio.fail_after(90):
            while b"wrong" not in back:
                again = await requests.pop(
                    addr, group, topic, broker, invisible_ms=60_000, poll_ms=3000, timeout=10
                )
                back += [m.body for m in again.messages]
    assert back == [b"wrong"]  # "right" was acked for good, and "first" by the batch


async def test_consume_and_ack(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Every message is handled once and acked: the group's progress on the broker
    reaches the end of each queue; queue-level features raise a clear error."""
    topic, group = unique_name("rpop"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    bodies = [f"m{i}".encode() for i in range(40)]
    await send(rocketmq, topic, bodies)
    seen: Counter[bytes] = Counter()
    all_seen = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage) and msg.topic == topic and msg.delivery_attempt == 1
        seen[msg.body] += 1
        if len(seen) == len(bodies):
            all_seen.set()

    consumer = pop_consumer(rocketmq, group, topic, handle)
    async with consumer:
        assert consumer.has_joined
        await consumer.wait_joined()
        with pytest.raises(UnsupportedTransportError, match="consume_mode='pull'"):
            consumer.assignment()
        with pytest.raises(UnsupportedTransportError, match="consume_mode='pull'"):
            consumer.stats()
        # The service integrations' health report works (no queues of its own to list).
        assert is_live(consumer, stuck_after=1.0)
        report = await consumer_health(consumer, stuck_after=1.0)
        assert report["joined"] and report["live"] and report["topics"] == [topic]
        with anyio.fail_after(30):
            await all_seen.wait()
        runtime = runtime_of(consumer)
        await eventually(lambda: runtime.acks.acked == len(bodies), timeout=10)
        assert runtime.acks.failed == 0 and not runtime.source.server_renews
    assert runtime.unsent_acks == 0
    assert set(seen) == set(bodies) and max(seen.values()) == 1
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.get_route(topic)

        async def caught_up() -> bool:
            for mq in route.read_queues():
                addr = route.master_addr(mq.broker_name)
                assert addr is not None
                end = await client.broker.get_max_offset(addr, mq)
                if await client.broker.query_consumer_offset(addr, group, mq) != end:
                    return False
            return True

        await eventually(caught_up, timeout=30, every=0.5)


async def test_failure_retry_then_dlq(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A failing message comes back from the group's pop retry topic after the first
    pop delay (10 s) as attempt 2, and after the group's retryMaxTimes (1 here) it goes
    to %DLQ%<group>; a message that succeeds does not."""
    topic, group = unique_name("rpopdlq"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await rocketmq.create_group(group, retry_max_times=1)
    await send(rocketmq, topic, [b"bad", b"ok"])
    attempts: list[tuple[int, float]] = []

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage)
        if msg.body == b"bad":
            attempts.append((msg.delivery_attempt, time.monotonic()))
            raise RuntimeError("poison")

    async with pop_consumer(rocketmq, group, topic, handle) as consumer:
        assert runtime_of(consumer).settler.max_attempts == 2
        with anyio.fail_after(60):
            while b"bad" not in await _dead_letters(rocketmq, group):  # noqa: ASYNC110
                await anyio.sleep(0.5)
    assert [a for a, _ in attempts] == [1, 2]
    assert attempts[1][1] - attempts[0][1] >= 9.5  # the first pop delay: 10 s
    assert b"ok" not in await _dead_letters(rocketmq, group)


async def test_a_retried_message_is_settled_by_the_check_point_the_broker_gave(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A message popped from the group's pop retry topic comes under its own topic, its
    check point (retry mark 1) in POP_CK (5.x, popResponseReturnActualRetryTopic=false).
    Its batch ack, its single ack (orderly acks), its dead-lettering, and a renewal
    followed by an ack all name that check point and hold: none of them comes back,
    while an unsettled control comes back every invisible time (1 s here) and marks
    two of them gone by. (A check point built from the topic names mark 0: the broker
    answers SUCCESS, and the message came back as attempt 3, 4, ... until the DLQ.)"""
    topic, group = unique_name("rpopck"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await send(rocketmq, topic, [b"batch", b"single", b"renew", b"dlq", b"control"])
    source = remoting_source(pop_consumer(rocketmq, group, topic)._state,
                             [rocketmq.namesrv_addr], None)()  # fmt: skip
    assert isinstance(source, RemotingSource)
    attempts: defaultdict[bytes, list[int]] = defaultdict(list)
    await source.open()
    try:
        with anyio.fail_after(60):
            while len(attempts[b"control"]) < 4:
                for m in await source.receive(16, 1.0):
                    attempts[m.body].append(m.delivery_attempt)
                    if m.delivery_attempt == 1 or m.body == b"control":
                        continue  # comes back from the retry topic after 1 s
                    assert CheckPoint.parse(m.receipt_handle).mark == "1"
                    if m.body == b"single":  # raises on an error answer
                        addr = rocketmq.broker_addrs[m.broker_name]
                        await source.requests.ack(addr, group, topic, m.receipt_handle)
                        continue
                    if m.body == b"renew":
                        await source.change_invisible(m, 2.0)
                    elif m.body == b"dlq":  # then acked, as the runtime does
                        await source.dead_letter(m, attempt=2, max_attempts=2)
                    assert await source.ack(topic, [m]) == []
    finally:
        await source.close()
    assert attempts == {b"control": [1, 2, 3, 4], **{b: [1, 2] for b in (
        b"batch", b"single", b"renew", b"dlq")}}  # fmt: skip
    assert b"dlq" in await _dead_letters(rocketmq, group)


async def test_handler_longer_than_invisible_time_is_not_redelivered(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A handler running 2.5x the invisible time, while another member of the group
    pops the same queue: the client's renewer keeps the message invisible, it is
    handled once and its ack (after renewals) holds."""
    topic, group = unique_name("rpoplong"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await send(rocketmq, topic, [b"slow"])
    calls: list[str] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        calls.append(msg.msg_id)
        await anyio.sleep(INVISIBLE * 2.5)
        done.set()

    a = pop_consumer(rocketmq, group, topic, handle, invisible_duration=INVISIBLE)
    b = pop_consumer(rocketmq, group, topic, handle, invisible_duration=INVISIBLE)
    async with a, b:
        with anyio.fail_after(60):
            await done.wait()
        renewed = runtime_of(a).renewer.renewed + runtime_of(b).renewer.renewed
        assert renewed >= 2
        # The ack after renewals holds: nothing comes back within another invisible
        # time and a revive pass (the broker's check every few seconds).
        await anyio.sleep(INVISIBLE + 5)  # an absence: no event announces it
    assert len(calls) == 1


async def test_more_consumers_than_queues_all_receive(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """8 members of a group on a topic of 4 queues (2 per broker): every member
    receives messages (a pull group would leave 4 idle), none is handled twice."""
    topic, group = unique_name("rpop8"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    per: dict[int, int] = defaultdict(int)
    seen: Counter[bytes] = Counter()
    n = 400
    all_seen = anyio.Event()

    def handler_of(i: int) -> Any:
        async def handle(msg: ConsumerMessage) -> None:
            per[i] += 1
            seen[msg.body] += 1
            await anyio.sleep(0.02)  # a little work, so the members share the load
            if len(seen) == n:
                all_seen.set()

        return handle

    consumers = [
        pop_consumer(rocketmq, group, topic, handler_of(i), pull_batch_size=4) for i in range(8)
    ]
    async with anyio.create_task_group() as tg:
        for c in consumers:
            await tg.start(_run, c)
        await send(rocketmq, topic, [f"m{i}".encode() for i in range(n)])
        with anyio.fail_after(60):
            await all_seen.wait()
        tg.cancel_scope.cancel()
    assert sorted(per) == list(range(8)), dict(per)
    assert max(seen.values()) == 1


async def test_a_message_on_one_broker_waits_for_no_long_poll_on_another(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Each broker of the topic always has a pop waiting: the receive loops never all
    long-poll one broker while the other's messages wait (up to long_poll_timeout, 120 s
    here, past each message's 60 s guard: it was 20 s against a 5 s guard and `< 5` s of
    wall clock). Taking brokers in turn did that: after a message from broker-a, both
    loops polled broker-b and the next message on broker-a waited the whole long poll."""
    topic, group = unique_name("rpopidle"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)  # one queue on each broker
    got: list[tuple[str, float]] = []
    arrived = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append((msg.broker_name, time.monotonic()))
        arrived.set()

    consumer = Consumer(
        group, rocketmq.namesrv_addr, handler=handle, consume_mode="pop",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, long_poll_timeout=120,
        pull_request_timeout=130,
    )  # fmt: skip
    consumer.subscribe(topic)
    async with consumer, Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
        assert runtime_of(consumer).source.receivers == 2
        for broker in ("broker-a", "broker-a", "broker-b", "broker-b", "broker-a"):
            arrived = anyio.Event()
            await producer.send(
                Message(topic, broker.encode()),
                selector=lambda qs, m, a: next(q for q in qs if q.broker_name == a),
                selector_arg=broker,
            )  # fmt: skip
            with anyio.fail_after(60):  # far under the 120 s long poll
                await arrived.wait()
            assert got[-1][0] == broker
    assert len(got) == 5


async def _run(consumer: Consumer, *, task_status: Any) -> None:
    async with consumer:
        task_status.started()
        await anyio.sleep_forever()


async def test_orderly_pop_keeps_each_queue_in_order(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """orderly=True: two members pop a topic of 2 queues with the broker's order lock;
    each sharding key's messages are handled in the order sent, one at a time, also
    when one fails once (retried in place before the next one of its queue)."""
    topic, group = unique_name("rpopord"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[next(iter(rocketmq.broker_addrs))])
    keys = ["k0", "k1", "k2"]
    n = 15
    handled: dict[str, list[int]] = defaultdict(list)
    failed_once: set[bytes] = set()
    running: set[str] = set()
    all_done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        key, i = msg.body.decode().split(":")
        assert key not in running  # one at a time per queue (and so per key)
        running.add(key)
        try:
            await anyio.sleep(0.01)
            if i == "3" and msg.body not in failed_once:
                failed_once.add(msg.body)
                raise RuntimeError("fail once")
            handled[key].append(int(i))
        finally:
            running.discard(key)
        if sum(len(v) for v in handled.values()) == n * len(keys):
            all_done.set()

    a = pop_consumer(rocketmq, group, topic, handle, orderly=True)
    b = pop_consumer(rocketmq, group, topic, handle, orderly=True)
    async with a, b:
        async with Producer("pop-test-producer", rocketmq.namesrv_addr) as producer:
            for i in range(n):
                for key in keys:
                    await producer.send(Message(topic, f"{key}:{i}".encode()), sharding_key=key)
        with anyio.fail_after(60):
            await all_done.wait()
    for key in keys:
        assert handled[key] == list(range(n)), (key, handled[key])
    assert len(failed_once) == len(keys)


async def test_switching_a_group_between_pull_and_pop_keeps_its_progress(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Pull and POP keep a group's progress in the same broker offsets: a group that
    consumed in pull mode continues in POP mode after what it committed, and back."""
    topic, group = unique_name("rpopsw"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)

    async def consume(mode: str, bodies: list[bytes]) -> list[bytes]:
        await send(rocketmq, topic, bodies)
        got: list[bytes] = []
        done = anyio.Event()

        async def handle(msg: ConsumerMessage) -> None:
            got.append(msg.body)
            if set(bodies) <= set(got):
                done.set()

        consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_mode=mode,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            long_poll_timeout=3)  # type: ignore[arg-type]  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            with anyio.fail_after(30):
                await done.wait()
            if mode == "pop":  # the broker's offsets move as the acks complete a pop
                runtime = runtime_of(consumer)
                await eventually(lambda: runtime.acks.acked >= len(bodies), timeout=10)
        return got

    first = [f"pull-{i}".encode() for i in range(10)]
    second = [f"pop-{i}".encode() for i in range(10)]
    third = [f"pull-again-{i}".encode() for i in range(10)]
    assert sorted(await consume("pull", first)) == sorted(first)
    assert sorted(await consume("pop", second)) == sorted(second)  # nothing of "first"
    assert sorted(await consume("pull", third)) == sorted(third)  # nothing of "second"


async def test_async_for_break_and_close_release_at_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """``async for`` in POP mode: the message the loop broke out of is released (made
    visible again at once: ChangeInvisibleTime 0), so the next member gets it within a
    few seconds (the broker's revive), long before its invisible time (300 s) ends; the
    one acked before does not come back. (A pop in flight when the close cancels it
    comes back after the invisible time, as the runtime's docstring says.)"""
    topic, group = unique_name("rpopiter"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await send(rocketmq, topic, [b"a", b"b", b"c"])
    seen: list[bytes] = []
    # Invisible for 300 s unless released: an unreleased one would come back far past
    # the guard below (it was 20 s against the default 30 s, and `< 20` s of wall clock).
    async with pop_consumer(rocketmq, group, topic, pull_batch_size=1,
                            invisible_duration=300) as consumer:  # fmt: skip
        async for msg in consumer:
            seen.append(msg.body)
            if len(seen) == 2:
                break  # the second is left unsettled: released at the close
    again: list[bytes] = []
    async with pop_consumer(rocketmq, group, topic) as consumer:
        with anyio.fail_after(120):
            async for msg in consumer:
                again.append(msg.body)
                if seen[1] in again:
                    break
    assert seen[0] not in again
