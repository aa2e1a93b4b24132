"""The gRPC auto-batcher's rules, with a scripted send in place of the Proxy."""

from __future__ import annotations

import math
import time

import anyio
import pytest

from aiorocket.client.results import SendResult, SendStatus
from aiorocket.errors import ClientClosedError, ProxyResponseError
from aiorocket.grpc._batcher import GrpcBatcher, Wanted
from aiorocket.grpc._convert import Outgoing
from aiorocket.message import MessageQueue

pytestmark = pytest.mark.anyio
INF = math.inf


def outgoing(topic: str, i: int) -> Outgoing:
    return Outgoing(topic=topic, namespace="", user_properties={}, tag=None, keys=[],
                    message_id=f"id{i}", message_type=1, born_ms=0, born_host="h",
                    message_group=None, delivery_ms=None, body=b"x")  # fmt: skip


class Proxy:
    """Records each request's message ids; a request waits for ``release`` when held."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        self.hold = False
        self.release = anyio.Event()
        self.fail: Exception | None = None
        self.deadlines: list[float] = []

    async def send(self, wanted: Wanted, topic: str) -> list[SendResult]:
        outs, deadline = wanted()
        self.requests.append([o.message_id for o in outs])
        self.deadlines.append(deadline)
        if self.hold:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        mq = MessageQueue(topic, "", -1)
        return [SendResult(SendStatus.SEND_OK, o.message_id, mq, i) for i, o in enumerate(outs)]


async def test_alone_a_message_goes_at_once_and_under_load_messages_share_requests() -> None:
    proxy = Proxy()
    async with anyio.create_task_group() as tg:
        batcher = GrpcBatcher(proxy.send, tg, max_bytes=10_000, in_flight=1)
        first = await batcher.send(outgoing("t", 0), 100, INF)  # nothing else: no waiting
        assert first.msg_id == "id0" and proxy.requests == [["id0"]]
        proxy.hold = True
        results: dict[str, SendResult] = {}

        async def send(i: int) -> None:
            results[f"id{i}"] = await batcher.send(outgoing("t", i), 100, INF)

        async with anyio.create_task_group() as senders:
            for i in range(1, 12):
                senders.start_soon(send, i)
            await anyio.wait_all_tasks_blocked()
            assert [len(r) for r in proxy.requests] == [1, 1]  # the others queue behind it
            proxy.release.set()
    assert [len(r) for r in proxy.requests] == [1, 1, 10]
    assert sorted(proxy.requests[1] + proxy.requests[2]) == sorted(f"id{i}" for i in range(1, 12))
    assert {k: r.msg_id for k, r in results.items()} == {f"id{i}": f"id{i}" for i in range(1, 12)}
    assert (batcher.batches, batcher.batched_messages) == (3, 12)


async def test_a_request_holds_at_most_max_bytes_and_topics_do_not_mix() -> None:
    proxy = Proxy()
    proxy.hold = True
    async with anyio.create_task_group() as tg:
        batcher = GrpcBatcher(proxy.send, tg, max_bytes=250, in_flight=1)
        async with anyio.create_task_group() as senders:
            for i in range(7):
                senders.start_soon(batcher.send, outgoing("a" if i < 6 else "b", i), 100, INF)
            await anyio.wait_all_tasks_blocked()
            proxy.release.set()
    sent = [i for r in proxy.requests for i in r]
    assert sorted(sent) == sorted(f"id{i}" for i in range(7))  # each once
    assert all(len(r) <= 2 for r in proxy.requests)  # 100 + 100 <= 250 < 300
    assert ["id6"] in proxy.requests  # topic b's one message: never with topic a's
    assert len(proxy.requests) == 1 + 1 + 3  # a: one alone, then 5 in pairs; b: alone


async def test_a_failed_request_fails_each_of_its_messages() -> None:
    proxy = Proxy()
    proxy.hold, proxy.fail = True, ProxyResponseError(50001, "boom", rpc="SendMessage")
    errors: list[BaseException] = []

    async def send(i: int) -> None:
        try:
            await batcher.send(outgoing("t", i), 10, INF)
        except ProxyResponseError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        batcher = GrpcBatcher(proxy.send, tg, max_bytes=1000, in_flight=1)
        async with anyio.create_task_group() as senders:
            for i in range(4):
                senders.start_soon(send, i)
            await anyio.wait_all_tasks_blocked()
            proxy.release.set()
    assert len(errors) == 4 and [len(r) for r in proxy.requests] == [1, 3]


async def test_a_cancelled_waiting_send_is_never_sent_and_close_fails_the_rest() -> None:
    proxy = Proxy()
    proxy.hold = True
    outcome: dict[str, str] = {}

    async def send(i: int) -> None:
        try:
            await batcher.send(outgoing("t", i), 10, INF)
        except ClientClosedError as exc:
            outcome[f"id{i}"] = str(exc)

    async with anyio.create_task_group() as callers:
        async with anyio.create_task_group() as tg:  # the producer's
            batcher = GrpcBatcher(proxy.send, tg, max_bytes=1000, in_flight=1)
            callers.start_soon(send, 0)
            await anyio.wait_all_tasks_blocked()
            with anyio.move_on_after(0.01):  # waits behind id0, then gives up
                await batcher.send(outgoing("t", 1), 10, INF)
            callers.start_soon(send, 2)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()  # the producer closes: id0 in flight, id2 waiting
        batcher.fail_waiting()
    assert proxy.requests == [["id0"]]  # id1 left the queue; id2 never went
    assert "answer" in outcome["id0"] and "never" not in outcome["id0"]
    assert "before the message was sent" in outcome["id2"]


async def test_a_request_runs_until_the_latest_deadline_of_its_callers() -> None:
    # Issue 39, item 7: under the earliest, a send with a long timeout failed with the
    # shortest timeout of the sends it shared a request with.
    proxy = Proxy()
    now = time.monotonic()
    async with anyio.create_task_group() as tg:
        batcher = GrpcBatcher(proxy.send, tg, max_bytes=1000, in_flight=1)
        proxy.hold = True
        async with anyio.create_task_group() as senders:
            senders.start_soon(batcher.send, outgoing("t", 0), 10, now + 500)
            await anyio.wait_all_tasks_blocked()  # id0 alone; the others queue behind it
            for i, deadline in ((1, 300), (2, 100), (3, 200)):
                senders.start_soon(batcher.send, outgoing("t", i), 10, now + deadline)
            await anyio.wait_all_tasks_blocked()
            proxy.release.set()
    assert [sorted(r) for r in proxy.requests] == [["id0"], ["id1", "id2", "id3"]]
    assert proxy.deadlines == [now + 500, now + 300]
