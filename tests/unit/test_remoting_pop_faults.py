"""POP over remoting (``consume_mode="pop"``) against a fake broker, for what a real one
will not do on demand: serve a record that cannot be decoded, answer POLLING_FULL, or
answer every pop at once with nothing. Issue 38, items 3 and 8.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import anyio
import pytest

from aiorocket.client.pop import (
    ACK_MESSAGE,
    BATCH_ACK_MESSAGE,
    CHANGE_MESSAGE_INVISIBLETIME,
    POP_MESSAGE,
)
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.consumer.backend import PopBackend
from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.pop import remoting_source
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import SYSFLAG_COMPRESSED
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import ServerSession
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import TOPIC, FakeCluster, PopBroker, running
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


@pytest.fixture
def virtual(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.monotonic`` reads the running loop's clock: a test ``ON_VIRTUAL_CLOCKS``
    (the fake broker and the consumer in one loop) then waits out backoffs and request
    timeouts at no cost of wall clock. Not for a test that counts requests over a span
    of time against a defect that would spin: the clock does not move while it spins."""
    monkeypatch.setattr(time, "monotonic", anyio.current_time)


SEND_BACK = 36  # RequestCode.CONSUMER_SEND_MSG_BACK


def pop_consumer(cluster: FakeCluster, handler: Any, **settings: Any) -> Consumer:
    consumer = Consumer(
        "g", cluster.namesrv.address, handler=handler, consume_mode="pop",
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **{"long_poll_timeout": 0.5, "request_timeout": 1.0, "invisible_duration": 10,
           **settings},
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    return consumer


def with_poison(broker: PopBroker) -> None:
    """Four messages; the second's body is flagged compressed and does not inflate."""
    broker.add(0, b"good-0", b"poison", b"good-2", b"good-3")
    broker.records[(0, 1)] = encode_stored_message(
        TOPIC, b"not zlib at all", {"UNIQ_KEY": "BAD1"}, queue_offset=1,
        commit_log_offset=1001, sys_flag=SYSFLAG_COMPRESSED,
    )  # fmt: skip


async def consume_poisoned(
    broker: PopBroker, settled: set[int]
) -> tuple[Consumer, list[bytes], list[dict[str, Any]]]:
    """Run a consumer until it handled the good messages and the broker saw
    ``settled`` acked; the consumer (closed), the bodies handled and the logs."""
    handled: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = pop_consumer(cluster, handle)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(10):
                    while len(handled) < 3 or not settled <= broker.acked:  # noqa: ASYNC110
                        await anyio.sleep(0.02)  # the fake broker's state: nothing to wait on
    return consumer, handled, logs


async def test_an_undecodable_record_is_dead_lettered_and_the_rest_of_its_pop_handled() -> None:
    # Before: the MessageDecodeError failed the whole pop, every time it was popped:
    # none of the four was handled, acked or dead-lettered.
    broker = PopBroker()
    with_poison(broker)
    consumer, handled, logs = await consume_poisoned(broker, {0, 1, 2, 3})
    assert sorted(handled) == [b"good-0", b"good-2", b"good-3"]
    assert broker.sent_back == [1001]  # the raw record, named by its commit-log offset
    assert dict(broker.deliveries) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert consumer.undecodable_messages == 1
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["topic"], event["queue"], event["offset"]) == (TOPIC, 0, 1)
    assert (event["msg_id"], event["action"]) == ("BAD1", "dead_lettered")
    assert event["log_level"] == "error" and "decompress" in event["error"]


async def test_an_undecodable_record_the_broker_will_not_take_back_is_skipped() -> None:
    broker = PopBroker()
    broker.refuse_send_back = True
    with_poison(broker)
    _, handled, logs = await consume_poisoned(broker, {0, 1, 2, 3})
    assert sorted(handled) == [b"good-0", b"good-2", b"good-3"]
    assert broker.sent_back == [] and dict(broker.deliveries) == {0: 1, 1: 1, 2: 1, 3: 1}
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert event["action"] == "skipped"
    assert [e for e in logs if e["event"] == "send_back_failed"]  # it was tried first


class StallingSendBackBroker(PopBroker):
    """A broker whose connection stalls at the send-back (no answer: a partition)."""

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == SEND_BACK:
            session.stall()
            return
        await super().handle(session, cmd)


