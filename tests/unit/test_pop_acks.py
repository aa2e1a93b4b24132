"""The pop consumer's acks when the server does not take them (error answers a real
server cannot be made to give on demand): retried while the consumer runs, released
when refused for good or still unacked at the close (issue 38, items 6 and 7)."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
import trio
from trio.testing import MockClock

pytest.importorskip("grpclib")

from aiorocket._log import get_logger
from aiorocket.client.pop import ACK_MESSAGE
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.pop.acks import AckBatcher, ack_backoff
from aiorocket.consumer.pop.grpc_source import GrpcSource
from aiorocket.consumer.pop.source import AckRefusals
from aiorocket.errors import ProxyResponseError, error_for_response
from aiorocket.grpc import SimpleConsumer
from aiorocket.grpc import _pb as pb
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.received import PopMessage
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.fake_remoting import ServerSession
from aiorocket.testing.sim.vloop import VirtualTimeLoop
from tests.unit.consumer_fakes import TOPIC, Collector, FakeCluster, running
from tests.unit.test_grpc_pop_runtime import _message, _pop
from tests.unit.test_lite_lost_event import FakeLiteBroker

pytestmark = pytest.mark.anyio

LOG = get_logger("test")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


class BusyOnce(FakeLiteBroker):
    """Answers the first ACK_MESSAGE with SYSTEM_BUSY."""

    busy = 1

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == ACK_MESSAGE and self.busy:
            self.busy -= 1
            await session.send(RemotingCommand.response_to(cmd, 2, "[PCBUSY] broker busy"))
            return
        await super().handle(session, cmd)


async def test_a_lite_ack_the_broker_was_too_busy_for_is_sent_again() -> None:
    """Item 6: a FIFO (lite) ack answered SYSTEM_BUSY is retried, so the lite topic's next
    message comes at once. Before, the busy answer became ``False``: never retried, the
    lite topic blocked until the invisible time (30 s) ended, then the handled message
    came back."""
    broker = BusyOnce("broker-a")
    got = Collector(2)
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = Consumer("g", cluster.namesrv.address, handler=got, bind_topic=TOPIC,
                            long_poll_timeout=0.5, request_timeout=1.0)  # fmt: skip
        await consumer.subscribe_lite("room")
        async with consumer:
            broker.add_lite("room", b"first")
            broker.add_lite("room", b"second")
            with anyio.fail_after(10):
                await got.done.wait()
                while broker.committed.get("room") != 2:
                    await broker.acked.wait()
    assert got.got == [b"first", b"second"]


async def test_an_ack_is_retried_past_a_second_of_failures_each_try_counted_once() -> None:
    """Item 7: four failed requests in a row (1.5 s of backoff) and the ack still goes
    through; each message's tries are counted once per request. Before, the batcher gave
    up after 3 requests (0.5 s), and the first entry of a chunk was counted twice, so it
    was dropped after the second."""
    msgs = [_pop(i) for i in range(3)]
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as session:
        proxy.ack_failures = 4
        acks = AckBatcher(GrpcSource(session, LOG), delay=0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(acks.run)
            for m in msgs:
                acks.add(m)
            with anyio.fail_after(20):
                await proxy.wait_acks(len(msgs))
                assert await acks.close(10) == []
            tg.cancel_scope.cancel()
    assert proxy.calls.count("AckMessage") == 5
    assert proxy.acked == [m.receipt_handle for m in msgs]
    assert [m._ack_tries for m in msgs] == [4, 4, 4]
    assert (acks.acked, acks.failed) == (3, 0)


def test_the_ack_backoff_is_bounded() -> None:
    assert [ack_backoff(n) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    assert ack_backoff(100) == 5.0


async def test_an_ack_refused_for_good_releases_the_message() -> None:
    """Item 7: an ack entry the Proxy refuses for good (not retriable) is not retried and
    the message is made visible again at once (ChangeInvisibleDuration 0): the Proxy,
    which renews it until it is acked, would otherwise hold it for hours."""
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    async with FakeProxy() as proxy:
        proxy.ack_entry_refusal = (pb.Code.BAD_REQUEST, 1)
        proxy.messages = [_message(0)]
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            runtime = consumer._backend.runtime  # type: ignore[attr-defined]
            with anyio.fail_after(10):
                await handled.wait()
                while not proxy.invisible_changes:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert proxy.invisible_changes == [("rh0", 0.0)]
            assert (runtime.acks.failed, runtime.acks.retried) == (1, 0)
        assert proxy.calls.count("AckMessage") == 1
        assert runtime.unsent_acks == 0  # refused earlier: not counted again by the close


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
])  # fmt: skip
async def test_the_close_releases_the_acks_it_could_not_deliver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Item 7: the Proxy refuses every ack (unavailable): the close tries within its bound,
    reports those acks and makes their messages visible again, instead of leaving them
    to a Proxy that renews them. On a virtual clock (the fake Proxy and the consumer in
    this loop, whose time the acks' due times read too, as in the simulator): its 1 s
    request timeout and the close's bound are exact whatever the load (on the wall
    clock a starved run's start and first ack retry outlasted a 10 s guard)."""
    monkeypatch.setattr(time, "monotonic", asyncio.get_running_loop().time)
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    async with FakeProxy() as proxy:
        proxy.messages = [_message(0)]
        proxy.receive_delay = 5  # a long poll, as the Proxy's: no receive loop spins
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5,
                            request_timeout=1.0)  # fmt: skip
        consumer.subscribe("t")
        proxy.ack_failures = 10**6
        async with consumer:
            runtime = consumer._backend.runtime  # type: ignore[attr-defined]
            with anyio.fail_after(10):
                await handled.wait()
                while not runtime.acks.retried:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        assert runtime.unsent_acks == 1
        assert proxy.invisible_changes == [("rh0", 0.0)]
        assert proxy.acked == []


