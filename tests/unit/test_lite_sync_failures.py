"""A remoting lite consumer whose subscription updates fail on one broker, and a
broker's unsubscribe notice that comes while a subscription is being answered.

Fake lite brokers (``test_lite_lost_event.FakeLiteBroker``) that refuse or answer in
the order a test needs.
"""

from __future__ import annotations

import json

import anyio
import pytest

from aiorocket.client.lite import (
    GET_LITE_CLIENT_INFO,
    LITE_SUBSCRIPTION_CTL,
    NOTIFY_UNSUBSCRIBE_LITE,
    POP_LITE_MESSAGE,
    lmq_name,
)
from aiorocket.consumer import Consumer
from aiorocket.consumer.pop import lite as lite_mod
from aiorocket.errors import BrokerResponseError, LiteQuotaExceededError, RocketMQError
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.testing.fake_remoting import ServerSession
from tests.unit.consumer_fakes import TOPIC, FakeCluster, running
from tests.unit.test_lite_lost_event import FakeLiteBroker

pytestmark = pytest.mark.anyio

SYSTEM_ERROR = 1
QUOTA_EXCEEDED = 2018


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RefusingLiteBroker(FakeLiteBroker):
    """Refuses the next ``refuse`` LITE_SUBSCRIPTION_CTL with ``code``; ``synced`` is set
    (and replaced) at every one it takes."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.refuse = 0
        self.code = SYSTEM_ERROR
        self.actions: list[str] = []
        self.synced = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == LITE_SUBSCRIPTION_CTL:
            self.actions.append(json.loads(cmd.body)["subscriptionSet"][0]["action"])
            if self.refuse:
                self.refuse -= 1
                await session.send(RemotingCommand.response_to(cmd, self.code, "scripted"))
                return
            await super().handle(session, cmd)
            self.synced.set()
            self.synced = anyio.Event()
            return
        await super().handle(session, cmd)


async def nothing(msg: object) -> None:
    pass


def lite_consumer(cluster: FakeCluster) -> Consumer:
    return Consumer("g", cluster.namesrv.address, handler=nothing, bind_topic=TOPIC,
                    long_poll_timeout=0.5, request_timeout=1.0)  # fmt: skip


@pytest.mark.parametrize(("code", "error"), [
    (QUOTA_EXCEEDED, LiteQuotaExceededError), (SYSTEM_ERROR, BrokerResponseError),
])  # fmt: skip
async def test_one_brokers_refusal_of_a_subscription_is_a_typed_error(
    code: int, error: type[RocketMQError]
) -> None:
    """Two brokers; one refuses the PARTIAL_ADD: ``subscribe_lite`` raises that
    broker's typed error (not an ExceptionGroup), and the set does not change."""
    a, b = RefusingLiteBroker("broker-a"), RefusingLiteBroker("broker-b")
    async with (
        running(FakeCluster({"broker-a": [a], "broker-b": [b]})) as cluster,
        lite_consumer(cluster) as consumer,
    ):
        b.refuse, b.code = 1, code
        with anyio.fail_after(5), pytest.raises(error):
            await consumer.subscribe_lite("room")
        assert consumer.lite_topics == frozenset()
        assert b.actions[-1] == "PARTIAL_ADD"


