"""The broker calls behind the data source: queues of a subscription, offsets, pulls.

Plain aiorocket coroutines on a ``ClientInstance`` (no pyspark): the driver
resolves subscriptions and offsets with them, executors pull ranges.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import anyio

from aiorocket._log import get_logger
from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullResult, PullStatus
from aiorocket.errors import (
    ConfigError,
    ConnectionClosedError,
    DataLossError,
    NoRouteError,
    RocketMQError,
    TopicNotExistError,
)
from aiorocket.message import MessageExt, MessageQueue
from aiorocket.spark._options import Filter, Subscription

T = TypeVar("T")
log = get_logger("spark")

#: topics of the broker's own machinery, never matched by ``subscribePattern``.
_SYSTEM_TOPIC = re.compile(
    r"^(%RETRY%|%DLQ%|%LMQ%|rmq_sys_|RMQ_SYS_|SCHEDULE_TOPIC_XXXX$|TBW102$|OFFSET_MOVED_EVENT$"
    r"|TRANS_CHECK_MAX_TIME_TOPIC$|SELF_TEST_TOPIC$)"
)
#: attempts of one pull or offset request on connection trouble or SYSTEM_BUSY.
ATTEMPTS = 4


async def _retrying(fn: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(ATTEMPTS):
        try:
            return await fn()
        except RocketMQError as exc:
            if not exc.retriable:
                raise
            error: Exception = exc
        if attempt == ATTEMPTS - 1:
            raise error
        await anyio.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


async def _route_queues(client: ClientInstance, topic: str, option: str) -> list[MessageQueue]:
    try:
        route = await client.namesrv.query_route(topic)
    except TopicNotExistError:
        raise ConfigError(f"topic {topic!r} does not exist (option {option})") from None
    except ConnectionClosedError as exc:
        raise ConfigError(f"cannot reach the NameServer (option nameServer): {exc}") from None
    return route.read_queues()


async def resolve_queues(client: ClientInstance, sub: Subscription) -> list[MessageQueue]:
    """Every readable queue the subscription names, sorted; clear errors for unknown ones."""
    if sub.assign:
        out: list[MessageQueue] = []
        for topic in sorted({mq.topic for mq in sub.assign}):
            have = set(await _route_queues(client, topic, "assign"))
            missing = [str(mq) for mq in sub.assign if mq.topic == topic and mq not in have]
            if missing:
                raise ConfigError(f"option assign names queues that do not exist: {missing}; "
                                  f"topic {topic!r} has {sorted(map(str, have))}")  # fmt: skip
            out.extend(mq for mq in sub.assign if mq.topic == topic)
        return sorted(out)
    if sub.pattern is not None:
        try:
            every = await client.namesrv.list_topics()
        except ConnectionClosedError as exc:
            raise ConfigError(f"cannot reach the NameServer (option nameServer): {exc}") from None
        regex = re.compile(sub.pattern)
        topics = [t for t in every if regex.fullmatch(t) and not _SYSTEM_TOPIC.match(t)]
    else:
        topics = list(sub.topics)
    queues: list[MessageQueue] = []
    for topic in topics:
        queues.extend(await _route_queues(client, topic, "subscribe"))
    return sorted(queues)


async def _broker_addr(client: ClientInstance, mq: MessageQueue) -> str:
    route = await client.namesrv.get_route(mq.topic)
    addr = route.master_addr(mq.broker_name)
    if addr is None:
        route = await client.namesrv.query_route(mq.topic)
        addr = route.master_addr(mq.broker_name)
    if addr is None:
        raise NoRouteError(f"no master broker for {mq}")
    return addr


async def _each(
    queues: Iterable[MessageQueue], fn: Callable[[MessageQueue], Awaitable[int | None]]
) -> dict[MessageQueue, int | None]:
    out: dict[MessageQueue, int | None] = {}

    async def one(mq: MessageQueue) -> None:
        out[mq] = await _retrying(lambda: fn(mq))

    async with anyio.create_task_group() as tg:
        for mq in queues:
            tg.start_soon(one, mq)
    return out


async def _ends(
    client: ClientInstance, queues: Iterable[MessageQueue], *, last: bool
) -> dict[MessageQueue, int]:
    ask = client.broker.get_max_offset if last else client.broker.get_min_offset

    async def one(mq: MessageQueue) -> int:
        return await ask(await _broker_addr(client, mq), mq)

    return {mq: int(v or 0) for mq, v in (await _each(queues, one)).items()}


async def min_offsets(
    client: ClientInstance, queues: Iterable[MessageQueue]
) -> dict[MessageQueue, int]:
    """Each queue's first stored offset."""
    return await _ends(client, queues, last=False)