async def test_an_undecodable_record_whose_dead_lettering_times_out_is_not_acked() -> None:
    # No refusal: the record is left to come back after its invisible time (then
    # dead-lettered), never acked without a copy in the DLQ; the others go on.
    broker = StallingSendBackBroker()
    with_poison(broker)
    _, handled, logs = await consume_poisoned(broker, {0, 2, 3})
    assert sorted(handled) == [b"good-0", b"good-2", b"good-3"]
    with anyio.fail_after(5):
        while not [e for e in logs if e["event"] == "undecodable_not_settled"]:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert 1 not in broker.acked
    assert not [e for e in logs if e["event"] == "undecodable_message"]


class RefusingAckBroker(PopBroker):
    """A broker that answers the first ``refusals`` acks of offset 1 (the record that
    cannot be decoded) SYSTEM_ERROR (retriable)."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals
        self.refused = 0
        #: offsets made visible again at once (CHANGE_MESSAGE_INVISIBLETIME 0)
        self.released: list[int] = []

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        ext = cmd.ext_fields
        if cmd.code == CHANGE_MESSAGE_INVISIBLETIME and ext["invisibleTime"] == "0":
            self.released.append(int(ext["offset"]))
        if cmd.code == ACK_MESSAGE and ext["offset"] == "1" and self.refusals:
            self.refusals -= 1
            self.refused += 1
            await session.send(RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, "busy"))
            return
        await super().handle(session, cmd)


@ON_VIRTUAL_CLOCKS
@pytest.mark.usefixtures("virtual")
async def test_an_undecodable_record_whose_ack_is_refused_is_acked_on_a_retry() -> None:
    # Before: the refused ack was logged and dropped; the dead-lettered record stayed
    # invisible, came back and was dead-lettered a second time (simulator seed 211).
    broker = RefusingAckBroker(refusals=2)
    with_poison(broker)
    _, handled, _ = await consume_poisoned(broker, {0, 1, 2, 3})
    assert sorted(handled) == [b"good-0", b"good-2", b"good-3"]
    assert broker.refused == 2 and broker.sent_back == [1001]  # dead-lettered once


async def test_an_undecodable_record_still_unacked_at_the_close_is_released() -> None:
    # Before: the close left it invisible for its whole invisible time (simulator seeds
    # 211 and 212: released_at_close).
    broker = RefusingAckBroker(refusals=1_000)
    with_poison(broker)

    async def handle(msg: ConsumerMessage) -> None:
        pass

    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster), pop_consumer(cluster, handle):
        with anyio.fail_after(10):
            while not broker.refused or not {0, 2, 3} <= broker.acked:  # noqa: ASYNC110
                await anyio.sleep(0.02)  # the fake broker's state: nothing to wait on
    assert 1 not in broker.acked and broker.sent_back == [1001]
    assert broker.released == [1]  # made visible again by the close


@pytest.mark.parametrize("offset", [3, 7])
async def test_an_undecodable_record_whose_offset_is_not_its_own_is_left_alone(
    offset: int,
) -> None:
    # Its header says offset 3 (good-3's) or 7 (not popped): an ack of it would settle
    # another message. Left, it comes back after its invisible time.
    broker = PopBroker()
    broker.add(0, b"good-0", b"poison", b"good-2", b"good-3")
    broker.records[(0, 1)] = encode_stored_message(
        TOPIC, b"not zlib at all", {"UNIQ_KEY": "BAD1"}, queue_offset=offset,
        commit_log_offset=1001, sys_flag=SYSFLAG_COMPRESSED,
    )  # fmt: skip
    consumer, handled, logs = await consume_poisoned(broker, {0, 2, 3})
    assert sorted(handled) == [b"good-0", b"good-2", b"good-3"]
    assert broker.acked == {0, 2, 3} and broker.sent_back == []
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert event["action"] == "left" and consumer.undecodable_messages == 1


@ON_VIRTUAL_CLOCKS
@pytest.mark.usefixtures("virtual")
@pytest.mark.parametrize("answer", ["polling_full", "empty_at_once"])
async def test_pops_answered_at_once_with_nothing_back_off(answer: str) -> None:
    """Before: 8,111 pops/s from one consumer to a broker answering POLLING_FULL. The
    pops' time is read, not the pops a span of time holds: on a virtual clock a loop
    that did not pause would spin, and the span would never end (no timer comes due
    while a task runs), but its pops would all come at one instant of the clock."""
    broker = PopBroker()
    if answer == "polling_full":
        broker.polling_full = 10**9
    else:
        broker.empty_at_once = True

    async def handle(msg: ConsumerMessage) -> None:
        pass

    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster):
        start = anyio.current_time()
        async with pop_consumer(cluster, handle, long_poll_timeout=15):
            with anyio.fail_after(600):  # a hang's guard (virtual)
                while broker.pops <= 16:
                    await broker.popped.wait()
            took = anyio.current_time() - start
    # The pauses after answers of nothing grow 0.1, 0.2, 0.4 s ... to 3 s: the 17th pop
    # comes 17.1 s in (without them, all at the start). The bound is the wall-clock
    # version's: at most 16 pops in 2 s.
    assert took > 2.0, took


async def test_a_pop_backoff_pause_does_not_hold_up_the_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pause after an empty answer is the receive's: the close cancels it. Each pause
    is made 120 s here (3 s at most in use), and the close starts once a loop is in one
    (it logs ``pop_backing_off`` just before it pauses): a close that waited for the
    pause would take 120 s, one that cancels it takes well under a second (seconds on a
    starved machine; the guard below is 60 s). Before, the bound was ``< 1.0`` s of wall
    clock for the whole close."""
    monkeypatch.setattr(remoting_source, "IDLE_BACKOFF", 120.0)
    monkeypatch.setattr(remoting_source, "MAX_IDLE_BACKOFF", 120.0)
    broker = PopBroker()
    broker.polling_full = 10**9

    async def handle(msg: ConsumerMessage) -> None:
        pass

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        with capture_logs() as logs:
            async with pop_consumer(cluster, handle, long_poll_timeout=15):
                with anyio.fail_after(30):
                    while not any(e["event"] == "pop_backing_off" for e in logs):  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # a log line has no event to wait on
                closing = time.monotonic()
            closed_in = time.monotonic() - closing
    assert closed_in < 60.0
    assert broker.pops <= 2  # one pop of each loop, then their pauses


