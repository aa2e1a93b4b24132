"""The 4.x feature set against a RocketMQ 4.9.x cluster (2 brokers, no Proxy), through the
public API: most tests are the default suite's own (``reuse``), run here with the 4.9
cluster as ``rocketmq``. ``-m 'not broker49'`` deselects them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.testing.broker import LocalRocketMQ

from . import (
    test_admin,
    test_cli,
    test_consumer,
    test_consumption_models,
    test_namespace,
    test_producer,
)
from . import test_pull_consumer_commits as pull_commits
from .reuse import reuse

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.broker49]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rocketmq(rocketmq49: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    assert rocketmq49.major == 4 and not rocketmq49.has_proxy
    yield rocketmq49


topic = test_producer.topic  # the producer tests' fixture

# -- producer: sync, compressed, ordered, batches, auto-batched, delay levels, transactions
test_send_result_and_stored_message_agree = reuse(
    test_producer.test_send_result_and_stored_message_agree
)
test_compressed_body_is_stored_compressed_and_read_back_intact = reuse(
    test_producer.test_compressed_body_is_stored_compressed_and_read_back_intact
)
test_ordered_sends_land_in_one_queue_in_send_order = reuse(
    test_producer.test_ordered_sends_land_in_one_queue_in_send_order
)
test_batch_is_stored_consecutively_in_one_queue = reuse(
    test_producer.test_batch_is_stored_consecutively_in_one_queue
)
test_auto_batched_sends_are_stored_as_sent_and_match_their_results = reuse(
    test_producer.test_auto_batched_sends_are_stored_as_sent_and_match_their_results
)
# Delay levels only: a delivery time is a 5.x timer message (test_rmq_features.py).
test_delayed_message_is_not_consumable_before_its_time_and_is_after = reuse(
    test_producer.test_delayed_message_is_not_consumable_before_its_time_and_is_after,
    how=["delay_level"],
)
test_transactions_commit_rollback_and_check_back = reuse(
    test_producer.test_transactions_commit_rollback_and_check_back
)

# -- push consumer: clustering with rebalance, retry and DLQ, filters, consume timeout
test_handler_consumes_everything_and_commits = reuse(
    test_consumer.test_handler_consumes_everything_and_commits
)
test_three_consumers_share_and_reassign = reuse(
    test_consumer.test_three_consumers_share_and_reassign
)
test_retry_then_dead_letter = reuse(test_consumer.test_retry_then_dead_letter)
test_tag_and_sql_filters = reuse(test_consumer.test_tag_and_sql_filters)
test_consume_timeout_cancels_handler = reuse(test_consumer.test_consume_timeout_cancels_handler)
test_async_for_acks_on_next_and_redelivers_unsettled = reuse(
    test_consumer.test_async_for_acks_on_next_and_redelivers_unsettled
)

# -- broadcasting, orderly (queue locks), PullConsumer. (Not the tests that expect no
# committed offset for a queue never committed: a 4.9 broker answers 0 for a group without
# an offset on a queue whose messages start at 0, whatever the client asks.)
test_broadcasting_everyone_gets_everything_and_resumes_from_file = reuse(
    test_consumption_models.test_broadcasting_everyone_gets_everything_and_resumes_from_file
)
test_orderly_strict_order_with_failures_and_rebalance = reuse(
    test_consumption_models.test_orderly_strict_order_with_failures_and_rebalance
)
test_pull_consumer_subscribe_with_rebalance_listener = reuse(
    test_consumption_models.test_pull_consumer_subscribe_with_rebalance_listener
)


async def test_pull_consumer_assign_getmany_commit_and_committed(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("pull49"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)  # one queue on each broker
    q1, q2 = await pull_commits.produce(rocketmq.namesrv_addr, topic, 20)
    consumer = PullConsumer(group, rocketmq.namesrv_addr, auto_commit=False,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            **pull_commits.FAST)  # fmt: skip
    consumer.assign([q1, q2])
    async with consumer:
        assert await consumer.end_offsets([q1, q2]) == {q1: 10, q2: 10}
        got: list[bytes] = []
        with anyio.fail_after(30):
            while len(got) < 20:
                for msgs in (await consumer.getmany(timeout=5)).values():
                    got += [m.body for m in msgs]
        assert sorted(got) == sorted(b"m%d" % i for i in range(20))
        await consumer.commit({q1: 7, q2: 10})
        assert await consumer.committed(q1) == 7
    assert await pull_commits.stored_offsets(rocketmq.namesrv_addr, group, [q1, q2]) == [7, 10]


# -- namespaces
test_a_namespaced_producer_and_consumer_use_prefixed_names_and_hide_them = reuse(
    test_namespace.test_a_namespaced_producer_and_consumer_use_prefixed_names_and_hide_them
)
test_a_namespaced_pull_consumer_takes_and_gives_the_applications_queue_names = reuse(
    test_namespace.test_a_namespaced_pull_consumer_takes_and_gives_the_applications_queue_names
)

# -- the admin API
test_topic_create_list_route_and_stats = reuse(test_admin.test_topic_create_list_route_and_stats)
test_lag_describe_and_reset = reuse(test_admin.test_lag_describe_and_reset)
test_describe_a_running_group = reuse(test_admin.test_describe_a_running_group)
test_message_lookup_by_id_and_key = reuse(test_admin.test_message_lookup_by_id_and_key)

# -- the CLI commands of a 4.x operator (produce, tail, lag, reset-offset, message lookup)
aio = test_cli.aio
test_produce_n_then_tail_n_returns_the_same_bodies = reuse(
    test_cli.test_produce_n_then_tail_n_returns_the_same_bodies
)
test_lag_falls_to_zero_and_reset_offset_re_reads = reuse(
    test_cli.test_lag_falls_to_zero_and_reset_offset_re_reads
)
test_message_get_by_id_and_key = reuse(test_cli.test_message_get_by_id_and_key)
