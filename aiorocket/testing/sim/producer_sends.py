"""Workload: the remoting producer's sends against ``SimSendCluster``: ordered sends
(a sharding key, or a queue selector) and plain senders each with a timeout of its own
(0.5-5 s), auto-batched or not, through ``send`` and ``start_send``, all at once.

Each send's report (``send_ok`` with where the result says it landed, or
``send_failed`` with its error and time) is held by the checker against the brokers'
truth (``send_stored``): stored exactly as sent where reported, not stored when
reported failed early, in order per key, within its own deadline (from its turn, with
a drawn ``max_rate``: ``send_rate.Turns``; each arrival at a broker is then recorded,
``send_arrived``, for ``send_rate_within_limit``).

``producer_sends_full`` (``nemesis.FULL``, ``producer_draws.draw_full``) adds full
senders: 48-64 tasks each keeping one ``start_send`` of a 1 KiB body under way, with
``max_in_flight`` as many, so that requests of 32 fill while every slot is taken (the
auto-batcher's turn, ``_TopicLane.turn``); all of them cancelled at once
(``full_cancel``), or the producer closed under every sender (``full_close``), after a
drawn number of their outcomes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.errors import BrokerStalledError, ConnectionClosedError, RequestTimeoutError
from aiorocket.message import Message, MessageQueue
from aiorocket.producer import Producer
from aiorocket.testing.sim._client import client_tasks, record_error
from aiorocket.testing.sim.producer_broker import SimSendCluster
from aiorocket.testing.sim.remoting import TOPIC
from aiorocket.testing.sim.send_rate import send_turns

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["SendLog", "app_scope", "producer_sends"]

#: the producer's default send timeout (virtual seconds)
TIMEOUT = 5.0


def app_scope(cancels: dict[str, float], key: str) -> anyio.CancelScope:
    """The application's own scope around a send: cancelled after the drawn time
    (``cancels``: key -> seconds, from ``send_cancel``)."""
    return anyio.move_on_after(cancels.get(key, math.inf))


class SendLog:
    """Writes a send's outcome to the history, as the checker reads it."""

    def __init__(self, history: History) -> None:
        self.history = history

    def ok(self, key: str, body: bytes, result: Any, *, started: float, timeout: float,
           **info: Any) -> None:  # fmt: skip
        queue = result.queue
        self.history.add("send_ok", key, broker=queue.broker_name, queue=queue.queue_id,
                         offset=result.queue_offset, msg_id=result.msg_id,
                         crc=zlib.crc32(body), elapsed=self.history.now() - started,
                         timeout=timeout, **info)  # fmt: skip

    def cancelled(self, key: str, scope: anyio.CancelScope, started: float) -> bool:
        """A send the application cancelled (its scope's deadline): no report, it may
        be stored (docs/producer.md); ``send_cancelled`` for the history."""
        if scope.cancelled_caught:
            self.history.add("send_cancelled", key, elapsed=self.history.now() - started)
        return scope.cancelled_caught

    def failed(self, key: str, exc: BaseException, started: float, timeout: float,
               **info: Any) -> None:  # fmt: skip
        # "May be stored": a closed connection, or a send abandoned at a stall whose
        # retries were refused (the stall named, the refusal its cause). A timeout says
        # so too, but only once the send's own time is up (deadline_kept).
        uncertain = isinstance(exc, ConnectionClosedError) or (
            isinstance(exc, BrokerStalledError) and exc.__cause__ is not None)
        self.history.add("send_failed", key, error=repr(exc)[:200],
                         elapsed=self.history.now() - started, timeout=timeout,
                         timed_out=isinstance(exc, RequestTimeoutError) and not uncertain,
                         uncertain=uncertain, **info)  # fmt: skip
        record_error(self.history, exc, f"send {key}")


def _body(key: str, big: bool) -> bytes:
    # a big body is compressed by the producer (compress_over, 4 KiB): stored inflated
    return key.encode() + (b"." * 6000 if big else b"")


def _full_body(key: str) -> bytes:
    # 1 KiB: 32 of them fill a request (``batch_max_bytes``, 32 KiB)
    return key.encode().ljust(1024, b".")


