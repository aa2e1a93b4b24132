"""Making received messages visible to their group again at once (a release), the one
mechanism for every consumer that gives messages back: a gRPC receive cancelled with
messages in hand (``aiorocket.grpc.SimpleConsumer``), and a pop consumer's nacks, acks
refused for good and close (``aiorocket.consumer.pop.settler``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from aiorocket.errors import RocketMQError

__all__ = ["TRIES", "release_all", "retried"]

M = TypeVar("M")

#: tries of a settling request (``retried``)
TRIES = 3

#: releases under way at once: a close with thousands in hand must not open thousands of
#: requests at the same moment
CONCURRENCY = 16


async def release_all(
    messages: Sequence[M],
    release: Callable[[M], Awaitable[None]],
    timeout: float,
    *,
    on_error: Callable[[M, RocketMQError], None] | None = None,
) -> list[M]:
    """Release each of ``messages`` with ``release`` (its request: an invisible time of 0),
    ``CONCURRENCY`` at a time, within ``timeout`` seconds, shielded (it runs when the
    caller is being cancelled: the close, a cut receive). Returns the messages that
    could not be released: their request failed (``on_error`` is told why) or had not
    finished in time. Those come back after their invisible time."""
    if not messages:
        return []
    released: set[int] = set()
    limiter = anyio.Semaphore(CONCURRENCY)

    async def one(i: int, msg: M) -> None:
        async with limiter:
            try:
                await release(msg)
            except RocketMQError as err:
                if on_error is not None:
                    on_error(msg, err)
            else:
                released.add(i)

    with anyio.move_on_after(timeout, shield=True):
        async with anyio.create_task_group() as tg:
            for i, msg in enumerate(messages):
                tg.start_soon(one, i, msg)
    return [m for i, m in enumerate(messages) if i not in released]


async def retried(call: Callable[[], Awaitable[None]], tries: int = TRIES) -> None:
    """``call()``, again after a retriable error (``tries`` in all, backing off 0.4 s,
    0.8 s ...): a settling request whose connection was lost under it (a silent
    connection the keepalive abandoned) goes again on a new one."""
    for attempt in range(1, tries + 1):
        try:
            return await call()
        except RocketMQError as err:
            if not err.retriable or attempt == tries:
                raise
            await anyio.sleep(0.2 * 2**attempt)
