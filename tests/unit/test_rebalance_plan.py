"""The rebalance's decision, rebalance.plan: current queues and target assignment in,
queues to revoke and to start out. Pure: no consumer, no broker, no fakes."""

from __future__ import annotations

from aiorocket.consumer.rebalance import Plan, plan
from aiorocket.message import MessageQueue


def qs(topic: str, *ids: int, broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in ids]


def test_nothing_owned_everything_added_in_order() -> None:
    target = frozenset(qs("t", 3, 1, 2))
    assert plan([], {"t": target}) == Plan(revoke=(), add=tuple(qs("t", 1, 2, 3)))


def test_the_steady_state_changes_nothing() -> None:
    owned = qs("t", 0, 1) + qs("u", 0)
    assert plan(owned, {"t": frozenset(qs("t", 1, 0)), "u": frozenset(qs("u", 0))}) == Plan(
        (), ()
    )


def test_a_shrinking_share_revokes_and_a_moved_one_swaps() -> None:
    owned = qs("t", 0, 1, 2, 3)
    assert plan(owned, {"t": frozenset(qs("t", 0, 1))}) == Plan(tuple(qs("t", 2, 3)), ())
    assert plan(owned, {"t": frozenset(qs("t", 2, 3, 4))}) == Plan(
        tuple(qs("t", 0, 1)), tuple(qs("t", 4))
    )


def test_an_empty_target_revokes_the_topic() -> None:
    assert plan(qs("t", 0, 1), {"t": frozenset()}) == Plan(tuple(qs("t", 0, 1)), ())


def test_topics_not_planned_keep_their_queues() -> None:
    # A topic with no route this pass is left out of the targets: its queues stay.
    owned = qs("t", 0) + qs("gone", 0, 1)
    assert plan(owned, {"t": frozenset(qs("t", 0, 1))}) == Plan((), tuple(qs("t", 1)))


def test_queues_of_several_topics_and_brokers_in_one_plan() -> None:
    owned = qs("t", 0) + qs("t", 0, broker="broker-b") + qs("u", 5)
    targets = {
        "t": frozenset(qs("t", 0, broker="broker-b") + qs("t", 1, broker="broker-b")),
        "u": frozenset(qs("u", 4)),
    }
    result = plan(owned, targets)
    assert set(result.revoke) == {*qs("t", 0), *qs("u", 5)}
    assert result.add == tuple(sorted(qs("t", 1, broker="broker-b") + qs("u", 4)))
