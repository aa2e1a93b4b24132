"""The simulated lite broker and the checker at the edges of what a client can see
(issue 40's lite_remoting findings 1001 and 1007): a pop answered into a connection the
client no longer reads, and an unsubscribe notice written into a silent one.

Both are what a 5.5.0 broker does (docs/simulator.md): a long poll woken just before
the broker sees the client hang up pops and writes its answer into the closed
connection (PopLiteLongPollingService.wakeUp checks the channel once, then pops and
writes on another thread); an eviction's NOTIFY_UNSUBSCRIBE_LITE is sent once and
nothing of it is kept. The client cannot read the one nor learn the other: the history
says so (``lost_on_wire``, ``lite_notice_lost``) and the checker does not blame it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import trio.testing

from aiorocket.client.lite import LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.testing.sim.checker import Bounds, check
from aiorocket.testing.sim.checker_more import LITE_LEARN
from aiorocket.testing.sim.history import History
from aiorocket.testing.sim.lite import LITE_GROUP, LITE_PARENT, SimLiteCluster
from aiorocket.testing.sim.memnet import MemoryByteStream, in_memory_network, memory_stream_pair
from aiorocket.testing.sim.nemesis import Fault, Schedule

pytestmark = pytest.mark.anyio

CLIENT = "sim-first-0"


def _request(code: int, ext: dict[str, str], body: bytes = b"") -> bytes:
    return encode_command(RemotingCommand.request(code, ext, body))


def _ctl(action: str, topics: list[str], client: str = CLIENT) -> bytes:
    entry = {"clientId": client, "group": LITE_GROUP, "topic": LITE_PARENT,
             "action": action, "liteTopicSet": topics}  # fmt: skip
    return _request(LITE_SUBSCRIPTION_CTL, {}, json.dumps({"subscriptionSet": [entry]}).encode())


def _pop() -> bytes:
    return _request(POP_LITE_MESSAGE, {
        "clientId": CLIENT, "consumerGroup": LITE_GROUP, "topic": LITE_PARENT,
        "maxMsgNum": "4", "invisibleTime": "10000", "pollTime": "20000",
    })  # fmt: skip


async def _quiet() -> None:
    for _ in range(20):  # the broker's tasks run what the writes woke
        await anyio.lowlevel.checkpoint()


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@asynccontextmanager
async def _connected(
    history: History, *, exclusive: bool, faults: list[Fault] | None = None
) -> AsyncIterator[tuple[SimLiteCluster, MemoryByteStream]]:
    """One simulated lite broker, and a client's end of a connection to it."""
    schedule = Schedule(0, "lite_remoting", {"server_seed": 1}, faults or [])
    with in_memory_network():
        async with SimLiteCluster(schedule, history, brokers=1, exclusive=exclusive) as cluster:
            client, served = memory_stream_pair()
            cluster.brokers[0].server.serve_stream(served)
            yield cluster, client
            await client.aclose()


@pytest.mark.parametrize(("hung_up", "named"), [(True, "lost_on_wire"), (False, "delivered")])
async def test_a_pop_answered_after_the_client_hung_up_is_lost_on_wire(
    hung_up: bool, named: str
) -> None:
    """Seed 1001: a parked lite pop woken by a new message at the instant the close cut
    it. The client had stopped reading that connection; the broker, not yet aware,
    pops and answers: the message is invisible for its invisible time and the client
    never saw it (``lost_on_wire``, not ``delivered``: not the client's to release).
    On a connection still read, the same answer is ``delivered``."""
    history = History(anyio.current_time)
    async with _connected(history, exclusive=False) as (cluster, client):
        await client.send(_ctl("PARTIAL_ADD", ["r0"]))
        await client.send(_pop())
        await _quiet()
        if hung_up:
            client._receive.close()  # the close hung up: nothing reads the answers now
        cluster.brokers[0].store("r0.0-0", "r0", 0)
        await _quiet()
    kinds = [e.kind for e in history.events if e.key == "r0.0-0"]
    assert kinds == ["stored", named]


@pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})]
)
async def test_a_pop_parked_before_a_pause_hands_out_nothing_until_the_broker_resumes() -> None:
    """Seeds 3014 and 3025 (``acked_after_success``): a lite pop parked before its
    broker was paused (SIGSTOP) was answered, during the pause, with a message stored
    then; the client handled it and owed its ack to the frozen broker. A stopped broker
    runs no long-polling service: the message is handed out only once it resumes."""
    history = History(anyio.current_time)
    start = anyio.current_time()
    pause = Fault("broker_pause", {"broker": "sim-broker-a", "at": start + 1.0, "seconds": 20.0})
    async with _connected(history, exclusive=False, faults=[pause]) as (cluster, client):
        assert cluster.brokers[0].name == "sim-broker-a"
        await client.send(_ctl("PARTIAL_ADD", ["r0"]))
        await client.send(_pop())
        await _quiet()
        await anyio.sleep(2.0)  # virtual seconds: into the pause
        cluster.brokers[0].store("r0.0-0", "r0", 0)
        await anyio.sleep(25.0)  # past its end
    delivered = [e.at - start for e in history.of("delivered") if e.key == "r0.0-0"]
    assert delivered and delivered[0] >= 21.0, delivered


async def test_an_unsubscribe_notice_into_a_silent_connection_is_noted_lost() -> None:
    """Seed 1007: the other member of an exclusive group takes a lite topic while the
    client's connection is half-open: the broker's notice goes nowhere."""
    history = History(anyio.current_time)
    async with _connected(history, exclusive=True) as (cluster, client):
        broker = cluster.brokers[0]
        await client.send(_ctl("PARTIAL_ADD", ["r0", "r1"]))
        await _quiet()
        broker.take("r0")  # heard: its notice is written
        await cluster._flush_notices()
        broker.silence.start()
        broker.take("r1")
        await cluster._flush_notices()
    lost = [e.info["lite_topic"] for e in history.of("lite_notice_lost")]
    assert lost == ["r1"]


@pytest.mark.parametrize(("action", "kept"), [("COMPLETE_ADD", {"r0"}), ("PARTIAL_ADD", set())])
async def test_only_a_partial_add_takes_a_lite_topic_from_its_holder(
    action: str, kept: set[str]
) -> None:
    """Seed 4244 (``none_lost``): in an exclusive group, the late COMPLETE_ADD of a client
    id whose start had failed took r0-r3 from the live member, silently; the live one
    then asked what it held, heard nothing and forgot them. 5.5's
    addCompleteSubscription evicts nobody (only addPartialSubscription runs
    excludeClientByLmqName): after a COMPLETE_ADD both hold the lite topic, and the
    first still pops it."""
    history = History(anyio.current_time)
    async with _connected(history, exclusive=True) as (cluster, client):
        broker = cluster.brokers[0]
        await client.send(_ctl("COMPLETE_ADD", ["r0"]))
        await _quiet()
        await client.send(_ctl(action, ["r0"], client="sim-first-dead"))
        await _quiet()
        assert broker.subs[CLIENT] == kept
        assert broker.subs["sim-first-dead"] == {"r0"}
        broker.store("r0.0-0", "r0", 0)
        await client.send(_pop())
        await _quiet()
    popped = [e.info["client"] for e in history.of("delivered")]
    assert popped == ([CLIENT] if kept else [])


def _history(*steps: tuple[float, str, dict[str, object]]) -> History:
    now = [0.0]
    history = History(lambda: now[0])
    for at, kind, info in steps:
        now[0] = at
        history.add(kind, "", **info)
    return history


_EVICTED = (10.0, "lite_evicted", {"broker": "a", "client": "c", "lite_topic": "r0"})
_LOST = (10.0, "lite_notice_lost", {"broker": "a", "client": "c", "lite_topic": "r0"})
_TAKEN_BACK = (30.0, "lite_taken_back", {"broker": "a", "client": "c", "lite_topic": "r0"})
_KEPT = (40.0, "lite_view", {"consumer": "first", "client": "c", "kept": ["r0"]})


def _agrees(history: History) -> list[str]:
    return [v.detail for v in check(history, Bounds())
            if v.invariant == "lite_subscription_agrees"]  # fmt: skip


_BACK_ON = (38.0, "reconnected", {"broker": "a"})


