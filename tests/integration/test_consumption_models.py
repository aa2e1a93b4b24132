"""Broadcasting, orderly consumption and the pull consumer against the real broker."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import (
    ConsumeFromWhere,
    Consumer,
    ConsumerMessage,
    MessageModel,
    PullConsumer,
    Reconsume,
)
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.5, "long_poll_timeout": 2.0, "pull_request_timeout": 12.0}


async def produce(namesrv: str, topic: str, messages: list[Message]) -> None:
    async with ClientInstance(namesrv) as client:
        results = await send_many(client, topic, messages)
        await wait_dispatched(client, topic, results)


def bodies(topic: str, prefix: str, n: int) -> list[Message]:
    return [Message(topic, f"{prefix}{i}".encode()) for i in range(n)]


# -- broadcasting ---------------------------------------------------------------------


async def test_broadcasting_everyone_gets_everything_and_resumes_from_file(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("bcast"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    got: dict[str, list[bytes]] = defaultdict(list)

    def make(name: str) -> Consumer:
        async def handle(msg: ConsumerMessage) -> None:
            got[name].append(msg.body)

        c = Consumer(group, rocketmq.namesrv_addr, handler=handle, instance_name=name,
                     message_model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path),
                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
        c.subscribe(topic)
        return c

    first = [m.body for m in bodies(topic, "a", 40)]
    async with make("one") as one, make("two") as two:
        assert one.assignment() == two.assignment()
        assert len(one.assignment()) == 4
        await produce(rocketmq.namesrv_addr, topic, bodies(topic, "a", 40))
        await eventually(lambda: len(got["one"]) >= 40 and len(got["two"]) >= 40)
    assert sorted(got["one"]) == sorted(first) == sorted(got["two"])
    path = tmp_path / "one" / group / "offsets.json"
    stored = json.loads(path.read_text())["offsets"]
    assert sum(v for k, v in stored.items() if k.endswith(topic)) == 40

    # Restart "one": it resumes from its file, so only the new messages arrive.
    got.clear()
    await produce(rocketmq.namesrv_addr, topic, bodies(topic, "b", 10))
    async with make("one"):
        await eventually(lambda: len(got["one"]) >= 10)
    assert sorted(got["one"]) == sorted(m.body for m in bodies(topic, "b", 10))

    # Corrupt the main file: the backup (one flush older) is used, with a warning.
    backup = json.loads(path.with_name("offsets.json.bak").read_text())["offsets"]
    path.write_text("{ not json")
    got.clear()
    async with make("one"):
        await anyio.lowlevel.checkpoint()  # started: offsets were loaded from the backup
        expect = sum(v for k, v in backup.items() if k.endswith(topic))
        assert expect >= 40
        await produce(rocketmq.namesrv_addr, topic, bodies(topic, "c", 4))
        await eventually(lambda: {m.body for m in bodies(topic, "c", 4)} <= set(got["one"]))
    # Redelivered exactly what the backup had not yet recorded, plus the new ones.
    assert len(got["one"]) == 50 - expect + 4


async def test_broadcasting_failures_retry_locally_then_drop(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("bfail"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    attempts: list[int] = []

    async def handle(msg: ConsumerMessage) -> None:
        attempts.append(msg.reconsume_times)
        raise RuntimeError("always fails")

    c = Consumer(group, rocketmq.namesrv_addr, handler=handle, instance_name="x",
                 message_model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path),
                 consume_from_where=ConsumeFromWhere.FIRST_OFFSET, broadcast_max_retries=2,
                 local_retry_delay=0.1, **FAST)  # fmt: skip
    c.subscribe(topic)
    async with c:
        await produce(rocketmq.namesrv_addr, topic, bodies(topic, "x", 1))
        await eventually(lambda: c.dropped_messages == 1)
        assert c.stats()[0].committed_offset == 1  # dropped counts as done
    assert attempts == [0, 1, 2]


# -- orderly --------------------------------------------------------------------------


async def test_orderly_strict_order_with_failures_and_rebalance(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("order"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)  # 4 queues over two brokers
    await rocketmq.create_group(group, orderly=True)
    per_queue_total = 60
    deliveries: dict[str, list[tuple[MessageQueue, int]]] = defaultdict(list)
    failed_once: set[tuple[MessageQueue, int]] = set()
    succeeded: dict[MessageQueue, list[int]] = defaultdict(list)

    def make(name: str) -> Consumer:
        async def handle(msg: ConsumerMessage) -> Reconsume | None:
            mq = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
            deliveries[name].append((mq, msg.queue_offset))
            if msg.queue_offset % 7 == 3 and (mq, msg.queue_offset) not in failed_once:
                failed_once.add((mq, msg.queue_offset))
                return Reconsume(suspend=0.05)
            # Until b has joined, a works slowly so the handover happens mid-stream.
            await anyio.sleep(0.1 if name == "a" and not deliveries["b"] else 0.005)
            succeeded[mq].append(msg.queue_offset)
            return None

        c = Consumer(group, rocketmq.namesrv_addr, handler=handle, orderly=True,
                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET, rebalance_interval=20.0,
                     **FAST)  # fmt: skip
        c.subscribe(topic)
        return c

    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        queues = route.write_queues()
        results = []
        for mq in queues:
            for i in range(per_queue_total):
                from .helpers import send_raw

                results.append(
                    await send_raw(client, mq, Message(topic, f"{mq.queue_id}-{i}".encode()))
                )
        await wait_dispatched(client, topic, results)

    def successes() -> dict[MessageQueue, list[int]]:
        return succeeded

    a = make("a")
    async with a:
        await eventually(lambda: len(deliveries["a"]) >= 20)
        async with make("b") as b:  # rebalance in the middle: b takes half of a's queues
            await eventually(lambda: len(a.assignment() & b.assignment()) == 0
                             and len(b.assignment()) >= 2, timeout=30)  # fmt: skip
            await eventually(
                lambda: sum(len(v) for v in successes().values()) >= per_queue_total * len(queues),
                timeout=60,
            )
    for name in ("a", "b"):
        by_queue: dict[MessageQueue, list[int]] = defaultdict(list)
        for mq, off in deliveries[name]:
            by_queue[mq].append(off)
        for mq, offs in by_queue.items():
            # Within one consumer: non-decreasing; a repeat only right after a failure.
            for prev, cur in itertools.pairwise(offs):
                assert cur > prev or (cur == prev and (mq, cur) in failed_once), (name, mq, offs)
    for mq in queues:
        offs = sorted(successes()[mq])
        assert offs == list(range(per_queue_total)), mq  # none skipped, none twice
    assert deliveries["b"], "the rebalance happened while messages were still flowing"


# -- pull consumer ---------------------------------------------------------------------


async def test_pull_consumer_seek_pause_commit_and_times(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("pull"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)  # one queue on each broker
    await rocketmq.create_group(group)
    await produce(rocketmq.namesrv_addr, topic, bodies(topic, "m", 20))
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        q1, q2 = route.read_queues()

    consumer = PullConsumer(group, rocketmq.namesrv_addr, auto_commit=False,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.assign([q1, q2])
    async with consumer:
        assert consumer.assignment() == {q1, q2}
        assert await consumer.beginning_offsets([q1, q2]) == {q1: 0, q2: 0}
        assert await consumer.end_offsets([q1, q2]) == {q1: 10, q2: 10}

        got: dict[MessageQueue, list[int]] = defaultdict(list)
        while sum(len(v) for v in got.values()) < 20:
            for mq, msgs in (await consumer.getmany(timeout=10, max_records=7)).items():
                assert len(msgs) <= 7
                got[mq].extend(m.queue_offset for m in msgs)
        assert got == {q1: list(range(10)), q2: list(range(10))}

        # seek back and read again; the position moves with what is returned
        consumer.seek(q1, 4)
        msg = await consumer.getone()
        assert (msg.queue, msg.queue_offset) == (MessageQueue(q1.topic, q1.broker_name, 0), 4)
        stamps = {}
        batch = await consumer.getmany(timeout=10, max_records=100)
        assert [m.queue_offset for m in batch[q1]] == list(range(5, 10))
        stamps = {m.queue_offset: m.store_timestamp for m in batch[q1]}

        # pause: q2 gets new messages but nothing of it is returned until resume
        consumer.pause(q2)
        assert consumer.paused() == {q2}
        async with ClientInstance(rocketmq.namesrv_addr) as client:
            from .helpers import send_raw

            res = [await send_raw(client, q2, Message(topic, b"late")) for _ in range(3)]
            res.append(await send_raw(client, q1, Message(topic, b"q1-late")))
            await wait_dispatched(client, topic, res)
        batch = await consumer.getmany(timeout=10, max_records=100)
        assert set(batch) == {q1} and [m.body for m in batch[q1]] == [b"q1-late"]
        assert await consumer.getmany(timeout=0.5) == {}
        consumer.resume(q2)
        resumed: list[int] = []
        with anyio.fail_after(20):
            while len(resumed) < 3:
                batch = await consumer.getmany(timeout=10, max_records=100)
                resumed += [m.queue_offset for m in batch.get(q2, [])]
        assert resumed == [10, 11, 12]

        # commit / committed round trip
        assert await consumer.committed(q1) is None
        await consumer.commit()
        assert await consumer.committed(q1) == 11
        assert await consumer.committed(q2) == 13
        await consumer.commit({q1: 3})
        assert await consumer.committed(q1) == 3

        # offsets for times: the first offset stored at or after each timestamp
        probe = stamps[7]
        expected = min(o for o, ts in stamps.items() if ts >= probe)
        assert (await consumer.offsets_for_times({q1: probe}))[q1] <= expected
        await consumer.seek_to_end(q1)
        assert consumer.position(q1) == 11
        await consumer.seek_to_beginning(q1)
        first = await consumer.getmany(timeout=10, max_records=1)
        assert [m.queue_offset for m in first[q1]] == [0]


async def test_pull_consumer_subscribe_with_rebalance_listener(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("plisten"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    events: list[tuple[str, int]] = []

    class Listener:
        async def on_queues_revoked(self, queues: list[MessageQueue]) -> None:
            events.append(("revoked", len(queues)))

        async def on_queues_assigned(self, queues: list[MessageQueue]) -> None:
            events.append(("assigned", len(queues)))

    one = PullConsumer(group, rocketmq.namesrv_addr, listener=Listener(),
                       consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    one.subscribe(topic)
    await produce(rocketmq.namesrv_addr, topic, bodies(topic, "m", 16))
    async with one:
        assert len(one.assignment()) == 4
        two = PullConsumer(group, rocketmq.namesrv_addr,
                           consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
        two.subscribe(topic)
        async with two:
            await eventually(lambda: len(one.assignment()) == 2 and len(two.assignment()) == 2)
            seen: set[bytes] = set()
            while len(seen) < 16:
                for c in (one, two):
                    for msgs in (await c.getmany(timeout=0.2)).values():
                        seen.update(m.body for m in msgs)
    assert ("assigned", 4) in events and ("revoked", 2) in events
