"""Workload: the producer over gRPC against ``SimProducerProxy`` (asyncio): senders with
timeouts of their own, auto-batched or not; FIFO sends of message groups; transactions
with the application of ``producer_txn`` (its database, local transaction and checker)
answered through the Proxy's orphaned-transaction recovery; a Proxy restart at a random
point (every session and its settings lost), after which the producer must send and
answer recoveries again; a crash of the producer at a random point, after which a
second producer of the group answers the recoveries.

Judged as the remoting producer workloads: ``stored_as_sent``, ``send_reported_truly``,
``deadline_kept``, ``order_per_key`` (per message group), ``txn_outcome``,
``checks_answered_truly``, ``typed_errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._extras import needs_extra
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.sim._client import record_error
from aiorocket.testing.sim.producer_sends import SendLog, app_scope
from aiorocket.testing.sim.producer_txn import GROUP, TxnApp
from aiorocket.testing.sim.remoting import TOPIC

with needs_extra("grpc", "aiorocket.testing.sim.grpc_producer (the gRPC producer workload)"):
    from aiorocket.testing.sim.grpc_workload import RECONNECT
    from aiorocket.testing.sim.producer_proxy import (
        CHECK_INTERVAL,
        CHECK_MAX,
        TXN_TIMEOUT,
        SimProducerProxy,
    )

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["grpc_producer"]

TIMEOUT = 4.0
RESOLVE = TXN_TIMEOUT + (CHECK_MAX + 2) * CHECK_INTERVAL


async def grpc_producer(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    p = schedule.params
    log = SendLog(history)
    app = TxnApp(schedule, history)
    restart = next((f.args for f in schedule.of("proxy_restart")), None)
    crash = next((f.args["seconds"] for f in schedule.of("crash_at")), None)
    proxy = SimProducerProxy(schedule, history)
    proxy.half_open_info["within"] = RECONNECT
    async with proxy:
        producer = Producer(GROUP, proxy=proxy.endpoint, auto_batch=p["auto_batch"],
                            send_timeout=TIMEOUT, transaction_checker=app.check,
                            topics=[TOPIC], request_timeout=2.0,
                            batch_in_flight=p["batch_in_flight"])  # fmt: skip

        def cancel_after(key: str) -> anyio.CancelScope:
            return app_scope(app.cancels, key)

        async def plain(s: int) -> None:
            timeout = p["timeouts"][s]
            for n in range(p["per_sender"]):
                key = f"p{s}-{n}"
                body, started = key.encode(), history.now()
                try:
                    with cancel_after(key) as scope:
                        result = await producer.send(Message(TOPIC, body, keys=[key]),
                                                     timeout=timeout)  # fmt: skip
                except Exception as exc:
                    log.failed(key, exc, started, timeout)
                else:
                    if not log.cancelled(key, scope, started):
                        log.ok(key, body, result, started=started, timeout=timeout)

        async def fifo(g: int) -> None:
            for seq in range(p["per_group"]):
                key = f"o{g}-{seq}"
                body, started = key.encode(), history.now()
                try:
                    with cancel_after(key) as scope:
                        result = await producer.send(Message(TOPIC, body, keys=[key]),
                                                     sharding_key=f"group-{g}")  # fmt: skip
                except Exception as exc:
                    log.failed(key, exc, started, TIMEOUT, okey=g, seq=seq)
                else:
                    if not log.cancelled(key, scope, started):
                        log.ok(key, body, result, started=started, timeout=TIMEOUT, okey=g,
                               seq=seq)  # fmt: skip

        async def txns() -> None:
            for i in range(p["txns"]):
                await app.send(producer, f"t-{i}")

        async def restarter() -> None:
            if restart is not None:
                await anyio.sleep(restart["seconds"])
                history.add("note", "", what="proxy restart", down=restart["down"])
                await proxy.restart_after(restart["down"])

        async def resolved() -> None:
            with anyio.move_on_after(RESOLVE + 3.0):
                while proxy.unresolved():  # noqa: ASYNC110  (the Proxy's truth)
                    await asyncio.sleep(0.1)

        async with anyio.create_task_group() as server:
            server.start_soon(proxy.recover)
            server.start_soon(restarter)
            try:
                async with producer:
                    with anyio.move_on_after(crash if crash is not None else 1e9):
                        async with anyio.create_task_group() as tg:
                            for s in range(p["senders"]):
                                tg.start_soon(plain, s)
                            for g in range(p["groups"]):
                                tg.start_soon(fifo, g)
                            tg.start_soon(txns)
                        await resolved()
                    history.add("close_start", "")
            except Exception as exc:
                record_error(history, exc, "producer")
            history.add("close_end", "")
            if crash is not None:
                app.crashed()
            for _ in range(5):  # a second member of the group answers the rest
                if not proxy.unresolved():
                    break
                second = Producer(GROUP, proxy=proxy.endpoint, transaction_checker=app.check,
                                  topics=[TOPIC])  # fmt: skip
                try:
                    async with second:
                        await resolved()
                except Exception as exc:  # the Proxy is still away: start it again soon
                    record_error(history, exc, "second producer")
                    await anyio.sleep(1.0)
            server.cancel_scope.cancel()
        for half in proxy.unresolved():
            history.add("txn_unresolved", half.key)
        app.record()
        history.add("end")