async def test_a_failed_resync_is_retried_and_the_application_runs_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A periodic resync that a broker refuses is logged and sent again within
    RESYNC_RETRY; the application's code inside ``async with consumer`` is not
    cancelled and the consumer keeps running."""
    monkeypatch.setattr(lite_mod, "RESYNC_INTERVAL", 0.3)
    monkeypatch.setattr(lite_mod, "RESYNC_RETRY", 0.1)
    broker = RefusingLiteBroker("broker-a")
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = lite_consumer(cluster)
        await consumer.subscribe_lite("room")
        async with consumer:
            broker.refuse = 2  # the next two resyncs fail
            with anyio.fail_after(5):
                while broker.refuse:
                    await broker.synced.wait()
                await broker.synced.wait()  # a resync taken after the refusals
            assert consumer.started and consumer.lite_topics == {"room"}
        assert broker.actions.count("COMPLETE_ADD") >= 4  # start, 2 refused, 1 taken


async def test_a_refused_unsubscribe_at_close_leaves_no_scope_open() -> None:
    """The close's COMPLETE_REMOVE refused: logged, the close returns and the caller's
    own cancel scopes still work."""
    broker = RefusingLiteBroker("broker-a")
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = lite_consumer(cluster)
        await consumer.subscribe_lite("room")
        with anyio.CancelScope():  # leaving it raises if the close left one open inside
            async with consumer:
                broker.refuse = 1
        assert broker.actions[-1] == "COMPLETE_REMOVE" and not consumer.started


class ExclusiveBroker(FakeLiteBroker):
    """Another member of an exclusive group takes ``room`` right after this client
    subscribed it: the broker answers the add and sends its unsubscribe notice in the
    same write."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.complete_adds: list[set[str]] = []
        self.resynced = anyio.Event()  # set (and replaced) at every COMPLETE_ADD

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == LITE_SUBSCRIPTION_CTL:
            entry = json.loads(cmd.body)["subscriptionSet"][0]
            topics = set(entry["liteTopicSet"])
            if entry["action"] == "COMPLETE_ADD":
                self.complete_adds.append(topics)
                self.resynced.set()
                self.resynced = anyio.Event()
            if entry["action"] == "PARTIAL_ADD" and "room" in topics:
                notice = RemotingCommand(code=NOTIFY_UNSUBSCRIBE_LITE, ext_fields={
                    "consumerGroup": entry["group"], "clientId": entry["clientId"],
                    "liteTopic": "room",
                })  # fmt: skip
                await session.send_raw(
                    encode_command(RemotingCommand.response_to(cmd)) + encode_command(notice)
                )
                return
        await super().handle(session, cmd)


async def test_an_unsubscribe_notice_during_the_subscription_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker's notice for a lite topic whose PARTIAL_ADD is being answered: the
    lite topic is not added, and the resyncs that follow do not take it back."""
    monkeypatch.setattr(lite_mod, "RESYNC_INTERVAL", 0.2)
    broker = ExclusiveBroker("broker-a")
    async with (
        running(FakeCluster({"broker-a": [broker]})) as cluster,
        lite_consumer(cluster) as consumer,
    ):
        await consumer.subscribe_lite("room")
        await consumer.subscribe_lite("hall")
        with anyio.fail_after(5):
            while len(broker.complete_adds) < 3:
                await broker.resynced.wait()
        assert consumer.lite_topics == {"hall"}
    assert broker.complete_adds[1:] and all("room" not in s for s in broker.complete_adds)


def _action(cmd: RemotingCommand) -> str:
    return str(json.loads(cmd.body)["subscriptionSet"][0]["action"])


class ParkingBroker(FakeLiteBroker):
    """Parks every lite pop (as a long poll with nothing to hand out) and, as 5.5.0
    does, pops nothing for one whose connection closed before it woke; holds the
    close's COMPLETE_REMOVE until ``answer_remove`` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.parked = anyio.Event()
        self.poll_session: ServerSession | None = None
        self.removing = anyio.Event()
        self.answer_remove = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == POP_LITE_MESSAGE:
            self.poll_session = session
            self.parked.set()
            with anyio.move_on_after(int(cmd.ext_fields["pollTime"]) / 1000):
                while not self.events:
                    await self._offered.wait()
            if session.closed:
                return  # the channel is no longer active: nothing popped, no answer
        elif cmd.code == LITE_SUBSCRIPTION_CTL and _action(cmd) == "COMPLETE_REMOVE":
            self.removing.set()
            await self.answer_remove.wait()
        await super().handle(session, cmd)


