"""Allocation strategies: partition properties, order independence, Java golden results.

The golden examples marked "Java 5.5.0" were produced by running the Java client's own
strategy classes (rocketmq-client 5.5.0) on the same inputs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.consumer.allocation import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    SeparatorMachineRoomResolver,
    allocate_averagely,
    allocate_averagely_by_circle,
    md5_hash,
)
from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue

ROOMS = ["r1", "r2", "r3"]
RESOLVER = SeparatorMachineRoomResolver("@")

# Characters chosen so Java (UTF-16) and Python (code point) string order differ.
_CHARS = st.sampled_from(["a", "b", "Z", "0", "-", "é", "\ue000", "\U0001f600"])
_NAMES = st.text(_CHARS, min_size=1, max_size=4)

queue_sets = st.sets(
    st.builds(
        MessageQueue,
        st.sampled_from(["T1", "T2"]),
        st.builds(lambda r, b: f"{r}@{b}", st.sampled_from(ROOMS), st.sampled_from(["a", "b"])),
        st.integers(0, 15),
    ),
    max_size=40,
)
client_sets = st.sets(
    st.builds(lambda r, n: f"{r}@{n}", st.sampled_from([*ROOMS, "r4"]), _NAMES),
    min_size=1,
    max_size=12,
)

PARTITIONING: list[AllocateStrategy] = [
    allocate_averagely,
    allocate_averagely_by_circle,
    AllocateConsistentHash(),
    AllocateConsistentHash(virtual_nodes=1),
    AllocateConsistentHash(virtual_nodes=3),
    AllocateMachineRoomNearby(allocate_averagely, RESOLVER),
    AllocateMachineRoomNearby(allocate_averagely_by_circle, RESOLVER),
    AllocateMachineRoomNearby(AllocateConsistentHash(3), RESOLVER),
]
ALL: list[AllocateStrategy] = [
    *PARTITIONING,
    AllocateByMachineRoom({"r1", "r3"}),
    AllocateByConfig([MessageQueue("T1", "r1@a", 0), MessageQueue("T2", "r2@b", 3)]),
]
strategy_ids = [repr(s) for s in ALL]


def q(i: int, broker: str = "broker-a", topic: str = "TopicTest") -> MessageQueue:
    return MessageQueue(topic, broker, i)


def allocations(
    strategy: AllocateStrategy, queues: Sequence[MessageQueue], cids: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy("group", cid, queues, cids) for cid in cids}


def assert_partition(result: dict[str, list[MessageQueue]], expected: set[MessageQueue]) -> None:
    flat = [mq for owned in result.values() for mq in owned]
    assert len(flat) == len(set(flat)), "a queue was given to two clients (or twice)"
    assert set(flat) == expected


# ------------------------------------------------------------------ properties


@pytest.mark.parametrize("strategy", PARTITIONING, ids=[repr(s) for s in PARTITIONING])
@given(queues=queue_sets, cids=client_sets)
@settings(max_examples=60, deadline=None)
def test_partition(strategy: AllocateStrategy, queues: set[MessageQueue], cids: set[str]) -> None:
    assert_partition(allocations(strategy, list(queues), list(cids)), queues)


@given(queues=queue_sets, cids=client_sets, idcs=st.sets(st.sampled_from(ROOMS), min_size=1))
@settings(max_examples=100, deadline=None)
def test_machine_room_partitions_selected_rooms(
    queues: set[MessageQueue], cids: set[str], idcs: set[str]
) -> None:
    strategy = AllocateByMachineRoom(idcs)
    expected = {mq for mq in queues if mq.broker_name.split("@")[0] in idcs}
    assert_partition(allocations(strategy, list(queues), list(cids)), expected)


@given(queues=queue_sets, cids=client_sets)
@settings(max_examples=100, deadline=None)
def test_nearby_keeps_queues_in_room_when_room_has_consumers(
    queues: set[MessageQueue], cids: set[str]
) -> None:
    strategy = AllocateMachineRoomNearby(allocate_averagely, RESOLVER)
    rooms_with_consumers = {RESOLVER.consumer_room(c) for c in cids}
    for cid, owned in allocations(strategy, list(queues), list(cids)).items():
        for mq in owned:
            room = RESOLVER.broker_room(mq)
            if room in rooms_with_consumers:
                assert room == RESOLVER.consumer_room(cid)


@pytest.mark.parametrize("strategy", ALL, ids=strategy_ids)
@given(queues=queue_sets, cids=client_sets, data=st.data())
@settings(max_examples=40, deadline=None)
def test_input_order_does_not_matter(
    strategy: AllocateStrategy, queues: set[MessageQueue], cids: set[str], data: st.DataObject
) -> None:
    q1, c1 = sorted(queues), sorted(cids)
    q2 = data.draw(st.permutations(q1))
    c2 = data.draw(st.permutations(c1))
    for cid in c1:
        assert strategy("g", cid, q1, c1) == strategy("g", cid, q2, c2)
    # Duplicate queues collapse, as Java's come from a set.
    assert strategy("g", c1[0], q1 + q1, c1) == strategy("g", c1[0], q1, c1)


@given(cids=client_sets)
def test_averagely_sizes_differ_by_at_most_one(cids: set[str]) -> None:
    for n in range(0, 3 * len(cids) + 2):
        queues = [q(i) for i in range(n)]
        sizes = [
            len(owned) for owned in allocations(allocate_averagely, queues, list(cids)).values()
        ]
        assert max(sizes) - min(sizes) <= 1


# ---------------------------------------------------------- common edge cases


@pytest.mark.parametrize("strategy", ALL, ids=strategy_ids)
def test_empty_inputs_and_strangers_get_nothing(strategy: AllocateStrategy) -> None:
    queues = [MessageQueue("T1", "r1@a", 0), MessageQueue("T2", "r2@b", 3), q(1)]
    assert strategy("g", "r1@c", [], ["r1@c"]) == []
    assert strategy("g", "r1@c", queues, []) == []
    assert strategy("g", "r1@stranger", queues, ["r1@c", "r2@d"]) == []


@pytest.mark.parametrize("strategy", ALL, ids=strategy_ids)
def test_invalid_arguments(strategy: AllocateStrategy) -> None:
    with pytest.raises(ConfigError):
        strategy("g", "", [q(0)], ["c"])
    with pytest.raises(ConfigError):
        strategy("g", "c", [q(0)], "c")


def test_constructor_validation() -> None:
    with pytest.raises(ConfigError):
        AllocateConsistentHash(virtual_nodes=0)
    with pytest.raises(ConfigError):
        AllocateByMachineRoom(set())
    with pytest.raises(ConfigError):
        AllocateByMachineRoom("r1")
    with pytest.raises(ConfigError):
        AllocateByConfig([])
    with pytest.raises(ConfigError):
        SeparatorMachineRoomResolver("")


def test_names() -> None:
    assert allocate_averagely.name == "AVG"
    assert AllocateAveragely().name == "AVG"
    assert allocate_averagely_by_circle.name == "AVG_BY_CIRCLE"
    assert AllocateAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateConsistentHash().name == "CONSISTENT_HASH"
    assert AllocateByConfig([q(0)]).name == "CONFIG"
    assert AllocateByMachineRoom({"r1"}).name == "MACHINE_ROOM"
    nearby = AllocateMachineRoomNearby(allocate_averagely_by_circle, RESOLVER)
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


# -------------------------------------------------------------- known examples


def test_averagely_reference_examples() -> None:
    five = [q(i) for i in range(5)]
    assert allocations(allocate_averagely, five, ["c0", "c1"]) == {
        "c0": five[0:3],
        "c1": five[3:5],
    }
    two = [q(i) for i in range(2)]
    assert allocations(allocate_averagely, two, ["c0", "c1", "c2"]) == {
        "c0": [two[0]],
        "c1": [two[1]],
        "c2": [],
    }
    ten = [q(i) for i in range(10)]
    assert [len(v) for v in allocations(allocate_averagely, ten, ["a", "b", "c"]).values()] == [
        4,
        3,
        3,
    ]


def test_averagely_sorts_queues_like_java() -> None:
    queues = [q(1, "broker-b"), q(0, "broker-b"), q(1, "broker-a"), q(0, "broker-a")]
    assert allocate_averagely("g", "c0", queues, ["c1", "c0"]) == [
        q(0, "broker-a"),
        q(1, "broker-a"),
    ]


def test_circle_example() -> None:
    five = [q(i) for i in range(5)]
    assert allocations(allocate_averagely_by_circle, five, ["c1", "c0"]) == {
        "c1": [five[1], five[3]],
        "c0": [five[0], five[2], five[4]],
    }
    # Queues across brokers are dealt round-robin in sorted order.
    eight = [q(i, b) for b in ("broker-a", "broker-b") for i in range(4)]
    result = allocations(allocate_averagely_by_circle, eight, ["x", "y", "z"])
    assert result["x"] == [eight[0], eight[3], eight[6]]
    assert result["y"] == [eight[1], eight[4], eight[7]]
    assert result["z"] == [eight[2], eight[5]]


def test_machine_room_java_example() -> None:
    # Same inputs as the Java client's AllocateMessageQueueByMachineRoomTest.
    queues = [
        MessageQueue("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)
    ]
    strategy = AllocateByMachineRoom({"room1"})
    cids = ["CID_PREFIX0", "CID_PREFIX1"]
    ids = {c: [mq.queue_id for mq in strategy("", c, queues, cids)] for c in cids}
    assert ids == {"CID_PREFIX0": [0, 1, 4], "CID_PREFIX1": [2, 3]}


def test_machine_room_broker_name_format() -> None:
    strategy = AllocateByMachineRoom({"room1"})
    assert strategy.selects(MessageQueue("t", "room1@b", 0))
    assert strategy.selects(MessageQueue("t", "room1@b@", 0))  # Java split drops trailing ""
    assert not strategy.selects(MessageQueue("t", "room1@", 0))
    assert not strategy.selects(MessageQueue("t", "room1@b@c", 0))
    assert not strategy.selects(MessageQueue("t", "room2@b", 0))
    assert not strategy.selects(MessageQueue("t", "room1", 0))


def test_md5_hash_matches_java_md5hash() -> None:
    # MD5("abc") = 900150983cd24fb0...; Java keeps the first four bytes as a long.
    assert md5_hash("abc") == 0x90015098
    assert md5_hash("") == 0xD41D8CD9


def test_consistent_hash_java_golden() -> None:
    # Java 5.5.0 AllocateMessageQueueConsistentHash on the same inputs.
    queues = [q(i, b) for b in ("broker-a", "broker-b") for i in range(4)]
    cids = ["10.0.0.1@1234", "10.0.0.2@1234", "10.0.0.3@1234"]
    a0, a1, a2, a3, b0, b1, b2, b3 = queues
    assert allocations(AllocateConsistentHash(), queues, cids) == {
        cids[0]: [b1, b3],
        cids[1]: [a3, b2],
        cids[2]: [a0, a1, a2, b0],
    }
    assert allocations(AllocateConsistentHash(3), queues, cids) == {
        cids[0]: [b1],
        cids[1]: [],
        cids[2]: [a0, a1, a2, a3, b0, b2, b3],
    }


def test_consistent_hash_moves_only_the_leavers_queues() -> None:
    queues = [q(i, b) for b in ("broker-a", "broker-b", "broker-c") for i in range(8)]
    cids = [f"10.0.0.{i}@1" for i in range(6)]
    strategy = AllocateConsistentHash()
    before = {mq: c for c, owned in allocations(strategy, queues, cids).items() for mq in owned}
    gone = cids[2]
    after = {
        mq: c
        for c, owned in allocations(strategy, queues, [c for c in cids if c != gone]).items()
        for mq in owned
    }
    for mq, owner in before.items():
        if owner != gone:
            assert after[mq] == owner


def test_nearby_java_golden() -> None:
    # Java 5.5.0 AllocateMachineRoomNearby(AVG) with a "<room>@..." resolver.
    queues = [MessageQueue("T", b, i) for b in ("r1@ba", "r2@bb", "r3@bc") for i in range(3)]
    cids = ["r1@c0", "r1@c1", "r2@c0"]
    strategy = AllocateMachineRoomNearby(allocate_averagely, RESOLVER)
    r1 = [MessageQueue("T", "r1@ba", i) for i in range(3)]
    r2 = [MessageQueue("T", "r2@bb", i) for i in range(3)]
    r3 = [MessageQueue("T", "r3@bc", i) for i in range(3)]
    assert allocations(strategy, queues, cids) == {
        "r1@c0": [r1[0], r1[1], r3[0]],
        "r1@c1": [r1[2], r3[1]],
        "r2@c0": [*r2, r3[2]],
    }


def test_nearby_rejects_queue_or_client_without_room() -> None:
    strategy = AllocateMachineRoomNearby(allocate_averagely, RESOLVER)
    with pytest.raises(ConfigError):
        strategy("g", "r1@c", [MessageQueue("T", "plain", 0)], ["r1@c"])
    with pytest.raises(ConfigError):
        strategy("g", "r1@c", [MessageQueue("T", "r1@b", 0)], ["r1@c", "no-room"])


def test_by_config_returns_configured_queues_present_in_route() -> None:
    wanted = [q(0), q(2), q(9, topic="Other")]
    strategy = AllocateByConfig(wanted)
    route = [q(i) for i in range(4)]
    # Every member gets its configured queues; this is not a partition.
    assert allocations(strategy, route, ["a", "b"]) == {"a": [q(0), q(2)], "b": [q(0), q(2)]}
    assert strategy("g", "a", [q(9, topic="Other")], ["a"]) == [q(9, topic="Other")]


def test_java_string_order_is_utf16() -> None:
    # U+1F600 (surrogates D83D DE00) sorts before U+E000 in Java, after it in Python.
    low, high = "\U0001f600", "\ue000"
    assert sorted([low, high]) == [high, low]
    queues = [q(0), q(1)]
    assert allocate_averagely("g", low, queues, [high, low]) == [q(0)]
    assert allocate_averagely("g", high, queues, [low, high]) == [q(1)]


def test_duplicate_client_ids_follow_java_indexof() -> None:
    # Java keeps duplicates and uses the first index; the duplicate's slice is orphaned.
    queues = [q(i) for i in range(6)]
    cids = ["a", "a", "b"]
    assert allocate_averagely("g", "a", queues, cids) == queues[0:2]
    assert allocate_averagely("g", "b", queues, cids) == queues[4:6]


def test_shuffled_large_example_is_stable() -> None:
    rng = random.Random(7)
    queues = [q(i, f"r{b}@b{b}", f"T{t}") for t in range(3) for b in "123" for i in range(8)]
    cids = [f"r{i % 4}@10.0.{i}.1" for i in range(11)]
    for strategy in PARTITIONING:
        expected = allocations(strategy, queues, cids)
        for _ in range(5):
            qs, cs = queues[:], cids[:]
            rng.shuffle(qs)
            rng.shuffle(cs)
            assert allocations(strategy, qs, cs) == {c: expected[c] for c in cs}
