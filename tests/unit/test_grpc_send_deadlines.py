"""A gRPC send that timed out or was cancelled is never sent again (issue 30, item 4).

Auto-batching is the default over gRPC: a message may share a request with other
callers' messages. The request runs while any of its callers waits (issue 39, item 7),
and a retry leaves out the messages whose callers have gone, so after a caller got its
``RequestTimeoutError`` or was cancelled no attempt carrying its message starts. Against
the fake Proxy, which records when each SendMessage request came and what it carried.

On a virtual clock (the simulator's ``VirtualTimeLoop``, ``time.monotonic`` the loop's:
the fake Proxy and the producer in one loop): the deadlines, hangs and delays below are
exact whatever the machine's load, and cost no wall clock.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.errors import ProxyUnavailableError, RequestTimeoutError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.sim.vloop import VirtualTimeLoop

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> object:
    return ("asyncio", {"loop_factory": VirtualTimeLoop})  # grpclib is asyncio-only


@pytest.fixture(autouse=True)
def _virtual_monotonic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer's deadlines and grpclib's read ``time.monotonic``: the loop's clock."""
    monkeypatch.setattr(time, "monotonic", anyio.current_time)


def record_send_attempts(producer: Producer) -> list[float]:
    """When each SendMessage attempt of ``producer`` starts (``time.monotonic()``), on
    the client's side: the fake Proxy's own record is when the request *arrived*, which
    on a loaded machine trails the start by tens of milliseconds (up to 80 ms measured),
    so an attempt started with 22 ms left arrived after its caller's deadline."""
    transport = producer._engine._grpc.transport  # type: ignore[union-attr]
    unary, starts = transport.unary, []

    async def recorded(rpc: str, *args: Any, **kwargs: Any) -> Any:
        if rpc == "SendMessage":
            starts.append(time.monotonic())
        return await unary(rpc, *args, **kwargs)

    transport.unary = recorded
    return starts


@pytest.mark.parametrize("auto_batch", [True, False])
async def test_no_attempt_of_a_send_starts_after_its_caller_timed_out(auto_batch: bool) -> None:
    async with FakeProxy() as proxy:
        # The session's start (the Proxy's settings) and heartbeats wait up to
        # request_timeout: 30 s, not the 0.4 s the sends' attempts get below (a starved
        # run failed its start with "no settings from the Proxy within 0.4s").
        async with Producer(
            "pg", proxy=proxy.endpoint, send_timeout=10, request_timeout=30, retries=20,
            shutdown_timeout=5, auto_batch=auto_batch,
        ) as producer:  # fmt: skip
            await producer.send(Message("t", b"warm-up"))  # the topic is declared
            producer.config.request_timeout = 0.4  # each send attempt's bound (read per attempt)
            attempts = record_send_attempts(producer)
            proxy.send_hangs = True
            with pytest.raises(RequestTimeoutError):
                # 7 attempts of 0.4 s fit; the first one's end is far from the deadline
                await producer.send(Message("t", b"late"), timeout=3.0)
            gave_up = time.monotonic()
            proxy.send_hangs = False  # a later attempt would now be stored
            # Leaving the block waits for the requests still under way (up to 5 s).
        assert len(attempts) >= 2  # it was retried while its caller waited
        assert max(attempts) <= gave_up
        # Whatever the Proxy got (and stored, if it came after the flip above) is from
        # those attempts: an attempt already under way may store its message.
        assert len(proxy.send_requests) - 1 <= len(attempts)


async def test_a_retry_of_a_shared_request_leaves_out_a_cancelled_callers_message() -> None:
    async with FakeProxy() as proxy:
        async with Producer(
            "pg", proxy=proxy.endpoint, send_timeout=10, request_timeout=0.4, retries=20,
            batch_in_flight=1,
        ) as producer:  # fmt: skip
            await producer.send(Message("t", b"warm-up"))
            proxy.send_hangs = True
            results: dict[str, str] = {}
            scopes = {"a": anyio.CancelScope(), "b": anyio.CancelScope()}

            async def send(name: str, timeout: float) -> None:
                with scopes.get(name, anyio.CancelScope()):
                    try:
                        result = await producer.send(Message("t", name.encode()), timeout=timeout)
                    except RequestTimeoutError:
                        results[name] = "timed out"
                    else:
                        results[name] = result.msg_id

            async with anyio.create_task_group() as tg:
                # x holds the topic's one request slot while a and b queue behind it.
                tg.start_soon(send, "x", 0.6)
                await proxy.wait_sends(2)
                tg.start_soon(send, "a", 10.0)
                tg.start_soon(send, "b", 10.0)
                await anyio.wait_all_tasks_blocked()
                # x's request is retried until x's deadline; a and b leave together.
                while len(proxy.send_requests[-1][1]) != 2:
                    await proxy.wait_sends(len(proxy.send_requests) + 1)
                shared = len(proxy.send_requests)
                scopes["a"].cancel()  # a's caller gives up while the attempt hangs
                proxy.send_hangs = False
            assert results == {"x": "timed out", "b": results["b"]}
            assert results["b"] != "timed out"
        after = [ids for _, ids in proxy.send_requests[shared:]]
        assert after and all(len(ids) == 1 for ids in after)  # b's retries, alone
        assert [m.body for m in proxy.sent] == [b"warm-up", b"b"]


