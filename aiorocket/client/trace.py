"""The remoting transport's trace sender: stores a trace message on a broker of the
trace topic (``aiorocket._trace``), as Java's internal trace producer does.

One attempt per broker of the route, round-robin over its writable queues: a trace is
worth a retry on another broker, not a wait. No producer group joins the brokers (the
trace messages are plain, not transactional: nobody asks this group anything).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from aiorocket._unique_id import create_unique_id
from aiorocket.client.instance import ClientInstance
from aiorocket.errors import NoRouteError, RocketMQError, TopicNotExistError
from aiorocket.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_WAIT_STORE_MSG_OK
from aiorocket.protocol.message_codec import encode_properties

__all__ = ["TRACE_PRODUCER_GROUP", "RemotingTraceSender"]

#: the group named in the send requests (Java: ``_INNER_TRACE_PRODUCER-<group>-...``)
TRACE_PRODUCER_GROUP = "_INNER_TRACE_PRODUCER"
#: seconds a trace topic the NameServer does not know is not asked for again: every
#: batch would ask (up to hundreds a second under load), each failing the same way
MISSING_TOPIC_RECHECK = 30.0


class RemotingTraceSender:
    """``TraceSender`` over a started ``ClientInstance`` (the client's own)."""

    def __init__(self, client: ClientInstance, group: str) -> None:
        self._client = client
        self._group = f"{TRACE_PRODUCER_GROUP}-{group}"
        self._turn = itertools.count()
        #: a missing trace topic: until when it is not asked for again, and the answer
        self._missing: tuple[float, TopicNotExistError] | None = None

    async def send_trace(self, topic: str, body: bytes, keys: Sequence[str]) -> None:
        client = self._client
        if self._missing is not None:
            until, err = self._missing
            if time.monotonic() < until:
                raise err
            self._missing = None
        try:
            route = await client.namesrv.get_route(topic)
        except TopicNotExistError as err:
            self._missing = (time.monotonic() + MISSING_TOPIC_RECHECK, err)
            raise
        queues = route.write_queues()
        if not queues:
            client.namesrv.forget(topic)  # asked again next time
            raise NoRouteError(f"trace topic {topic} has no writable queue")
        msg_id = create_unique_id()
        props = encode_properties({
            PROPERTY_KEYS: " ".join(keys), PROPERTY_UNIQ_KEY: msg_id,
            PROPERTY_WAIT_STORE_MSG_OK: "true",
        })  # fmt: skip
        start = next(self._turn)
        brokers: dict[str, None] = {}
        last: RocketMQError | None = None
        for i in range(len(queues)):
            mq = queues[(start + i) % len(queues)]
            if mq.broker_name in brokers:
                continue
            brokers[mq.broker_name] = None
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                continue
            try:
                await client.broker.send_message(
                    addr, mq, body, props, producer_group=self._group, msg_id=msg_id
                )
                return
            except RocketMQError as exc:
                last = exc
        raise last or NoRouteError(f"trace topic {topic} has no broker with a master")
