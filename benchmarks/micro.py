"""Per-message costs of the consume path's building blocks, in µs (CPU time, one process).

    .venv/bin/python benchmarks/micro.py [--n 100000]

Each line is one primitive the push consumer pays per message today, next to a cheaper
alternative, so that profile hot spots can be priced. No broker needed.

The last lines run a real Consumer's whole client-side path (pull loop, decode, work
queue, workers or ``async for``, settle, offset tracking) against a fake broker that
answers pulls from memory: everything but the network and the remoting layer, in both
modes and on both backends (``--path-only`` for just those). Being free of broker
noise, it is the figure to compare before and after a change to that path; under
``valgrind --tool=callgrind`` its instruction count is deterministic.
"""

from __future__ import annotations

import argparse
import inspect
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from aiorocket._log import get_logger
from aiorocket.client.results import PullResult, PullStatus
from aiorocket.consumer.brokers import BrokerFinder
from aiorocket.consumer.committer import AutoCommit, OffsetCommitter
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.delivery import Delivery
from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.handler import Handler
from aiorocket.consumer.iterate import Iterated
from aiorocket.consumer.membership import Membership
from aiorocket.consumer.offsets import OffsetTracker
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.puller import Puller
from aiorocket.consumer.settle import RemotingSettler
from aiorocket.consumer.state import ConsumerState
from aiorocket.consumer.threads import HandlerThreads
from aiorocket.message import MessageQueue
from aiorocket.protocol.message_codec import decode_messages
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.protocol.subscription import Subscription
from aiorocket.received import ConsumerMessage

N = 100_000


def per_op(fn: Callable[[], None], n: int) -> float:
    cpu = time.process_time()
    fn()
    return (time.process_time() - cpu) / n * 1e6


async def aper_op(fn: Callable[[], Awaitable[None]], n: int) -> float:
    cpu = time.process_time()
    await fn()
    return (time.process_time() - cpu) / n * 1e6


def show(name: str, us: float) -> None:
    print(f"{us:8.2f} µs  {name}", flush=True)


def sync_cases(n: int) -> None:
    props = {"UNIQ_KEY": "7F0000010C7F1B6B5B2A1C8B7E5A0000", "WAIT": "true", "TAGS": "t"}
    record = encode_stored_message("bench_topic", b"x" * 1024, props, born_host="127.0.0.1:5555")
    body = record * 32  # one pull of 32 messages
    pulls = n // 32

    def decode() -> None:
        for _ in range(pulls):
            decode_messages(body, broker_name="broker-a", message_class=ConsumerMessage)

    show("decode_messages, per message (32 x 1 KiB per pull)", per_op(decode, pulls * 32))

    async def handler(msg: object) -> None:
        return None

    def check() -> None:
        for _ in range(n):
            inspect.iscoroutinefunction(handler)

    show("inspect.iscoroutinefunction(handler) (if done per message)", per_op(check, n))

    def event() -> None:
        for _ in range(n):
            anyio.Event()

    def track() -> None:
        t = OffsetTracker(0)
        for base in range(0, n, 32):
            t.add(list(range(base, base + 32)), base + 32)
            for o in range(base, base + 32):
                t.done(o, 0)

    anyio.run(lambda: _in_loop(event, track, n))


async def _in_loop(event: Callable[[], None], track: Callable[[], None], n: int) -> None:
    show("anyio.Event() creation", per_op(event, n))
    show("OffsetTracker add (per msg, batches of 32) + done", per_op(track, n))

    async def clock() -> None:
        for _ in range(n):
            anyio.current_time()

    show("anyio.current_time() (sniffio backend lookup each call)", await aper_op(clock, n))

    async def noop() -> None:
        return None

    async def awaits() -> None:
        for _ in range(n):
            await noop()

    show("await of a trivial coroutine (e.g. settle's success path)", await aper_op(awaits, n))

    async def scopes() -> None:
        for _ in range(n):
            with anyio.move_on_after(900):  # noqa: ASYNC100
                pass

    show("anyio.move_on_after(consume_timeout) enter+exit (per message)", await aper_op(scopes, n))

    async def bare_scope() -> None:
        for _ in range(n):
            with anyio.CancelScope():  # noqa: ASYNC100
                pass

    show("anyio.CancelScope() without deadline enter+exit", await aper_op(bare_scope, n))

    async def checkpoints() -> None:
        for _ in range(n):
            await anyio.lowlevel.checkpoint()

    show("await anyio.lowlevel.checkpoint() (a loop round trip)", await aper_op(checkpoints, n))

    send, recv = anyio.create_memory_object_stream[list[int]](float("inf"))

    async def stream() -> None:
        for i in range(n):
            send.send_nowait([i])
            await recv.receive()

    show("memory stream send_nowait([m]) + await receive()", await aper_op(stream, n))

    async def stream_nowait() -> None:
        for i in range(n):
            send.send_nowait([i])
            recv.receive_nowait()

    show("memory stream send_nowait([m]) + receive_nowait()", await aper_op(stream_nowait, n))

    q: deque[int] = deque()

    async def plain_deque() -> None:
        for i in range(n):
            q.append(i)
            q.popleft()

    show("deque append + popleft (alternative hand-off)", await aper_op(plain_deque, n))

    async def task_each() -> None:
        async def nop() -> None:
            return None

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(nop)

    show("a task per message (tg.start_soon + run)", await aper_op(task_each, n))


