"""Looking messages up in the brokers' index in [`aiorocket.admin.Admin`][]: by key
(every match, not the index's first page), and by producer message id without its topic.

A broker answers an index query with at most ``maxMsgsNumBatch`` messages (64 by
default) of the time range asked, and says nothing of the rest: a range whose answer is
full is split in two and each half asked again, so a lookup finds every match up to the
count asked, and knows whether more exist. The index keeps store times to the second
(from its file's start): more than a page of matches stored within one second cannot
be told apart, and the lookup says more match.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio

from aiorocket.admin._core import AdminCore
from aiorocket.admin._names import is_system_topic
from aiorocket.errors import ConfigError, RocketMQError
from aiorocket.message import MessageExt

__all__ = ["KeyLookup", "MessageLookup"]

#: messages asked of one index query: the brokers' maxMsgsNumBatch (64 by default), so
#: an answer this long means the range may hold more (a broker configured lower answers
#: fewer, and its full answers are taken for complete ones)
_PAGE = 64
#: topics searched at once for a producer message id given without its topic
_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """What ``Admin.lookup_key`` found: the messages, oldest first, and whether more
    match than it returns (beyond ``limit``, or past what the index gives: more than a
    page stored within one second cannot be split further)."""

    messages: list[MessageExt]
    more: bool


class MessageLookup(AdminCore):
    async def find_messages(self, topic: str, key: str, *, limit: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (their ``keys``), oldest first, at
        most ``limit`` (``lookup_key``: within a time range, and whether more match)."""
        return (await self.lookup_key(topic, key, limit=limit)).messages

    async def lookup_key(
        self,
        topic: str,
        key: str,
        *,
        limit: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> KeyLookup:
        """Messages of ``topic`` indexed under ``key`` and stored in [``begin_ms``,
        ``end_ms``] (epoch ms; default: any time), oldest first, at most ``limit``, and
        whether more match than those returned."""
        if limit < 1:
            raise ConfigError("limit must be >= 1")
        end = end_ms if end_ms is not None else int(time.time() * 1000) + 60_000
        if begin_ms > end:
            raise ConfigError("the time range ends before it begins")
        route = await self.route(topic)
        out: list[MessageExt] = []
        more = False
        for name, addr in sorted(route.group_addrs().items()):
            # one more than asked: more than ``limit`` on one broker is more than ``limit``
            found, cut = await self._by_key(addr, name, topic, key, begin_ms, end, limit + 1)
            out += found
            more = more or cut
        out.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_offset))
        return KeyLookup(out[:limit], more or len(out) > limit)

    async def _by_key(
        self, addr: str, broker: str, topic: str, key: str, begin: int, end: int, want: int
    ) -> tuple[list[MessageExt], bool]:
        """Up to ``want`` of one broker's messages with ``key`` in [begin, end], oldest
        first (a full answer splits the range, see the module docstring), and whether a
        full answer for one second left some out."""
        found = await self.requests.query_messages(
            addr, topic, key, max_num=_PAGE, begin_ms=begin, end_ms=end, broker_name=broker
        )
        if len(found) < _PAGE or end - begin < 1000:
            hits = sorted((m for m in found if key in m.keys), key=lambda m: m.queue_offset)
            return hits[:want], len(found) >= _PAGE
        mid = (begin + end) // 2
        older, cut = await self._by_key(addr, broker, topic, key, begin, mid, want)
        if len(older) >= want:
            return older, cut
        newer, cut_newer = await self._by_key(addr, broker, topic, key, mid + 1, end,
                                              want - len(older))  # fmt: skip
        return older + newer, cut or cut_newer

    async def _unique_anywhere(self, msg_id: str) -> tuple[MessageExt | None, int]:
        """The message whose producer id is ``msg_id``, looked up in every topic's index
        (system topics aside); with the number of topics searched."""
        topics = [t for t in await self.client.namesrv.list_topics() if not is_system_topic(t)]
        found: list[MessageExt] = []
        limiter = anyio.Semaphore(_CONCURRENCY)

        async def search(topic: str, scope: anyio.CancelScope) -> None:
            async with limiter:
                try:
                    msg = await self._unique_in(topic, msg_id)
                except RocketMQError:
                    return  # no route (a broker's or cluster's name, deleted), no answer
                if msg is not None:
                    found.append(msg)
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            for topic in topics:
                tg.start_soon(search, topic, tg.cancel_scope)
        return (found[0] if found else None), len(topics)

    async def _unique_in(self, topic: str, msg_id: str) -> MessageExt | None:
        route = await self.route(topic)
        for name, addr in sorted(route.group_addrs().items()):
            found = await self.requests.query_messages(
                addr, topic, msg_id, unique_key=True, broker_name=name
            )
            for msg in found:
                if msg.msg_id == msg_id:
                    return msg
        return None
