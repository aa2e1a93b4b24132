"""Latency fault tolerance: the Java table, isolation after failures, recovery."""

from __future__ import annotations

import pytest

from aiorocket.producer.fault import (
    FAILURE_LATENCY_MS,
    LATENCY_MAX_MS,
    NOT_AVAILABLE_MS,
    LatencyFaultTolerance,
    not_available_duration,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        (0, 0), (49, 0), (50, 0), (549, 0), (550, 2000), (1799, 2000), (1800, 5000),
        (3000, 6000), (4999, 6000), (5000, 10000), (15000, 30000), (10**9, 30000),
    ],
)  # fmt: skip
def test_duration_follows_the_java_table(latency: int, expected: int) -> None:
    assert not_available_duration(latency) == expected


def test_table_is_the_java_5x_one() -> None:
    assert LATENCY_MAX_MS == (50, 100, 550, 1800, 3000, 5000, 15000)
    assert NOT_AVAILABLE_MS == (0, 0, 2000, 5000, 6000, 10000, 30000)


def test_slow_broker_is_avoided_for_a_time_growing_with_latency() -> None:
    clock = Clock()
    ft = LatencyFaultTolerance(clock=clock)
    assert ft.is_available("a")  # never seen
    assert ft.record("a", 10) == 0
    assert ft.is_available("a")
    assert ft.record("a", 600) == 2.0
    assert not ft.is_available("a")
    assert ft.unavailable_for("a") == pytest.approx(2.0)
    clock.now += 1.999
    assert not ft.is_available("a")
    clock.now += 0.001
    assert ft.is_available("a")
    assert ft.record("a", 2000) == 5.0


def test_failure_isolates_the_broker_and_success_restores_it() -> None:
    clock = Clock()
    ft = LatencyFaultTolerance(clock=clock)
    assert ft.record("a", 3, failed=True) == not_available_duration(FAILURE_LATENCY_MS) / 1000
    assert ft.unavailable_for("a") == pytest.approx(10.0)  # 5.x: failure = 10 s latency
    assert ft.snapshot()["a"].latency_ms == FAILURE_LATENCY_MS
    ft.record("a", 5)  # a good send (e.g. an ordered one that had to go there) restores it
    assert ft.is_available("a")
    ft.record("a", 20_000, failed=True)  # slower than the failure latency: kept
    assert ft.unavailable_for("a") == pytest.approx(30.0)
    ft.forget("a")
    assert ft.is_available("a")


def test_least_bad_prefers_available_then_soonest_then_fastest() -> None:
    clock = Clock()
    ft = LatencyFaultTolerance(clock=clock)
    assert ft.least_bad([]) is None
    ft.record("a", 0, failed=True)  # 10 s
    ft.record("b", 2000)  # 5 s
    ft.record("c", 600)  # 2 s
    assert ft.least_bad(["a", "b", "c"]) == "c"
    assert ft.least_bad(["a", "b"]) == "b"
    assert ft.least_bad(["a", "b", "new"]) == "new"
    clock.now += 60
    ft.record("x", 40)
    ft.record("y", 10)
    assert ft.least_bad(["x", "y"]) == "y"


def test_rejects_inconsistent_tables() -> None:
    with pytest.raises(ValueError):
        LatencyFaultTolerance(latency_max=(1, 2), not_available=(0,))
    with pytest.raises(ValueError):
        LatencyFaultTolerance(latency_max=(5, 1), not_available=(0, 0))


@pytest.mark.parametrize(
    ("latency_max", "not_available"),
    [
        (LATENCY_MAX_MS, NOT_AVAILABLE_MS),
        ((10, 20, 30), (5, 0, 7)),  # a first threshold that avoids already
        ((10, 20), (0, 0)),  # a table that never avoids
    ],
)
def test_record_avoids_a_broker_as_the_table_says_for_every_latency(
    latency_max: tuple[int, ...], not_available: tuple[int, ...]
) -> None:
    """``record`` skips the table's walk below its first non-zero duration: the same
    durations as the walk, at and around every threshold and for failures."""
    clock = Clock()
    fault = LatencyFaultTolerance(clock=clock, latency_max=latency_max, not_available=not_available)
    latencies = [0.0, float("nan"), 10.0**9]
    for t in latency_max:
        latencies += [t - 0.5, t, t + 0.5]
    for latency in latencies:
        expected = not_available_duration(latency, latency_max, not_available) / 1000
        assert fault.record("b", latency) == expected
        assert fault.unavailable_for("b") == pytest.approx(expected)
        failed = not_available_duration(max(latency, FAILURE_LATENCY_MS), latency_max,
                                        not_available) / 1000  # fmt: skip
        assert fault.record("b", latency, failed=True) == failed
