"""The gRPC source of the consumer runtime on the fake Proxy: what a real Proxy cannot be
made to do on demand (an ack request held while the consumer closes; a Proxy that does
not renew received messages itself)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

pytest.importorskip("grpclib")

from aiorocket._log import get_logger
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.backend import PopBackend
from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.pop import acks as acks_module
from aiorocket.consumer.pop import grpc_source as grpc_source_module
from aiorocket.consumer.pop import receiver as receiver_module
from aiorocket.consumer.pop import settler as settler_module
from aiorocket.consumer.pop.acks import AckBatcher
from aiorocket.consumer.pop.grpc_source import GrpcSource
from aiorocket.consumer.pop.runtime import PopRuntime
from aiorocket.errors import RocketMQError
from aiorocket.grpc import SimpleConsumer, _fast
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._push_message import PopMessage
from aiorocket.results import Reconsume
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.sim.vloop import VirtualTimeLoop

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


LOG = get_logger("test")

#: The fake Proxy and the consumer in one loop on a virtual clock, the clock that
#: ``time.monotonic`` is patched to read (the renewer's and the settler's due times): a
#: test waiting out handlers, renewals and backoffs costs no wall clock, and its timing
#: does not depend on the machine's load.
VIRTUAL = pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
])  # fmt: skip


@pytest.fixture
def mid_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mid-stream hand-on on (``grpc_source.MID_STREAM_HAND_ON``, off by default)."""
    monkeypatch.setattr(grpc_source_module, "MID_STREAM_HAND_ON", True)


def _pop(i: int) -> PopMessage:
    msg = PopMessage("t", b"x", {}, 0, i, 0)
    msg.receipt_handle, msg.message_id = f"h{i}", f"id{i}"
    return msg


async def _flushing_held_by_the_proxy(
    tg: anyio.abc.TaskGroup, proxy: FakeProxy, session: SimpleConsumer, msgs: list[PopMessage]
) -> AckBatcher:
    """An ack batcher whose flusher (run in ``tg``) has its first request out, held by
    the Proxy until ``proxy.ack_gate`` is set."""
    acks = AckBatcher(GrpcSource(session, LOG), delay=0)
    proxy.ack_gate = asyncio.Event()
    tg.start_soon(acks.run)
    for m in msgs:
        acks.add(m)
    with anyio.fail_after(10):
        await proxy.ack_started.wait()
    return acks


async def test_acks_of_a_flush_cancelled_mid_request_are_sent_by_the_close() -> None:
    """200 acks queued, the first request held by the Proxy while the close cancels the
    flusher: the close sends every one of them (before the fix, the request's entries
    had left the queue and were lost with the flusher: 64 of 200 reached the Proxy)."""
    msgs = [_pop(i) for i in range(200)]
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as session:
        async with anyio.create_task_group() as tg:
            acks = await _flushing_held_by_the_proxy(tg, proxy, session, msgs)
            assert acks.pending == len(msgs)  # MAX_ENTRIES of them in a request
            tg.cancel_scope.cancel()  # the close stops the flusher mid-request
        assert acks.pending == len(msgs)  # the interrupted request's entries are back
        proxy.ack_gate.set()
        unsent = await acks.close(timeout=10)
    assert unsent == [] and acks.acked == len(msgs)
    assert set(proxy.acked) == {m.receipt_handle for m in msgs}


async def test_the_close_waits_for_the_flushers_request_in_flight() -> None:
    """The close's last flush meets the flusher with a request out (the Proxy holds it):
    it waits for that request instead of finding nothing queued, so the acks are counted
    delivered before the task group (and the flusher's request) is cancelled. Before,
    the close reported nothing unsent and the request died with the flusher: a batch of
    acks lost (8 of 200 in test_the_close_delivers_every_ack_it_owes, now and then)."""
    msgs = [_pop(i) for i in range(8)]
    async with (
        FakeProxy() as proxy,
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as session,
        anyio.create_task_group() as tg,
    ):
        acks = await _flushing_held_by_the_proxy(tg, proxy, session, msgs)
        asyncio.get_running_loop().call_later(0.2, proxy.ack_gate.set)
        unsent = await acks.close(timeout=10)
        assert (unsent, acks.acked) == ([], len(msgs))
        tg.cancel_scope.cancel()  # as the close does next
    assert sorted(proxy.acked) == sorted(m.receipt_handle for m in msgs)


async def test_an_ack_the_proxy_could_not_take_is_sent_again() -> None:
    """The Proxy renews an auto-renewed message until it is acked: an ack request that
    failed retriably is sent again, not dropped (the message would be held back)."""
    msgs = [_pop(i) for i in range(3)]
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as session:
        proxy.ack_failures = 1
        acks = AckBatcher(GrpcSource(session, LOG), delay=0)
        for m in msgs:
            acks.add(m)
        async with anyio.create_task_group() as tg:
            tg.start_soon(acks.run)
            with anyio.fail_after(10):
                await proxy.wait_acks(len(msgs))
                assert await acks.close(10) == []  # waits for the flusher's answer
            tg.cancel_scope.cancel()
    assert proxy.calls.count("AckMessage") == 2
    assert proxy.acked == [m.receipt_handle for m in msgs]
    assert (acks.acked, acks.failed, acks.retried) == (3, 0, 3)


