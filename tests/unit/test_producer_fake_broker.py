"""Producer behaviour against scripted in-process NameServer and brokers.

The real broker tests (tests/integration/test_producer*.py) cover the happy paths end
to end; these cover what a real broker will not do on demand: hang up, stay silent,
answer with errors, hold answers back, or ask for a transaction check at a given time.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiorocket.client.results import SendResult, SendStatus
from aiorocket.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConfigError,
    ConnectionClosedError,
    MessageTooLargeError,
    NoRouteError,
    RequestTimeoutError,
)
from aiorocket.message import Message, MessageExt, MessageQueue
from aiorocket.producer import LatencyFaultTolerance, Producer, TransactionState, hash_selector
from aiorocket.producer.batch import decode_records
from aiorocket.protocol.codes import RemotingFlag, RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import (
    decode_offset_message_id,
    decode_properties,
    decompress_body,
    offset_message_id,
)
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.remoting.connection import Connection
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

from .test_membership_faults import HangingHeartbeat, LateHeartbeat

pytestmark = pytest.mark.anyio

TOPIC = "orders"
GROUP = "pg"
SEND_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


class FakeBroker:
    """A broker whose answer to sends is scripted by ``mode``.

    ``"ok"``; ``"hangup"`` (close the connection); ``"silent"`` (never answer); or a
    response code to answer with. ``hold`` makes successful sends wait for an event.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode: str | int = "ok"
        self.requests: list[RemotingCommand] = []
        self.next_offset: dict[int, int] = defaultdict(int)
        self.busy_next = 0  # answer the next sends SYSTEM_BUSY, then go back to mode
        self.hold: anyio.Event | None = None
        self.holding = 0
        self.max_holding = 0
        self.session: ServerSession | None = None
        self.server = FakeRemotingServer(self.handle)

    @property
    def addr(self) -> str:
        return self.server.address

    def received(self, *codes: int) -> list[RemotingCommand]:
        return [c for c in self.requests if c.code in codes]

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        self.requests.append(cmd)
        self.session = session
        if cmd.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            await session.send(RemotingCommand.response_to(cmd))
        elif cmd.code in SEND_CODES:
            await self._on_send(session, cmd)

    async def _on_send(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if self.busy_next:
            self.busy_next -= 1
            await session.send(RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_BUSY, "busy"))
            return
        if self.mode == "hangup":
            await session.close()
            return
        if self.mode == "silent":
            return
        if isinstance(self.mode, int) and self.mode not in (10, 11, 12):
            await session.send(RemotingCommand.response_to(cmd, self.mode, "scripted"))
            return
        if self.hold is not None:
            self.holding += 1
            self.max_holding = max(self.max_holding, self.holding)
            await self.hold.wait()
            self.holding -= 1
        if cmd.is_oneway:
            return
        queue_id = int(cmd.ext_fields["e"])
        count = len(decode_records(cmd.body)) if cmd.code == RequestCode.SEND_BATCH_MESSAGE else 1
        first = self.next_offset[queue_id]
        self.next_offset[queue_id] += count
        ids = [offset_message_id(self.addr, 5000 + 100 * (first + i)) for i in range(count)]
        ext = {"msgId": ",".join(ids), "queueId": str(queue_id), "queueOffset": str(first)}
        if int(cmd.ext_fields["f"]) & 0x4:
            ext["transactionId"] = "TX" + ids[0]
        code = self.mode if isinstance(self.mode, int) else ResponseCode.SUCCESS
        await session.send(RemotingCommand.response_to(cmd, code, ext_fields=ext))


class FakeCluster:
    """A NameServer serving one topic with 4 write queues on each broker."""

    def __init__(self, brokers: int = 2) -> None:
        self.brokers = [FakeBroker(f"broker-{chr(97 + i)}") for i in range(brokers)]
        self.namesrv = FakeRemotingServer(self._namesrv)
        self.route_queries = 0
        #: how many of the brokers the route names (the others are not in the cluster yet).
        self.in_route = brokers
        #: topics the NameServer answers TOPIC_NOT_EXIST for.
        self.missing: set[str] = set()

    def broker(self, name: str) -> FakeBroker:
        return next(b for b in self.brokers if b.name == name)

    async def _namesrv(self, session: ServerSession, cmd: RemotingCommand) -> None:
        self.route_queries += 1
        if cmd.ext_fields.get("topic") in self.missing:
            reply = RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, "no route")
            await session.send(reply)
            return
        route = {
            "queueDatas": [
                {"brokerName": b.name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
                for b in self.brokers[: self.in_route]
            ],
            "brokerDatas": [
                {"cluster": "c", "brokerName": b.name, "brokerAddrs": {"0": b.addr}}
                for b in self.brokers[: self.in_route]
            ],
        }
        await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))

    def sends(self) -> dict[str, int]:
        return {b.name: len(b.received(*SEND_CODES)) for b in self.brokers}


@asynccontextmanager
async def cluster(brokers: int = 2) -> AsyncIterator[FakeCluster]:
    fake = FakeCluster(brokers)
    async with AsyncExitStack() as stack:
        for b in fake.brokers:
            await stack.enter_async_context(b.server)
        await stack.enter_async_context(fake.namesrv)
        yield fake