async def test_a_long_poll_cut_by_the_close_is_not_answered_while_the_close_unsubscribes() -> None:
    """A lite pop parked at the broker when the close begins: the close hangs up the
    connection it is on before it unsubscribes, so a message that comes while a slow
    COMPLETE_REMOVE is answered is not popped for a client that no longer reads (it
    stayed invisible for the invisible time: the simulator's lite_remoting seeds 114
    and 126)."""
    broker = ParkingBroker("broker-a")
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = Consumer("g", cluster.namesrv.address, handler=nothing, bind_topic=TOPIC,
                            long_poll_timeout=20, request_timeout=1.0)  # fmt: skip
        await consumer.subscribe_lite("room")

        async def message_during_the_unsubscribe() -> None:
            with anyio.fail_after(10):
                await broker.removing.wait()
            session = broker.poll_session
            assert session is not None and session.closed  # hung up before the remove
            broker.add_lite("room", b"late")
            broker.answer_remove.set()

        async with anyio.create_task_group() as tg, consumer:
            with anyio.fail_after(10):
                await broker.parked.wait()
            tg.start_soon(message_during_the_unsubscribe)
        assert broker.in_flight == set()  # not popped: it stays visible to the group


class EvictingBroker(RefusingLiteBroker):
    """An exclusive group's broker (5.5.0's answers): it lists what it holds for the
    client (GET_LITE_CLIENT_INFO, as LMQ names), and ``evict_unheard`` drops a lite
    topic for another member with the notice lost: the connection it went into ends.
    ``restarted``: it knows no subscription of the client (a count of -1)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.restarted = False
        self.complete_adds: list[set[str]] = []
        self.asked = 0

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            attributes = {"lite.bind.topic": TOPIC, "lite.sub.model": "Exclusive"}
            config = {"groupName": "g", "retryMaxTimes": 16, "attributes": attributes}
            await session.send(RemotingCommand.response_to(cmd, body=json.dumps(config).encode()))
            return
        if cmd.code == GET_LITE_CLIENT_INFO:
            self.asked += 1
            info: dict[str, object] = {"liteTopicCount": -1}
            if not self.restarted:
                info = {"liteTopicCount": len(self.subscribed),
                        "liteTopicSet": [lmq_name(TOPIC, t) for t in self.subscribed]}  # fmt: skip
            await session.send(RemotingCommand.response_to(cmd, body=json.dumps(info).encode()))
            return
        if cmd.code == LITE_SUBSCRIPTION_CTL:
            entry = json.loads(cmd.body)["subscriptionSet"][0]
            if entry["action"] == "COMPLETE_ADD":
                self.complete_adds.append(set(entry["liteTopicSet"]))
        await super().handle(session, cmd)

    async def evict_unheard(self, lite_topic: str) -> None:
        self.subscribed.discard(lite_topic)
        for session in list(self.server.sessions):
            await session.close()


@pytest.mark.parametrize(("restarted", "kept"), [(False, {"b"}), (True, {"a", "b"})])
async def test_a_lite_topic_dropped_while_the_connection_died_is_learned_not_taken_back(
    monkeypatch: pytest.MonkeyPatch, restarted: bool, kept: set[str]
) -> None:
    """Issue 40, lite_remoting seed 1007: another member of an exclusive group took "a"
    and the broker's notice went into a connection that then died. After it ended the
    client asks the brokers what they hold for it before its next resync (asked for at
    once), forgets "a" and does not subscribe it again (5.5.0's COMPLETE_ADD would put it
    back beside the other member). A broker that knows no subscription of the client
    (restarted) teaches nothing: the resync restores the whole set."""
    monkeypatch.setattr(lite_mod, "RESYNC_INTERVAL", 0.5)
    broker = EvictingBroker("broker-a")
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = lite_consumer(cluster)
        await consumer.subscribe_lite("a")
        await consumer.subscribe_lite("b")
        async with consumer:
            broker.restarted = restarted
            adds = len(broker.complete_adds)
            await broker.evict_unheard("a")
            with anyio.fail_after(5):
                while len(broker.complete_adds) == adds:
                    await broker.synced.wait()
            assert consumer.lite_topics == kept
        assert broker.complete_adds[adds] == kept and broker.asked == 1