async def test_an_ack_whose_answer_a_restart_lost_is_sent_again_and_then_let_go_of() -> None:
    """The Proxy restarts while the ack of a handled message is in a request (it takes
    the ack, the answer is lost with the connection): the message stays with the renewer
    while its ack is owed, the ack is sent again over a new connection, and once that is
    answered nothing of the message is held (simulator grpc_restart seed 1041 suspected
    this path; memory_within_cache)."""
    async with FakeProxy() as proxy:
        proxy.ack_gate = asyncio.Event()
        consumer = _one_message_consumer(proxy, _ok)
        async with consumer:
            runtime = _runtime(consumer)
            with anyio.fail_after(10):
                await proxy.ack_started.wait()
                assert (runtime.renewer.holding, runtime.acks.pending) == (1, 1)  # owed
                await proxy.restart()  # the request's connection goes: no answer
                proxy.ack_gate.set()  # the first request's ack is taken all the same
                while runtime.acks.acked < 1:  # noqa: ASYNC110  (answered: no event)
                    await anyio.sleep(0.005)
            assert proxy.calls.count("AckMessage") == 2
            assert runtime.acks.retried == 1
            assert (runtime.renewer.holding, runtime.acks.pending, runtime.budget.count) == (
                0, 0, 0)  # fmt: skip


def _message(i: int) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="t"),
        system_properties=pb.SystemProperties(
            message_id=f"id{i}", receipt_handle=f"rh{i}", delivery_attempt=1,
            born_timestamp=datetime.now(timezone.utc),
        ),
        body=f"m{i}".encode(),
    )  # fmt: skip


def _one_message_consumer(proxy: FakeProxy, handle: Any, **settings: Any) -> Consumer:
    """A consumer of topic "t" on ``proxy``, which hands out one message (``rh0``)."""
    proxy.messages = [_message(0)]
    consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5,
                        **settings)  # fmt: skip
    consumer.subscribe("t")
    return consumer


async def _refused_then_a_broken_receive(proxy: FakeProxy, runtime: PopRuntime) -> None:
    """Once rh0's ack was refused (retriable), a receive stream breaks (m2 written,
    never arriving), and the consumer's release follows: until its termination."""
    with anyio.fail_after(10):  # the refusal answered to the client: no event
        while runtime.acks.retried < 1:  # noqa: ASYNC110
            await anyio.sleep(0.005)
    proxy.receive_mode = "reset"
    proxy.messages = [_message(1), _message(2)]
    with anyio.fail_after(10):
        await proxy.termination_seen.wait()


async def test_an_owed_ack_goes_before_the_release_that_follows_a_broken_receive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """m0 handled, its ack refused once (retriable) and waiting for its retry; then a
    receive stream breaks, and the consumer ends the Proxy's hold on what it gave it
    (NotifyClientTermination), which frees m0 too unless its ack went first: the Proxy
    would hand it out again, a duplicate outside the in-flight window (simulator
    grpc_receive seed 42000). The owed ack goes before the termination, not after its
    backoff. Before, the termination found rh0 unacked (its retry 60 s away here)."""
    monkeypatch.setattr(acks_module, "FIRST_BACKOFF", 60.0)
    monkeypatch.setattr(acks_module, "MAX_BACKOFF", 60.0)
    async with FakeProxy() as proxy:
        proxy.ack_failures = 1
        consumer = _one_message_consumer(proxy, _ok)
        async with consumer:
            await _refused_then_a_broken_receive(proxy, _runtime(consumer))
        assert "rh0" in proxy.acked_at_termination[0]
        assert proxy.acked.count("rh0") == 1


async def test_a_handled_message_whose_ack_the_release_did_not_get_through_is_not_handled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """m0 handled, its ack refused (retriable), and refused again when it goes ahead of
    the release that follows a broken receive: the termination frees m0, and the Proxy
    hands it back to this consumer (rh0b). The copy of a handled message whose ack is
    owed is acked with its new handle, not handed to the application again. Before, the
    message counted as settled once its ack was queued, and the copy was handled a
    second time (calls ['id0', 'id1', 'id0'])."""
    monkeypatch.setattr(acks_module, "FIRST_BACKOFF", 60.0)
    monkeypatch.setattr(acks_module, "MAX_BACKOFF", 60.0)
    calls: list[str] = []

    async def handle(msg: ConsumerMessage) -> None:
        calls.append(msg.msg_id)

    async with FakeProxy() as proxy:
        proxy.ack_failures = 10**6  # every ack refused until the termination
        consumer = _one_message_consumer(proxy, handle)
        async with consumer:
            runtime = _runtime(consumer)
            await _refused_then_a_broken_receive(proxy, runtime)
            assert "rh0" not in proxy.acked_at_termination[0]  # refused at the release too
            proxy.ack_failures = 0
            proxy.receive_mode = "ok"
            proxy.messages = [_copy(0, "rh0b")]  # freed by the termination, back to us
            with anyio.fail_after(10):
                while "rh0b" not in proxy.acked:
                    await proxy.wait_acked()
            assert calls.count("id0") == 1, calls
        assert len(runtime.in_hand) == 0  # let go of as the close ended the owed acks
    assert calls.count("id0") == 1, calls


