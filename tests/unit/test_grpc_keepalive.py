"""The gRPC keepalive (issue 30, item 6) against the fake Proxy behind a FaultProxy: a
connection that stops answering while a call waits is abandoned after an unanswered
PING and the call is retried on a new connection; a slow Proxy that still answers PINGs
keeps its connection."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.errors import ProxyUnavailableError, RocketMQError
from aiorocket.grpc import SimpleConsumer
from aiorocket.grpc._keepalive import PINGS_PER_SILENCE
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.faultproxy import FaultProxy
from aiorocket.testing.sim.vloop import VirtualTimeLoop

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def keepalive_of(producer: Producer):  # type: ignore[no-untyped-def]
    """The keepalive of the connection the sends go on (the unary calls' own)."""
    wire = producer._engine._grpc.transport._wire  # type: ignore[union-attr]
    assert wire is not None and wire.keepalive is not None
    return wire.keepalive


async def test_a_stalled_connection_is_abandoned_and_the_send_goes_on_a_new_one() -> None:
    """The stalled send goes on a new connection once its PING went unanswered (the
    PING's bound, interval + timeout: ~2-2.25 s), not when it times out: the request
    timeout is set past the hang guard, so only the keepalive can end the stalled call
    in time (a 3 s one, and a wall-clock bound of 3 s, left a loaded machine 0.75 s)."""
    async with (
        FakeProxy() as fake,
        FaultProxy(fake.endpoint) as link,
        Producer("pg", proxy=link.address, auto_batch=False, request_timeout=120,
                 send_timeout=240) as producer,
    ):  # fmt: skip
        await producer.send(Message("t", b"before"))
        keepalive = keepalive_of(producer)
        before = link.accepted  # the unary calls' connection and the streams'
        link.stall()
        with anyio.fail_after(60):  # a hang's guard, half the request timeout
            await producer.send(Message("t", b"during"))  # before: RequestTimeoutError
        assert keepalive.abandoned and keepalive.pings == 1
        assert link.accepted > before  # a new connection
        assert [m.body for m in fake.sent] == [b"before", b"during"]


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
])  # fmt: skip
async def test_a_slow_proxy_that_answers_pings_keeps_its_connection() -> None:
    """On a virtual clock (the fake Proxy, the link and the client in this loop): the
    PINGs' timers and the Proxy's delay are exact, whatever the machine's load (on the
    wall clock a starved run could see an ACK come later than the PING's 1 s timeout,
    or the second PING fall past the 3 s answer)."""
    async with (
        FakeProxy() as fake,
        FaultProxy(fake.endpoint) as link,
        Producer(
            "pg", proxy=link.address, auto_batch=False, request_timeout=10, send_timeout=10
        ) as producer,
    ):
        await producer.send(Message("t", b"first"))
        keepalive = keepalive_of(producer)
        before = link.accepted
        fake.send_delay = 3.0  # longer than interval + timeout
        await producer.send(Message("t", b"slow"))
        # The silence's PINGs (the call waited: two), answered; never a third, which the
        # Proxy would answer by hanging up.
        assert keepalive.pings == PINGS_PER_SILENCE and not keepalive.abandoned
        assert link.accepted == before


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
])  # fmt: skip
async def test_a_stall_after_the_silences_first_ping_is_noticed_by_the_next_call() -> None:
    """A receive parks (a long poll with nothing to deliver): the silence gets its first
    PING, answered. Then the path stalls. A PING per interval is not allowed (the Proxy
    hangs up at the third of a silence), but a call that waits for a prompt answer
    earns the second: the connection is abandoned about 2 s after that call started,
    not when it times out (before: at the request timeout, then one more for the probe's
    PING). The request timeout is set past the hang guards, so only the PINGs can end
    the calls in time (a 10 s one, and a wall-clock bound of 3.5 s, left a loaded
    machine 1.25 s). On a virtual clock (the fake Proxy, the link and the client in
    this loop): on the wall clock, a starved run's wait for the first PINGs could
    outlast the 10 s heartbeat, whose answer ends the silence, and a third PING went."""
    async with (
        FakeProxy() as fake,
        FaultProxy(fake.endpoint) as link,
        SimpleConsumer("g", link.address, {"t": "*"}, await_duration=20,
                       request_timeout=120) as consumer,
    ):  # fmt: skip
        fake.receive_mode = "hang"
        protocol = consumer.transport.channel.protocol
        wire = consumer.transport._wire  # the unary calls' connection: the heartbeat's
        assert protocol is not None and protocol.keepalive is not None
        assert wire is not None and wire.keepalive is not None
        keepalives = [protocol.keepalive, wire.keepalive]
        async with anyio.create_task_group() as tg:

            async def receive() -> None:
                with pytest.raises(RocketMQError):
                    await consumer.receive(1, invisible_duration=20)

            tg.start_soon(receive)
            with anyio.fail_after(10):
                # the first PING of each connection's silence went, and its ACK came
                while any(k.pings < 1 or k._deadline is not None for k in keepalives):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            link.stall()
            with anyio.fail_after(60), pytest.raises(ProxyUnavailableError):
                await consumer.session.heartbeat()  # abandoned, not timed out
            with anyio.fail_after(30):  # the streams' connection too (the heartbeat waited)
                while not keepalives[0].abandoned:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        for keepalive in keepalives:
            assert keepalive.abandoned and keepalive.pings == PINGS_PER_SILENCE


async def test_a_connection_dropped_for_silence_takes_its_silent_sibling_along() -> None:
    """The client's two connections to a Proxy (streams', unary calls') share a path:
    when one is dropped for an unanswered PING, the other is dropped at once if its own
    PING is out unanswered too (before, a call could start on it until its own deadline:
    the ack after a stall in tests/integration/test_grpc_keepalive.py), and otherwise
    is sent a PING now."""
    from aiorocket.grpc._keepalive import Keepalive, KeepaliveSettings
    from aiorocket.grpc._transport import GrpcTransport

    settings = KeepaliveSettings(interval=60.0, timeout=60.0)  # only what the test does
    aborted: list[str] = []
    transport = GrpcTransport("127.0.0.1:1", client_id="c")

    def abandoned() -> None:
        transport._keepalive_abandoned()

    def watch(name: str) -> Keepalive:
        return Keepalive(
            settings, lambda: True, lambda data: None, lambda: aborted.append(name),
            peer=name, abandoned=abandoned,
        )  # fmt: skip

    keepalives = [watch(n) for n in ("streams", "unary", "idle")]
    streams, unary, idle = keepalives
    transport._keepalives = lambda: keepalives  # type: ignore[method-assign]
    try:
        streams.probe()
        unary.probe()  # both PINGs out, unanswered
        streams._dead()  # the first one's deadline
        assert aborted == ["streams", "unary"] and unary.abandoned
        assert not idle.abandoned and idle.pings == 1  # answered PINGs: only probed
    finally:
        for keepalive in keepalives:
            keepalive.stop()
