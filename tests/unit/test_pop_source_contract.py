"""Every ``PopSource`` against the error contract of ``aiorocket.consumer.pop.source``:
the same server answer (success, a retriable error, a refusal for good, no answer)
gives the same result shape from the gRPC source (fake Proxy), the remoting source
(batch acks), the orderly remoting source (one ACK_MESSAGE per message) and the remoting
lite source. Error answers are what a real server cannot be made to give on demand.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.client.lite import LITE_SUBSCRIPTION_CTL
from aiorocket.client.pop import ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME
from aiorocket.consumer import Consumer
from aiorocket.consumer.backend import grpc_source, remoting_source
from aiorocket.consumer.pop.lite import LiteAction
from aiorocket.consumer.pop.source import PopSource
from aiorocket.errors import NoRouteError, RocketMQError
from aiorocket.grpc import _pb as pb
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.received import PopMessage
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.fake_remoting import ServerSession
from tests.unit.consumer_fakes import TOPIC, FakeBroker, FakeCluster, running

pytestmark = pytest.mark.anyio

Answer = Literal["ok", "busy", "refused", "silent"]
SOURCES = ["grpc", "remoting", "remoting-orderly", "remoting-lite"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


class ScriptedPopBroker(FakeBroker):
    """A broker whose answers to acks, renewals and lite subscription updates are
    scripted: ``answer`` (SYSTEM_BUSY for "busy", MESSAGE_ILLEGAL for "refused", none
    for "silent")."""

    def __init__(self) -> None:
        super().__init__("broker-a", 0)
        self.answer: Answer = "ok"
        self.acks = 0
        #: what the acks named: (request code, offset) per single ack, per batch its
        #: check points' (start offset, bitmap)
        self.acked: list[tuple[int, object]] = []

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        code = cmd.code
        if code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            config = {"groupName": cmd.ext_fields["group"], "retryMaxTimes": 16,
                      "attributes": {"lite.bind.topic": TOPIC}}  # fmt: skip
            await session.send(RemotingCommand.response_to(cmd, body=json.dumps(config).encode()))
            return
        if code not in (ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
                        LITE_SUBSCRIPTION_CTL):  # fmt: skip
            await super().handle(session, cmd)
            return
        if self.answer == "silent":
            session.stall()
            return
        if self.answer == "busy":
            resp = RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_BUSY, "[PCBUSY] busy")
        elif self.answer == "refused":
            resp = RemotingCommand.response_to(cmd, 13, "offset is illegal")  # MESSAGE_ILLEGAL
        else:
            resp = RemotingCommand.response_to(cmd)
            if code == CHANGE_MESSAGE_INVISIBLETIME:
                resp.ext_fields = {"popTime": "2", "invisibleTime": "30000", "reviveQid": "999"}
            elif code in (ACK_MESSAGE, BATCH_ACK_MESSAGE):
                self.acks += 1
                named: object = (
                    int(cmd.ext_fields["offset"]) if code == ACK_MESSAGE
                    else [(a["so"], a["b"]) for a in json.loads(cmd.body)["acks"]]
                )  # fmt: skip
                self.acked.append((code, named))
        await session.send(resp)


@dataclass
class Rig:
    """A source, opened, and how to make its server answer."""

    source: PopSource
    answer: Callable[[Answer], None]
    lite: bool
    broker: ScriptedPopBroker | None = None
    cluster: FakeCluster | None = None


def _messages(n: int, lite: bool) -> list[PopMessage]:
    out = []
    for i in range(n):
        msg = PopMessage(TOPIC, b"x", {}, 0, i, 0)
        msg.broker_name = "broker-a"
        msg.message_id = f"id{i}"
        msg.receipt_handle = f"0 1 30000 999 0 broker-a 0 {i}"
        if lite:
            msg.properties[PROPERTY_LITE_TOPIC] = "room"
        out.append(msg)
    return out


@asynccontextmanager
async def rig(kind: str) -> AsyncIterator[Rig]:
    async with AsyncExitStack() as stack:
        if kind == "grpc":
            proxy = await stack.enter_async_context(FakeProxy())
            consumer = Consumer("g", proxy=proxy.endpoint, request_timeout=30.0)
            consumer.subscribe(TOPIC)
            state = consumer._state
            source = grpc_source(state, proxy.endpoint, None, None)()

            def answer_grpc(what: Answer) -> None:
                if what == "busy":
                    proxy.ack_entry_refusal = (pb.Code.INTERNAL_ERROR, 1)
                    proxy.change_refusal = (pb.Code.INTERNAL_ERROR, 1)
                elif what == "refused":
                    proxy.ack_entry_refusal = (pb.Code.INVALID_RECEIPT_HANDLE, 1)
                    proxy.change_refusal = (pb.Code.INVALID_RECEIPT_HANDLE, 1)
                elif what == "silent":
                    proxy.ack_failures = 1  # the call fails (gRPC UNAVAILABLE)

            answer = answer_grpc
        else:
            broker = ScriptedPopBroker()
            cluster = await stack.enter_async_context(
                running(FakeCluster({"broker-a": [broker]}))
            )
            ns = cluster.namesrv.address
            # A generous request timeout: every answer but a silent broker's comes (a
            # loaded CI machine took more than the 0.5 s this had); "silent" shortens it.
            settings: dict[str, Any] = dict(request_timeout=30.0, long_poll_timeout=0.5)
            if kind == "remoting-lite":
                consumer = Consumer("g", ns, bind_topic=TOPIC, **settings)
            else:
                consumer = Consumer("g", ns, consume_mode="pop",
                                    orderly=kind == "remoting-orderly", **settings)  # fmt: skip
                consumer.subscribe(TOPIC)
            state = consumer._state
            source = remoting_source(state, [ns], None)()

            def answer_remoting(what: Answer) -> None:
                broker.answer = what
                # The broker answers nothing from now on: a short timeout only makes
                # "no answer" show sooner, however loaded the machine.
                source.client.broker.timeout = 0.5 if what == "silent" else 30.0

            answer = answer_remoting
        await source.open()
        stack.push_async_callback(source.close)
        yield Rig(source, answer, lite=kind == "remoting-lite",
                  broker=None if kind == "grpc" else broker,
                  cluster=None if kind == "grpc" else cluster)  # fmt: skip


async def _ack(r: Rig, msgs: list[PopMessage]) -> list[tuple[PopMessage, RocketMQError]]:
    """``ack``, a raised error read as that error for every message (the contract)."""
    try:
        return await r.source.ack(TOPIC, msgs)
    except RocketMQError as err:
        return [(m, err) for m in msgs]


@pytest.mark.parametrize("kind", SOURCES)
async def test_an_ack_the_server_takes_returns_no_refusal(kind: str) -> None:
    async with rig(kind) as r:
        with anyio.fail_after(10):
            assert await r.source.ack(TOPIC, _messages(3, r.lite)) == []
        assert isinstance(r.source.dead_letter_settles, bool)


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize(("what", "retriable"), [("busy", True), ("refused", False),
                                                 ("silent", True)])  # fmt: skip
async def test_an_ack_the_server_does_not_take_is_a_typed_refusal_per_message(
    kind: str, what: Answer, retriable: bool
) -> None:
    """Busy (SYSTEM_BUSY / the Proxy's INTERNAL_ERROR), refused for good
    (MESSAGE_ILLEGAL / INVALID_RECEIPT_HANDLE) or no answer: every message comes back
    with a typed error whose ``retriable`` says whether to send it again. Before, an
    orderly or lite source answered a busy broker with a count (no error: never retried)."""
    async with rig(kind) as r:
        msgs = _messages(2, r.lite)
        r.answer(what)
        with anyio.fail_after(10):
            refused = await _ack(r, msgs)
    assert [m for m, _ in refused] == msgs
    assert all(isinstance(err, RocketMQError) for _, err in refused)
    assert [err.retriable for _, err in refused] == [retriable] * len(msgs)


@pytest.mark.parametrize("kind", [k for k in SOURCES if k != "grpc"])
async def test_settling_while_the_broker_has_no_master_is_retriable(kind: str) -> None:
    """The broker's master is out of the route (a failover, a restart): acks, renewals
    and releases fail with a retriable NoRouteError, so the acks are sent again while
    the consumer runs (the route comes back) instead of being given up and the handled
    messages delivered again. Before: not retriable, every ack refused for good."""
    async with rig(kind) as r:
        assert r.cluster is not None
        msgs = _messages(2, r.lite)
        r.cluster.master_down.add("broker-a")
        await r.source.client.namesrv.query_route(TOPIC)  # type: ignore[attr-defined]
        with anyio.fail_after(10):
            refused = await _ack(r, msgs)
            with pytest.raises(NoRouteError) as renewal:
                await r.source.change_invisible(msgs[0], 10.0)
        assert [m for m, _ in refused] == msgs
        assert all(isinstance(err, NoRouteError) and err.retriable for _, err in refused)
        assert renewal.value.retriable and not r.source.lost(renewal.value)
        r.cluster.master_down.clear()  # the master is back: the same acks go through
        with anyio.fail_after(10):
            assert await r.source.ack(TOPIC, msgs) == []


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize(("what", "retriable"), [("busy", True), ("refused", False)])
async def test_a_renewal_the_server_does_not_take_raises_a_typed_error(
    kind: str, what: Answer, retriable: bool
) -> None:
    async with rig(kind) as r:
        (msg,) = _messages(1, r.lite)
        handle = msg.receipt_handle
        r.answer(what)
        with anyio.fail_after(10), pytest.raises(RocketMQError) as caught:
            await r.source.change_invisible(msg, 10.0)
        assert caught.value.retriable is retriable
        assert r.source.lost(caught.value) in (False, not retriable)
        assert msg.receipt_handle == handle  # not replaced by a failed renewal
        r.answer("ok")
        with anyio.fail_after(10):
            await r.source.change_invisible(msg, 10.0)
        assert msg.receipt_handle != handle


@pytest.mark.parametrize(("what", "retriable"), [("busy", True), ("refused", False)])
async def test_a_lite_subscription_update_refused_raises_one_typed_error(
    what: Answer, retriable: bool
) -> None:
    async with rig("remoting-lite") as r:
        sync_lite = getattr(r.source, "sync_lite")  # noqa: B009
        r.answer(what)
        with anyio.fail_after(10), pytest.raises(RocketMQError) as caught:
            await sync_lite(LiteAction.PARTIAL_ADD, ["room"])
        assert caught.value.retriable is retriable


@pytest.mark.parametrize("kind", ["remoting", "remoting-orderly", "remoting-lite"])
async def test_a_message_below_its_check_point_start_is_acked_alone(kind: str) -> None:
    """A 5.x broker that corrected a wrong stored pop offset (after a SIGKILL and
    restart) keeps the stale one as the check point's start, past the message's offset
    (see aiorocket.client.pop): a batch ack cannot name it. It is acked with its own
    ACK_MESSAGE, the others still in one batch, and nothing raises; an unreadable
    receipt handle is refused for good, alone. Before, the batch ack raised
    ``ValueError: negative shift count`` (untyped) for every message, at close too."""
    async with rig(kind) as r:
        assert r.broker is not None
        ok, behind, garbage = _messages(3, r.lite)
        ok.receipt_handle = "5 1 30000 0 0 broker-a 0 6"
        behind.receipt_handle = "9 1 30000 0 0 broker-a 0 7"  # offset 7 < start 9
        garbage.receipt_handle = "not a handle"
        with anyio.fail_after(10):
            refused = await r.source.ack(TOPIC, [ok, behind, garbage])
    assert [m for m, _ in refused] == [garbage]
    assert all(isinstance(e, RocketMQError) and not e.retriable for _, e in refused)
    # offset 6 of the check point at 5: bit 1 (the orderly and lite sources ack alone)
    first = (BATCH_ACK_MESSAGE, [(5, "Ag==")]) if kind == "remoting" else (ACK_MESSAGE, 6)
    assert r.broker.acked == [first, (ACK_MESSAGE, 7)]
