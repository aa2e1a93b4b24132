"""``aiorocket produce|tail|bench``: sending and reading messages, with progress and rates."""

from __future__ import annotations

import itertools
import json
import secrets
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

from aiorocket.cli._admin_cmds import body_text, message_json
from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    err,
    fail,
    json_option,
    out,
    parse_time,
    pass_settings,
    print_json,
    run,
)
from aiorocket.consumer import ConsumeFromWhere, Consumer, PullConsumer
from aiorocket.message import Message, MessageExt, MessageQueue
from aiorocket.producer import Producer

TAIL_GROUP = "aiorocket-cli-tail"


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
@click.option("--delay", type=float, help="Deliver after this many seconds (5.x timer).")
@click.option(
    "--delay-level",
    type=click.IntRange(0, 18),
    default=0,
    help="Deliver after this delay level (1..18).",
)
@click.option(
    "--count",
    "-n",
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
        async with Producer(group, settings.namesrv, auto_batch=total > 1) as producer:
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


# -- tail ----------------------------------------------------------------------------------


def _print_message(msg: MessageExt, body_format: str) -> None:
    if body_format == "json":
        sys.stdout.write(json.dumps(message_json(msg, "text")) + "\n")
    else:
        sys.stdout.write(body_text(msg.body, body_format) + "\n")
    sys.stdout.flush()


@click.command()
@click.argument("topic")
@click.option(
    "--from",
    "start",
    default="latest",
    show_default=True,
    help="Where to start: earliest, latest, or a time (ISO 8601, epoch ms, -10m).",
)
@click.option("--until", help="Stop at messages stored after this time.")
@click.option(
    "--follow/--no-follow",
    default=None,
    help="Keep waiting for new messages (default: follow from latest, stop at the end otherwise).",
)
@click.option("--max", "-n", "limit", type=click.IntRange(1), help="Stop after N messages.")
@click.option("--tag", "tags", help="Tag expression, e.g. 'a || b'.")
@click.option("--sql", help="SQL92 filter over properties (broker needs enablePropertyFilter).")
@click.option(
    "--format",
    "body_format",
    type=click.Choice(["text", "json", "hex", "base64"]),
    default="text",
    show_default=True,
    help="How to print messages.",
)
@click.option("--timeout", type=float, help="Give up after this many seconds without N.")
@pass_settings
def tail(
    settings: Settings,
    topic: str,
    start: str,
    until: str | None,
    follow: bool | None,
    limit: int | None,
    tags: str | None,
    sql: str | None,
    body_format: str,
    timeout: float | None,
) -> None:
    """Print a topic's messages without committing anything (no consumer group is joined)."""
    if tags and sql:
        fail("--tag and --sql exclude each other", EXIT_USAGE)
    if start not in ("earliest", "latest"):
        start_ms: int | None = parse_time(start)
    else:
        start_ms = None
    until_ms = parse_time(until) if until else None
    keep_following = follow if follow is not None else start == "latest" and until is None

    async def go() -> None:
        # One shared name: a manually assigned pull consumer that never commits joins no
        # group, but brokers create a subscription group for every name that pulls.
        group = TAIL_GROUP
        async with settings.admin() as admin:
            route = await admin.route(topic)
        queues = route.read_queues()
        consumer = PullConsumer(
            group,
            settings.namesrv,
            auto_commit=False,
            request_timeout=settings.timeout,
            long_poll_timeout=2.0,
        )
        consumer.assign(queues, tags or "*", sql=sql)
        printed = 0
        async with consumer:
            if start == "earliest":
                await consumer.seek_to_beginning(*queues)
            elif start == "latest":
                await consumer.seek_to_end(*queues)
            else:
                assert start_ms is not None
                offsets = await consumer.offsets_for_times(dict.fromkeys(queues, start_ms))
                for mq, offset in offsets.items():
                    consumer.seek(mq, offset)
            ends = {} if keep_following else await consumer.end_offsets(queues)
            done: set[MessageQueue] = set()

            def finished() -> bool:
                if keep_following:
                    return False
                for mq in queues:
                    if mq not in done and consumer.position(mq) >= ends[mq]:
                        done.add(mq)
                return len(done) == len(queues)

            with anyio.fail_after(timeout) if timeout else anyio.CancelScope():
                while not finished():
                    batch = await consumer.getmany(timeout=1.0)
                    for mq, msgs in batch.items():
                        for msg in msgs:
                            if until_ms is not None and msg.store_timestamp > until_ms:
                                done.add(mq)
                                consumer.pause(mq)
                                break
                            if not keep_following and msg.queue_offset >= ends[mq]:
                                break
                            _print_message(msg, body_format)
                            printed += 1
                            if limit is not None and printed >= limit:
                                return

    run(go)


# -- bench ---------------------------------------------------------------------------------


@click.group()
def bench() -> None:
    """A quick throughput check: produce or consume N messages, with progress and rate."""


@bench.command("produce")
@click.argument("topic")
@click.option("--count", "-n", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--size", type=click.IntRange(0), default=1024, show_default=True, help="Body bytes.")
@click.option("--concurrency", type=click.IntRange(1), default=64, show_default=True)
@json_option
@pass_settings
def bench_produce(
    settings: Settings, topic: str, count: int, size: int, concurrency: int, as_json: bool
) -> None:
    """Send COUNT messages of SIZE bytes with auto-batching."""
    body = b"x" * size
    left = iter(range(count))

    async def go() -> dict[str, Any]:
        async with Producer("aiorocket-bench", settings.namesrv, auto_batch=True) as producer:
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


@bench.command("consume")
@click.argument("topic")
@click.option("--count", "-n", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--group", help="Consumer group (default: a fresh one, from the oldest message).")
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
    """Consume COUNT messages with a push consumer (``async for``)."""

    async def go() -> dict[str, Any]:
        name = group or f"aiorocket-bench-{secrets.token_hex(4)}"
        consumer = Consumer(
            name, settings.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe(topic)
        with progress_bar() as progress:
            meter = Meter(progress, "consume", count)
            async with consumer:
                with anyio.fail_after(timeout):
                    async for msg in consumer:
                        meter.advance()
                        if meter.done >= count:
                            await msg.ack()
                            break
        return meter.summary()

    summary = run(go)
    if as_json:
        print_json(summary)
    else:
        out.print(
            f"consumed {summary['messages']:,} messages in {summary['seconds']:.2f} s "
            f"= {summary['rate']:,.0f} msg/s"
        )
