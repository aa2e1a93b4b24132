"""Components that own background tasks (aiorocket._tasks): a start that fails after
the task group was entered, and a close one of whose steps fails, unwind every part in
order, raise what failed, and leave no cancel scope open.

Each case runs inside the test's own ``anyio.CancelScope``: leaving it raises
RuntimeError ("Attempted to exit a cancel scope that isn't the current task's current
cancel scope") when the component left a scope of its own open.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.abc
import pytest

from aiorocket._tasks import BackgroundTasks
from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import Consumer
from aiorocket.consumer.committer import AutoCommit
from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.orderly import Orderly
from aiorocket.consumer.pop.acks import AckBatcher
from aiorocket.consumer.pop.remoting_lite import LiteRemotingSource
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._batcher import GrpcBatcher
from aiorocket.grpc._session import Session
from aiorocket.grpc._transport import GrpcTransport
from aiorocket.producer import Producer
from aiorocket.producer.accumulate import AutoBatcher
from aiorocket.producer.remoting import RemotingProducer
from aiorocket.testing.fake_grpc import FakeProxy
from tests.unit.consumer_fakes import TOPIC, FakeBroker, FakeCluster, consumer_of, running
from tests.unit.test_lite_lost_event import FakeLiteBroker

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Boom(Exception):
    pass


def not_a_task() -> None:
    """Handed to ``start_soon`` it fails there (not a coroutine function)."""


async def boom(*args: Any, **kwargs: Any) -> Any:
    raise Boom("scripted")


def boom_now(*args: Any, **kwargs: Any) -> Any:
    raise Boom("scripted")


async def fails_to_start(component: Any) -> None:
    """Start ``component`` (made to fail): the start raises that failure, and leaves no
    cancel scope open."""
    with anyio.CancelScope(), pytest.raises(Boom):
        await component.__aenter__()


async def fails_to_close(component: Any, fail: Callable[[], None]) -> None:
    """Start ``component``, make a step of its close fail (``fail()``), close it: the
    close raises that failure, and leaves no cancel scope open."""
    with anyio.CancelScope():
        await component.__aenter__()
        fail()
        with pytest.raises(Boom):
            await component.__aexit__(None, None, None)


# -- BackgroundTasks (the shared mechanism) -------------------------------------------

BOTH = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


class Worker:
    """A background task standing for a connection's reader: it answers each request
    sent to it until stopped, and says whether it was stopped."""

    def __init__(self) -> None:
        self.requests, self._inbox = anyio.create_memory_object_stream[anyio.Event](8)
        self.stopped = False

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  ) -> None:  # fmt: skip
        task_status.started()  # then waits for requests
        try:
            async for answered in self._inbox:
                answered.set()
        finally:
            self.stopped = True

    async def request(self) -> bool:
        """Whether the request was answered (at once, or never: the bound is not a wait)."""
        answered = anyio.Event()
        await self.requests.send(answered)
        with anyio.move_on_after(2):
            await answered.wait()
        return answered.is_set()


@BOTH
async def test_background_tasks_outlive_the_callers_cancellation() -> None:
    """The task that entered the group is cancelled from outside: its own code is
    cancelled, not the background tasks; the close (shielded) still gets its requests
    answered through them, then stops them (issue 40: a cancelled consumer could not
    release what it held, its connections' readers cancelled with it)."""
    worker, tasks = Worker(), BackgroundTasks()
    answered = stopped_before = None
    with anyio.CancelScope() as outside:
        tg = await tasks.__aenter__()
        try:
            await tg.start(worker.run)
            outside.cancel()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):  # the close's step that releases
                answered = await worker.request()
            stopped_before = worker.stopped
            await tasks.__aexit__(None, None, None)
    assert outside.cancelled_caught
    assert (answered, stopped_before) == (True, False)
    assert worker.stopped


