"""Shared helpers for integration tests against the real local RocketMQ."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket._unique_id import create_unique_id
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import SendResult
from aiorocket.errors import BrokerResponseError
from aiorocket.message import Message, MessageQueue
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.message_codec import encode_properties
from aiorocket.testing.broker import BrokerStartError, LocalRocketMQ


async def send_raw(
    client: ClientInstance,
    mq: MessageQueue,
    msg: Message,
    *,
    sys_flag: int = 0,
    body: bytes | None = None,
) -> SendResult:
    """One SEND_MESSAGE_V2 straight to ``mq`` (no producer logic)."""
    route = await client.namesrv.get_route(mq.topic)
    addr = route.master_addr(mq.broker_name)
    assert addr is not None
    uniq = create_unique_id()
    props = msg.wire_properties()
    props["UNIQ_KEY"] = uniq
    for attempt in range(10):
        try:
            return await client.broker.send_message(
                addr,
                mq,
                msg.body if body is None else body,
                encode_properties(props),
                producer_group="it-producer",
                msg_id=uniq,
                sys_flag=sys_flag,
            )
        except BrokerResponseError as exc:
            # A loaded broker sheds load with SYSTEM_BUSY; the message was not stored.
            if exc.code != ResponseCode.SYSTEM_BUSY or attempt == 9:
                raise
            await anyio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 30.0,
    every: float = 0.1,
) -> None:
    """Poll ``check`` until it holds; for broker state that offers no event to wait on."""
    with anyio.fail_after(timeout):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await anyio.sleep(every)


async def send_many(
    client: ClientInstance, topic: str, messages: list[Message]
) -> list[SendResult]:
    """Send ``messages`` round-robin over every writable queue of ``topic``."""
    route = await client.namesrv.query_route(topic)
    queues = route.write_queues()
    return [await send_raw(client, queues[i % len(queues)], m) for i, m in enumerate(messages)]


async def wait_dispatched(client: ClientInstance, topic: str, results: list[SendResult]) -> None:
    """Wait until the brokers' consume queues show every sent message (built asynchronously)."""
    route = await client.namesrv.query_route(topic)
    need: dict[MessageQueue, int] = {}
    for r in results:
        need[r.queue] = max(need.get(r.queue, 0), r.queue_offset + 1)

    async def done() -> bool:
        for mq, n in need.items():
            addr = route.master_addr(mq.broker_name)
            assert addr is not None
            if await client.broker.get_max_offset(addr, mq) < n:
                return False
        return True

    await eventually(done)


async def one_queue_topic(
    rocketmq: LocalRocketMQ, topic: str, group: str, *, orderly: bool = False
) -> None:
    """Create ``topic`` with a single queue (on the first broker) and ``group``."""
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await rocketmq.create_group(group, orderly=orderly)


def throwaway_cluster(prefix: str, **start: Any) -> Iterator[LocalRocketMQ]:
    """For a module fixture (``yield from``): a cluster of its own in a fresh directory,
    started with ``LocalRocketMQ.start(**start)``, stopped and removed afterwards. A
    cluster that does not start fails the test with the reason, not a traceback."""
    base = Path(tempfile.mkdtemp(prefix=f"aiorocket-{prefix}-"))
    inst = LocalRocketMQ(base)
    try:
        inst.start(**start)
    except BrokerStartError as exc:
        inst.stop(timeout=5)
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"throw-away cluster failed to start: {exc}", pytrace=False)
    try:
        yield inst
    finally:
        inst.stop(timeout=10)
        shutil.rmtree(base, ignore_errors=True)
