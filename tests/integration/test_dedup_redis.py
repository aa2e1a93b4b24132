"""RedisDedupStore against a real redis-server (each module starts its own on a free
loopback port; scripts/ensure_redis.sh installs the Debian package), and idempotent
consumption against the real cluster: a message sent twice is handled once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, Dedup
from aiorocket.consumer.dedup import Claim
from aiorocket.errors import UnsupportedTransportError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests.unit.test_dedup import store_contract

from .helpers import eventually
from .test_pause_resume import _consumer

redis = pytest.importorskip("redis")
from aiorocket.consumer.dedup_redis import RedisDedupStore  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis.asyncio (and grpclib) are asyncio-only


async def test_redis_store_claims_done_releases_and_expires(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        store = RedisDedupStore(client, prefix="t1:")
        await store_contract(store)
        assert 0 < await client.pttl("t1:k") <= 10_000
        # A crashed handler's claim expires (PX), and the message is handled again.
        assert await store.claim("crashed", "a", 0.05) is Claim.NEW
        assert await client.pttl("t1:crashed") <= 50

        async def expired() -> bool:
            return await client.exists("t1:crashed") == 0

        await eventually(expired, timeout=5, every=0.01)
        assert await store.claim("crashed", "b", 10) is Claim.NEW
    finally:
        await client.aclose()


def test_redis_store_is_refused_on_trio(redis_url: str) -> None:
    pytest.importorskip("trio")
    store = RedisDedupStore(redis.asyncio.Redis.from_url(redis_url))

    async def check() -> None:
        store.check_loop()

    anyio.run(check, backend="asyncio")
    with pytest.raises(UnsupportedTransportError, match="asyncio"):
        anyio.run(check, backend="trio")


@pytest.mark.parametrize("mode", ["pull", "grpc"])
async def test_a_message_sent_twice_is_handled_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], redis_url: str, mode: str
) -> None:
    """Two sends of one order (two message ids, one business key) and a redelivery
    (a failed first call): the handler's work is done once per order."""
    pytest.importorskip("grpclib")
    topic, group = unique_name(f"dedup{mode}"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    done: list[str] = []
    calls: list[str] = []

    async def handle(msg: ConsumerMessage) -> None:
        order = msg.properties["order"]
        calls.append(order)
        if order == "o2" and calls.count("o2") == 1:
            raise RuntimeError("first attempt fails: the claim is released, the retry runs")
        done.append(order)

    client = redis.asyncio.Redis.from_url(redis_url)
    dedup = Dedup(RedisDedupStore(client), key=lambda m: m.properties["order"])
    consumer = _consumer(rocketmq, mode, group, handler=handle, dedup=dedup,
                         consume_concurrency=1, retry_delay_level=1)  # fmt: skip
    consumer.subscribe(topic)
    try:
        async with Producer("dedup-producer", rocketmq.namesrv_addr) as producer:
            for order in ["o1", "o1", "o2", "o3"]:
                await producer.send(Message(topic, b"x", properties={"order": order}))
            async with consumer:
                await eventually(lambda: len(done) == 3, timeout=30)
                # o1's second copy was settled before o3 (one queue, one worker).
                await producer.send(Message(topic, b"x", properties={"order": "o1"}))
                await producer.send(Message(topic, b"x", properties={"order": "end"}))
                await eventually(lambda: "end" in done, timeout=30)
    finally:
        await client.aclose()
    assert sorted(done) == ["end", "o1", "o2", "o3"]
    assert calls.count("o1") == 1 and calls.count("o2") == 2


_CRASHING_MEMBER = """
import sys
import anyio
import redis.asyncio
from aiorocket.consumer import ConsumeFromWhere, Consumer, Dedup
from aiorocket.consumer.dedup_redis import RedisDedupStore

namesrv, group, topic, url = sys.argv[1:5]


async def handle(msg):
    print("handling", flush=True)
    await anyio.sleep_forever()  # SIGKILLed here, its claim held


async def main():
    dedup = Dedup(RedisDedupStore(redis.asyncio.Redis.from_url(url)), claim_ttl=3)
    consumer = Consumer(group, namesrv, handler=handle, dedup=dedup,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    async with consumer:
        await anyio.sleep_forever()


anyio.run(main)
"""


async def test_a_member_killed_mid_handler_leaves_its_message_to_be_handled_after_the_claim(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], redis_url: str, tmp_path: Path
) -> None:
    """The claim of a handler that never finished expires (claim_ttl): the message is
    handled by another member then, not dropped as a duplicate."""
    topic, group = unique_name("dedupkill"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await rocketmq.create_group(group)
    async with Producer("dedup-producer", rocketmq.namesrv_addr) as producer:
        await producer.send(Message(topic, b"work"))
    child = await anyio.open_process(
        [sys.executable, "-c", _CRASHING_MEMBER, rocketmq.namesrv_addr, group, topic, redis_url],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        with anyio.fail_after(60):
            assert b"handling" in await child.stdout.receive()
    finally:
        child.kill()  # SIGKILL: no close, no release
        await child.wait()
    handled: list[tuple[bytes, int]] = []

    async def handle(msg: ConsumerMessage) -> None:
        handled.append((msg.body, msg.reconsume_times))

    client = redis.asyncio.Redis.from_url(redis_url)
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, retry_delay_level=1,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        dedup=Dedup(RedisDedupStore(client), claim_ttl=3))  # fmt: skip
    consumer.subscribe(topic)
    try:
        async with consumer:
            await eventually(lambda: bool(handled), timeout=60)
    finally:
        await client.aclose()
    # Failed back (retried) while the dead member's claim lasted, then handled once.
    assert [body for body, _ in handled] == [b"work"]
    assert handled[0][1] >= 1


def _calls(stats: dict[str, Any], command: str) -> int:
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_long_handler_keeps_its_claim_renewed(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], redis_url: str
) -> None:
    """A handler that runs for several claim_ttl: its claim is renewed (the same token
    holds the key throughout), and the message costs two Redis commands besides the
    renewals (SET NX to claim, SET to mark done; counted by INFO commandstats)."""
    topic, group = unique_name("dedupkeep"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    started, finish = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        started.set()
        await finish.wait()

    client = redis.asyncio.Redis.from_url(redis_url)
    prefix = f"{group}:"
    dedup = Dedup(RedisDedupStore(client, prefix=prefix), claim_ttl=0.6)
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, dedup=dedup,
                        consume_timeout=30,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    try:
        async with Producer(unique_name("p"), rocketmq.namesrv_addr) as producer, consumer:
            before = await client.info("commandstats")
            await producer.send(Message(topic, b"slow"))
            with anyio.fail_after(30):
                await started.wait()
            [key] = await client.keys(prefix + "*")
            token = await client.get(key)
            await anyio.sleep(2.0)  # the time is what is tested: over three claim_ttl
            assert await client.get(key) == token and await client.pttl(key) > 0
            finish.set()

            async def done() -> bool:
                return await client.get(key) == b"done"

            await eventually(done, timeout=10, every=0.05)
            after = await client.info("commandstats")
    finally:
        await client.aclose()
    renewals = _calls(after, "evalsha") - _calls(before, "evalsha")
    assert renewals >= 6, renewals  # every claim_ttl / 3 (0.2 s) for 2 s
    assert _calls(after, "set") - _calls(before, "set") == 2  # the claim and the done mark
