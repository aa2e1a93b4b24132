"""``TestRocketBroker``: the broker in memory, as FastStream's other test brokers.

```python
async with TestRocketBroker(broker) as br:
    await br.publish({"id": 1}, "orders", tags="paid")
    handle.mock.assert_called_once_with({"id": 1})
```

Published messages go straight to the subscribers of their topic whose tag expression
accepts their tag (each subscriber is a group: every matching one gets it), through the
same parser, filters, dependencies and middlewares as on a real broker; a handler's
exception reaches the test. SQL92 filters are not evaluated in memory (an SQL-filtered
subscriber gets every message of its topic). ``TestRocketBroker(broker, with_real=True)``
runs the same test against a real RocketMQ, with the handlers' mocks kept.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from typing import Any

from faststream._internal.testing.broker import TestBroker, change_producer
from faststream.exceptions import SubscriberNotFound

from aiorocket._unique_id import create_unique_id
from aiorocket._validate import check_body, check_schedule, check_topic
from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.faststream._broker import RocketBroker
from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.faststream._producer import RocketProducer, encode_all
from aiorocket.faststream._publisher import RocketPublisher
from aiorocket.faststream._subscriber import RocketSubscriber
from aiorocket.message import PROPERTY_UNIQ_KEY, Message
from aiorocket.producer.config import ProducerConfig
from aiorocket.protocol.subscription import EXPRESSION_TAG, Subscription
from aiorocket.received import ConsumerMessage

__all__ = ["TestRocketBroker"]


class TestRocketBroker(TestBroker[RocketBroker, Any], broker=RocketBroker):
    """Runs a ``RocketBroker``'s subscribers in memory (or, ``with_real=True``, against
    the real cluster with the handlers' mocks)."""

    def __init__(
        self, *brokers: RocketBroker, with_real: bool = False, connect_only: bool | None = None
    ) -> None:
        super().__init__(*brokers, with_real=with_real, connect_only=connect_only)
        self._began_ms = int(time.time() * 1000) - 1000  # a second's margin for the clock

    def create_publisher_fake_subscriber(
        self, broker: RocketBroker, publisher: RocketPublisher
    ) -> tuple[RocketSubscriber, bool]:
        for sub in broker.subscribers:
            assert isinstance(sub, RocketSubscriber)
            if sub.topic == publisher.topic:
                return sub, True
        # with_real: a group of its own that reads what was stored since the test began
        # (a new group at the newest offset could miss what the test publishes at once).
        group = "faststream-test-" + re.sub(r"[^A-Za-z0-9_-]", "_", publisher.topic)
        sub = broker.subscriber(
            publisher.topic, group=group, persistent=False,
            consume_from_where=ConsumeFromWhere.TIMESTAMP, consume_timestamp_ms=self._began_ms,
        )  # fmt: skip
        return sub, False

    def _fake_start(self, broker: RocketBroker, *args: Any, **kwargs: Any) -> None:
        # The checks of the real start first: an app that cannot start against a
        # broker must not pass its tests in memory.
        broker.check_groups()
        super()._fake_start(broker, *args, **kwargs)

    @contextmanager
    def _patch_producer(self, broker: RocketBroker) -> Iterator[None]:
        with change_producer(broker.config.broker_config, FakeRocketProducer(broker)):
            yield

    async def _fake_connect(self, broker: RocketBroker, *args: Any, **kwargs: Any) -> None:
        return None


class FakeRocketProducer(RocketProducer):
    """Delivers what the broker publishes to its subscribers, in memory."""

    def __init__(self, broker: RocketBroker) -> None:
        super().__init__(broker._parser, broker._decoder)
        self.broker = broker
        self.serializer = broker.config.fd_config._serializer
        if broker.config.broker_codec is not None:
            self.codec = broker.config.broker_codec
        self._offsets = count()
        config = broker._producer_args["config"] or ProducerConfig()
        self._max_size = config.max_message_size

    def _received(self, msg: Message) -> ConsumerMessage:
        # What the real producers refuse is refused in memory too.
        check_topic(msg.topic)
        check_body(msg, self._max_size)
        check_schedule(msg)
        props = msg.wire_properties()
        props[PROPERTY_UNIQ_KEY] = create_unique_id()
        now = int(time.time() * 1000)
        return ConsumerMessage(
            topic=msg.topic, body=msg.body, properties=props, queue_id=0,
            queue_offset=next(self._offsets), commit_log_offset=0,
            born_timestamp=now, store_timestamp=now, broker_name="memory",
        )  # fmt: skip

    def _subscribers(self, raw: ConsumerMessage) -> Iterator[RocketSubscriber]:
        for sub in self.broker.subscribers:
            assert isinstance(sub, RocketSubscriber)
            if sub.topic != raw.topic:
                continue
            if sub.options.sql is None:
                accepts = Subscription(raw.topic, sub.options.tags, EXPRESSION_TAG)
                if not accepts.accepts_tag(raw.tags):
                    continue
            yield sub

    async def publish(self, cmd: RocketPublishCommand) -> None:  # type: ignore[override]
        for msg in await encode_all(cmd, self.codec, self.serializer):
            raw = self._received(msg)
            for sub in self._subscribers(raw):
                await sub.process_message(raw)

    async def publish_batch(self, cmd: RocketPublishCommand) -> None:  # type: ignore[override]
        await self.publish(cmd)

    async def request(self, cmd: RocketPublishCommand) -> ConsumerMessage:
        (msg,) = await encode_all(cmd, self.codec, self.serializer)
        raw = self._received(msg)
        for sub in self._subscribers(raw):
            response = await sub.process_message(raw)
            reply = RocketPublishCommand.from_cmd(response.as_publish_command())
            reply.destination = raw.topic
            (out,) = await encode_all(reply, self.codec, self.serializer)
            return self._received(out)
        raise SubscriberNotFound(f"no subscriber of topic {raw.topic!r} accepts the message")