class RefusesThenHangs:
    """A source whose first ack call refuses every entry for good and whose later ones
    never answer; ``released`` records what the batcher released."""

    group = "g"

    def __init__(self) -> None:
        self.calls = 0
        self.released: list[PopMessage] = []

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        self.calls += 1
        if self.calls == 1:
            err = ProxyResponseError(pb.Code.BAD_REQUEST, "refused", rpc="AckMessage")
            return [(m, err) for m in messages]
        await anyio.sleep_forever()
        raise AssertionError

    async def release(self, messages: list[PopMessage]) -> None:
        self.released += messages


async def test_a_refusal_is_released_even_when_the_close_cuts_the_flush() -> None:
    """A flush of two topics: the first request is refused for good, the second outlives
    the close's bound. The refused message is still released (and the other one is
    reported unacked, for the runtime to release). Before, the release waited for the end
    of the flush: cut there, the refused message was in no list and never released."""
    source = RefusesThenHangs()
    first, second = _pop(0), _pop(1)
    second.topic = "u"
    acks = AckBatcher(source, delay=0, release=source.release)  # type: ignore[arg-type]
    acks.add(first)
    acks.add(second)
    with anyio.fail_after(5):
        unacked = await acks.close(0.2)
    assert source.released == [first]
    assert unacked == [second]


class BusyAcks:
    """A source that answers its first ``busy`` ack requests SYSTEM_BUSY (retriable) and
    takes the later ones; ``calls`` records when each request came."""

    group = "g"

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls: list[float] = []
        self.acked: list[PopMessage] = []

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        self.calls.append(time.monotonic())
        if len(self.calls) <= self.busy:
            err = error_for_response(ResponseCode.SYSTEM_BUSY, "[PCBUSY] busy")
            return [(m, err) for m in messages]
        self.acked += messages
        return []


VIRTUAL = pytest.mark.parametrize("anyio_backend", [
    pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-virtual"),
])  # fmt: skip


@VIRTUAL
async def test_the_close_tries_a_refused_ack_once_more_before_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Simulator pop_remoting seed 7202: the broker answers an ack busy six times in a
    row during a close of 6 s; the backoff (0.1 s doubling) puts the seventh request at
    6.3 s, past the bound. The close tries once more a second before its bound instead,
    and the ack the broker takes then is not released. Before, the close slept into its
    bound and released the message: handled successfully, delivered again."""
    monkeypatch.setattr(time, "monotonic", trio.lowlevel.current_clock().current_time)
    source = BusyAcks(busy=6)
    acks = AckBatcher(source, delay=0)  # type: ignore[arg-type]
    msg = _pop(0)
    acks.add(msg)
    start = time.monotonic()
    assert await acks.close(6.0) == []
    assert source.acked == [msg]
    assert [round(t - start, 2) for t in source.calls] == [0, 0.1, 0.3, 0.7, 1.5, 3.1, 5.0]


@VIRTUAL
async def test_the_close_last_ack_try_keeps_to_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ack the broker refuses through the whole close: one last try before the bound,
    then the close returns the message (to be released) within its bound, without
    trying again at once."""
    monkeypatch.setattr(time, "monotonic", trio.lowlevel.current_clock().current_time)
    source = BusyAcks(busy=10**6)
    acks = AckBatcher(source, delay=0)  # type: ignore[arg-type]
    msg = _pop(0)
    acks.add(msg)
    start = time.monotonic()
    assert await acks.close(6.0) == [msg]
    assert time.monotonic() - start <= 6.0
    assert [round(t - start, 2) for t in source.calls][-2:] == [3.1, 5.0]