def test_a_lite_topic_whose_notice_was_lost_is_kept_until_the_client_can_learn() -> None:
    """Seed 1007: the only notice went into a silent connection. Kept while the client
    has no new connection to that broker (and ``LITE_LEARN`` after) is not judged;
    kept longer, or taken back by a resync, is."""
    assert _agrees(_history(_EVICTED, _LOST, _KEPT)) == []
    late = (38.0 + LITE_LEARN + 0.1, "lite_view", _KEPT[2])
    assert len(_agrees(_history(_EVICTED, _LOST, _BACK_ON, _KEPT))) == 0  # 2 s: learning
    assert len(_agrees(_history(_EVICTED, _LOST, _BACK_ON, late))) == 1
    assert len(_agrees(_history(_EVICTED, _LOST, _TAKEN_BACK))) == 1


def test_a_lite_topic_whose_notice_was_heard_is_judged() -> None:
    assert len(_agrees(_history(_EVICTED, _TAKEN_BACK, _KEPT))) == 2
    # a later eviction whose notice arrived: judged again
    again = (35.0, "lite_evicted", {"broker": "a", "client": "c", "lite_topic": "r0"})
    assert len(_agrees(_history(_EVICTED, _LOST, again, _KEPT))) == 1
    # another client's lost notice excuses nobody else
    other = (10.0, "lite_notice_lost", {"broker": "a", "client": "d", "lite_topic": "r0"})
    assert len(_agrees(_history(_EVICTED, other, _KEPT))) == 1


class _Call:
    """One gRPC call to the simulated Proxy: its request, the answer it got."""

    def __init__(self, request: object) -> None:
        self.request, self.answers = request, list[object]()

    async def recv_message(self) -> object:
        return self.request

    async def send_message(self, answer: object) -> None:
        self.answers.append(answer)


def test_a_lite_handle_from_before_a_renewal_still_settles_its_message() -> None:
    """5.5.0 keeps a lite message's pop time at a change
    (``ChangeInvisibleTimeProcessor.processChangeInvisibleTimeForLite``) and the Proxy
    builds the new receipt handle from that answer, so an ack sent with the handle from
    before a renewal (the renewal's answer still on its way, or lost) lands
    (``AckMessageProcessor.ackLite``: ``commitAndNext`` under the pop time), as the
    remoting model has it (lite_remoting seed 44040). Before, the simulated Proxy
    ignored it and the message came back. A handle of an earlier pop still names
    nothing, nor a normal message's old handle (apache/rocketmq#9583)."""
    pytest.importorskip("grpclib")
    from datetime import timedelta

    from aiorocket.grpc import _pb as pb
    from aiorocket.testing.sim.lite_proxy import SimLiteProxy

    history = History(lambda: 0.0)
    proxy = SimLiteProxy(Schedule(0, "grpc_lite", {}, []), history, exclusive=False)
    proxy.store_lite("m-0", 0, 0)
    proxy.add("n-0")  # a normal message beside it
    lite, normal = proxy.store
    for m in (lite, normal):
        proxy._hand_out(m, 30.0, auto_renew=False)
    first = {m.key: m.handle for m in (lite, normal)}

    async def settle() -> None:
        for m in (lite, normal):  # renewed: the Proxy answers a new handle
            change = _Call(pb.ChangeInvisibleDurationRequest(
                receipt_handle=m.handle, invisible_duration=timedelta(seconds=30),
                lite_topic=m.lite_topic,
            ))  # fmt: skip
            await proxy._change(change)  # type: ignore[arg-type]
            assert change.answers[0].receipt_handle != first[m.key]  # type: ignore[attr-defined]
        ack = _Call(pb.AckMessageRequest(entries=[
            pb.AckMessageEntry(receipt_handle=first[m.key], lite_topic=m.lite_topic)
            for m in (lite, normal)
        ]))  # fmt: skip
        await proxy._ack(ack)  # type: ignore[arg-type]

    anyio.run(settle, backend="asyncio")
    assert (lite.state, normal.state) == ("acked", "inflight")
    assert [e.key for e in history.of("acked")] == ["m-0"]
    # popped again once its invisible time ended: the first pop's handle names nothing
    proxy.store_lite("m-1", 1, 1)
    again = proxy.store[-1]
    proxy._hand_out(again, 0.0, auto_renew=False)
    earlier = again.handle
    proxy._visible()  # revived
    proxy._hand_out(again, 30.0, auto_renew=False)
    assert proxy._settling(earlier, again.lite_topic) is None
    assert proxy._settling(again.handle, again.lite_topic) is again
