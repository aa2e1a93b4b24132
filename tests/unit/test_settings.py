"""Settings shared by consumer and producer: overrides copy the config, validation agrees."""

from __future__ import annotations

import pytest

from aiorocket.consumer import Consumer, ConsumerConfig, PullConsumer
from aiorocket.errors import ConfigError
from aiorocket.producer import Producer, ProducerConfig


def test_overrides_never_change_the_callers_config() -> None:
    shared = ConsumerConfig()
    fast = Consumer("g", "127.0.0.1:9876", config=shared, consume_concurrency=4)
    slow = PullConsumer("g", "127.0.0.1:9876", config=shared, pull_batch_size=8)
    assert fast.config.consume_concurrency == 4 and slow.config.pull_batch_size == 8
    assert shared == ConsumerConfig()  # one config, several clients, each its own overrides
    assert slow.config.consume_concurrency == ConsumerConfig().consume_concurrency
    producer_config = ProducerConfig()
    Producer("p", "127.0.0.1:9876", config=producer_config, retries=0)
    assert producer_config == ProducerConfig()


@pytest.mark.parametrize(
    ("make", "name", "value", "message"),
    [
        (Consumer, "consume_concurrency", True, "positive integer"),
        (Producer, "max_in_flight", True, "positive integer"),
        (Producer, "batch_in_flight", 0, "positive integer"),  # None: the transport's
        (Consumer, "pull_threshold_for_all", False, "positive integer"),
        (Consumer, "request_timeout", "5", "positive number"),
        (Producer, "send_timeout", "5", "positive number"),
        (Consumer, "consume_timeout", True, "positive number"),
        (Producer, "request_timeout", -1.0, "positive number"),
    ],
)
def test_consumer_and_producer_reject_the_same_wrong_values(
    make: type[Consumer | Producer], name: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"{name} must be a {message}"):
        make("g", "127.0.0.1:9876", **{name: value})


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_auto_batch_is_true_false_or_none(value: object) -> None:
    with pytest.raises(ConfigError, match="auto_batch must be True, False or None"):
        Producer("p", "127.0.0.1:9876", auto_batch=value)


@pytest.mark.anyio
async def test_remoting_sends_one_message_per_request_unless_asked() -> None:
    # None (the default) means off over remoting, as in Java (on over gRPC: tested
    # against the Proxy in tests/integration/test_grpc.py).
    from tests.unit.test_producer_fake_broker import cluster, producer

    async with cluster(brokers=1) as fake, producer(fake) as p:
        assert p.config.auto_batch is None
        assert p.batcher is None
    async with cluster(brokers=1) as fake, producer(fake, auto_batch=True) as p:
        assert p.batcher is not None
