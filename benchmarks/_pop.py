"""POP pieces shared by benchmarks/pop.py and benchmarks/compare.py (issue 33): the
broker switch for the Java POP consumer, and the membership-change run (a member joins,
another is SIGKILLed, under a paced load) with its consumption gaps."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c
import anyio

from aiorocket import Message
from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import RocketMQError
from aiorocket.producer import Producer

HERE = Path(__file__).parent


async def set_pop_mode(cl: Any, topic: str, group: str) -> None:
    """SET_MESSAGE_REQUEST_MODE (401) on every broker: the Java push consumer pops this
    (topic, group) when it does not rebalance itself (``setClientRebalance(false)``)."""
    body = json.dumps({"topic": topic, "consumerGroup": group, "mode": "POP",
                       "popShareQueueNum": 0}).encode()  # fmt: skip
    async with ClientInstance(cl.namesrv_addr) as client:
        for addr in cl.broker_addrs.values():
            resp = await client.broker.call(addr, 401, {}, body)
            if resp.code not in (0, 17):  # 17: the topic is not on that broker
                raise RuntimeError(f"SET_MESSAGE_REQUEST_MODE refused: {resp.remark}")


async def membership(cl: Any, mode: str, rate: int, window: float) -> dict[str, Any]:
    """Members A and C consume ``mode`` ("pull" or "pop") from the start of a window of
    paced sends; B joins at a third, C is SIGKILLed at two thirds (see pop.py)."""
    topic = f"bench_popjoin_{uuid.uuid4().hex[:8]}"
    group = f"bench_join_{mode}_{uuid.uuid4().hex[:6]}"
    await cl.create_topic(topic, queues=8)
    handled: dict[bytes, float] = {}
    times: list[float] = []
    sent_at: dict[bytes, float] = {}

    async def handle(msg: ConsumerMessage) -> None:
        now = time.monotonic()
        if msg.body not in handled:
            handled[msg.body] = now
        times.append(now)

    def member() -> Consumer:
        consumer = Consumer(group, cl.namesrv_addr, handler=handle, consume_mode=mode,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            invisible_duration=10) if mode == "pop" else Consumer(
            group, cl.namesrv_addr, handler=handle,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        return consumer

    child_mode = "pop" if mode == "pop" else "handler"
    member_c = c.Child(f"member C ({mode})", [
        sys.executable, str(HERE / "consume.py"), "child", cl.namesrv_addr, topic, group,
        str(10**9), child_mode, "--idle-timeout", "3600",
    ]).start()  # fmt: skip
    member_c.wait_ready()
    changes: dict[str, float] = {}
    async with member(), Producer("bench_popjoin", cl.namesrv_addr) as producer:
        b = member()
        start = time.monotonic()
        drained = anyio.Event()
        failed: list[bytes] = []
        n = 0
        async with anyio.create_task_group() as tg:

            async def changes_at() -> None:
                await anyio.sleep(window / 3)
                changes["join"] = time.monotonic()
                async with b:  # member B, until the drain below is over
                    await anyio.sleep(window / 3)
                    changes["kill"] = time.monotonic()
                    member_c.kill()
                    await drained.wait()

            async def send(body: bytes) -> None:
                try:
                    await producer.send(Message(topic, body))
                except RocketMQError:  # a loaded machine: counted, not a crash
                    del sent_at[body]
                    failed.append(body)

            tg.start_soon(changes_at)
            while time.monotonic() - start < window:
                body = b"m%d" % n
                sent_at[body] = time.monotonic()
                tg.start_soon(send, body)  # paced, not awaited
                n += 1
                ahead = n / rate - (time.monotonic() - start)
                if ahead > 0:
                    await anyio.sleep(ahead)
            after_kill = [k for k, t in sent_at.items() if t >= changes.get("kill", 1e18)]
            with anyio.move_on_after(60):
                while any(k not in handled for k in after_kill):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            drained.set()
    times.sort()
    steady = [t for t in times if start + 1 < t < start + window]
    pairs = list(itertools.pairwise(steady))
    gap = max((later - t for t, later in pairs), default=0.0)
    # While B joins: from the join until the kill (pull: the rebalance that hands B its
    # queues; POP: nothing should move).
    join, kill = changes["join"], changes.get("kill", start + window)
    join_gap = max((later - t for t, later in pairs if later >= join and t < kill), default=0.0)
    # The same before the join: what the load alone does to A's consumption.
    before = max((later - t for t, later in pairs if later < join), default=0.0)
    worst = {}
    for what, at in changes.items():
        lat = [handled[k] - s for k, s in sent_at.items() if at <= s < at + 3 and k in handled]
        worst[what] = max(lat, default=float("nan"))
    with contextlib.suppress(RuntimeError):  # killed: no RESULT
        member_c.wait(timeout=5)
    lost = [k for k, t in list(sent_at.items()) if t >= changes["kill"] and k not in handled]
    sent = n - len(failed)
    return {"mode": mode, "sent": sent, "failed": len(failed), "rate": sent / window,
            "unhandled_after_kill": len(lost), "longest_gap_s": gap,
            "join_gap_s": join_gap, "join_gap_ms": join_gap * 1000,
            "gap_before_join_ms": before * 1000,
            "worst_latency_after_s": worst}  # fmt: skip