async def test_owed_acks_cut_short_before_the_release_go_back_to_the_flusher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The acks sent ahead of a release (``AckBatcher.send_owed``) are cut short by its
    bound while their request is out (the Proxy holds it): they are queued again and the
    flusher, asleep until a retry 60 s away, is woken for them, not left until the next
    success's ack wakes it."""
    monkeypatch.setattr(acks_module, "FIRST_BACKOFF", 60.0)
    monkeypatch.setattr(acks_module, "MAX_BACKOFF", 60.0)
    msgs = [_pop(i) for i in range(3)]
    async with (
        FakeProxy() as proxy,
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as session,
        anyio.create_task_group() as tg,
    ):
        proxy.ack_failures = 1
        acks = AckBatcher(GrpcSource(session, LOG), delay=0)
        tg.start_soon(acks.run)
        for m in msgs:
            acks.add(m)
        with anyio.fail_after(10):  # refused once: its retry 60 s away
            while acks.retried < len(msgs):  # noqa: ASYNC110 - no event
                await anyio.sleep(0.005)
            proxy.ack_gate = asyncio.Event()
            proxy.ack_started.clear()
            with anyio.CancelScope() as bound:
                tg.start_soon(_cut_when_started, proxy, bound)
                await acks.send_owed()
            assert bound.cancelled_caught and acks.pending == len(msgs)
            proxy.ack_gate.set()  # (the cut request's entries are acked too: harmless)
            while acks.acked < len(msgs):  # noqa: ASYNC110 - answered to the client
                await anyio.sleep(0.005)
        tg.cancel_scope.cancel()
    assert acks.pending == 0 and proxy.calls.count("AckMessage") == 3


async def _cut_when_started(proxy: FakeProxy, scope: anyio.CancelScope) -> None:
    await proxy.ack_started.wait()
    scope.cancel()