async def test_a_send_keeps_its_own_timeout_in_a_request_shared_with_a_shorter_one() -> None:
    # Issue 39, item 7: the shared request ran under the earliest deadline of its
    # callers, so y (10 s) failed at x's 1.2 s deadline although the Proxy, merely
    # slow, answered it 0.8 s later.
    async with FakeProxy() as proxy:
        async with Producer(
            "pg", proxy=proxy.endpoint, send_timeout=10, request_timeout=5, retries=3,
            batch_in_flight=1, shutdown_timeout=5,
        ) as producer:  # fmt: skip
            await producer.send(Message("t", b"warm-up"))
            proxy.send_delay = 1.0  # every request takes 1 s
            results: dict[str, str] = {}

            async def send(name: str, timeout: float) -> None:
                try:
                    await producer.send(Message("t", name.encode()), timeout=timeout)
                except RequestTimeoutError:
                    results[name] = "timed out"
                else:
                    results[name] = "ok"

            async with anyio.create_task_group() as tg:
                tg.start_soon(send, "z", 10.0)  # holds the topic's one request slot
                await proxy.wait_sends(2)
                tg.start_soon(send, "x", 1.2)  # x and y queue, then leave together
                tg.start_soon(send, "y", 10.0)
        assert results == {"z": "ok", "x": "timed out", "y": "ok"}
        # z alone, then x and y in one request, sent once
        assert [len(ids) for _, ids in proxy.send_requests[1:]] == [1, 2]
        # x's message was in the request that was answered: stored (at-least-once: its
        # caller had given up), and sent once.
        assert sorted(m.body for m in proxy.sent) == [b"warm-up", b"x", b"y", b"z"]


@asynccontextmanager
async def _proxy_down(retries: int, auto_batch: bool) -> AsyncIterator[tuple[FakeProxy, Producer]]:
    """A producer (5 s send timeout) that sent once, and its Proxy stopped since."""
    async with FakeProxy() as proxy, Producer(
        "pg", proxy=proxy.endpoint, send_timeout=5, retries=retries, shutdown_timeout=1,
        auto_batch=auto_batch,
    ) as producer:  # fmt: skip
        await producer.send(Message("t", b"warm-up"))
        await proxy.stop()
        yield proxy, producer


@pytest.mark.parametrize("auto_batch", [True, False])
async def test_a_send_outlives_a_proxy_restart_shorter_than_its_timeout(auto_batch: bool) -> None:
    """The Proxy goes away for 0.5 s while a send with 5 s left is made: attempts that
    find it unreachable are not counted against ``retries`` and back off until the
    Proxy is back; the send is stored once. Before, its 3 attempts (retries=2) failed
    within ~30 ms with ProxyUnavailableError."""
    async with _proxy_down(2, auto_batch) as (proxy, producer):
        results: list[object] = []

        async def send() -> None:
            results.append(await producer.send(Message("t", b"during")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await anyio.sleep(0.5)  # the Proxy's down time (the fault, not a wait)
            assert not results
            await proxy.start()
        assert len(results) == 1
    assert [m.body for m in proxy.sent] == [b"warm-up", b"during"]


async def test_a_send_with_no_retries_still_fails_at_once_when_the_proxy_is_down() -> None:
    """``retries=0`` asks for one attempt: an unreachable Proxy fails it at once."""
    async with _proxy_down(0, False) as (proxy, producer):
        # At once, not backing off until the Proxy is back (it stays down) or its
        # timeout (600 s): the 60 s guard (virtual) fails a send that backs off.
        with anyio.fail_after(60), pytest.raises(ProxyUnavailableError):
            await producer.send(Message("t", b"during"), timeout=600)
        await proxy.start()
