"""The Spark source and sink against the RocketMQ 4.9.7 cluster (``broker49``): a batch
read with every field, the at-least-once sink read back by the consumer, and the
exactly-once sink (transactional half messages) rolling a replayed batch back. The
default suite's own tests (tests/integration/reuse.py), with the 4.9 cluster as
``rocketmq``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.reuse import reuse
from tests.spark import test_batch_read, test_exactly_once, test_sink

pytestmark = [pytest.mark.integration, pytest.mark.broker49]


@pytest.fixture(scope="module")
def rocketmq(rocketmq49: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    yield rocketmq49


filled = test_batch_read.filled
test_reads_every_message_once_with_its_fields = reuse(
    test_batch_read.test_reads_every_message_once_with_its_fields
)
test_dataframe_round_trips_through_the_consumer = reuse(
    test_sink.test_dataframe_round_trips_through_the_consumer
)
test_replayed_batch_is_rolled_back = reuse(test_exactly_once.test_replayed_batch_is_rolled_back)
