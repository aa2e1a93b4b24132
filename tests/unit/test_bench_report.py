"""compare.py's report: invalid runs give no figure, medians and spreads use valid runs only."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load()


def _lat(p99: float, failed: int = 0, samples: int = 100) -> dict[str, Any]:
    return {
        "lat_p50_ms": p99 / 2,
        "lat_p99_ms": p99,
        "lat_samples": samples,
        "count": 1000,
        "messages": 1000,
        "rate": 5000,
        "producer": {"failed": failed, "elapsed": 1.0},
    }


def test_a_run_with_failed_sends_is_invalid() -> None:
    assert report.invalid_reason({"msgs_per_s": 1.0}) is None
    assert report.invalid_reason({"msgs_per_s": 1.0, "failed": 3}) == "3 failed sends"
    assert report.invalid_reason(_lat(5.0, failed=48_408)) == "48,408 failed sends"
    assert report.invalid_reason({"error": "boom\nstack"}) == "failed: boom"


def test_median_and_spread_skip_invalid_runs() -> None:
    runs = [_lat(4.0), _lat(6700.0, failed=10), _lat(8.0), _lat(6.0)]
    assert report.median(runs, "lat_p99_ms") == 6.0
    assert report.spread(runs, "lat_p99_ms") == (4.0, 8.0, 3)


def test_every_run_invalid_shows_invalid_not_a_figure() -> None:
    runs = [_lat(6700.0, failed=48_408), _lat(387.0, failed=1)]
    assert report.median(runs, "lat_p99_ms") == report.INVALID
    assert report.spread(runs, "lat_p99_ms") is None
    assert math.isnan(report.median([], "lat_p99_ms"))


def test_table_and_notes_name_the_invalid_client() -> None:
    results = {
        "meta": {},
        "consume": {"aiorocket": [{"msgs_per_s": 100.0, "us_cpu_per_msg": 10.0}]},
        "produce": {},
        "latency": {"aiorocket": [_lat(3.0)], "java": [_lat(6700.0, failed=48_408)]},
    }
    text = report.table(results)
    p99 = next(line for line in text.splitlines() if line.startswith("e2e latency p99"))
    assert "INVALID" in p99 and "3.00" in p99
    assert "6,700" not in p99
    assert "latency java run 1: INVALID (48,408 failed sends)" in text


def test_the_tail_split_has_a_row_per_side_with_java_beside_aiorocket() -> None:
    split = {"send_to_store_p99_ms": 15.0, "store_to_user_p99_ms": 4.0}
    java = {**_lat(30.0), "send_to_store_p99_ms": 20.0, "store_to_user_p99_ms": 9.0}
    lat = {"aiorocket": [{**_lat(21.6), **split}], "java": [java]}
    res: dict[str, Any] = {"consume": {}, "produce": {}, "send": {}, "latency": lat}
    by_name = {name: v for name, _unit, v, _target in report.rows(res)}
    assert by_name["p99 send -> stored"]["aiorocket"] == 15.0
    assert by_name["p99 send -> stored"]["java"] == 20.0
    assert by_name["p99 stored -> user"]["aiorocket"] == 4.0
    assert by_name["p99 stored -> user"]["java"] == 9.0


def _beside(send_p99: float) -> dict[str, Any]:
    return {**_lat(20.0), "producer": {"failed": 0, "elapsed": 1.0, "send_p99_ms": send_p99}}


def test_the_latency_floor_puts_the_producer_alone_beside_each_side() -> None:
    # compare.py's latency case runs the common paced producer alone too (no consumer,
    # _runs.latency_floor): its send p99 is the machine's and the brokers' share of
    # send -> stored, to read against the same producer's beside each consumer
    alone = [{"producer": {"failed": 0, "send_p99_ms": x}} for x in (16.5, 27.0, 20.1)]
    failed = {"producer": {"failed": 3, "send_p99_ms": 1.0}}
    lat = {"aiorocket": [_beside(23.2), _beside(15.8)], "java": [_beside(29.2), _beside(3.8)]}
    res: dict[str, Any] = {"consume": {}, "produce": {}, "send": {}, "latency": lat,
                           "latency_floor": [*alone, failed]}  # fmt: skip
    text = "\n".join(report.notes(res))
    assert (
        "latency floor: the common paced producer alone, send p99 20.1 ms "
        "(runs 16.5 / 27.0 / 20.1); beside each consumer: aiorocket 19.5 ms "
        "(runs 23.2 / 15.8), java 16.5 ms (runs 29.2 / 3.8)"
    ) in text
    assert "latency floor run 4: INVALID (3 failed sends)" in text
    assert not [n for n in report.notes({**res, "latency_floor": []}) if "floor" in n]