async def wait_for(condition: Callable[[], Any], timeout: float = 5.0) -> None:
    """Poll ``condition`` (for effects of oneway requests, which have no answer)."""
    with anyio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110 - a oneway request has no event to wait on
            await anyio.sleep(0.01)


def producer(fake: FakeCluster, **settings: Any) -> Producer:
    return Producer(GROUP, fake.namesrv.address, **settings)


# -- sending -----------------------------------------------------------------------------


async def test_send_returns_id_queue_and_offset_and_sends_the_right_header() -> None:
    async with cluster() as fake, producer(fake) as p:
        msg = Message(TOPIC, b"hello", tags="t1", keys=["k"], properties={"u": "v"})
        result = await p.send(msg)
        assert result.status is SendStatus.SEND_OK
        assert result.queue.topic == TOPIC and result.queue_offset == 0
        (cmd,) = fake.broker(result.queue.broker_name).received(RequestCode.SEND_MESSAGE_V2)
        ext = cmd.ext_fields
        assert (ext["a"], ext["b"], ext["e"], ext["f"], ext["m"]) == (
            GROUP, TOPIC, str(result.queue.queue_id), "0", "false",
        )  # fmt: skip
        assert ext["n"] == result.queue.broker_name
        props = decode_properties(ext["i"])
        assert props == {"u": "v", "TAGS": "t1", "KEYS": "k", "UNIQ_KEY": result.msg_id}
        assert cmd.body == b"hello"
        assert decode_offset_message_id(result.offset_msg_id)[1] == 5000


async def test_large_body_goes_compressed() -> None:
    async with cluster() as fake, producer(fake) as p:
        body = b"abc" * 5000
        result = await p.send(Message(TOPIC, body))
        (cmd,) = fake.broker(result.queue.broker_name).received(RequestCode.SEND_MESSAGE_V2)
        assert int(cmd.ext_fields["f"]) == 0x301
        assert len(cmd.body) < len(body)
        assert decompress_body(cmd.body, 0x301) == body