def _pick(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    return queues[int(arg) % len(queues)]


async def producer_sends(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    p = schedule.params
    log = SendLog(history)
    async with SimSendCluster(schedule, history, brokers=2, queues=p["queues"]) as cluster:
        cancels = {f.args["key"]: f.args["after"] for f in schedule.of("send_cancel")}

        def cancel_after(key: str) -> anyio.CancelScope:
            return app_scope(cancels, key)

        turns = send_turns(schedule, history)
        rate: dict[str, Any] = {} if turns is None else {"max_rate": turns.rate}
        full = p.get("full")  # producer_sends_full (``producer_draws.draw_full``)
        if full is not None:
            rate["max_in_flight"] = full["max_in_flight"]
        producer = Producer("sim-producers", cluster.namesrv.address, retries=p["retries"],
                            send_timeout=TIMEOUT, auto_batch=p["auto_batch"], **rate)  # fmt: skip

        def called(key: str) -> float:
            """A send is called now: when its own time starts (its turn, with max_rate)."""
            return history.now() if turns is None else turns.call(key)

        def client_tokens() -> float:
            """The producer's bucket's tokens now (a cancel at its turn's instant)."""
            return producer._rate._refill() if producer._rate is not None else 0.0

        def cancelled(key: str, scope: anyio.CancelScope, started: float) -> bool:
            if scope.cancelled_caught and turns is not None:
                turns.cancelled(key, client_tokens)
            return log.cancelled(key, scope, started)

        async def ordered(k: int) -> None:
            for seq in range(p["per_key"]):
                key = f"o{k}-{seq}"
                body, started = _body(key, False), history.now()
                kw: dict[str, Any] = ({"selector": _pick, "selector_arg": k} if p["selector"]
                                      else {"sharding_key": f"key-{k}"})  # fmt: skip
                try:
                    with cancel_after(key) as scope:
                        started = called(key)
                        result = await producer.send(Message(TOPIC, body, keys=[key]), **kw)
                except Exception as exc:
                    log.failed(key, exc, started, TIMEOUT, okey=k, seq=seq)
                else:
                    if not cancelled(key, scope, started):
                        log.ok(key, body, result, started=started, timeout=TIMEOUT, okey=k,
                               seq=seq)  # fmt: skip

        async def plain(s: int) -> None:
            timeout = p["timeouts"][s]
            for n in range(p["per_sender"]):
                key = f"p{s}-{n}"
                body, started = _body(key, n in p["big"]), history.now()
                msg = Message(TOPIC, body, keys=[key])
                if not p["start_send"][s]:
                    try:
                        with cancel_after(key) as scope:
                            started = called(key)
                            result = await producer.send(msg, timeout=timeout)
                    except Exception as exc:
                        log.failed(key, exc, started, timeout)
                    else:
                        if not cancelled(key, scope, started):
                            log.ok(key, body, result, started=started, timeout=timeout)
                    continue
                try:
                    async with anyio.create_task_group() as tg:
                        started = called(key)
                        on_result = functools.partial(log.ok, key, body, started=started,
                                                      timeout=timeout)  # fmt: skip
                        await producer.start_send(tg, msg, timeout=timeout, on_result=on_result)
                except Exception as exc:  # the failed send's task raised in tg
                    errors = getattr(exc, "exceptions", None)
                    log.failed(key, errors[0] if errors else exc, started, timeout)

        def full_ok(key: str, body: bytes, started: float, timeout: float,
                    answered: list[bool], result: Any) -> None:  # fmt: skip
            answered.append(True)
            log.ok(key, body, result, started=started, timeout=timeout)

        async def full_sender(s: int) -> None:
            """One ``start_send`` under way at a time, of a 1 KiB body: with the others,
            every slot taken and requests filled (``producer_sends_full``)."""
            assert full is not None
            timeout = 1.0 if s in full["short"] else TIMEOUT
            for n in range(full["per_sender"]):
                key = f"f{s}-{n}"
                body, started = _full_body(key), history.now()
                answered: list[bool] = []
                msg = Message(TOPIC, body, keys=[key])
                try:
                    with cancel_after(key) as scope:
                        async with anyio.create_task_group() as tg:
                            started = called(key)
                            on_result = functools.partial(full_ok, key, body, started, timeout,
                                                          answered)  # fmt: skip
                            await producer.start_send(tg, msg, timeout=timeout,
                                                      on_result=on_result)  # fmt: skip
                except anyio.get_cancelled_exc_class():  # every full sender cancelled
                    if not answered:
                        history.add("send_cancelled", key, elapsed=history.now() - started)
                    raise
                except Exception as exc:  # the failed send's task raised in tg
                    errors = getattr(exc, "exceptions", None)
                    log.failed(key, errors[0] if errors else exc, started, timeout)
                else:
                    if not answered:
                        cancelled(key, scope, started)
                finally:
                    full_outcome()

        # full_cancel, full_close: struck once ``outcomes`` full sends had their outcome
        strike = {kind: f.args["outcomes"] for kind in ("full_cancel", "full_close")
                  for f in schedule.of(kind)}  # fmt: skip
        struck = {kind: anyio.Event() for kind in strike}
        outcomes = 0

        def full_outcome() -> None:
            nonlocal outcomes
            outcomes += 1
            for kind, n in strike.items():
                if outcomes > n:
                    struck[kind].set()

        async def full_senders() -> None:
            assert full is not None
            try:
                async with anyio.create_task_group() as tg:

                    async def senders() -> None:
                        async with anyio.create_task_group() as each:
                            for s in range(full["senders"]):
                                each.start_soon(full_sender, s)
                        tg.cancel_scope.cancel()  # all done: the watch below too

                    tg.start_soon(senders)
                    if "full_cancel" in struck:  # every full sender cancelled at once
                        await struck["full_cancel"].wait()
                        tg.cancel_scope.cancel()
            finally:
                for event in struck.values():  # not struck: no more outcomes come
                    event.set()

        close = struck.get("full_close")
        try:
            async with contextlib.AsyncExitStack() as stack:
                # full_close: the producer closes under every sender, which then run in a
                # task group outside it (only then: a group would wrap the errors)
                outside = None if close is None else \
                    await stack.enter_async_context(anyio.create_task_group())  # fmt: skip
                async with producer:
                    for i in range(4):  # latencies known on both brokers
                        called(f"warm-{i}")
                        await producer.send(Message(TOPIC, f"warm-{i}".encode()))
                    async with anyio.create_task_group() as tg:
                        group = tg if outside is None else outside
                        for k in range(p["keys"]):
                            group.start_soon(ordered, k)
                        for s in range(p["senders"]):
                            group.start_soon(plain, s)
                        if full is not None:
                            group.start_soon(full_senders)
                    if close is not None:
                        await close.wait()
                    history.add("close_start", "")
                history.add("close_end", "")
        except Exception as exc:
            record_error(history, exc, "producer")
            if not history.of("close_end"):
                history.add("close_end", "")
        await anyio.sleep(5.0)  # what slow brokers still store, stored; tasks ended
        left = client_tasks()
        if left:
            history.add("tasks_left", "", count=len(left), names=sorted(set(left))[:5])
        history.add("end")