def _written_after(
    monkeypatch: pytest.MonkeyPatch,
    consumer: SimpleConsumer,
    go: Callable[[], Awaitable[Any]],
    order: list[str],
) -> None:
    """A receive's request held between its check of the session and its write until
    ``go()`` returns, as the opening of a connection to a Proxy back holds it; each
    write noted in ``order``."""
    real = consumer.transport.server_stream

    @asynccontextmanager
    async def held(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await go()
        async with real(*args, **kwargs) as stream:
            order.append("receive written")
            yield stream

    monkeypatch.setattr(consumer.transport, "server_stream", held)


@asynccontextmanager
async def _warm_consumer() -> AsyncIterator[tuple[FakeProxy, SimpleConsumer, anyio.abc.TaskGroup]]:
    """A consumer on the fake Proxy that received once: its assignment known, the
    next receive has no await between its check of the session and its write."""
    async with (
        FakeProxy() as proxy,
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as consumer,
        anyio.create_task_group() as tg,
    ):
        assert await consumer.receive(1, 30) == []
        yield proxy, consumer, tg


async def _receive_into(consumer: SimpleConsumer, out: list[object], done: anyio.Event) -> None:
    try:
        out.append(await consumer.receive(1, 30))
    except RocketMQError as err:
        out.append(err)
    finally:
        done.set()


async def test_a_receive_during_the_owed_acks_waits_for_the_settings_after_the_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release (after a broken receive) sends the owed acks, then NotifyClientTermination
    (which drops this client's settings at the Proxy), then the settings again. A
    receive that comes while the acks' request is out (as one woken with the release
    when a restarted Proxy has the settings) waits for the settings sent after the
    termination, and the owed ack still goes first (seed 42000). Before (b069a51) it
    went at once: its request, written after the termination (held here until the Proxy
    had it), was refused ('"settings" is null': test_grpc_proxy_restart's CI failure)."""
    async with _warm_consumer() as (proxy, consumer, tg):
        session = consumer.session
        acks = AckBatcher(GrpcSource(consumer, LOG), delay=0)
        acks.add(_pop(0))
        session.before_release = acks.send_owed
        order: list[str] = []
        _written_after(monkeypatch, consumer, proxy.termination_seen.wait, order)
        proxy.ack_gate = asyncio.Event()
        got: list[object] = []
        received = anyio.Event()
        with anyio.fail_after(10):
            tg.start_soon(session.release_held)
            await proxy.ack_started.wait()  # the owed ack's request out, held
            tg.start_soon(_receive_into, consumer, got, received)
            await anyio.wait_all_tasks_blocked()  # the receive went, or waits
            proxy.ack_gate.set()
            await received.wait()
        assert got == [[]] and order == ["receive written"]
        assert proxy.receives_without_settings == 0
        assert proxy.acked_at_termination == [["h0"]]


async def test_the_settings_back_after_a_restart_go_to_a_waiting_release_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Proxy restart: a receive and then a release (its stream broke) wait for the
    session. When the new Proxy has the settings, the release takes the session in the
    same step: the receive, woken first, waits for the settings sent after the
    termination. Before (b069a51) it went first; its request, written after the
    termination (held here until the Proxy had it), was refused: '"settings" is null'."""
    async with _warm_consumer() as (proxy, consumer, tg):
        session = consumer.session
        order: list[str] = []
        _written_after(monkeypatch, consumer, proxy.termination_seen.wait, order)
        got: list[object] = []
        received = anyio.Event()
        with anyio.fail_after(10):
            await proxy.stop()
            while session.ready:  # noqa: ASYNC110 - the stream's end: no event
                await anyio.sleep(0.005)
            tg.start_soon(_receive_into, consumer, got, received)
            await anyio.wait_all_tasks_blocked()  # the receive waits for the session
            tg.start_soon(session.release_held)
            await anyio.wait_all_tasks_blocked()  # and the release after it
            await proxy.start()
            await received.wait()
        assert got == [[]] and order == ["receive written"]
        assert proxy.receives_without_settings == 0


async def test_the_release_waits_for_the_request_of_a_receive_let_go_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A receive that saw the session ready before a release began, its request not
    written yet (held here, as the opening of a connection holds it): the termination
    waits for that write, else the receive would reach the Proxy after the termination
    dropped the settings. Before (b069a51) the termination went at once."""
    async with _warm_consumer() as (proxy, consumer, tg):
        session = consumer.session
        order: list[str] = []
        write = anyio.Event()
        _written_after(monkeypatch, consumer, write.wait, order)
        real_notify = session.notify_termination

        async def notify() -> None:
            order.append("termination")
            await real_notify()

        monkeypatch.setattr(session, "notify_termination", notify)
        got: list[object] = []
        received = anyio.Event()
        with anyio.fail_after(10):
            tg.start_soon(_receive_into, consumer, got, received)
            await anyio.wait_all_tasks_blocked()  # at its write
            tg.start_soon(session.release_held)
            await anyio.wait_all_tasks_blocked()
            write.set()
            await received.wait()
            await proxy.termination_seen.wait()
        assert got == [[]] and order == ["receive written", "termination"]
        assert proxy.receives_without_settings == 0


@VIRTUAL
async def test_receives_wait_past_a_release_for_settings_the_proxy_has_not_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release whose settings, sent again after the termination, the Proxy has not
    answered within a request timeout (its pool behind): at the release's end receives
    wait for that answer. Before, the end let them go whenever a telemetry stream was
    open (9fa69ea), and a receive reached a Proxy that had dropped the settings: refused
    '"settings" is null' (a retry, a refusal the client promises never to cause). On a
    virtual clock (the fake Proxy and the consumer in this loop): the request timeout
    and the Proxy's 20 s cost no wall clock."""
    monkeypatch.setattr(time, "monotonic", asyncio.get_running_loop().time)
    async with _warm_consumer() as (proxy, consumer, tg):
        session = consumer.session
        proxy.lag["settings"] = 20.0  # those sent after the termination: held 20 s
        got: list[object] = []
        received = anyio.Event()
        with anyio.fail_after(60):
            tg.start_soon(session.release_held)
            await proxy.termination_seen.wait()
            await proxy.held.wait()  # the settings sent again, not answered
            tg.start_soon(_receive_into, consumer, got, received)
            await received.wait()
        assert proxy.receives_without_settings == 0
        assert got == [[]]
        after = proxy.applied[proxy.applied.index("NotifyClientTermination") :]
        assert "settings" in after  # the answer the receive waited for


@VIRTUAL
async def test_a_proxy_that_does_not_renew_gets_renewals_from_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Proxy refuses auto-renewed receives (``enableProxyAutoRenew=false``): the
    consumer receives with its ``invisible_duration`` and renews a message whose handler
    outlives the renewal margin itself; the ack then carries the renewed handle. On a
    virtual clock (the fake Proxy and the consumer in this loop, whose time the renewer's
    due times read too): the handler's 6.5 s cost 6.5 s of wall clock before."""
    monkeypatch.setattr(time, "monotonic", asyncio.get_running_loop().time)
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        await anyio.sleep(6.5)  # past the renewal margin of a 10 s invisible time (5 s)
        handled.set()

    async with FakeProxy() as proxy:
        proxy.auto_renew = False
        proxy.receive_delay = 5  # a long poll, as the Proxy's: no receive loop spins
        consumer = _one_message_consumer(proxy, handle, invisible_duration=10)
        async with consumer:
            with anyio.fail_after(20):
                await handled.wait()
                while not proxy.acked:
                    await proxy.wait_acked()
            assert isinstance(consumer._backend, PopBackend)
            runtime = consumer._backend.runtime
            assert runtime is not None and not runtime.source.server_renews
            assert runtime.renewer.renewed == 1
    assert proxy.invisible_changes == [("rh0", 10.0)]
    assert proxy.acked == ["rh0+"]  # the handle the renewal returned


async def test_the_renewer_lets_go_of_settled_messages_at_once() -> None:
    """Issue 38 item 12: 4 receives of 32 messages handled and acked: the renewer holds
    none of them (nor their bodies) once they are settled, as the cache budget says.
    Before, it held every one until its invisible time would have ended (30 s here, up
    to 12 h allowed): 1,536 acked messages of 64 KiB still held 96 MiB."""
    handled = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal handled
        handled += 1

    async with FakeProxy() as proxy:
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            assert isinstance(consumer._backend, PopBackend)
            runtime = consumer._backend.runtime
            assert runtime is not None
            with anyio.fail_after(20):
                for n in range(0, 128, 32):
                    proxy.messages = [_message(n + k) for k in range(32)]
                    # acked: answered to the client (a message whose ack is not yet
                    # answered is held, and renewed if need be)
                    while handled < n + 32 or runtime.acks.acked < n + 32:  # noqa: ASYNC110
                        await anyio.sleep(0.005)
            # ``holding`` counts every message held, settled or not (``held()`` lists
            # only the unsettled ones, so it would not see this defect).
            assert (runtime.renewer.holding, runtime.budget.count) == (0, 0)


async def test_the_close_lets_a_shielded_handler_finish_before_releasing() -> None:
    """A handler that shields its work from cancellation outlives ``shutdown_timeout``:
    the close waits for it (bounded), so its message is acked, not made visible while
    it still runs (another member would handle it at the same time). Before, the worker
    pool's drain returned at the cancellation: the message was released (invisible
    time 0) and the handler's success then came too late to ack it."""
    started = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        started.set()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.5)

    async with FakeProxy() as proxy:
        consumer = _one_message_consumer(proxy, handle, shutdown_timeout=0.1)
        async with consumer:
            with anyio.fail_after(10):
                await started.wait()
    assert (proxy.acked, proxy.invisible_changes) == (["rh0"], [])


async def test_the_close_leaves_a_message_a_handler_thread_still_works_on_invisible() -> None:
    """A synchronous handler's thread outlives ``shutdown_timeout`` (a thread cannot be
    stopped): the close gives the call up but does not release its message, which would
    then be handled by another member while the thread still works on it; it comes back
    after its invisible time. Before, it was made visible at once (invisible time 0)."""
    started, go = threading.Event(), threading.Event()

    def handle(msg: ConsumerMessage) -> None:
        started.set()
        go.wait(60)  # let go by the test at its end

    async with FakeProxy() as proxy:
        # request_timeout: the start's wait for the Proxy's settings (a starved run
        # failed "no settings from the Proxy within 3.0s")
        consumer = _one_message_consumer(proxy, handle, shutdown_timeout=0.1, request_timeout=30)
        try:
            async with consumer:
                # A thread's wait cannot be cancelled (a fail_after around it guarded
                # nothing): it is bounded itself.
                assert await anyio.to_thread.run_sync(started.wait, 60)
            assert consumer.abandoned_threads == 1
        finally:
            go.set()
    assert (proxy.acked, proxy.invisible_changes) == ([], [])


def _runtime(consumer: Consumer) -> PopRuntime:
    assert isinstance(consumer._backend, PopBackend)
    runtime = consumer._backend.runtime
    assert runtime is not None
    return runtime


async def _fail(msg: ConsumerMessage) -> None:
    raise RuntimeError("handler failed")


@VIRTUAL
async def test_a_nack_the_proxy_could_not_take_is_sent_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler fails; the Proxy refuses the nack's ChangeInvisibleDuration 5 times
    (retriable): after the settler's 3 requests the nack waits in the backlog, the
    message still held, and is sent again with the acks' backoff until it goes through.
    Before, the settler logged ``nack_failed`` and let go of the message: no nack ever
    reached the Proxy, which kept the message invisible (auto-renewed) for hours."""
    monkeypatch.setattr(time, "monotonic", asyncio.get_running_loop().time)
    async with FakeProxy() as proxy:
        proxy.change_refusal = (pb.Code.TOO_MANY_REQUESTS, 5)
        proxy.receive_delay = 5  # a long poll, as the Proxy's: no receive loop spins
        consumer = _one_message_consumer(proxy, _fail)
        async with consumer:
            runtime = _runtime(consumer)
            # The nack through, and its answer taken: ~2 s of backoffs (0.4 + 0.8 s in
            # the settler, 0.1 + 0.2 + 0.4 s from the backlog), under a guard far from
            # them (virtual: exact whatever the load).
            with anyio.fail_after(60):
                while not proxy.invisible_changes or runtime.budget.count:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert runtime.settler.backlog == 0
    assert proxy.calls.count("ChangeInvisibleDuration") == 6
    assert len(proxy.invisible_changes) == 1
    handle, seconds = proxy.invisible_changes[0]
    assert handle == "rh0" and seconds > 0  # the retry's backoff, not a release


async def test_the_close_releases_a_message_whose_nack_still_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The nack's 3 requests fail and its next retry is far off when the consumer
    closes: the close releases the message (visible again at once) instead of leaving
    it to a Proxy that renews it. Before, nothing more was sent: held for hours."""
    monkeypatch.setattr(settler_module, "ack_backoff", lambda tries: 60.0, raising=False)
    async with FakeProxy() as proxy:
        proxy.change_refusal = (pb.Code.TOO_MANY_REQUESTS, 3)
        consumer = _one_message_consumer(proxy, _fail)
        async with consumer:
            with anyio.fail_after(10):
                while proxy.change_refusal is not None:  # noqa: ASYNC110 (no event)
                    await anyio.sleep(0.01)
            assert not proxy.invisible_changes
    assert proxy.invisible_changes == [("rh0", 0.0)]


async def test_a_new_connection_ends_the_receive_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 38 item 14: receives failed (the backoff grown: an hour here) and the Proxy
    restarts: once the Proxy has the client's settings on the new connection, the next
    receive goes out at once and the backoff starts again. Before, the receive loops
    slept out the grown backoff (up to 10 s by default) after the Proxy was back."""
    monkeypatch.setattr(receiver_module, "receive_backoff", lambda failures: 3600.0)
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    async with FakeProxy() as proxy:
        proxy.receive_refusal = pb.Code.TOO_MANY_REQUESTS
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            receiver = _runtime(consumer).receiver
            with anyio.fail_after(10):
                while receiver.failures < 1:  # noqa: ASYNC110 (no event to wait on)
                    await anyio.sleep(0.01)
            proxy.receive_refusal = None
            proxy.messages = [_message(0)]
            await proxy.restart()
            # Not after the hour's backoff: 60 s is a guard (it was `< 5` s of wall clock
            # against a 30 s backoff).
            with anyio.fail_after(60):
                await handled.wait()
            assert receiver.failures == 0


def _copy(i: int, handle: str) -> pb.Message:
    """Message ``i`` delivered again (the Proxy released it: NotifyClientTermination)."""
    msg = _message(i)
    msg.system_properties.receipt_handle = handle
    msg.system_properties.delivery_attempt = 2
    return msg


async def _redelivered_while_in_hand(
    proxy: FakeProxy, outcome: Any, **settings: Any
) -> tuple[Consumer, list[int], anyio.Event]:
    """A consumer whose handler of ``rh0`` waits for the returned event (the test sets
    it), then returns ``outcome(msg)``; started, with the handler running."""
    calls: list[int] = []
    started, go = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        calls.append(msg.reconsume_times)
        started.set()
        await go.wait()
        await outcome(msg)

    consumer = _one_message_consumer(proxy, handle, **settings)
    await consumer.__aenter__()
    with anyio.fail_after(10):
        await started.wait()
    return consumer, calls, go


async def _copy_arrives(proxy: FakeProxy, runtime: PopRuntime) -> None:
    proxy.messages = [_copy(0, "rh0b")]
    with anyio.fail_after(10):
        while runtime.budget.count < 2:  # noqa: ASYNC110 - the copy counted: no event
            await anyio.sleep(0.005)


async def _all_settled(runtime: PopRuntime) -> None:
    with anyio.fail_after(10):
        while runtime.budget.count:  # noqa: ASYNC110 - all settled: no event
            await anyio.sleep(0.005)


async def _ok(msg: ConsumerMessage) -> None:
    pass


async def test_a_message_delivered_again_while_its_handler_runs_is_not_handled_twice() -> None:
    """The Proxy hands out again a message whose handler still runs (it released it:
    the consumer's NotifyClientTermination after a broken receive, simulator grpc_receive
    seed 0): the copy is not dispatched while the call runs; the call's success acks
    the copy's handle (the old one is stale after the release), and nothing is left in
    the cache. Before, the copy was handled at the same time as the first call."""
    async with FakeProxy() as proxy:
        consumer, calls, go = await _redelivered_while_in_hand(proxy, _ok)
        try:
            runtime = _runtime(consumer)
            await _copy_arrives(proxy, runtime)
            # dispatched, the copy would be queued for a worker or running by now
            assert isinstance(runtime.delivery, WorkerPool)
            assert calls == [0] and not runtime.delivery.queue
            go.set()
            with anyio.fail_after(10):  # the acks answered to the client: no event
                while runtime.acks.acked < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            assert sorted(proxy.acked) == ["rh0", "rh0b"]
            assert calls == [0]
            assert (runtime.budget.count, runtime.renewer.holding, len(runtime.in_hand)) == (
                0, 0, 0)  # fmt: skip
        finally:
            await consumer.__aexit__(None, None, None)
    assert proxy.invisible_changes == []


async def test_a_copy_delivered_while_its_handler_runs_takes_the_retry_path_when_it_fails() -> None:
    """As above, and the call fails: the copy's handle gets the retry's invisible time
    (the old handle's nack is ignored by the Proxy), the message handled once."""
    async with FakeProxy() as proxy:
        consumer, calls, go = await _redelivered_while_in_hand(proxy, _fail)
        try:
            runtime = _runtime(consumer)
            await _copy_arrives(proxy, runtime)
            go.set()
            await _all_settled(runtime)
            assert calls == [0]
        finally:
            await consumer.__aexit__(None, None, None)
    changes = dict(proxy.invisible_changes)
    assert set(changes) == {"rh0", "rh0b"} and changes["rh0b"] > 0
    assert proxy.acked == []


async def test_a_copy_delivered_while_the_retry_is_asked_waits_the_retry_delay() -> None:
    """The handler asks for its message back in 30 s (``Reconsume(delay=30)``); while
    that nack (ChangeInvisibleDuration) is in flight the Proxy hands the message out
    again (it released it: NotifyClientTermination; simulator grpc_receive seed 94,
    ``retry_after_delay``). The copy is not handled at once: it gets the retry's 30 s
    too. Before, it was dispatched (the message counted as settled once its nack began)
    and handled again 30 s early."""
    calls: list[int] = []

    async def handle(msg: ConsumerMessage) -> Reconsume:
        calls.append(msg.reconsume_times)
        return Reconsume(delay=30)

    async with FakeProxy() as proxy:
        proxy.change_gate = asyncio.Event()
        consumer = _one_message_consumer(proxy, handle)
        await consumer.__aenter__()
        try:
            runtime = _runtime(consumer)
            with anyio.fail_after(10):
                while "ChangeInvisibleDuration" not in proxy.calls:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            await _copy_arrives(proxy, runtime)
            proxy.change_gate.set()
            await _all_settled(runtime)
            assert calls == [0]
        finally:
            await consumer.__aexit__(None, None, None)
    assert sorted(proxy.invisible_changes) == [("rh0", 30.0), ("rh0b", 30.0)]
    assert proxy.acked == []


async def test_the_close_releases_a_copy_with_the_message_whose_handler_it_cut() -> None:
    """The close cuts the handler of a message delivered again meanwhile: both handles
    are made visible again at once, none acked."""
    async with FakeProxy() as proxy:
        consumer, calls, _ = await _redelivered_while_in_hand(proxy, _ok, shutdown_timeout=0.1)
        try:
            await _copy_arrives(proxy, _runtime(consumer))
        finally:
            await consumer.__aexit__(None, None, None)
    assert calls == [0] and proxy.acked == []
    assert sorted(proxy.invisible_changes) == [("rh0", 0.0), ("rh0b", 0.0)]


async def test_more_receives_go_out_while_the_consumer_is_behind_and_park_after() -> None:
    """Issue 43, goal 5: receives that come back full mean messages wait beyond them;
    the extra receive loops then receive beside the two, up to 8 out in all, and park
    again once a receive comes back short. Before, two receives of a batch each bounded
    the rate (two of 32 through a Proxy answering in ~10 ms: 6,400/s), so the backlog of
    a stall at 5,000/s drained at the spare fifth while every message behind it waited."""
    handled: list[str] = []
    done = anyio.Event()
    count = 120

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.msg_id)
        if len(handled) == count:
            done.set()

    async with FakeProxy() as proxy:
        proxy.receive_delay = 0.05
        proxy.messages = [_message(i) for i in range(count)]
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5,
                            pull_batch_size=8)  # fmt: skip
        consumer.subscribe("t")
        async with consumer:
            with anyio.fail_after(10):
                await done.wait()
            receiver = _runtime(consumer).receiver
            assert proxy.max_receives_in_flight == 8  # 2 + 6 while behind
            # Caught up: the extra loops park (one may still send the receive it had
            # begun while behind), so six receives in a row go out two at a time.
            with anyio.fail_after(10):
                while True:
                    proxy.max_receives_in_flight = 0
                    seen = len(proxy.receive_attempts)
                    while len(proxy.receive_attempts) < seen + 6:  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # no event to wait on
                    if proxy.max_receives_in_flight <= 2:
                        break
            assert not receiver.behind
        assert sorted(handled) == sorted(f"id{i}" for i in range(count))


