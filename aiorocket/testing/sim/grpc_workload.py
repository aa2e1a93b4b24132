"""Workloads through the simulated Proxy (asyncio, real time): a consumer with a
handler on the gRPC receive stream, and a FIFO group consumed with ``async for``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._extras import needs_extra
from aiorocket.consumer import Consumer
from aiorocket.consumer.pop.grpc_source import RECEIVERS
from aiorocket.grpc._keepalive import DEFAULT_KEEPALIVE
from aiorocket.testing.sim._client import (
    RenewerProbe,
    SimHandler,
    cancelled_from_outside,
    record_error,
)
from aiorocket.testing.sim.features import pauser, rate_kwargs, topic_rate_kwargs

with needs_extra("grpc", "aiorocket.testing.sim.grpc_workload (the gRPC workloads)"):
    from aiorocket.testing.sim.proxy import SimProxy

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["fifo_async_for", "grpc_receive"]

GROUP, TOPIC = "sim-group", "t"
SETTINGS: dict[str, Any] = {"long_poll_timeout": 2.0, "request_timeout": 2.0,
                            "shutdown_timeout": 2.0, "consume_timeout": 10.0}  # fmt: skip
#: a silent connection to the Proxy is noticed by the keepalive when a call waits on it:
#: a receive that times out, or at the latest the next heartbeat (every 10 s), then a
#: PING unanswered (docs/grpc.md): the bound to a call on a new connection, 2 s to spare
RECONNECT = 10.0 + DEFAULT_KEEPALIVE.interval + DEFAULT_KEEPALIVE.timeout + 2
#: how long (seconds) each phase may run
PHASE = 20.0
#: how many consumers the drain (the second phase) starts at most, a second apart, while
#: each one's start fails (``_drain``)
DRAIN_STARTS = 5

Handler = Callable[[Any], Awaitable[None]]


def _held_at_close(proxy: SimProxy, history: History, name: str) -> None:
    failed: set[str] = set()
    last: dict[str, str] = {}
    for e in history.events:
        if e.kind in ("delivered", "handler_ok", "handler_failed"):
            last[e.key] = e.kind
    failed = {k for k, kind in last.items() if kind == "handler_failed"}
    now = proxy.now()
    held = [m.key for m in proxy.store if m.state == "inflight" and m.key not in failed
            and (m.auto_renew or m.visible_at > now + 1.0)]  # fmt: skip
    if held:
        history.add("held_after_close", "", keys=held, consumer=name)


async def _phase(proxy: SimProxy, history: History, handler: Handler, close_at: float | None,
                 name: str) -> bool:  # fmt: skip
    """One consumer's run (until the Proxy has everything settled, ``close_at`` or
    ``PHASE``), its close and what the Proxy holds after it; whether it started (``async
    with`` entered its body)."""
    started = False
    rate = rate_kwargs(proxy.schedule, history, name, loops=RECEIVERS)
    rate.update(topic_rate_kwargs(proxy.schedule, history, name, TOPIC, loops=1))
    consumer = Consumer(GROUP, proxy=proxy.endpoint, handler=handler, **SETTINGS, **rate)
    consumer.subscribe(TOPIC)
    probe = RenewerProbe(history, consumer, name)
    client_ids: list[str] = []

    async def application() -> None:
        nonlocal started
        try:
            async with consumer, anyio.create_task_group() as tg:
                started = True
                client_ids.append(consumer.client_id)
                if name == "first":
                    tg.start_soon(pauser, consumer, proxy.schedule, history, TOPIC, name)
                with anyio.move_on_after(close_at if close_at is not None else PHASE):
                    while not proxy.settled():  # the Proxy's truth (sampling meanwhile)
                        probe.sample()
                        await anyio.sleep(0.05)
                    await anyio.sleep(0.5)
                    probe.sample(last=True)
                tg.cancel_scope.cancel()
                history.add("close_start", "", consumer=name)
        except Exception as exc:
            record_error(history, exc, f"{name}: async with")

    await cancelled_from_outside(application, proxy.schedule, history, name)
    history.add("close_end", "", consumer=name)
    _held_at_close(proxy, history, name)
    await proxy.lag_ended()  # what the Proxy applies late, it applies now
    if proxy.registered.intersection(client_ids):
        history.add("left_behind", "", broker="sim-proxy", consumer=name,
                    kept=["listed as a consumer of the group"])  # fmt: skip
    proxy.terminate()
    return started


async def _drain(proxy: SimProxy, history: History, handler: Handler) -> None:
    """The second member, once the first closed with anything left: it consumes the
    rest. A start that fails (``async with`` raises: its first heartbeat not answered
    within the request timeout, say, its bytes held by the network, ``arrival_delay``
    with ``after`` 0 and 3 s) is tried again a second later with a new consumer, as an
    application would (``lite_workload._phase``'s, ``grpc_producer``'s second
    producer): what the Proxy still holds is not lost, only not yet consumed
    (grpc_receive_late 83026)."""
    for _ in range(DRAIN_STARTS):
        if proxy.settled() or await _phase(proxy, history, handler, None, "second"):
            return
        await anyio.sleep(1.0)


async def grpc_receive(schedule: Schedule, history: History, handler: Handler | None) -> None:
    codecs = {f.args["message"]: f.args["codec"] for f in schedule.of("compressed_as_gzip")}
    closes = [f.args["seconds"] for f in schedule.of("close_at")]
    async with SimProxy(schedule, history) as proxy:
        proxy.half_open_info["within"] = RECONNECT
        for i in range(schedule.params["messages"]):
            proxy.add(f"m-{i}", codec=codecs.get(i))
        sim_handler = SimHandler(schedule, history, handler)
        await _phase(proxy, history, sim_handler, closes[0] if closes else None, "first")
        await _drain(proxy, history, sim_handler)
        history.add("end")


async def _stop_once_settled(proxy: SimProxy, probe: RenewerProbe,
                             phase: anyio.CancelScope) -> None:  # fmt: skip
    """The application of ``fifo_async_for`` stops once the Proxy has every message
    settled: its loop cannot see that itself (its last ack is answered after it asked
    for the next message, and none comes), so it would wait out the phase."""
    while not proxy.settled():  # the Proxy's truth (sampling meanwhile)
        probe.sample()
        await anyio.sleep(0.05)
    probe.sample(last=True)
    phase.cancel()


async def _iterate(proxy: SimProxy, schedule: Schedule, history: History,
                   per_group: int) -> bool:  # fmt: skip
    """``fifo_async_for``'s consumer: ``async for`` until the Proxy has every message
    settled (or ``PHASE``), failing some with ``msg.nack()``, breaking out as drawn;
    whether it started."""
    fails = {f.args["message"]: f.args["attempts"] for f in schedule.of("iter_fail")}
    consumer = Consumer(GROUP, proxy=proxy.endpoint, **SETTINGS)
    consumer.subscribe(TOPIC)
    probe = RenewerProbe(history, consumer, "first")
    started = False
    try:
        async with consumer, anyio.create_task_group() as tg:
            started = True
            tg.start_soon(pauser, consumer, schedule, history, TOPIC, "first")
            breaks = [f.args["at"] for f in schedule.of("iter_break")]
            break_at, received = (breaks[0] if breaks else None), 0
            with anyio.move_on_after(PHASE) as phase:
                tg.start_soon(_stop_once_settled, proxy, probe, phase)
                while True:  # again after a drawn break
                    async for msg in consumer:
                        key = bytes(msg.body).decode()
                        if received == break_at:  # out, this one in hand, unsettled
                            received += 1
                            history.add("iter_break", key)
                            break
                        received += 1
                        i = int(key.split("-")[1])
                        attempt = int(getattr(msg, "delivery_attempt", 1))
                        at = {"group": f"g{i // per_group}", "seq": i % per_group,
                              "attempt": attempt}  # fmt: skip
                        history.add("handler_start", key, **at)
                        if attempt <= fails.get(i, 0):
                            history.add("handler_failed", key, **at)
                            history.add("handler_end", key, **at)
                            await msg.nack()
                            continue
                        await msg.ack()
                        history.add("handler_ok", key, **at)
                        history.add("handler_end", key, **at)
                        # done by the Proxy's truth, not once each key was handled:
                        # a copy released meanwhile (a broken receive's termination
                        # notice frees what the client held) comes again
                        if proxy.settled():
                            break
                    if proxy.settled():
                        break
            tg.cancel_scope.cancel()
            history.add("close_start", "", consumer="first")
    except Exception as exc:
        record_error(history, exc, "async for")
    history.add("close_end", "", consumer="first")
    return started


async def fifo_async_for(schedule: Schedule, history: History, handler: Handler | None) -> None:
    groups, per_group = schedule.params["groups"], schedule.params["per_group"]
    async with SimProxy(schedule, history, fifo=True) as proxy:
        proxy.half_open_info["within"] = RECONNECT
        for i in range(groups * per_group):
            proxy.add(f"m-{i}", group=f"g{i // per_group}")
        # a start that fails (``async with`` raises: the settings or the first heartbeat
        # held by the network past the request timeout, ``arrival_delay``) is tried again
        # a second later with a new consumer, as an application would (``_drain``)
        for _ in range(DRAIN_STARTS):
            if await _iterate(proxy, schedule, history, per_group) or proxy.settled():
                break
            await anyio.sleep(1.0)
        _held_at_close(proxy, history, "first")
        history.add("end")
