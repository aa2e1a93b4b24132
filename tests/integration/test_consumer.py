"""The push consumer against the real broker."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullStatus
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, Reconsume
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ

from ..unit.consumer_fakes import engine_of
from .helpers import eventually, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"rebalance_interval": 20.0, "persist_offset_interval": 0.5, "long_poll_timeout": 2.0,
        "pull_request_timeout": 12.0}  # fmt: skip


async def produce(namesrv: str, topic: str, bodies: list[bytes], **kw: object) -> None:
    async with ClientInstance(namesrv) as client:
        results = await send_many(client, topic, [Message(topic, b, **kw) for b in bodies])  # type: ignore[arg-type]
        await wait_dispatched(client, topic, results)


@pytest.mark.smoke
@pytest.mark.parametrize(
    "anyio_backend",
    ["asyncio", "trio", pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")],
)
async def test_handler_consumes_everything_and_commits(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("all"), unique_name("g")
    await rocketmq.create_topic(topic, queues=4)
    bodies = [f"m{i}".encode() for i in range(200)]
    await produce(rocketmq.namesrv_addr, topic, bodies)
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert msg.topic == topic
        got.append(msg.body)
        if len(got) >= len(bodies):
            done.set()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        assert len({mq for mq in consumer.assignment() if mq.topic == topic}) == 8
        with anyio.fail_after(30):
            await done.wait()
        stats = {s.queue: s for s in consumer.stats()}
    assert sorted(got) == sorted(bodies)
    # Close flushed the offsets: every queue is committed at its end.
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            assert addr is not None
            end = await client.broker.get_max_offset(addr, mq)
            assert await client.broker.query_consumer_offset(addr, group, mq) == end
            assert stats[mq].committed_offset == end
            assert stats[mq].consumed == end


async def test_three_consumers_share_and_reassign(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("share"), unique_name("g")
    await rocketmq.create_topic(topic, queues=4)  # 8 queues over two brokers
    all_queues = 8
    seen: dict[str, list[bytes]] = {"a": [], "b": [], "c": []}

    def handler_for(name: str) -> Callable[[ConsumerMessage], object]:
        async def handle(msg: ConsumerMessage) -> None:
            seen[name].append(msg.body)

        return handle

    consumers = {
        name: Consumer(group, rocketmq.namesrv_addr, handler=handler_for(name),  # type: ignore[arg-type]
                       consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)
        for name in seen
    }  # fmt: skip
    for c in consumers.values():
        c.subscribe(topic)

    def owned(c: Consumer) -> set[MessageQueue]:
        return {mq for mq in c.assignment() if mq.topic == topic}

    def settled(names: list[str]) -> bool:
        sets = [owned(consumers[n]) for n in names]
        union = set().union(*sets)
        return len(union) == all_queues and sum(len(s) for s in sets) == all_queues

    async with consumers["a"], consumers["b"]:
        async with consumers["c"]:
            # Brokers register a new member's heartbeat one after the other, so a pass
            # may briefly see an older member list and leave a valid but uneven split;
            # the next notification or pass corrects it: wait for the even one.
            def even() -> bool:
                sizes = sorted(len(owned(c)) for c in consumers.values())
                return settled(["a", "b", "c"]) and sizes == [2, 3, 3]

            await eventually(even, timeout=30)
            bodies = [f"m{i}".encode() for i in range(300)]
            await produce(rocketmq.namesrv_addr, topic, bodies)
            await eventually(lambda: sum(len(v) for v in seen.values()) >= len(bodies), timeout=30)
            assert sorted(b for v in seen.values() for b in v) == sorted(bodies)
            assert all(seen.values()), "every consumer got a share"
        # c left (unregistered): a and b take over its queues within one rebalance,
        # triggered at once by the broker's NOTIFY_CONSUMER_IDS_CHANGED.
        with anyio.fail_after(FAST["rebalance_interval"]):
            await eventually(lambda: settled(["a", "b"]), timeout=FAST["rebalance_interval"])
        assert sorted(len(owned(consumers[n])) for n in "ab") == [4, 4]
        more = [f"n{i}".encode() for i in range(100)]
        await produce(rocketmq.namesrv_addr, topic, more)
        await eventually(lambda: len(seen["a"]) + len(seen["b"]) >= len(seen["a"]) and
                         set(more) <= set(seen["a"]) | set(seen["b"]), timeout=30)  # fmt: skip


async def test_abrupt_cancel_loses_nothing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("cancel"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    bodies = [f"m{i}".encode() for i in range(60)]
    await produce(rocketmq.namesrv_addr, topic, bodies)
    started = 0
    finished_by_victim: set[bytes] = set()
    some_started = anyio.Event()

    async def victim_handler(msg: ConsumerMessage) -> None:
        nonlocal started
        started += 1
        if started >= 5:
            some_started.set()
        if int(msg.body[1:]) % 3 == 0:
            finished_by_victim.add(msg.body)  # finishes a third, hangs on the rest
            return
        await anyio.sleep_forever()

    victim = Consumer(group, rocketmq.namesrv_addr, handler=victim_handler,
                      consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    victim.subscribe(topic)
    with anyio.CancelScope() as scope:
        async with victim:
            with anyio.fail_after(30):
                await some_started.wait()
            scope.cancel()  # abrupt: the body is cancelled, handlers never finish
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    got: set[bytes] = set()

    async def survivor_handler(msg: ConsumerMessage) -> None:
        got.add(msg.body)

    survivor = Consumer(group, rocketmq.namesrv_addr, handler=survivor_handler,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    survivor.subscribe(topic)
    async with survivor:
        unfinished = set(bodies) - finished_by_victim
        await eventually(lambda: unfinished <= got, timeout=30)


async def test_retry_then_dead_letter(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("retry"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await produce(rocketmq.namesrv_addr, topic, [b"ok", b"poison"])
    attempts: list[tuple[int, str]] = []
    ok_seen = anyio.Event()

    async def handle(msg: ConsumerMessage) -> Reconsume | None:
        if msg.body == b"ok":
            ok_seen.set()
            return None
        attempts.append((msg.reconsume_times, msg.topic))
        return Reconsume(delay_level=1)  # 1 s

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=2,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        await eventually(lambda: len(attempts) >= 3, timeout=60)
        assert ok_seen.is_set()
    # Original delivery plus max_reconsume_times retries, each with the topic restored.
    assert attempts[:3] == [(0, topic), (1, topic), (2, topic)]

    async with ClientInstance(rocketmq.namesrv_addr) as client:

        async def in_dlq() -> bool:
            for addr in rocketmq.broker_addrs.values():
                mq = MessageQueue(f"%DLQ%{group}", "", 0)
                try:
                    res = await client.broker.pull(
                        addr, unique_name("reader"), mq, 0, sys_flag=PULL_SUBSCRIPTION,
                        subscription="*", suspend_timeout_ms=0, timeout=5,
                    )  # fmt: skip
                except Exception:
                    continue
                if res.status is PullStatus.FOUND and any(
                    m.body == b"poison" for m in res.messages
                ):
                    return True
            return False

        await eventually(in_dlq, timeout=30)
    assert len(attempts) == 3  # nothing redelivered after the dead-letter move


async def test_tag_and_sql_filters(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("filter")
    await rocketmq.create_topic(topic, queues=2)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        msgs = [
            Message(topic, f"{tag}-{i}".encode(), tags=tag, properties={"n": str(i)})
            for i in range(30)
            for tag in ("a", "b", "c")
        ]
        results = await send_many(client, topic, msgs)
        await wait_dispatched(client, topic, results)

    async def collect(expression: str | None, sql: str | None, expected: set[bytes]) -> set[bytes]:
        got: set[bytes] = set()

        async def handle(msg: ConsumerMessage) -> None:
            got.add(msg.body)

        consumer = Consumer(unique_name("g"), rocketmq.namesrv_addr, handler=handle,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
        if sql is not None:
            consumer.subscribe(topic, sql=sql)
        else:
            consumer.subscribe(topic, expression or "*")
        async with consumer:
            await eventually(lambda: expected <= got, timeout=30)
            # Everything the broker had is pulled once the committed offsets reach the end.
            await eventually(
                lambda: (
                    all(s.next_offset > 0 for s in consumer.stats() if s.queue.topic == topic)
                    and sum(s.cached for s in consumer.stats()) == 0
                ),
                timeout=30,
            )
        return got

    tags_expected = {m.body for m in msgs if m.tags in ("a", "c")}
    assert await collect("a || c", None, tags_expected) == tags_expected
    sql_expected = {m.body for m in msgs if int(m.properties["n"]) > 25 and m.tags == "b"}
    assert await collect(None, "n > 25 AND TAGS = 'b'", sql_expected) == sql_expected


async def test_consume_from_where_for_new_groups(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("where")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    old = [f"old{i}".encode() for i in range(5)]
    await produce(rocketmq.namesrv_addr, topic, old)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        mq = route.read_queues()[0]
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        res = await client.broker.pull(
            addr, "peek", mq, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=5,
        )  # fmt: skip
        stamps = [m.store_timestamp for m in res.messages]
    probe = stamps[2]
    from_probe = min(i for i, ts in enumerate(stamps) if ts >= probe)

    async def run(where: ConsumeFromWhere, new: list[bytes], **kw: object) -> list[bytes]:
        got: list[bytes] = []

        async def handle(msg: ConsumerMessage) -> None:
            got.append(msg.body)

        consumer = Consumer(unique_name("g"), rocketmq.namesrv_addr, handler=handle,
                            consume_from_where=where, **FAST, **kw)  # type: ignore[arg-type]  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            await produce(rocketmq.namesrv_addr, topic, new)
            await eventually(lambda: set(new) <= set(got), timeout=30)
        return got

    assert await run(ConsumeFromWhere.LAST_OFFSET, [b"new1"]) == [b"new1"]
    assert await run(ConsumeFromWhere.FIRST_OFFSET, [b"new2"]) == [*old, b"new1", b"new2"]
    by_time = await run(ConsumeFromWhere.TIMESTAMP, [b"new3"], consume_timestamp_ms=probe)
    assert by_time == [*old[from_probe:], b"new1", b"new2", b"new3"]


async def test_consume_timeout_cancels_handler(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("timeout"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await produce(rocketmq.namesrv_addr, topic, [b"slow"])
    cancelled = anyio.Event()
    deliveries: list[int] = []
    redelivered = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        deliveries.append(msg.reconsume_times)
        if msg.reconsume_times == 0:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                cancelled.set()
                raise
        redelivered.set()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_timeout=1.0,
                        retry_delay_level=1, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            await cancelled.wait()
            await redelivered.wait()
    assert deliveries == [0, 1]


@pytest.mark.smoke
async def test_async_for_acks_on_next_and_redelivers_unsettled(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("iter"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    bodies = [f"m{i}".encode() for i in range(10)]
    await produce(rocketmq.namesrv_addr, topic, bodies)

    first_run: list[bytes] = []
    consumer = Consumer(group, rocketmq.namesrv_addr,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        async for msg in consumer:
            first_run.append(msg.body)
            if len(first_run) == 4:
                break  # the 4th is left unsettled: acked are m0..m2 only
    assert first_run == bodies[:4]

    second_run: list[bytes] = []
    consumer = Consumer(group, rocketmq.namesrv_addr, **FAST)
    consumer.subscribe(topic)
    async with consumer:
        async for msg in consumer:
            async with msg:  # manual settlement through the context manager
                second_run.append(msg.body)
            if len(second_run) == 7:
                break
    assert second_run == bodies[3:]


async def test_close_drains_running_handlers(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("drain"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await produce(rocketmq.namesrv_addr, topic, [b"one"])
    running = anyio.Event()
    release = anyio.Event()
    finished: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        running.set()
        await release.wait()
        finished.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)

    async def release_when_closing() -> None:
        await eventually(lambda: engine_of(consumer).state.closing, timeout=30, every=0.01)
        release.set()

    async with anyio.create_task_group() as tg, consumer:
        with anyio.fail_after(30):
            await running.wait()
        tg.start_soon(release_when_closing)
    assert finished == [b"one"]
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        mq = route.read_queues()[0]
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        assert await client.broker.query_consumer_offset(addr, group, mq) == 1


async def test_batch_and_sync_handlers(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("batch")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    bodies = [f"m{i}".encode() for i in range(40)]
    await produce(rocketmq.namesrv_addr, topic, bodies)
    batches: list[int] = []
    got: list[bytes] = []

    async def on_batch(msgs: list[ConsumerMessage]) -> None:
        batches.append(len(msgs))
        got.extend(m.body for m in msgs)

    consumer = Consumer(unique_name("g"), rocketmq.namesrv_addr, batch_handler=on_batch,
                        consume_batch_size=8, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        await eventually(lambda: len(got) >= 40, timeout=30)
    assert sorted(got) == sorted(bodies) and max(batches) <= 8 and max(batches) > 1

    sync_got: list[bytes] = []

    def sync_handler(msg: ConsumerMessage) -> None:  # runs in a worker thread
        sync_got.append(msg.body)

    consumer = Consumer(unique_name("g"), rocketmq.namesrv_addr, handler=sync_handler,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        await eventually(lambda: len(sync_got) >= 40, timeout=30)
    assert sorted(sync_got) == sorted(bodies)


async def test_flow_control_bounds_the_cache(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("flow"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await produce(rocketmq.namesrv_addr, topic, [f"m{i}".encode() for i in range(60)])
    threshold, batch = 10, 4
    entered = anyio.Event()
    gate = anyio.Semaphore(0)
    handled = 0
    peak = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal handled
        entered.set()
        await gate.acquire()
        handled += 1

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_concurrency=1,
                        pull_threshold_for_queue=threshold, pull_batch_size=batch,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        for _ in range(40):
            with anyio.fail_after(30):
                await entered.wait()
            entered = anyio.Event()

            def cached_now() -> int:
                return sum(s.cached for s in consumer.stats() if s.queue.topic == topic)

            if handled == 0:
                # While the first handler is held, pulling fills the cache to its limit.
                await eventually(lambda: cached_now() >= threshold, timeout=30)
            cached = cached_now()
            peak = max(peak, cached)
            # A pull starts only below the threshold and adds at most one batch.
            assert cached <= threshold + batch - 1
            gate.release()
        gate.release()
        for _ in range(30):
            gate.release()
    assert peak >= threshold  # the cache did fill up to the limit
    assert handled >= 40
