"""A smoke set against a RocketMQ 5.3.x cluster (1 broker with its local-mode Proxy), over
both transports: remoting (to the broker) and the Proxy's gRPC endpoint. Most tests are
the default suite's own (``reuse``), run here with the 5.3 cluster as ``rocketmq``.
``-m 'not broker53'`` deselects them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiorocket.testing.broker import LocalRocketMQ

from . import test_consumer, test_grpc, test_grpc_push, test_producer, test_recall
from . import test_remoting_pop as pop
from .reuse import reuse

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.broker53]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the gRPC clients are asyncio-only


@pytest.fixture
def rocketmq(rocketmq53: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    assert rocketmq53.version.startswith("5.3.") and rocketmq53.has_proxy
    yield rocketmq53


topic = test_producer.topic

# -- remoting, to the broker
test_send_result_and_stored_message_agree = reuse(
    test_producer.test_send_result_and_stored_message_agree
)
test_async_for_acks_on_next_and_redelivers_unsettled = reuse(
    test_consumer.test_async_for_acks_on_next_and_redelivers_unsettled
)
test_consume_and_ack = reuse(pop.test_consume_and_ack)  # POP over remoting
# Recall (5.3.2+) over both transports.
test_a_recalled_timer_message_is_never_delivered = reuse(
    test_recall.test_a_recalled_timer_message_is_never_delivered
)

# -- the Proxy's gRPC endpoint
# (Not test_grpc_producer_to_remoting_consumer: a 5.3.3 Proxy stores every message of a
# multi-message SendMessage with the first one's message id; 5.5.0 keeps each its own.)
test_delivery_time = reuse(test_grpc.test_delivery_time)
test_remoting_producer_to_simple_consumer = reuse(
    test_grpc.test_remoting_producer_to_simple_consumer
)
test_the_consumer_class_over_a_proxy_endpoint_handler_and_async_for = reuse(
    test_grpc_push.test_the_consumer_class_over_a_proxy_endpoint_handler_and_async_for
)