async def test_too_large_message_fails_before_anything_is_sent() -> None:
    async with cluster() as fake, producer(fake) as p:
        with pytest.raises(MessageTooLargeError):
            await p.send(Message(TOPIC, b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(MessageTooLargeError):
            await p.send_batch([Message(TOPIC, b"x" * (3 * 1024 * 1024))] * 2)
        assert fake.route_queries == 0
        assert fake.sends() == {"broker-a": 0, "broker-b": 0}


async def test_failed_broker_is_retried_elsewhere_and_then_avoided() -> None:
    async with cluster() as fake:
        p = producer(fake)
        p.fault = LatencyFaultTolerance(clock=lambda: 0.0)  # isolation cannot run out
        async with p:
            fake.broker("broker-a").mode = "hangup"
            results = [await p.send(Message(TOPIC, b"m")) for _ in range(12)]
            assert {r.queue.broker_name for r in results} == {"broker-b"}
            assert fake.sends()["broker-a"] == 1  # tried once, then isolated
            assert not p.fault.is_available("broker-a")
            assert p.fault.is_available("broker-b")


#: the event loop kept busy this long: over the 550 ms at which a broker is avoided (2 s)
HOG = 0.7


@pytest.mark.parametrize("when", ["before_the_write", "after_the_read"])
async def test_a_busy_event_loop_does_not_make_a_prompt_broker_slow(
    when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault table takes a send's latency from the write of its request to the read
    of its answer: the client's own delays around them (a thousand sends in flight: the
    answers wait in the loop's ready queue behind each other) are not the broker's, and
    a prompt broker is not avoided for them."""
    hogged: list[float] = []
    armed = False
    request, on_response = Connection.request, Connection._on_response

    def hog() -> None:
        nonlocal armed
        if armed:
            armed = False
            time.sleep(HOG)  # the loop is busy: nothing else runs meanwhile
            hogged.append(HOG)

    async def late_write(conn: Connection, cmd: RemotingCommand, *args: Any) -> RemotingCommand:
        if cmd.code in SEND_CODES:
            hog()  # between the producer's clock before the send and the write
        return await request(conn, cmd, *args)

    def late_resume(conn: Connection, cmd: RemotingCommand) -> None:
        on_response(conn, cmd)  # read, and its requester woken: it resumes after this
        if "queueOffset" in cmd.ext_fields:
            hog()

    if when == "before_the_write":
        monkeypatch.setattr(Connection, "request", late_write)
    else:
        monkeypatch.setattr(Connection, "_on_response", late_resume)
    async with cluster(brokers=1) as fake:
        p = producer(fake)
        p.fault = LatencyFaultTolerance(clock=lambda: 0.0)  # an isolation never runs out
        async with p:
            await p.send(Message(TOPIC, b"warm"))  # the route and the connection
            armed = True
            started = time.monotonic()
            await p.send(Message(TOPIC, b"m"))
            assert hogged == [HOG] and time.monotonic() - started >= HOG
            assert p.fault.is_available("broker-a")
            assert p.fault.snapshot()["broker-a"].latency_ms < 550


async def test_a_broker_slow_between_write_and_read_is_still_avoided() -> None:
    async with cluster(brokers=1) as fake:
        p = producer(fake)
        p.fault = LatencyFaultTolerance(clock=lambda: 0.0)
        broker = fake.broker("broker-a")
        async with p, anyio.create_task_group() as tg:
            await p.send(Message(TOPIC, b"warm"))
            broker.hold = anyio.Event()
            tg.start_soon(p.send, Message(TOPIC, b"m"))
            await wait_for(lambda: broker.holding)  # read by the broker, not answered
            await anyio.sleep(0.6)  # the broker's slowness itself
            broker.hold.set()
        assert not p.fault.is_available("broker-a")
        assert p.fault.snapshot()["broker-a"].latency_ms >= 550


async def test_without_fault_tolerance_retries_still_move_but_the_broker_is_not_avoided() -> None:
    async with cluster() as fake, producer(fake, latency_fault_tolerance=False) as p:
        fake.broker("broker-a").mode = ResponseCode.SYSTEM_BUSY
        results = [await p.send(Message(TOPIC, b"m")) for _ in range(16)]
        assert {r.queue.broker_name for r in results} == {"broker-b"}
        assert fake.sends()["broker-a"] >= 4  # round-robin keeps landing on it


async def test_all_attempts_failing_raises_the_last_error() -> None:
    async with cluster() as fake, producer(fake, retries=2) as p:
        for b in fake.brokers:
            b.mode = "hangup"
        with pytest.raises(ConnectionClosedError):
            await p.send(Message(TOPIC, b"m"))
        assert sum(fake.sends().values()) == 3


async def test_non_retryable_answer_is_raised_at_once() -> None:
    async with cluster() as fake, producer(fake) as p:
        for b in fake.brokers:
            b.mode = ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(BrokerResponseError) as info:
            await p.send(Message(TOPIC, b"m"))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert sum(fake.sends().values()) == 1


async def test_topic_not_exist_on_a_broker_refreshes_the_route() -> None:
    async with cluster() as fake, producer(fake) as p:
        await p.send(Message(TOPIC, b"warm"))
        queries = fake.route_queries
        fake.broker("broker-a").mode = ResponseCode.TOPIC_NOT_EXIST
        fake.broker("broker-b").mode = ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(BrokerResponseError):
            await p.send(Message(TOPIC, b"m"))
        assert fake.route_queries == queries + 3


async def test_route_refresh_brings_in_a_new_broker() -> None:
    async with cluster(brokers=3) as fake, producer(fake, route_refresh_interval=0.1) as p:
        fake.in_route = 2
        first = [await p.send(Message(TOPIC, b"m")) for _ in range(8)]
        assert {r.queue.broker_name for r in first} == {"broker-a", "broker-b"}
        fake.in_route = 3  # broker-c joins; the refresher sees it within an interval
        queries = fake.route_queries
        await wait_for(lambda: fake.route_queries > queries + 1)
        later = [await p.send(Message(TOPIC, b"m")) for _ in range(12)]
        assert {r.queue.broker_name for r in later} == {"broker-a", "broker-b", "broker-c"}
        await wait_for(lambda: fake.broker("broker-c").received(RequestCode.HEART_BEAT))


async def test_per_call_timeout_bounds_the_whole_send() -> None:
    async with cluster() as fake, producer(fake) as p:
        for b in fake.brokers:
            b.mode = "silent"
        with pytest.raises(RequestTimeoutError):
            await p.send(Message(TOPIC, b"m"), timeout=0.3)
        with pytest.raises(ConfigError):
            await p.send(Message(TOPIC, b"m"), timeout=0)


async def test_ordered_sends_stay_on_their_queue_and_retry_only_definite_refusals() -> None:
    async with cluster() as fake, producer(fake) as p:
        results = [await p.send(Message(TOPIC, b"m"), sharding_key="user-1") for _ in range(10)]
        queues = {r.queue for r in results}
        expected = hash_selector(
            [MessageQueue(TOPIC, b, i) for b in ("broker-a", "broker-b") for i in range(4)],
            Message(TOPIC, b""),
            "user-1",
        )
        assert queues == {expected}
        assert [r.queue_offset for r in results] == list(range(10))
        (cmd, *_) = fake.broker(expected.broker_name).received(RequestCode.SEND_MESSAGE_V2)
        assert decode_properties(cmd.ext_fields["i"])["__SHARDINGKEY"] == "user-1"
        broker = fake.broker(expected.broker_name)
        broker.busy_next = 2  # "not stored": retried, on the same queue, in order
        again = await p.send(Message(TOPIC, b"m"), sharding_key="user-1")
        assert (again.queue, again.queue_offset) == (expected, 10)
        assert fake.sends()[expected.broker_name] == 13
        broker.mode = "hangup"  # maybe stored: not retried, neither here nor elsewhere
        before = sum(fake.sends().values())
        with pytest.raises(ConnectionClosedError):
            await p.send(Message(TOPIC, b"m"), sharding_key="user-1")
        assert sum(fake.sends().values()) == before + 1


async def test_user_selector_gets_all_queues_and_must_return_one() -> None:
    seen: list[list[MessageQueue]] = []

    def last_queue(queues: Any, msg: Message, arg: Any) -> MessageQueue:
        seen.append(list(queues))
        return queues[-1] if arg is None else MessageQueue(TOPIC, "nowhere", 0)

    async with cluster() as fake, producer(fake) as p:
        result = await p.send(Message(TOPIC, b"m"), selector=last_queue)
        assert result.queue == MessageQueue(TOPIC, "broker-b", 3)
        assert len(seen[0]) == 8
        with pytest.raises(ConfigError):
            await p.send(Message(TOPIC, b"m"), selector=last_queue, selector_arg=1)
        with pytest.raises(ConfigError):
            await p.send(Message(TOPIC, b"m"), selector=last_queue, sharding_key="k")


async def test_oneway_is_written_without_waiting() -> None:
    async with cluster() as fake, producer(fake) as p:
        await p.send_oneway(Message(TOPIC, b"fire"))
        await wait_for(lambda: sum(fake.sends().values()) == 1)
        cmd = next(c for b in fake.brokers for c in b.received(RequestCode.SEND_MESSAGE_V2))
        assert cmd.flag & RemotingFlag.ONEWAY and cmd.body == b"fire"


async def test_batch_is_one_request_with_per_message_results() -> None:
    async with cluster() as fake, producer(fake) as p:
        await p.send(Message(TOPIC, b"first"), sharding_key=1)
        batch = [Message(TOPIC, f"b{i}".encode(), keys=[f"k{i}"]) for i in range(5)]
        results = await p.send_batch(batch, sharding_key=1)
        assert len({r.queue for r in results}) == 1
        assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5]
        broker = fake.broker(results[0].queue.broker_name)
        (cmd,) = broker.received(RequestCode.SEND_BATCH_MESSAGE)
        assert cmd.ext_fields["m"] == "true"
        records = decode_records(cmd.body)
        assert [b for _, b, _ in records] == [m.body for m in batch]
        assert [decode_properties(p)["UNIQ_KEY"] for _, _, p in records] == [
            r.msg_id for r in results
        ]
        offsets = [decode_offset_message_id(r.offset_msg_id)[1] for r in results]
        assert offsets == [5100, 5200, 5300, 5400, 5500]


async def test_in_flight_requests_are_bounded() -> None:
    async with cluster(brokers=1) as fake, producer(fake, max_in_flight=3) as p:
        broker = fake.brokers[0]
        broker.hold = anyio.Event()
        started = 0
        results: list[SendResult] = []
        async with anyio.create_task_group() as tg:

            async def feed() -> None:
                nonlocal started
                for i in range(10):
                    await p.start_send(tg, Message(TOPIC, b"%d" % i), on_result=results.append)
                    started += 1

            tg.start_soon(feed)
            await wait_for(lambda: broker.holding == 3)
            assert p.in_flight == 3
            assert started == 3  # the 4th start_send waits for a slot: nothing more spawned
            for _ in range(5):
                tg.start_soon(p.send, Message(TOPIC, b"direct"))
            await anyio.wait_all_tasks_blocked()
            assert broker.holding == 3
            broker.hold.set()
        assert broker.max_holding == 3
        assert len(results) == 10 and p.in_flight == 0
        assert len(broker.received(RequestCode.SEND_MESSAGE_V2)) == 15


async def test_a_send_cancelled_at_its_slot_or_its_answer_gives_its_slot_back() -> None:
    """``send`` takes its slot in the sender's own coroutine (no coroutine of the engine's
    around it): cancelled while it waits for a slot it holds none, cancelled while its
    request waits for an answer it gives its slot back, and a refused send too; the
    slots are all free after, and a send then gets its result."""
    async with cluster(brokers=1) as fake, producer(fake, max_in_flight=2, retries=0) as p:
        broker = fake.brokers[0]
        broker.hold = held = anyio.Event()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                for i in range(4):  # two held at the broker, two waiting for a slot
                    tg.start_soon(p.send, Message(TOPIC, b"%d" % i))
                await wait_for(lambda: broker.holding == 2)
                await anyio.wait_all_tasks_blocked()
                assert p.in_flight == 2
                scope.cancel()
        assert p.in_flight == 0
        broker.hold = None
        held.set()  # the abandoned two are answered late: nobody waits for them
        broker.mode = ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(BrokerResponseError):
            await p.send(Message(TOPIC, b"refused"))
        assert p.in_flight == 0
        broker.mode = "ok"
        result = await p.send(Message(TOPIC, b"after"))
        assert result.status is SendStatus.SEND_OK and p.in_flight == 0


async def test_async_result_callback_and_failures_reach_the_task_group() -> None:
    got: list[str] = []

    async def on_result(result: SendResult) -> None:
        await anyio.lowlevel.checkpoint()
        got.append(result.msg_id)

    async with cluster() as fake, producer(fake, retries=0) as p:
        async with anyio.create_task_group() as tg:
            await p.start_send(tg, Message(TOPIC, b"m"), on_result=on_result)
        assert len(got) == 1
        for b in fake.brokers:
            b.mode = ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(Exception) as info:  # an ExceptionGroup (BaseExceptionGroup: 3.11+)
            async with anyio.create_task_group() as tg:
                await p.start_send(tg, Message(TOPIC, b"m"))
        assert info.group_contains(BrokerResponseError)
        assert p.in_flight == 0


async def test_closed_or_unstarted_producer_refuses_to_send() -> None:
    async with cluster() as fake:
        p = producer(fake)
        with pytest.raises(ClientClosedError):
            await p.send(Message(TOPIC, b"m"))
        async with p:
            pass
        with pytest.raises(ClientClosedError):
            await p.send(Message(TOPIC, b"m"))
        with pytest.raises(ClientClosedError):
            await p.__aenter__()


def test_invalid_settings() -> None:
    with pytest.raises(ConfigError):
        Producer("", "127.0.0.1:9876")
    with pytest.raises(ConfigError):
        Producer("DEFAULT_PRODUCER", "127.0.0.1:9876")
    with pytest.raises(ConfigError):
        Producer("g", "127.0.0.1:9876", no_such_setting=1)
    with pytest.raises(ConfigError):
        Producer("g", "127.0.0.1:9876", retries=-1)


# -- membership --------------------------------------------------------------------------


async def test_group_heartbeats_to_brokers_it_uses_and_unregisters_on_close() -> None:
    async with cluster() as fake:
        async with producer(fake) as p:
            await p.send(Message(TOPIC, b"m"))
            # the route names both brokers: both get the heartbeat
            await wait_for(lambda: all(b.received(RequestCode.HEART_BEAT) for b in fake.brokers))
            body = json.loads(fake.brokers[0].received(RequestCode.HEART_BEAT)[0].body)
            assert body["clientID"] == p.client.client_id
            assert body["producerDataSet"] == [{"groupName": GROUP}]
            assert body["consumerDataSet"] == []
        for b in fake.brokers:
            (unreg,) = b.received(RequestCode.UNREGISTER_CLIENT)
            assert unreg.ext_fields["producerGroup"] == GROUP
            assert unreg.ext_fields["clientID"] == p.client.client_id


# -- transactions ------------------------------------------------------------------------


def _end_of(fake: FakeCluster) -> list[RemotingCommand]:
    return [c for b in fake.brokers for c in b.received(RequestCode.END_TRANSACTION)]


@pytest.mark.parametrize("state", list(TransactionState))
async def test_transaction_sends_half_runs_local_and_ends(state: TransactionState) -> None:
    calls: list[tuple[Message, SendResult]] = []

    async def local(msg: Message, result: SendResult) -> TransactionState:
        calls.append((msg, result))
        return state

    async with cluster() as fake, producer(fake) as p:
        msg = Message(TOPIC, b"tx")
        tx = await p.send_in_transaction(msg, local)
        assert tx.state is state and calls == [(msg, tx.send_result)]
        broker = fake.broker(tx.send_result.queue.broker_name)
        (half,) = broker.received(RequestCode.SEND_MESSAGE_V2)
        assert int(half.ext_fields["f"]) == 0x4
        props = decode_properties(half.ext_fields["i"])
        assert (props["TRAN_MSG"], props["PGROUP"]) == ("true", GROUP)
        assert broker.received(RequestCode.HEART_BEAT)  # registered before the local tx
        await wait_for(lambda: _end_of(fake))
        (end,) = _end_of(fake)
        assert end.flag & RemotingFlag.ONEWAY
        ext = end.ext_fields
        assert ext["commitOrRollback"] == str(
            {"COMMIT": 8, "ROLLBACK": 12, "UNKNOWN": 0}[state.value]
        )
        assert ext["producerGroup"] == GROUP and ext["fromTransactionCheck"] == "false"
        assert ext["msgId"] == tx.msg_id and ext["transactionId"] == tx.transaction_id
        assert ext["tranStateTableOffset"] == str(tx.send_result.queue_offset)
        assert ext["commitLogOffset"] == "5000"


async def test_failing_local_transaction_ends_unknown_and_raises() -> None:
    async def local(msg: Message, result: SendResult) -> TransactionState:
        raise RuntimeError("db down")

    async with cluster() as fake, producer(fake) as p:
        with pytest.raises(RuntimeError, match="db down"):
            await p.send_in_transaction(Message(TOPIC, b"tx"), local)
        await wait_for(lambda: _end_of(fake))
        assert _end_of(fake)[0].ext_fields["commitOrRollback"] == "0"
        with pytest.raises(ConfigError):
            await p.send_in_transaction(Message(TOPIC, b"tx", delay_level=2), local)


async def test_half_message_not_stored_ok_is_rolled_back_without_local_transaction() -> None:
    async def local(msg: Message, result: SendResult) -> TransactionState:
        raise AssertionError("must not run")

    async with cluster() as fake, producer(fake) as p:
        for b in fake.brokers:
            b.mode = ResponseCode.FLUSH_DISK_TIMEOUT
        tx = await p.send_in_transaction(Message(TOPIC, b"tx"), local)
        assert tx.state is TransactionState.ROLLBACK
        assert tx.send_result.status is SendStatus.FLUSH_DISK_TIMEOUT
        await wait_for(lambda: _end_of(fake))
        assert _end_of(fake)[0].ext_fields["commitOrRollback"] == "12"


async def _check_back(
    broker: FakeBroker, uniq: str, commit_log_offset: int, *, topic: str = TOPIC,
    group: str = GROUP,
) -> None:  # fmt: skip
    body = encode_stored_message(
        topic, b"half", {"UNIQ_KEY": uniq, "PGROUP": group, "TRAN_MSG": "true"},
        queue_offset=7, commit_log_offset=commit_log_offset, store_host=broker.addr,
    )  # fmt: skip
    ext = {
        "tranStateTableOffset": "7", "commitLogOffset": str(commit_log_offset),
        "msgId": uniq, "transactionId": "TX-" + uniq,
        "offsetMsgId": offset_message_id(broker.addr, commit_log_offset),
    }  # fmt: skip
    assert broker.session is not None
    cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, body)
    cmd.flag = RemotingFlag.ONEWAY
    await broker.session.send(cmd)


async def test_check_back_is_answered_with_the_checkers_verdict() -> None:
    checked: list[MessageExt] = []

    async def checker(msg: MessageExt) -> TransactionState:
        checked.append(msg)
        if msg.msg_id == "BOOM":
            raise RuntimeError("cannot tell")
        return TransactionState.COMMIT if msg.msg_id == "ID1" else TransactionState.ROLLBACK

    async with cluster(brokers=1) as fake, producer(fake, transaction_checker=checker) as p:
        await p.send(Message(TOPIC, b"m"))
        broker = fake.brokers[0]
        await wait_for(lambda: broker.received(RequestCode.HEART_BEAT))
        await _check_back(broker, "ID1", 111)
        await _check_back(broker, "ID2", 222)
        await _check_back(broker, "BOOM", 333)
        await wait_for(lambda: len(_end_of(fake)) == 3)
        ends = {e.ext_fields["msgId"]: e.ext_fields for e in _end_of(fake)}
        assert {k: v["commitOrRollback"] for k, v in ends.items()} == {
            "ID1": "8", "ID2": "12", "BOOM": "0",
        }  # fmt: skip
        assert ends["ID1"]["fromTransactionCheck"] == "true"
        assert ends["ID1"]["commitLogOffset"] == "111"
        assert ends["ID1"]["tranStateTableOffset"] == "7"
        assert ends["ID1"]["transactionId"] == "TX-ID1"
        assert ends["ID1"]["producerGroup"] == GROUP
        assert sorted(m.body for m in checked) == [b"half"] * 3
        assert p.checks is not None and p.checks.answered == 3


async def test_check_back_without_checker_or_for_another_group_is_ignored() -> None:
    async with cluster(brokers=1) as fake, producer(fake) as p:
        await p.send(Message(TOPIC, b"m"))
        broker = fake.brokers[0]
        await wait_for(lambda: broker.received(RequestCode.HEART_BEAT))
        await _check_back(broker, "ID1", 111)
        assert p.checks is not None
        # the request is oneway; a second request on the same connection is served after it
        await p.send(Message(TOPIC, b"m"), sharding_key=0)
        assert p.checks.answered == 0 and not _end_of(fake)


async def test_a_topic_without_route_borrows_the_create_topic_keys_until_it_has_one() -> None:
    async with (
        cluster() as fake,
        producer(fake, route_refresh_interval=0.3, default_topic_queue_nums=2) as p,
    ):
        fake.missing = {"new"}
        borrowed = [await p.send(Message("new", b"m")) for _ in range(8)]
        assert {(r.queue.broker_name, r.queue.queue_id) for r in borrowed} == {
            (b, q) for b in ("broker-a", "broker-b") for q in (0, 1)
        }
        cmd = fake.broker("broker-a").received(RequestCode.SEND_MESSAGE_V2)[0]
        assert (cmd.ext_fields["b"], cmd.ext_fields["c"], cmd.ext_fields["d"]) == (
            "new", "TBW102", "2",
        )  # fmt: skip
        fake.missing.clear()  # the brokers created and registered it
        await anyio.sleep(0.3)  # the borrowed route's time (no event marks its end)
        later = [await p.send(Message("new", b"m")) for _ in range(16)]
        assert {r.queue.queue_id for r in later} == {0, 1, 2, 3}  # the topic's own route


async def test_without_a_create_topic_key_route_a_new_topic_raises_no_route() -> None:
    async with cluster() as fake, producer(fake) as p:
        fake.missing = {"new", "TBW102"}
        with pytest.raises(NoRouteError, match="autoCreateTopicEnable is off"):
            await p.send(Message("new", b"m"))


async def test_a_namespaced_producer_sends_and_checks_back_under_the_brokers_names() -> None:
    """Half message, END_TRANSACTION and the check-back's answer carry ``ns1%...``; the
    application (result, local transaction, checker) sees its own names."""
    seen: list[tuple[str, str]] = []

    async def local(msg: Message, result: SendResult) -> TransactionState:
        seen.append(("local", result.queue.topic))
        return TransactionState.COMMIT

    async def checker(msg: MessageExt) -> TransactionState:
        seen.append(("checker", msg.topic))
        return TransactionState.ROLLBACK

    async with (
        cluster(brokers=1) as fake,
        producer(fake, transaction_checker=checker, namespace="ns1") as p,
    ):
        tx = await p.send_in_transaction(Message(TOPIC, b"tx"), local)
        broker = fake.brokers[0]
        (half,) = broker.received(RequestCode.SEND_MESSAGE_V2)
        assert half.ext_fields["b"] == f"ns1%{TOPIC}"  # topic
        assert half.ext_fields["a"] == f"ns1%{GROUP}"  # producer group
        assert decode_properties(half.ext_fields["i"])["PGROUP"] == f"ns1%{GROUP}"
        assert tx.send_result.queue.topic == TOPIC
        await _check_back(broker, "ID1", 111, topic=f"ns1%{TOPIC}", group=f"ns1%{GROUP}")
        await wait_for(lambda: len(_end_of(fake)) == 2)
        for end in _end_of(fake):
            assert end.ext_fields["producerGroup"] == f"ns1%{GROUP}"
            assert end.ext_fields["topic"] == f"ns1%{TOPIC}"
    assert seen == [("local", TOPIC), ("checker", TOPIC)]


# -- an older broker -----------------------------------------------------------------------


async def test_a_timer_message_to_a_4_9_broker_is_refused_before_it_is_sent() -> None:
    """A 4.x broker stores a 5.x timer message and delivers it at once: the producer
    refuses it first, by the release the broker's answers name (4.9.7 = 407)."""
    from aiorocket.errors import UnsupportedBrokerFeatureError

    async with cluster(brokers=1) as fake:
        broker = fake.brokers[0]
        broker.server.version = 407

        async def also_max_offset(session: ServerSession, cmd: RemotingCommand) -> None:
            if cmd.code == RequestCode.GET_MAX_OFFSET:  # what the producer asks to learn it
                await session.send(RemotingCommand.response_to(cmd, ext_fields={"offset": "0"}))
            else:
                await broker.handle(session, cmd)

        broker.server.handler = also_max_offset
        async with producer(fake) as p:
            refused = pytest.raises(UnsupportedBrokerFeatureError, match=r"runs 4\.9\.7$")
            with anyio.fail_after(5), refused:
                await p.send(Message(TOPIC, b"later", deliver_time_ms=2_000_000_000_000))
            assert fake.brokers[0].received(*SEND_CODES) == []
            await p.send(Message(TOPIC, b"now"))
    assert len(fake.brokers[0].received(*SEND_CODES)) == 1


# -- the single-message path's fast paths (issue 43, goal 6) ----------------------------


async def test_half_message_gets_one_attempt_even_with_retries() -> None:
    """The cached one-attempt plan: a refused half message is not sent again elsewhere
    (a second half message would be a second transaction), whatever ``retries`` says."""
    async with cluster() as fake, producer(fake, retries=2, latency_fault_tolerance=False) as p:
        for b in fake.brokers:
            b.busy_next = 1
        with pytest.raises(BrokerResponseError):
            await p.send_prepared(Message(TOPIC, b"half"), check_immunity=30)
        assert sum(fake.sends().values()) == 1
        for b in fake.brokers:
            b.busy_next = 1
        with pytest.raises(BrokerResponseError):
            await p.send_in_transaction(Message(TOPIC, b"tx"), _never)
        assert sum(fake.sends().values()) == 2
        # Plain sends keep their retries: refused by both brokers, stored at the third.
        for b in fake.brokers:
            b.busy_next = 1
        await p.send(Message(TOPIC, b"m"))
        assert sum(fake.sends().values()) == 5


async def _never(msg: Message, result: SendResult) -> TransactionState:
    raise AssertionError("must not run")


async def test_send_prepared_result_and_handle() -> None:
    """A half message's result (built from its slots) and its handle (the commit-log
    offset read without the host) are what the broker answered."""
    from aiorocket.producer.transaction import HalfMessage

    async with cluster() as fake, producer(fake) as p:
        result = await p.send_prepared(Message(TOPIC, b"half"), check_immunity=30)
        broker = fake.broker(result.queue.broker_name)
        expected = SendResult(
            status=SendStatus.SEND_OK, msg_id=result.msg_id, queue=result.queue,
            queue_offset=0, offset_msg_id=offset_message_id(broker.addr, 5000),
            transaction_id="TX" + offset_message_id(broker.addr, 5000),
        )  # fmt: skip
        assert result == expected
        half = HalfMessage.of(result)
        assert half.commit_log_offset == 5000 == decode_offset_message_id(result.offset_msg_id)[1]
        assert (half.queue_offset, half.transaction_id) == (0, result.transaction_id)


class MemberBroker(FakeBroker):
    """A broker that lists the clients its heartbeats name (an UNREGISTER_CLIENT removes
    one) and runs heartbeats as 5.x does, on an executor of their own
    (``LateHeartbeat``: a lagging one is applied after an unregister that overtook it);
    ``hangs`` makes a heartbeat's connection go silent."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.members: set[str] = set()
        self.late = LateHeartbeat()
        self.hangs = HangingHeartbeat()
        self.heartbeat_seen = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        await self.hangs.handle(partial(self.late.handle, self._apply), session, cmd)

    async def _apply(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.HEART_BEAT:
            self.members.add(json.loads(cmd.body)["clientID"])
            self.heartbeat_seen.set()
            self.heartbeat_seen = anyio.Event()
        elif cmd.code == RequestCode.UNREGISTER_CLIENT:
            self.members.discard(cmd.ext_fields["clientID"])
        await super().handle(session, cmd)


@asynccontextmanager
async def member_cluster() -> AsyncIterator[tuple[FakeCluster, MemberBroker]]:
    fake = FakeCluster(1)
    broker = MemberBroker("broker-a")
    fake.brokers = [broker]
    async with broker.server, fake.namesrv:
        yield fake, broker


async def listed(p: Producer, broker: MemberBroker) -> None:
    await p.send(Message(TOPIC, b"m"))  # the broker is met: heartbeated at once
    with anyio.fail_after(10):
        while p.client.client_id not in broker.members:
            await broker.heartbeat_seen.wait()


async def test_a_heartbeat_under_way_as_the_close_begins_goes_before_the_unregister() -> None:
    """The shape of simulator seed pull_remoting 9360, in the producer: a heartbeat under
    way when the close began was cut (its wait, not the request) and the unregister sent;
    the broker applied the unregister first, then the heartbeat, listing the closed
    producer again (a transactional one is then called back for its checks until the
    broker expires the channel, 120 s). The unregister now waits for the heartbeat."""
    async with member_cluster() as (fake, broker):
        async with producer(fake, heartbeat_interval=0.2, request_timeout=3.0) as p:
            await listed(p, broker)
            await broker.late.hold_next(1.0)  # well inside its request_timeout (3 s)
        # Closed as the heartbeat was under way (on the old code the broker applied it
        # after the close, as the unregister came in first).
        assert await broker.late.order_applied() == ["heartbeat", "unregister"]
        assert p.client.client_id not in broker.members


@pytest.mark.parametrize("shutdown_timeout", [60.0, 0.5])
async def test_the_close_unregisters_within_its_bound_when_the_heartbeat_under_way_hangs(
    shutdown_timeout: float,
) -> None:
    """A heartbeat under way that hangs ends by its request timeout (1 s), its
    connection closed; the unregister then goes once, on a new connection, inside the
    close's bound (``close_bound``: max(2 x request_timeout, 5 s), as a consumer's),
    whatever ``shutdown_timeout`` (it bounds the drain of the sends in flight). Before,
    that bound was ``shutdown_timeout``: at 0.5 s the wait was cut and the unregister
    never sent, the producer left listed by the broker (called back for its
    transactions until it expires, 2 min); at 60 s the old code, not waiting, passed."""
    async with member_cluster() as (fake, broker):
        settings = {"heartbeat_interval": 0.2, "request_timeout": 1.0,
                    "shutdown_timeout": shutdown_timeout}  # fmt: skip
        async with producer(fake, **settings) as p:
            await listed(p, broker)
            broker.hangs.hang = True
            with anyio.fail_after(10):
                await broker.hangs.hung.wait()
            stalled = {id(s) for s in broker.server.sessions if s.stalled}
    assert p.client.client_id not in broker.members
    assert len(broker.hangs.unregisters) == 1 and not stalled & set(broker.hangs.unregisters)


async def test_a_retry_whose_route_look_up_fails_still_says_the_first_may_be_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attempt that lost its connection under the request may have stored the
    message; when the retry's route look-up then fails (here: the producer closed under
    it), the send raises the first attempt's "may be stored" error with the look-up's as
    its cause, not the look-up's alone ("not stored")."""
    from aiorocket.producer.routes import PublishRoutes

    cached = PublishRoutes.cached
    looked_up = 0  # by the armed send: its first attempt finds the route, a retry not

    def forgotten(self: PublishRoutes, topic: str) -> Any:
        nonlocal looked_up
        looked_up += 1
        return cached(self, topic) if looked_up == 1 else None

    async def refused(self: PublishRoutes, topic: str) -> Any:
        raise ClientClosedError("connection pool is closed")

    async with cluster() as fake, producer(fake) as p:
        await p.send(Message(TOPIC, b"warm"))  # the route and both connections
        for b in ("broker-a", "broker-b"):
            fake.broker(b).mode = "hangup"  # the request is read, then the close
        monkeypatch.setattr(PublishRoutes, "cached", forgotten)
        monkeypatch.setattr(PublishRoutes, "get", refused)
        with pytest.raises(ConnectionClosedError) as caught:
            await p.send(Message(TOPIC, b"m"))
        assert isinstance(caught.value.__cause__, ClientClosedError)
        assert "may still store the message" in str(caught.value)