@ON_VIRTUAL_CLOCKS
@pytest.mark.usefixtures("virtual")
async def test_the_backoff_ends_with_the_first_messages() -> None:
    broker = PopBroker()
    broker.polling_full = 5  # the two loops back off 0.1, 0.2, 0.4, 0.8, 1.6 s
    handled = anyio.Event()
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        handled.set()

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = pop_consumer(cluster, handle)
        async with consumer:
            broker.add(0, b"first")
            with anyio.fail_after(10):
                await handled.wait()
            # A new episode starts again from the shortest pause (not from 3 s).
            broker.polling_full = 2
            handled = anyio.Event()
            with capture_logs() as logs:
                broker.add(0, b"second")
                with anyio.fail_after(30):  # a hang's guard (without the reset: 3 + 3 s)
                    await handled.wait()
    assert got == [b"first", b"second"]
    # Counted, not timed: the episode's first POLLING_FULL was the first of an episode
    # again (logged as such: its pause the shortest, 0.1 s), not the sixth of the last.
    assert [e for e in logs if e["event"] == "pop_backing_off" and e["polling_full"]], logs


async def test_messages_below_their_check_point_start_are_handled_and_acked() -> None:
    """A broker SIGKILLed and restarted corrects a wrong stored pop offset but answers
    the stale one as the check point's start, past the messages' offsets: the consumer
    acks those alone (ACK_MESSAGE) and the rest in a batch, and runs and closes without
    error. Before, ``ValueError: negative shift count`` from the batch ack stopped it."""
    broker = PopBroker()
    broker.add(0, b"m0", b"m1", b"m2")
    broker.start_ahead = 2  # start 2: offsets 0 and 1 below it, 2 at it
    handled: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        with capture_logs() as logs:
            async with pop_consumer(cluster, handle):
                with anyio.fail_after(10):
                    while broker.acked != {0, 1, 2}:  # noqa: ASYNC110
                        await anyio.sleep(0.02)  # the fake broker's state: nothing to wait on
    assert sorted(handled) == [b"m0", b"m1", b"m2"]
    assert dict(broker.deliveries) == {0: 1, 1: 1, 2: 1}
    outside = [e for e in logs if e["event"] == "pop_ack_outside_check_point"]
    assert sorted((e["offset"], e["check_point_start"]) for e in outside) == [(0, 2), (1, 2)]


