"""A handler asks for its message back after some seconds (``Reconsume(delay=)``),
against the real cluster, on each way of consuming: remoting pull rounds the delay up
to a delay level (3 s comes back after level 2, 5 s); POP over remoting and gRPC change
the invisible time to exactly the delay. Each message comes back no sooner than asked,
and not when the transport's own backoff would have brought it (remoting: 10 s; the
Proxy's policy here: about 1 s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, Reconsume
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytest.importorskip("grpclib")

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: what the handler asks for, and (seconds) the window its retry must arrive in
CASES = {
    "pull": (3.0, 5.0, 9.5),  # rounded up to level 2: 5 s (the default would be 10 s)
    "pop": (3.0, 3.0, 9.0),  # exact (the default: 10 s)
    "grpc": (5.0, 5.0, 11.0),  # exact (the server policy's first backoff here: 1 s)
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


@pytest.mark.parametrize("mode", list(CASES))
async def test_a_message_comes_back_after_the_delay_its_handler_asked_for(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], mode: str
) -> None:
    delay, earliest, latest = CASES[mode]
    topic, group = unique_name(f"rdelay{mode}"), unique_name("g")
    broker = rocketmq.state["proxy_broker"]
    await rocketmq.create_topic(topic, queues=1, brokers=[broker])
    await rocketmq.create_group(group)
    seen: list[float] = []
    back = anyio.Event()

    async def handle(msg: ConsumerMessage) -> Reconsume | None:
        seen.append(time.monotonic())
        if len(seen) == 1:
            return Reconsume(delay=delay)
        back.set()
        return None

    settings: dict[str, Any] = {"handler": handle, "long_poll_timeout": 3}
    if mode == "grpc":
        consumer = Consumer(group, proxy=rocketmq.proxy_grpc, **settings)
    else:
        consumer = Consumer(group, rocketmq.namesrv_addr, consume_mode=mode,  # type: ignore[arg-type]
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            **settings)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        async with Producer("rdelay-producer", rocketmq.namesrv_addr) as producer:
            await producer.send(Message(topic, b"later"))
        with anyio.fail_after(latest + 20):
            await back.wait()
    waited = seen[1] - seen[0]
    assert earliest - 0.2 <= waited < latest, (mode, waited)