class _FakeRoute:
    def master_addr(self, broker_name: str) -> str:
        return "127.0.0.1:10911"

    def find_addr(
        self, broker_name: str, broker_id: int = 0, *, only_this: bool = False
    ) -> tuple[str, int]:
        return "127.0.0.1:10911", 0


class _FakeBroker:
    """Answers pulls from pre-encoded records: the whole client-side consume path runs."""

    def __init__(self, topic: str, per_queue: int, size: int) -> None:
        props = {"UNIQ_KEY": "7F0000010C7F1B6B5B2A1C8B7E5A0000", "WAIT": "true"}
        body = b"x" * size
        self.chunks: dict[tuple[int, int], bytes] = {}
        for qid in range(_QUEUES):
            # One encoded record patched per offset (QUEUEOFFSET is at byte 20): cheap
            # enough that building the data barely counts next to consuming it.
            record = bytearray(
                encode_stored_message(topic, body, props, queue_id=qid, born_host="127.0.0.1:5555")
            )
            for base in range(0, per_queue, 32):
                chunk = bytearray()
                for o in range(base, min(base + 32, per_queue)):
                    struct.pack_into(">q", record, 20, o)
                    chunk += record
                self.chunks[qid, base] = bytes(chunk)
        self.end = per_queue

    async def pull(self, addr: str, group: str, mq: MessageQueue, offset: int, **kw: Any) -> Any:
        await anyio.lowlevel.checkpoint()  # a pull is at least one loop round trip
        chunk = self.chunks.get((mq.queue_id, offset))
        if chunk is None:
            await anyio.sleep_forever()
        messages = decode_messages(
            chunk, broker_name=mq.broker_name, message_class=kw["message_class"],
            stamp=kw.get("stamp"),
        )
        return PullResult(PullStatus.FOUND, messages[-1].queue_offset + 1, 0, self.end, messages)


class _FakeNamesrv:
    def cached_route(self, topic: str) -> _FakeRoute:
        return _FakeRoute()


class _NoOffsets:
    async def read(self, mq: MessageQueue) -> int | None:
        return None

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        return None

    async def flush(self) -> None:
        return None


_QUEUES = 8


async def consume_path(n: int, mode: str, size: int = 1024) -> float:
    """CPU µs per message of pull -> decode -> dispatch -> handler -> settle, no network."""
    topic = "bench_topic"
    count = 0
    done = anyio.Event()

    async def handler(msg: ConsumerMessage) -> None:
        nonlocal count
        count += 1
        if count == total:
            done.set()

    per_queue = n // _QUEUES
    total = per_queue * _QUEUES
    # The engine's real parts around a broker that answers from memory.
    log = get_logger("bench")
    state = ConsumerState("bench_group", ConsumerConfig(), log)
    sub = Subscription(topic)
    state.subscriptions[topic] = sub
    broker: Any = _FakeBroker(topic, per_queue, size)
    namesrv: Any = _FakeNamesrv()
    finder = BrokerFinder(namesrv)
    store: Any = _NoOffsets()
    commits = AutoCommit(state, OffsetCommitter(store, log, bound=5.0), store)
    settler = RemotingSettler(state, broker, finder, lambda msg, after: None)
    delivery: Delivery
    iterated: Iterated | None = None
    if mode == "handler":
        threads = HandlerThreads(concurrency=20, max_abandoned=4, log=log)
        delivery = WorkerPool(
            state, Handler(handler, batch=False, threads=threads, state=state), settler
        )
    else:
        delivery = iterated = Iterated(state, settler)
    membership = Membership(state, "bench", broker, namesrv)
    puller = Puller(
        state, broker, finder, membership, settler, delivery.deliver, commits, needs_lock=False
    )
    cpu = time.process_time()
    async with anyio.create_task_group() as tg:
        await delivery.start(tg)
        for qid in range(_QUEUES):
            pq = ProcessQueue(MessageQueue(topic, "broker-a", qid), 0)
            state.process_queues[pq.mq] = pq
            await tg.start(puller.run, pq, sub)
        if iterated is None:
            await done.wait()
        else:
            async for _ in iterated.messages():
                count += 1
                if count == total:
                    break
        used = time.process_time() - cpu
        tg.cancel_scope.cancel()
    return used / total * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=N)
    p.add_argument("--path-only", action="store_true", help="only the no-broker consume path")
    a = p.parse_args()
    if not a.path_only:
        sync_cases(a.n)
    for backend in ("asyncio", "trio"):
        for mode in ("handler", "iter"):
            us = anyio.run(consume_path, a.n, mode, backend=backend)
            show(f"consume path, no broker: {mode} mode, {backend} (pull..settle)", us)


if __name__ == "__main__":
    main()
