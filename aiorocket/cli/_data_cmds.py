"""``aiorocket produce|tail|bench``: sending and reading messages, with progress and rates."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import anyio
import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from aiorocket.admin import TOOLS_GROUP, Admin
from aiorocket.cli._common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    Settings,
    err,
    fail,
    json_option,
    out,
    pass_settings,
    print_json,
    run,
)
from aiorocket.cli._reader import PullFailures, reader
from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.errors import GroupNotFoundError
from aiorocket.message import Message
from aiorocket.producer import Producer


def progress_bar(transient: bool = False) -> Progress:
    """A rich progress bar on stderr with count and rate; silent when stderr is no TTY."""
    return Progress(
        TextColumn("{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]:>10} msg/s"),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
        disable=not err.is_terminal,
    )


class Meter:
    """A progress task that also tracks its rate (for the bar and the summary)."""

    def __init__(self, progress: Progress, label: str, total: int | None) -> None:
        self.progress, self.done = progress, 0
        self.start = time.perf_counter()
        self.task = progress.add_task(label, total=total, rate="-")

    def advance(self, n: int = 1) -> None:
        self.done += n
        self.progress.update(self.task, advance=n, rate=f"{self.rate:,.0f}")

    @property
    def elapsed(self) -> float:
        return max(time.perf_counter() - self.start, 1e-9)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def summary(self) -> dict[str, Any]:
        return {
            "messages": self.done,
            "seconds": round(self.elapsed, 3),
            "rate": round(self.rate, 1),
        }


# -- produce -------------------------------------------------------------------------------


def _bodies(args: tuple[str, ...], file: IO[bytes] | None) -> list[bytes]:
    if args:
        return [a.encode() for a in args]
    stream: Any = file if file is not None else sys.stdin.buffer
    lines = [
        line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n").encode()
        for line in stream
    ]
    return [line for line in lines if line]


def _properties(pairs: tuple[str, ...]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--property")
        props[k] = v
    return props


@click.command()
@click.argument("topic")
@click.argument("bodies", nargs=-1)
@click.option(
    "--file",
    "-f",
    type=click.File("rb"),
    help="Send each line of this file ('-': stdin). Without bodies or --file, stdin is read.",
)
@click.option("--tag", help="The message tag.")
@click.option("--key", "keys", multiple=True, help="A message key (repeatable).")
@click.option("--property", "-p", "props", multiple=True, help="KEY=VALUE (repeatable).")
@click.option(
    "--delay",
    type=click.FloatRange(min=0, min_open=True),
    help="Deliver after this many seconds (5.x timer).",
)
@click.option(
    "--delay-level",
    type=click.IntRange(0, 18),
    default=0,
    help="Deliver after this delay level (1..18).",
)
@click.option(
    "--count",
    "-c",
    type=click.IntRange(1),
    help="Send this many messages, cycling through the bodies (default: each body once).",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    help="At most this many messages per second.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    default=32,
    show_default=True,
    help="Sends in flight (without --rate).",
)
@click.option("--group", default="aiorocket-cli", show_default=True, help="Producer group.")
@json_option
@pass_settings
def produce(
    settings: Settings,
    topic: str,
    bodies: tuple[str, ...],
    file: IO[bytes] | None,
    tag: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    delay: float | None,
    delay_level: int,
    count: int | None,
    rate: float | None,
    concurrency: int,
    group: str,
    as_json: bool,
) -> None:
    """Send messages: the BODIES given, or the lines of --file or stdin."""
    namesrv = settings.addrs
    payloads = _bodies(bodies, file)
    if not payloads:
        fail("nothing to send: give bodies, --file or lines on stdin", EXIT_USAGE)
    properties = _properties(props)
    total = count or len(payloads)
    deliver_ms = None if delay is None else int((time.time() + delay) * 1000)

    def messages() -> Iterator[Message]:
        for body in itertools.islice(itertools.cycle(payloads), total):
            yield Message(
                topic,
                body,
                tags=tag,
                keys=list(keys),
                properties=dict(properties),
                delay_level=delay_level,
                deliver_time_ms=deliver_ms,
            )

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        results: list[dict[str, Any]] = []
        source = messages()
        workers = 1 if rate else min(concurrency, total)
        async with Producer(group, namesrv, auto_batch=total > 1) as producer:
            with progress_bar() as progress:
                meter = Meter(progress, "produce", total)

                async def sender() -> None:
                    for msg in source:
                        if rate:
                            wait = meter.start + meter.done / rate - time.perf_counter()
                            if wait > 0:
                                await anyio.sleep(wait)
                        sent = await producer.send(msg)
                        if len(results) < 1000:
                            results.append(
                                {
                                    "msg_id": sent.msg_id,
                                    "broker": sent.queue.broker_name,
                                    "queue": sent.queue.queue_id,
                                    "queue_offset": sent.queue_offset,
                                }
                            )
                        meter.advance()

                async with anyio.create_task_group() as tg:
                    for _ in range(workers):
                        tg.start_soon(sender)
        return meter.summary(), results

    summary, results = run(go)
    if as_json:
        print_json({**summary, "results": results})
        return
    if total <= 20:
        for r in results:
            out.print(f"{r['msg_id']}  {r['broker']}:{r['queue']}@{r['queue_offset']}")
    err.print(
        f"sent {summary['messages']:,} message(s) in {summary['seconds']:.2f} s "
        f"({summary['rate']:,.0f} msg/s)"
    )


# -- bench ---------------------------------------------------------------------------------


@click.group()
def bench() -> None:
    """A quick throughput check: produce or consume N messages, with progress and rate."""


@bench.command("produce")
@click.argument("topic")
@click.option("--count", "-c", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--size", type=click.IntRange(0), default=1024, show_default=True, help="Body bytes.")
@click.option("--concurrency", type=click.IntRange(1), default=64, show_default=True)
@json_option
@pass_settings
def bench_produce(
    settings: Settings, topic: str, count: int, size: int, concurrency: int, as_json: bool
) -> None:
    """Send COUNT messages of SIZE bytes with auto-batching."""
    namesrv = settings.addrs
    body = b"x" * size
    left = iter(range(count))

    async def go() -> dict[str, Any]:
        async with Producer("aiorocket-bench", namesrv, auto_batch=True) as producer:
            with progress_bar() as progress:
                meter = Meter(progress, "produce", count)

                async def sender() -> None:
                    for i in left:
                        await producer.send(Message(topic, body, keys=[f"k{i}"]))
                        meter.advance()

                async with anyio.create_task_group() as tg:
                    for _ in range(min(concurrency, count)):
                        tg.start_soon(sender)
        return meter.summary()

    summary = run(go)
    if as_json:
        print_json(summary)
    else:
        out.print(
            f"produced {summary['messages']:,} messages of {size} B in "
            f"{summary['seconds']:.2f} s = {summary['rate']:,.0f} msg/s"
        )


async def _require_group(admin: Admin, group: str, topic: str) -> None:
    """Exit 3 naming ``group`` and how to create it, if it does not exist and a broker of
    ``topic`` would not create it on first use (its pulls would fail for ever)."""
    try:
        await admin.group_config(group)
        return
    except GroupNotFoundError:
        pass
    for broker in sorted({mq.broker_name for mq in (await admin.route(topic)).read_queues()}):
        config = await admin.broker_config(broker)
        if config.get("autoCreateSubscriptionGroup", "true").lower() != "true":
            fail(f"consumer group {group!r} does not exist (and {broker} creates no group on "
                 f"first use): create it with 'aiorocket group create {group}'",
                 EXIT_NOT_FOUND)  # fmt: skip


@bench.command("consume")
@click.argument("topic")
@click.option("--count", "-c", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--group", help="Consume in this (existing) group with a push consumer.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@json_option
@pass_settings
def bench_consume(
    settings: Settings,
    topic: str,
    count: int,
    group: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Consume COUNT messages: with --group, a push consumer of that group (``async
    for``, acking each; the group must exist); without, the topic's queues are read from
    the oldest message through the brokers' tools group, committing nothing."""
    namesrv = settings.addrs

    async def push(name: str, meter: Meter) -> None:
        async with settings.admin() as admin:
            await _require_group(admin, name, topic)
        consumer = Consumer(name, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic)
        failures = PullFailures(window=max(15.0, 3 * settings.timeout))
        with failures.watching():
            async with consumer, anyio.create_task_group() as tg:
                tg.start_soon(failures.watch)
                async for msg in consumer:
                    meter.advance()
                    failures.progress()
                    await msg.ack()
                    if meter.done >= count:
                        break
                tg.cancel_scope.cancel()

    async def pull(meter: Meter) -> None:
        async with settings.admin() as admin:
            queues = (await admin.route(topic)).read_queues()
            consumer = await reader(admin, namesrv, queues, timeout=settings.timeout)
        consumer.assign(queues)
        failures = PullFailures(window=max(15.0, 3 * settings.timeout))
        with failures.watching():
            async with consumer:
                await consumer.seek_to_beginning(*queues)
                while meter.done < count:
                    batch = await consumer.getmany(timeout=1.0, max_records=count - meter.done)
                    if batch:
                        failures.progress()
                        meter.advance(sum(len(msgs) for msgs in batch.values()))
                    failures.check()

    async def go() -> dict[str, Any]:
        with progress_bar() as progress:
            meter = Meter(progress, "consume", count)
            with anyio.fail_after(timeout):
                await (push(group, meter) if group else pull(meter))
        return {"group": group or TOOLS_GROUP, **meter.summary()}

    summary = run(go)
    if as_json:
        print_json(summary)
    else:
        out.print(
            f"consumed {summary['messages']:,} messages in {summary['seconds']:.2f} s "
            f"= {summary['rate']:,.0f} msg/s"
        )
