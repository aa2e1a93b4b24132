"""Per-message costs of the consume path's building blocks, in µs (CPU time, one process).

    .venv/bin/python benchmarks/micro.py [--n 100000]

Each line is one primitive the push consumer pays per message today, next to a cheaper
alternative, so that profile hot spots can be priced. No broker needed.
"""

from __future__ import annotations

import argparse
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.offsets import OffsetTracker
from aiorocket.protocol.message_codec import decode_messages
from aiorocket.protocol.store_record import encode_stored_message

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=N)
    sync_cases(p.parse_args().n)


if __name__ == "__main__":
    main()