@BOTH
async def test_a_failed_background_task_still_cancels_the_owner() -> None:
    """A background task that fails cancels the code inside the group and its failure
    is raised on leaving, as a plain task group's (not wrapped twice)."""
    worker, tasks = Worker(), BackgroundTasks()
    raised: Exception | None = None
    try:
        tg = await tasks.__aenter__()
        try:
            tg.start_soon(worker.run)
            tg.start_soon(boom)
            await anyio.sleep_forever()
        finally:
            await tasks.__aexit__(None, None, None)
    except Exception as exc:  # an ExceptionGroup (a builtin from 3.11 only)
        raised = exc
    assert [type(e) for e in getattr(raised, "exceptions", ())] == [Boom]
    assert worker.stopped


@BOTH
async def test_a_failed_start_stops_the_background_tasks() -> None:
    """A start that fails after its tasks started unwinds its stack: they are stopped,
    though nothing cancelled them from outside."""
    worker = Worker()
    with anyio.CancelScope(), pytest.raises(Boom):
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(BackgroundTasks())
            tg.start_soon(worker.run)
            assert await worker.request()
            raise Boom("a later step of the start")
    assert worker.stopped


# -- ClientInstance ----------------------------------------------------------------


async def test_client_instance_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ClientInstance("127.0.0.1:1")
    monkeypatch.setattr(client.namesrv, "run_refresher", not_a_task)
    with anyio.CancelScope(), pytest.raises(TypeError):
        await client.__aenter__()
    assert client.pool._closed