@pytest.mark.usefixtures("mid_stream")
async def test_a_receives_first_messages_reach_the_handler_before_its_stream_ends() -> None:
    """Issue 43, goal 5: the Proxy writes a receive's batch message by message; its
    first message is handed on as soon as it is read, not after the stream's end (the
    split's ``stream`` part, benchmarks/README.md). The fake holds the rest of the batch
    until the first one's handler ran: before, the consumer waited for the stream's end,
    so nothing was handled."""
    handled: list[str] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.msg_id)
        assert proxy.stream_gate is not None
        proxy.stream_gate.set()  # the rest of the batch comes only now
        if len(handled) == 4:
            done.set()

    async with FakeProxy() as proxy:
        proxy.stream_gate = asyncio.Event()
        proxy.messages = [_message(i) for i in range(4)]
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            with anyio.fail_after(5):
                await done.wait()
            with anyio.fail_after(5):
                while len(proxy.acked) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # no event to wait on
    assert handled == ["id0", "id1", "id2", "id3"]  # in order, each once
    assert sorted(proxy.acked) == ["rh0", "rh1", "rh2", "rh3"]
    assert proxy.invisible_changes == []  # nothing released


@pytest.mark.usefixtures("mid_stream")
async def test_a_message_handed_on_mid_stream_is_settled_once_when_the_close_cuts_the_stream() -> (
    None
):
    """At-least-once with early hand-on: the consumer closes while a receive's stream
    still waits for the rest of its batch; the message already handed on is handled and
    acked (not released as a cut receive's messages are), the receive is cancelled, and
    nothing the client got is left unsettled."""
    handled: list[str] = []
    first = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.msg_id)
        first.set()

    async with FakeProxy() as proxy:
        proxy.stream_gate = asyncio.Event()  # never set: the rest never comes
        proxy.messages = [_message(i) for i in range(3)]
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        with anyio.fail_after(10):
            async with consumer:
                await first.wait()
    assert handled == ["id0"]
    assert proxy.acked == ["rh0"]
    assert proxy.invisible_changes == []


