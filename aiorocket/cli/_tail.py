"""``aiorocket tail``: print a topic's messages (or a queue's offset range), committing nothing."""

from __future__ import annotations

import json
import sys

import anyio
import click

from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    fail,
    parse_time,
    pass_settings,
    run,
)
from aiorocket.cli._reader import PullFailures, reader
from aiorocket.cli._show import BODY_FORMATS, body_shown, message_json, message_line
from aiorocket.consumer import PullConsumer
from aiorocket.message import MessageExt, MessageQueue


def _print(msg: MessageExt, mode: str, body_format: str) -> None:
    if mode == "json":
        line = json.dumps(message_json(msg, body_format))
    elif mode == "body":
        line = body_shown(msg.body, body_format)[0]
    else:
        line = message_line(msg, body_format)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _start_time(text: str) -> int:
    try:
        return parse_time(text)
    except click.BadParameter as exc:
        hint = " (an offset: --offset N)" if text.strip().isdigit() else ""
        raise click.BadParameter(exc.message + hint, param_hint="--from") from None


def _queue_ids(specs: tuple[str, ...]) -> set[tuple[str, int]]:
    wanted = set()
    for spec in specs:
        broker, sep, qid = spec.rpartition(":")
        if not sep or not broker or not qid.isdigit():
            raise click.BadParameter(f"{spec!r} is not BROKER:QUEUE_ID", param_hint="--queue")
        wanted.add((broker, int(qid)))
    return wanted


@click.command()
@click.argument("topic")
@click.option(
    "--from",
    "start",
    help="Where to start: earliest, latest (default), or a time (ISO 8601, epoch ms, -10m).",
)
@click.option(
    "--offset",
    type=click.IntRange(0),
    help="Start at this offset of each queue (instead of --from).",
)
@click.option(
    "--end-offset",
    type=click.IntRange(0),
    help="Stop before this offset of each queue.",
)
@click.option(
    "--queue",
    "queue_specs",
    multiple=True,
    metavar="BROKER:ID",
    help="Only this queue (repeatable), e.g. broker-a:0.",
)
@click.option("--until", help="Stop at messages stored after this time.")
@click.option(
    "--follow/--no-follow",
    default=None,
    help="Keep waiting for new messages (default: follow from latest, stop at the end otherwise).",
)
@click.option(
    "--count", "--max", "-c", "limit", type=click.IntRange(1), help="Stop after N messages."
)
@click.option("--tag", "tags", help="Tag expression, e.g. 'a || b'.")
@click.option("--sql", help="SQL92 filter over properties (broker needs enablePropertyFilter).")
@click.option(
    "--format",
    "body_format",
    type=click.Choice([*BODY_FORMATS, "json"]),
    default="text",
    show_default=True,
    help="How bodies print (text falls back to hex for binary); json: as --json.",
)
@click.option("--body-only", is_flag=True, help="Print only the bodies, one per line.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document per message.")
@click.option("--timeout", type=float, help="Give up after this many seconds.")
@pass_settings
def tail(
    settings: Settings,
    topic: str,
    start: str | None,
    offset: int | None,
    end_offset: int | None,
    queue_specs: tuple[str, ...],
    until: str | None,
    follow: bool | None,
    limit: int | None,
    tags: str | None,
    sql: str | None,
    body_format: str,
    body_only: bool,
    as_json: bool,
    timeout: float | None,
) -> None:
    """Print a topic's messages without committing anything (no consumer group is joined).

    Each message is one line: broker:queue@offset, store time, message id, tags, keys,
    the application's properties, then the body. A queue's offset range:
    --queue broker-a:0 --offset 10 --end-offset 20.
    """
    if tags and sql:
        fail("--tag and --sql exclude each other", EXIT_USAGE)
    if start is not None and offset is not None:
        fail("--from and --offset exclude each other", EXIT_USAGE)
    if body_format == "json":
        as_json, body_format = True, "text"
    mode = "json" if as_json else "body" if body_only else "line"
    start = start or ("offset" if offset is not None else "latest")
    start_ms = _start_time(start) if start not in ("earliest", "latest", "offset") else None
    until_ms = parse_time(until) if until else None
    wanted = _queue_ids(queue_specs)
    keep_following = (
        follow if follow is not None else start == "latest" and until is None and end_offset is None
    )
    namesrv = settings.addrs

    async def go() -> None:
        async with settings.admin() as admin:
            route = await admin.route(topic)
            queues = route.read_queues()
            if wanted:
                queues = [mq for mq in queues if (mq.broker_name, mq.queue_id) in wanted]
                missing = wanted - {(mq.broker_name, mq.queue_id) for mq in queues}
                if missing:
                    have = " ".join(f"{q.broker_name}:{q.queue_id}" for q in route.read_queues())
                    fail(f"{topic} has no queue {sorted(missing)[0][0]}:{sorted(missing)[0][1]} "
                         f"(it has {have})", EXIT_USAGE)  # fmt: skip
            consumer = await reader(admin, namesrv, queues, timeout=settings.timeout)
        consumer.assign(queues, tags or "*", sql=sql)
        failures = PullFailures(window=max(15.0, 3 * settings.timeout))
        with failures.watching():
            await read(consumer, queues, failures)

    async def read(
        consumer: PullConsumer, queues: list[MessageQueue], failures: PullFailures
    ) -> None:
        printed = 0
        async with consumer:
            if start == "earliest":
                await consumer.seek_to_beginning(*queues)
            elif start == "latest":
                await consumer.seek_to_end(*queues)
            elif start == "offset":
                assert offset is not None
                lowest = await consumer.beginning_offsets(queues)
                for mq in queues:
                    consumer.seek(mq, max(offset, lowest[mq]))
            else:
                assert start_ms is not None
                offsets = await consumer.offsets_for_times(dict.fromkeys(queues, start_ms))
                for mq, at in offsets.items():
                    consumer.seek(mq, at)
            # Where each queue stops: the end as it is now (unless following), and
            # --end-offset.
            stop_at: dict[MessageQueue, int] = {}
            if not keep_following:
                stop_at = await consumer.end_offsets(queues)
            if end_offset is not None:
                stop_at = {mq: min(stop_at.get(mq, end_offset), end_offset) for mq in queues}
            done: set[MessageQueue] = set()

            def finished() -> bool:
                for mq in queues:
                    if mq not in done and mq in stop_at and consumer.position(mq) >= stop_at[mq]:
                        done.add(mq)
                        consumer.pause(mq)
                return len(done) == len(queues)

            with anyio.fail_after(timeout) if timeout else anyio.CancelScope():
                while not finished():
                    batch = await consumer.getmany(timeout=1.0)
                    if batch:
                        failures.progress()
                    failures.check()
                    for mq, msgs in batch.items():
                        for msg in msgs:
                            if until_ms is not None and msg.store_timestamp > until_ms:
                                done.add(mq)
                                consumer.pause(mq)
                                break
                            if mq in stop_at and msg.queue_offset >= stop_at[mq]:
                                break
                            _print(msg, mode, body_format)
                            printed += 1
                            if limit is not None and printed >= limit:
                                return

    run(go)