async def test_client_instance_failed_close(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ClientInstance("127.0.0.1:1")
    close = client.pool.aclose_connections

    async def fails() -> None:
        await close()
        raise Boom("a connection failed to close")

    monkeypatch.setattr(client.pool, "aclose_connections", fails)
    with anyio.CancelScope():
        await client.__aenter__()
        with pytest.raises(Boom):
            await client.__aexit__(None, None, None)


# -- Session (gRPC) ------------------------------------------------------------------


def closed_connections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Grows by one each time a gRPC connection is closed from now on."""
    closed: list[int] = []
    close = GrpcTransport.close

    def counted(self: GrpcTransport) -> None:
        closed.append(1)
        close(self)

    monkeypatch.setattr(GrpcTransport, "close", counted)
    return closed


def session_of(proxy: FakeProxy, monkeypatch: pytest.MonkeyPatch) -> tuple[Session, list[int]]:
    transport = GrpcTransport(proxy.endpoint, client_id="c", request_timeout=2.0)
    closed = closed_connections(monkeypatch)
    return Session(transport, pb.ClientType.PRODUCER, pb.Publishing()), closed


async def test_session_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first heartbeat fails after the background tasks started."""
    async with FakeProxy() as proxy:
        session, closed = session_of(proxy, monkeypatch)
        monkeypatch.setattr(session, "heartbeat", boom)
        await fails_to_start(session)
        assert closed and session.closed


async def test_session_failed_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """The termination notice fails unexpectedly: the connection is still closed."""
    async with FakeProxy() as proxy:
        session, closed = session_of(proxy, monkeypatch)
        await fails_to_close(
            session, lambda: monkeypatch.setattr(session, "notify_termination", boom)
        )
        assert closed and session.closed


# -- PopRuntime ----------------------------------------------------------------------


async def nothing(msg: object) -> None:
    pass


def lite_consumer(cluster: FakeCluster) -> Consumer:
    return Consumer("g", cluster.namesrv.address, handler=nothing, bind_topic=TOPIC,
                    long_poll_timeout=0.5, request_timeout=1.0)  # fmt: skip


def sources(monkeypatch: pytest.MonkeyPatch) -> list[LiteRemotingSource]:
    """The lite sources opened from now on."""
    opened: list[LiteRemotingSource] = []
    open_ = LiteRemotingSource.open

    async def track(self: LiteRemotingSource) -> None:
        opened.append(self)
        await open_(self)

    monkeypatch.setattr(LiteRemotingSource, "open", track)
    return opened


async def test_pop_runtime_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delivery fails to start, after the background tasks did."""
    opened = sources(monkeypatch)
    monkeypatch.setattr(Orderly, "start", boom)  # a lite topic is delivered in order
    async with running(FakeCluster({"broker-a": [FakeLiteBroker("broker-a")]})) as cluster:
        consumer = lite_consumer(cluster)
        await consumer.subscribe_lite("room")
        await fails_to_start(consumer)
        assert not consumer.started
        assert [s.client.pool._closed for s in opened] == [True]


@pytest.mark.parametrize("step", ["acks", "lite"])
async def test_pop_runtime_failed_close(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """A step of the close fails unexpectedly (the acks' flush, or the lite
    subscriptions' removal): the later steps still run, the source is closed, and the
    close raises what failed."""
    opened = sources(monkeypatch)
    async with running(FakeCluster({"broker-a": [FakeLiteBroker("broker-a")]})) as cluster:
        consumer = lite_consumer(cluster)
        await consumer.subscribe_lite("room")
        with anyio.CancelScope():
            await consumer.__aenter__()
            if step == "acks":
                monkeypatch.setattr(AckBatcher, "close", boom)
            else:
                monkeypatch.setattr(opened[0], "sync_lite", boom)
            with pytest.raises(Boom):
                await consumer.__aexit__(None, None, None)
        assert not consumer.started
        assert [s.client.pool._closed for s in opened] == [True]


# -- Engine (the remoting pull consumer) ---------------------------------------------


async def test_engine_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delivery fails to start, after the background tasks did."""
    monkeypatch.setattr(WorkerPool, "start", boom)
    async with running(FakeCluster({"broker-a": [FakeBroker("broker-a", 0)]})) as cluster:
        consumer = consumer_of(cluster, nothing)
        await fails_to_start(consumer)
        assert consumer.client.pool._closed


async def test_engine_failed_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Committing the offsets fails unexpectedly at the close: the tasks stop, the
    client is closed and the close raises what failed."""
    async with running(FakeCluster({"broker-a": [FakeBroker("broker-a", 0)]})) as cluster:
        consumer = consumer_of(cluster, nothing)
        await fails_to_close(consumer, lambda: monkeypatch.setattr(AutoCommit, "commit_all", boom))
        assert consumer.client.pool._closed


# -- the remoting producer -------------------------------------------------------------


def remoting_producer() -> tuple[Producer, RemotingProducer]:
    producer = Producer("pg", "127.0.0.1:1", auto_batch=True)  # nothing sent: no server
    engine = producer._engine
    assert isinstance(engine, RemotingProducer)
    return producer, engine


async def test_remoting_producer_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-batcher fails to start, after the background tasks did."""
    monkeypatch.setattr(AutoBatcher, "start", boom_now)
    producer, engine = remoting_producer()
    await fails_to_start(producer)
    assert engine.client.pool._closed


async def test_remoting_producer_failed_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draining the batches fails unexpectedly: the tasks stop, the client is closed and
    the close raises what failed."""
    producer, engine = remoting_producer()
    await fails_to_close(producer, lambda: monkeypatch.setattr(AutoBatcher, "drain", boom))
    assert engine.client.pool._closed


# -- the gRPC producer ---------------------------------------------------------------


def grpc_producer(proxy: FakeProxy, monkeypatch: pytest.MonkeyPatch) -> tuple[Producer, list[int]]:
    """A producer through ``proxy``; the list grows when its connection is closed."""
    closed = closed_connections(monkeypatch)
    return Producer("pg", proxy=proxy.endpoint, auto_batch=True), closed


async def test_grpc_producer_failed_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-batcher fails to start, after its task group was entered."""
    async with FakeProxy() as proxy:
        producer, closed = grpc_producer(proxy, monkeypatch)
        monkeypatch.setattr(GrpcBatcher, "__init__", boom_now)
        await fails_to_start(producer)
        assert closed


async def test_grpc_producer_failed_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failing the batches' waiting callers fails unexpectedly: the session still ends."""
    async with FakeProxy() as proxy:
        producer, closed = grpc_producer(proxy, monkeypatch)
        await fails_to_close(
            producer, lambda: monkeypatch.setattr(GrpcBatcher, "fail_waiting", boom_now)
        )
        assert closed