@pytest.mark.usefixtures("mid_stream")
async def test_a_failure_handing_on_mid_stream_is_the_receives_error() -> None:
    """The messages read before the stream's end are handed on from a loop callback;
    what that hand-on raises fails the receive (as when the receive handed them on
    itself), not only the loop's exception handler's log."""
    chunks: list[list[str]] = []

    def early(chunk: list[PopMessage]) -> None:
        chunks.append([m.message_id for m in chunk])
        if len(chunks) == 1:  # the first read's, from the loop callback
            raise RuntimeError("hand-on failed")

    async with FakeProxy() as proxy:
        proxy.stream_gate = asyncio.Event()
        proxy.messages = [_message(i) for i in range(3)]
        source = GrpcSource(SimpleConsumer("g", proxy.endpoint, {"t": "*"}), LOG)
        await source.open()
        try:
            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:

                    async def open_gate() -> None:
                        while not chunks:  # noqa: ASYNC110
                            await anyio.sleep(0.01)  # no event to wait on
                        assert proxy.stream_gate is not None
                        proxy.stream_gate.set()

                    tg.start_soon(open_gate)
                    with pytest.raises(RuntimeError, match="hand-on failed"):
                        await source.receive(32, 30, early)
        finally:
            await source.close()
    assert chunks[0] == ["id0"]  # handed on before the rest came


