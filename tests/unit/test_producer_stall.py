"""A broker that sits on sends while the other answers (issue 30, item 7), against the
scripted brokers of test_producer_fake_broker: broker-a stays silent (a frozen broker's
sockets stay open and answer nothing), broker-b answers.

Before: each send that picked broker-a waited its whole timeout and failed. Now it is
abandoned at its stall bound (5x broker-a's recent latency, 0.25 s to 1 s), retried
on broker-b, and broker-a is avoided for new sends."""

from __future__ import annotations

import time

import anyio
import pytest

from aiorocket.errors import RequestTimeoutError
from aiorocket.message import Message
from aiorocket.producer import LatencyFaultTolerance
from aiorocket.producer.stall import STALL_FLOOR, StallWatch

from .test_producer_fake_broker import TOPIC, cluster, producer
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


async def test_a_send_stuck_on_a_silent_broker_moves_to_the_answering_one() -> None:
    async with cluster() as fake:
        p = producer(fake, send_timeout=5)
        p.fault = LatencyFaultTolerance(clock=lambda: 0.0)  # isolation cannot run out
        async with p:
            for _ in range(4):  # both brokers answer: their latency is known
                await p.send(Message(TOPIC, b"warm"))
            fake.broker("broker-a").mode = "silent"
            before = fake.sends()["broker-a"]
            took, brokers = [], []
            for _ in range(8):
                started = time.monotonic()
                result = await p.send(Message(TOPIC, b"m"))
                took.append(time.monotonic() - started)
                brokers.append(result.queue.broker_name)
            assert brokers == ["broker-b"] * 8  # no error, every send acknowledged
            assert max(took) < 2.5  # not the 5 s send timeout: the stall bound (<= 1 s)
            assert fake.sends()["broker-a"] == before + 1  # stuck once, then avoided
            assert not p.fault.is_available("broker-a")


async def test_a_cluster_where_nobody_answers_is_not_a_stall() -> None:
    async with cluster() as fake, producer(fake, send_timeout=5) as p:
        for b in fake.brokers:
            b.mode = "silent"
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await p.send(Message(TOPIC, b"m"), timeout=1.0)
        assert time.monotonic() - started >= 0.95  # waited: nobody else answers


async def test_an_ordered_send_never_moves_off_a_stalled_broker() -> None:
    async with cluster() as fake, producer(fake, send_timeout=5) as p:
        for _ in range(8):
            await p.send(Message(TOPIC, b"warm"))  # both brokers answer
        pinned = await p.send(Message(TOPIC, b"k"), sharding_key="user-1")
        fake.broker(pinned.queue.broker_name).mode = "silent"
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await p.send(Message(TOPIC, b"k"), sharding_key="user-1", timeout=1.0)
        assert time.monotonic() - started >= 0.95


@ON_VIRTUAL_CLOCKS
async def test_with_stall_retry_off_a_send_waits_for_the_silent_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``stall_retry=False`` a send that picked the silent broker waits there for its
    timeout and fails, though it has retries left and broker-b answers (with the stall
    watch on, it would be abandoned at its bound and stored on broker-b); then broker-a
    is avoided. The fault record's clock is frozen, so which broker a send picks does not
    depend on how long anything took; only the one send to broker-a has a short timeout
    (sends to broker-b that took 0.8 s on a starved machine failed too: ``3 == 1``).
    On a virtual clock (the fake brokers and the producer in one loop, time.monotonic
    the loop's): the 2.5 s timeout cost 2.5 s of wall clock a backend before."""
    monkeypatch.setattr(time, "monotonic", anyio.current_time)
    async with cluster() as fake:
        p = producer(fake, stall_retry=False, send_timeout=30)
        p.fault = LatencyFaultTolerance(clock=lambda: 0.0)  # an isolation stays as it is
        async with p:
            for _ in range(4):  # both brokers answer: each is known to answer
                await p.send(Message(TOPIC, b"warm"))
            fake.broker("broker-a").mode = "silent"
            p.fault.isolate("broker-b", 0.0, 1.0)  # the next send picks broker-a
            before = dict(fake.sends())
            with pytest.raises(RequestTimeoutError):
                # Long enough for a stall bound (at most 1 s) and another attempt in it.
                await p.send(Message(TOPIC, b"m"), timeout=2.5)
            assert fake.sends() == {**before, "broker-a": before["broker-a"] + 1}
            assert p.stall_retries == 0
            p.fault.forget("broker-b")  # broker-a's failure is what keeps sends away now
            for _ in range(8):
                result = await p.send(Message(TOPIC, b"m"))
                assert result.queue.broker_name == "broker-b"
            assert fake.sends()["broker-a"] == before["broker-a"] + 1


def test_the_stall_bound_follows_the_broker_latency_within_its_limits() -> None:
    now = [100.0]
    watch = StallWatch(lambda: now[0], send_timeout=3.0)
    assert watch.bound("a") == STALL_FLOOR  # nothing known yet
    watch.answered("a", 0.001)
    assert watch.bound("a") == STALL_FLOOR
    for _ in range(50):
        watch.answered("a", 0.1)
    assert watch.bound("a") == pytest.approx(0.5, rel=0.01)  # 5x
    for _ in range(50):
        watch.answered("a", 2.0)
    assert watch.bound("a") == 0.75  # a quarter of the send timeout
    assert StallWatch(lambda: 0.0, send_timeout=10.0).bound("x") == STALL_FLOOR
    slow = StallWatch(lambda: 0.0, send_timeout=10.0)
    slow.answered("x", 2.0)
    assert slow.bound("x") == 1.0  # at most STALL_CAP
    assert not watch.others_answer("a")  # only a answered
    watch.answered("b", 0.001)
    assert watch.others_answer("a") and watch.others_answer("b")
    now[0] += 10.5
    assert not watch.others_answer("a")  # b's answer is too old to vouch for the cluster
    watch.answered("b", 0.001)
    now[0] += 1
    watch.stalled("b")
    assert not watch.others_answer("a")  # b stalled since it last answered
    assert watch.stalls == 1
    now[0] += 2.0
    assert watch.others_answer("a")  # its isolation is over: it may take sends again


def test_an_attempt_is_abandoned_only_while_the_next_one_gets_a_stall_bound() -> None:
    # Issue 39, item 6: an attempt abandoned with too little time left would end the
    # send with an error while the slow broker may still store the message.
    now = [100.0]
    watch = StallWatch(lambda: now[0], send_timeout=5.0)
    watch.answered("b", 0.001)  # another broker answers
    bound, give_up = watch.check("a", deadline=101.0)
    assert bound == STALL_FLOOR
    now[0] += bound
    assert give_up()  # 0.75 s left: the next attempt has its bound
    now[0] = 101.0 - STALL_FLOOR
    assert not give_up()  # what is left is no more than one bound: wait for the answer
