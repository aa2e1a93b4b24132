"""compare.py's latency floor: the common paced producer of the e2e case alone (no
consumer), so that each side's send -> stored has the machine's own beside it
(benchmarks/README.md, "Goal 4, round 10")."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    import _runs

    yield _runs
    sys.modules.pop("_runs", None)


class _Env:
    """What ``_runs.latency`` and ``latency_floor`` read of ``_runs.Env``."""

    cl = object()
    broker = "broker-a"

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def producer(self, *args: Any) -> tuple[list[str], None]:
        self.asked.append(("producer", *args))
        return ["paced-child"], None

    def consumer(self, *args: Any, **kw: Any) -> tuple[list[str], None]:
        self.asked.append(("consumer", *args))
        return ["consumer-child"], None


def _fake_children(monkeypatch: pytest.MonkeyPatch, runs: ModuleType) -> list[str]:
    started: list[str] = []

    class Child:
        def __init__(self, name: str, argv: list[str], env: Any = None) -> None:
            self.argv = argv

        def start(self) -> Child:
            started.append(self.argv[0])
            return self

        def wait_ready(self) -> None:
            pass

        def wait(self, timeout: float | None = None) -> dict[str, Any]:
            return {"count": 10, "failed": 0, "send_p99_ms": 7.5}

    topics = iter(["t1", "t2"])
    monkeypatch.setattr(runs.c, "Child", Child)
    monkeypatch.setattr(runs.s, "new_topic", lambda cl, prefix, broker: next(topics))
    monkeypatch.setattr(runs.s, "wait_cluster_quiet", lambda cl: {"broker-a": 5.0})
    monkeypatch.setattr(runs.time, "sleep", lambda s: None)
    return started


def test_the_floor_is_the_latency_cases_producer_without_a_consumer(
    runs: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _fake_children(monkeypatch, runs)
    env = _Env()
    floor = runs.latency_floor(env, 20000, 4, 2)
    assert started == ["paced-child"]  # no consumer child
    assert env.asked == [("producer", runs.COMMON_SENDER, "paced", "t1", 120000, 20000)]
    assert floor["producer"]["send_p99_ms"] == floor["send_p99_ms"] == 7.5
    assert floor["rate"] == 20000 and floor["messages"] == 120000
    # the same producer, rate and count as a side's run
    env_side = _Env()
    runs.latency(env_side, "java", 20000, 4, 2)
    assert [a for a in env_side.asked if a[0] == "producer"] == [
        ("producer", runs.COMMON_SENDER, "paced", "t2", 120000, 20000)
    ]
