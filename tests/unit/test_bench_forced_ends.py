"""benchmarks/_common.forced_ends: the brokers' stalled-op-queue ends an exactly-once
figure must not include (benchmarks/README.md, the Spark sink, round 3)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


common = _load()

LINE = (
    "2026-11-29 16:54:19 WARN EndTransactionThread_3 - Force add remove op data. queueId=0\n"
)


def test_counts_the_forced_ends_of_every_broker(tmp_path: Path) -> None:
    cluster = SimpleNamespace(base_dir=tmp_path)
    assert common.forced_ends(cluster) == 0  # no logs yet
    for broker, lines in (("broker-a", 2), ("broker-b", 3)):
        logs = tmp_path / broker / "logs" / "rocketmqlogs"
        logs.mkdir(parents=True)
        (logs / "transaction.log").write_text("INFO other\n" + LINE * lines)
    assert common.forced_ends(cluster) == 5