async def max_offsets(
    client: ClientInstance, queues: Iterable[MessageQueue]
) -> dict[MessageQueue, int]:
    """Each queue's next offset to be written (its number of messages ever)."""
    return await _ends(client, queues, last=True)


async def offsets_for_times(
    client: ClientInstance, stamps: dict[MessageQueue, int]
) -> dict[MessageQueue, int]:
    """The first offset stored at or after each queue's epoch-ms time (max if none)."""

    async def one(mq: MessageQueue) -> int:
        addr = await _broker_addr(client, mq)
        return await client.broker.search_offset(addr, mq, stamps[mq])

    return {mq: int(v or 0) for mq, v in (await _each(stamps, one)).items()}


async def group_offsets(
    client: ClientInstance, group: str, queues: Iterable[MessageQueue]
) -> dict[MessageQueue, int | None]:
    async def one(mq: MessageQueue) -> int | None:
        return await client.broker.query_consumer_offset(await _broker_addr(client, mq), group, mq)

    return await _each(queues, one)


async def commit_offsets(
    client: ClientInstance, group: str, offsets: dict[MessageQueue, int]
) -> None:
    async def one(mq: MessageQueue) -> int:
        addr = await _broker_addr(client, mq)
        await client.broker.update_consumer_offset(addr, group, mq, offsets[mq])
        return 0

    await _each(offsets, one)


async def _pull(
    client: ClientInstance,
    group: str,
    mq: MessageQueue,
    offset: int,
    end: int,
    flt: Filter,
    batch: int,
) -> PullResult:
    """One pull without long polling; the expression travels with it (no heartbeat)."""
    return await client.broker.pull(
        await _broker_addr(client, mq), group, mq, offset,
        max_nums=min(batch, end - offset), sys_flag=PULL_SUBSCRIPTION, suspend_timeout_ms=0,
        subscription=flt.expression, expression_type="SQL92" if flt.sql else "TAG",
        timeout=client.broker.timeout,
    )  # fmt: skip


@dataclass(slots=True)
class Segment:
    """What one pull task brought back for ``[start, end)`` of a queue."""

    messages: list[MessageExt] = field(default_factory=list)
    #: offsets found missing (deleted) and skipped, as ``(from, to)`` ranges.
    lost: list[tuple[int, int]] = field(default_factory=list)


async def pull_segment(
    client: ClientInstance,
    group: str,
    mq: MessageQueue,
    start: int,
    end: int,
    flt: Filter,
    *,
    fail_on_data_loss: bool,
    batch: int,
) -> Segment:
    """Every message stored at offsets ``[start, end)`` that passes ``flt``.

    Offsets below the queue's minimum, or past its end (the queue was reset), are data
    loss: ``DataLossError``, or skipped and reported in ``lost``.
    """
    seg = Segment()
    tags = flt.tags
    offset = start
    while offset < end:
        result = await _retrying(partial(_pull, client, group, mq, offset, end, flt, batch))
        status = result.status
        if status is PullStatus.FOUND:
            msgs = [m for m in result.messages if offset <= m.queue_offset < end]
            if tags:
                msgs = [m for m in msgs if m.tags in tags]
            seg.messages.extend(msgs)
            last = result.messages[-1].queue_offset + 1 if result.messages else offset
            offset = max(result.next_begin_offset, last, offset + 1)
        elif status is PullStatus.NO_MATCHED_MSG:
            offset = max(result.next_begin_offset, offset + 1)
        else:
            # NO_NEW_MSG below ``end``, or OFFSET_ILLEGAL: what we were told exists is gone.
            if status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                resume = min(result.min_offset, end)
            else:
                resume = end
            what = (
                f"offsets [{offset}, {resume}) of {mq} are no longer available "
                f"(queue now holds [{result.min_offset}, {result.max_offset}))"
            )
            if fail_on_data_loss:
                raise DataLossError(
                    f"{what}. Some data may have been lost because it is not available in "
                    "RocketMQ any more: it was deleted by retention or the topic was deleted "
                    "and re-created. If you want the query to go on, set the option "
                    "failOnDataLoss to false."
                )
            log.warning("spark_data_loss", queue=str(mq), lost_from=offset, lost_to=resume,
                        min_offset=result.min_offset, max_offset=result.max_offset)  # fmt: skip
            seg.lost.append((offset, resume))
            offset = resume
    return seg
