"""Offset commits against the scripted cluster: faults a real broker will not produce on
demand (a commit request that never gets an answer)."""

from __future__ import annotations

import time

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import ServerSession

from . import consumer_fakes
from .consumer_fakes import FAST, TOPIC, FakeBroker, FakeCluster, running
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


class SilentOffsetBroker(FakeBroker):
    """Leaves UPDATE_CONSUMER_OFFSET unanswered (and unstored) while ``silent`` is set:
    a broker that hangs, or a request cut off by cancellation."""

    def __init__(self, name: str) -> None:
        super().__init__(name, 0)
        self.silent = False
        self.silent_once = False
        self.unanswered = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET and (self.silent or self.silent_once):
            self.silent_once = False
            self.unanswered.set()
            return
        await super().handle(session, cmd)


def consumer_counting(
    cluster: FakeCluster, expected: int, **settings: object
) -> tuple[Consumer, anyio.Event]:
    done = anyio.Event()
    seen = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal seen
        seen += 1
        if seen == expected:
            done.set()

    consumer = Consumer(
        "g", cluster.namesrv.address, handler=handle,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **{**FAST, **settings},
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    return consumer, done


async def test_a_commit_cancelled_at_close_is_sent_again_by_the_final_commit() -> None:
    broker = SilentOffsetBroker("broker-a")
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"m0", b"m1")
    broker.add(1, b"m2", b"m3")
    async with running(cluster):
        consumer, done = consumer_counting(cluster, 4)
        async with consumer:
            with anyio.fail_after(10):
                await done.wait()
                broker.silent_once = True  # the flusher's next commit is left hanging...
                await broker.unanswered.wait()
        # ... and cancelled by the close, whose own commit must still send it.
        assert broker.offsets == {(TOPIC, 0): 2, (TOPIC, 1): 2}


@ON_VIRTUAL_CLOCKS
async def test_a_silent_broker_does_not_keep_the_others_offsets_from_being_committed_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a virtual clock (the fake brokers and the consumer in one loop; every address
    numeric, no resolver thread): the silent broker's commit timeouts cost ~5 s of wall
    clock a backend before, and a starved run's timing is exact."""
    monkeypatch.setattr(time, "monotonic", anyio.current_time)
    monkeypatch.setattr(consumer_fakes, "QUEUES", 4)
    dead, healthy = SilentOffsetBroker("broker-a"), FakeBroker("broker-b", 0)
    cluster = FakeCluster({"broker-a": [dead], "broker-b": [healthy]})
    for q in range(4):
        dead.add(q, b"a")
        healthy.add(q, b"b1", b"b2")
    async with running(cluster):
        consumer, done = consumer_counting(cluster, 12, persist_offset_interval=3600.0)
        async with consumer:
            with anyio.fail_after(10):
                await done.wait()
            dead.silent = True
        # broker-a's commits each time out; broker-b's go out beside them, not after.
        assert healthy.offsets == {(TOPIC, q): 2 for q in range(4)}
        assert all(dead.offsets[(TOPIC, q)] == 0 for q in range(4))