class _Unreachable(PopBroker):
    """A broker the route still names (the NameServer keeps a stopped broker for up to
    two minutes) but nothing listens at."""

    @property
    def addr(self) -> str:
        with socket.socket() as s:  # a port just freed: refused
            s.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{s.getsockname()[1]}"


async def test_a_pop_consumer_starts_while_a_broker_of_its_topic_is_down() -> None:
    # Before: the start's release check (RocketMQ 4.x has no POP) connected to every
    # broker of the route and failed the start on the one that is down, where the
    # heartbeats that precede it only log; the consumer could not start until the
    # NameServer dropped the broker.
    broker = PopBroker()
    broker.add(0, b"m0")
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    cluster = FakeCluster({"broker-a": [broker], "broker-b": [_Unreachable()]})
    up = FakeCluster({"broker-a": [broker]})  # runs broker-a; ``cluster`` routes both
    async with running(up), cluster.namesrv, pop_consumer(cluster, handle):
        with anyio.fail_after(10):
            await handled.wait()


class HeldAckBroker(PopBroker):
    """Holds its first BATCH_ACK unanswered (and not applied): an ack in flight when
    the consumer closes; counts the pops parked (long polls held)."""

    def __init__(self) -> None:
        super().__init__()
        self.ack_held = anyio.Event()
        self.parked = 0

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == BATCH_ACK_MESSAGE and not self.ack_held.is_set():
            self.ack_held.set()
            await anyio.sleep_forever()  # ends with its connection (or the fake cluster)
        if cmd.code == POP_MESSAGE:
            self.parked += 1
            try:
                await super().handle(session, cmd)
            finally:
                self.parked -= 1
            return
        await super().handle(session, cmd)


async def test_an_ack_in_flight_when_the_close_cuts_its_long_poll_is_sent_again_at_once() -> None:
    # The close hangs up the connection of the long poll it cuts (so the broker does not
    # answer it); an ack in flight on that connection failed "closed locally". Before: a
    # WARNING ack_retried on every clean close, and the ack re-sent only after
    # FIRST_BACKOFF (0.1 s). Now: re-sent at once on a new connection, logged at INFO.
    broker = HeldAckBroker()
    broker.add(0, b"m0")

    async def handle(msg: ConsumerMessage) -> None:
        pass

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = pop_consumer(cluster, handle, long_poll_timeout=120.0, pull_request_timeout=130)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(10):
                    await broker.ack_held.wait()
                    while not broker.parked:  # noqa: ASYNC110  (the fake broker's state)
                        await anyio.sleep(0.01)
                closing = time.monotonic()
            closed = time.monotonic() - closing
    assert broker.acked == {0}  # sent again on a new connection, within the close
    events = [e["event"] for e in logs]
    assert "ack_retried" not in events
    assert "acks_not_delivered" not in events
    assert "ack_resent" in events
    assert [e for e in logs if e["log_level"] == "warning"] == []
    # The cut poll is not waited for: it would end after 120 s (long_poll_timeout); the
    # close takes well under a second, seconds when starved (the old bound, `< 2.0` s
    # against 5 s, was wall clock too near to it).
    assert closed < 60.0


def _stored(body: bytes, uniq: str, offset: int, reconsume_times: int = 0) -> bytes:
    return encode_stored_message(
        TOPIC, body, {"UNIQ_KEY": uniq}, queue_offset=offset,
        commit_log_offset=1000 + offset, reconsume_times=reconsume_times,
    )  # fmt: skip


