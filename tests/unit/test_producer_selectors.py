"""Queue choice: round-robin with fault avoidance, Java-compatible hashing, selectors."""

from __future__ import annotations

from collections import Counter

import pytest

from aiorocket.errors import ConfigError, NoRouteError
from aiorocket.message import Message, MessageQueue
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.selectors import (
    RoundRobin,
    check_selected,
    hash_selector,
    java_hash,
    java_string_hash,
)

QUEUES = [MessageQueue("t", b, i) for b in ("broker-a", "broker-b") for i in range(4)]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),
        ("hello", 99162322),
        ("order-123456789", -1902235530),  # overflows int32
        ("日本", 835047),
        ("😀", 1772899),  # a surrogate pair: two UTF-16 units
    ],
)  # values printed by Java 17 String.hashCode()
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_hash_of_ints_and_others() -> None:
    assert java_hash(42) == 42
    assert java_hash(-7) == -7
    assert java_hash(1 << 40) == 256  # Long.hashCode: (int)(v ^ (v >>> 32))
    assert java_hash(-1 << 40) == -256  # 0xFFFFFF00_00000000 -> 0xFFFFFF00
    assert java_hash(True) == 1231
    assert java_hash(3.5) == java_string_hash("3.5")


def test_hash_selector_is_stable_and_java_compatible() -> None:
    msg = Message("t", b"x")
    assert hash_selector(QUEUES, msg, "hello") == QUEUES[99162322 % 8]
    assert hash_selector(QUEUES, msg, "order-123456789") == QUEUES[2]  # Java: 2
    assert hash_selector(QUEUES, msg, -9) == QUEUES[9 % 8]
    picks = {hash_selector(QUEUES, msg, f"user-{i}") for i in range(200)}
    assert picks == set(QUEUES)  # keys spread over every queue
    with pytest.raises(NoRouteError):
        hash_selector([], msg, "k")


def test_check_selected_rejects_foreign_queues() -> None:
    assert check_selected(QUEUES[3], QUEUES) == QUEUES[3]
    with pytest.raises(ConfigError):
        check_selected(MessageQueue("t", "broker-z", 0), QUEUES)
    with pytest.raises(ConfigError):
        check_selected("broker-a:0", QUEUES)


def test_round_robin_visits_every_queue_in_turn() -> None:
    rr = RoundRobin(start=5)
    picks = [rr.select(QUEUES) for _ in range(24)]
    assert picks[:3] == [QUEUES[5], QUEUES[6], QUEUES[7]]
    assert Counter(picks) == {q: 3 for q in QUEUES}
    with pytest.raises(NoRouteError):
        rr.select([])


def test_round_robin_skips_unavailable_brokers() -> None:
    clock = Clock()
    fault = LatencyFaultTolerance(clock=clock)
    fault.record("broker-a", 0, failed=True)
    rr = RoundRobin(start=0)
    picks = [rr.select(QUEUES, fault=fault) for _ in range(8)]
    assert {q.broker_name for q in picks} == {"broker-b"}
    clock.now += 11  # isolation over
    picks = [rr.select(QUEUES, fault=fault) for _ in range(8)]
    assert {q.broker_name for q in picks} == {"broker-a", "broker-b"}


def test_round_robin_avoids_the_broker_that_just_failed() -> None:
    rr = RoundRobin(start=0)
    for _ in range(8):
        assert rr.select(QUEUES, avoid="broker-a").broker_name == "broker-b"
    single = QUEUES[:4]  # only broker-a: nothing else to move to
    assert rr.select(single, avoid="broker-a").broker_name == "broker-a"


def test_round_robin_uses_the_least_bad_broker_when_all_are_unavailable() -> None:
    fault = LatencyFaultTolerance(clock=Clock())
    fault.record("broker-a", 0, failed=True)  # 10 s
    fault.record("broker-b", 600)  # 2 s
    rr = RoundRobin(start=0)
    assert {rr.select(QUEUES, fault=fault).broker_name for _ in range(8)} == {"broker-b"}
    # avoid wins over "least bad" while another broker exists
    assert rr.select(QUEUES, avoid="broker-b", fault=fault).broker_name == "broker-a"


def _old_select(rr_start: int, queues: list[MessageQueue], avoid: str | None,
                fault: LatencyFaultTolerance | None) -> MessageQueue:  # fmt: skip
    """RoundRobin.select as it was before it looked at each broker once (the reference)."""
    n = len(queues)
    for i in range(n):
        q = queues[(rr_start + i) % n]
        if q.broker_name != avoid and (fault is None or fault.is_available(q.broker_name)):
            return q
    return RoundRobin(rr_start).select(queues, avoid=avoid, fault=fault)


@pytest.mark.parametrize("down", [(), ("a",), ("b",), ("a", "b"), ("a", "b", "c")])
@pytest.mark.parametrize("avoid", [None, "a", "b", "z"])
def test_round_robin_picks_as_it_did_per_queue(down: tuple[str, ...], avoid: str | None) -> None:
    """One fault-table look per broker chooses the queue a look per queue chose."""
    queues = [MessageQueue("t", b, i) for b in ("a", "b", "c") for i in range(3)]
    clock = [100.0]
    fault = LatencyFaultTolerance(clock=lambda: clock[0])
    for b in down:
        fault.record(b, 600 + 100 * ord(b))  # unavailable for 2 s
    for start in range(len(queues) + 2):
        got = RoundRobin(start).select(queues, avoid=avoid, fault=fault)
        assert got == _old_select(start, queues, avoid, fault)