@pytest.mark.usefixtures("mid_stream")
def test_a_fifo_groups_first_message_handed_on_mid_stream_starts_its_loop_under_asyncio_run() -> (
    None
):
    """A FIFO group's first message, handed on mid-stream, starts the group's consume
    loop (``Orderly.start_queue``: a task group's ``start_soon``), which needs anyio to
    find the running library. 5f6532c handed it on from a loop callback, outside any
    task: ``anyio.run`` names the library in the context its tasks copy, ``asyncio.run``
    (an application's usual entry, and the simulator's) does not, and the hand-on raised
    NoEventLoopError (the receive's error since 4a1399d: the consumer failed; before,
    the loop's log only, and the group's messages stayed unhandled in the buffer).
    18020de ran the callback in a context naming asyncio; the hand-on now runs in the
    receive's task (``SimpleConsumer.receive``'s ``idle``)."""

    async def main() -> list[str]:
        handled: list[str] = []
        done = anyio.Event()

        async def handle(msg: ConsumerMessage) -> None:
            handled.append(msg.msg_id)
            assert proxy.stream_gate is not None
            proxy.stream_gate.set()  # the rest of the batch comes only now
            if len(handled) == 4:
                done.set()

        async with FakeProxy() as proxy:
            proxy.fifo = True
            proxy.stream_gate = asyncio.Event()
            proxy.messages = [_message(i) for i in range(4)]
            for m in proxy.messages:
                m.system_properties.message_group = "g1"
            consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
            consumer.subscribe("t")
            async with consumer:
                with anyio.fail_after(5):
                    await done.wait()
        return handled

    assert asyncio.run(main()) == ["id0", "id1", "id2", "id3"]  # in order, each once


async def test_a_receive_cut_by_the_close_releases_what_it_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At-least-once, explicitly: the consumer closes while a receive's stream still waits
    for the rest of its batch (messages handed on at the stream's end, the default); the
    message it read is released (visible again at once), not left to its invisible time
    nor to a Proxy renewing it for this client until the session ends."""
    read = anyio.Event()
    original = _fast.decode_message

    def decode_message(*args: Any) -> Any:  # the receive's stream decodes a message
        read.set()
        return original(*args)

    monkeypatch.setattr(_fast, "decode_message", decode_message)
    handled: list[str] = []

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.msg_id)

    async with FakeProxy() as proxy:
        proxy.stream_gate = asyncio.Event()  # never set: the rest never comes
        proxy.messages = [_message(i) for i in range(3)]
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        with anyio.fail_after(10):
            async with consumer:
                await read.wait()
    assert handled == []
    assert [(h, d) for h, d in proxy.invisible_changes if h == "rh0"] == [("rh0", 0.0)]