async def test_a_first_delivery_delivered_again_while_its_handler_runs_is_not_handled_twice() -> (
    None
):
    """Its renewals did not reach the broker (a silent connection, simulator pop_remoting
    seed 3033), which revived it: the copy (``reconsume_times`` 1) finds its first
    delivery in hand, whose id was never decoded, and is not dispatched; the call's
    success acks both, and nothing is left in hand. Another message with the same body
    and another id is not taken for it. Before, the copy was handled at the same time."""
    broker = PopBroker()
    broker.add(0, b"same", b"same")
    broker.records[(0, 0)] = _stored(b"same", "ID0", 0)
    broker.records[(0, 1)] = _stored(b"same", "ID1", 1)
    calls: list[tuple[str, int]] = []
    started, go = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        calls.append((msg.msg_id, msg.reconsume_times))
        if msg.queue_offset == 0:
            started.set()
            await go.wait()

    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = pop_consumer(cluster, handle)
        async with consumer:
            backend = consumer._backend
            assert isinstance(backend, PopBackend) and backend.runtime is not None
            runtime = backend.runtime
            with anyio.fail_after(10):
                await started.wait()
                while 1 not in broker.acked:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # the fake broker's state: nothing to wait on
            # the broker revives it (its renewals never reached it), counting the retry
            broker.records[(0, 0)] = _stored(b"same", "ID0", 0, reconsume_times=1)
            broker.visible_at[0] = 0.0
            with anyio.fail_after(10):
                while broker.deliveries[0] < 2 or runtime.budget.count < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # the copy counted: no event
            # dispatched, the copy would be queued for a worker or running by now
            assert isinstance(runtime.delivery, WorkerPool)
            assert not runtime.delivery.queue
            assert sorted(calls) == [("ID0", 0), ("ID1", 0)]
            go.set()
            with anyio.fail_after(10):
                while runtime.budget.count or runtime.acks.acked < 3:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # the acks answered: no event
            assert sorted(calls) == [("ID0", 0), ("ID1", 0)]
            assert (runtime.renewer.holding, len(runtime.in_hand)) == (0, 0)
    assert broker.acked == {0, 1}
    assert dict(broker.deliveries) == {0: 2, 1: 1}


class DroppingPopBroker(PopBroker):
    """Holds each pop of its first connection ``hold`` seconds, then closes that
    connection unanswered: pops lost with their connection, as on a silent connection a
    timed-out request dropped (``hold`` 0: at once, as a broker that accepts and hangs
    up)."""

    def __init__(self, hold: float) -> None:
        super().__init__()
        self.hold = hold
        self.first: ServerSession | None = None

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == POP_MESSAGE and self.first in (None, session):
            self.first = session
            await anyio.sleep(self.hold)
            await session.close()
            return
        await super().handle(session, cmd)


@ON_VIRTUAL_CLOCKS
@pytest.mark.usefixtures("virtual")
async def test_a_pop_lost_with_its_connection_pops_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pop lost with its connection after a request timeout or more (its own timeout
    on a silent connection, or the connection dropped under it) ends the receive
    backoff: the next pop goes on a new connection at once, as a gRPC receive does on
    the Proxy's new connection. Before, it waited the backoff (an hour here; up to 10 s
    by default: a silence falling in a backoff cost up to 35 s, e3c51b8)."""
    from aiorocket.consumer.pop import receiver as receiver_module

    monkeypatch.setattr(receiver_module, "receive_backoff", lambda failures: 3600.0)
    broker = DroppingPopBroker(hold=1.5)  # past the request timeout (1 s)
    broker.add(0, b"m0")
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster), pop_consumer(cluster, handle) as consumer:
        # 60 s is a guard, far from the hour's backoff
        with anyio.fail_after(60):
            await handled.wait()
        assert isinstance(consumer._backend, PopBackend)
        runtime = consumer._backend.runtime
        assert runtime is not None and runtime.source.connection >= 1


async def test_a_pop_whose_connection_fails_at_once_backs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection hung up at once is no lost pop: the loops back off (no storm of
    pops against a broker that accepts and hangs up)."""
    from aiorocket.consumer.pop import receiver as receiver_module

    monkeypatch.setattr(receiver_module, "receive_backoff", lambda failures: 3600.0)
    broker = DroppingPopBroker(hold=0.0)
    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster), pop_consumer(cluster, _never) as consumer:
        assert isinstance(consumer._backend, PopBackend)
        runtime = consumer._backend.runtime
        assert runtime is not None
        with anyio.fail_after(60):
            while runtime.receiver.failures < 1:  # noqa: ASYNC110 (no event to wait on)
                await anyio.sleep(0.01)
        assert runtime.source.connection == 0
        # at most another loop's first pop, sent once the first connection was gone
        assert broker.pops <= 1


async def _never(msg: ConsumerMessage) -> None:
    raise AssertionError("nothing to handle")
