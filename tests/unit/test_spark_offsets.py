"""The connector's pure parts: option parsing, canonical offsets, rate limits, splits."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue
from aiorocket.spark._offsets import Range, from_json, rate_limit, split_ranges, to_json
from aiorocket.spark._options import EARLIEST, LATEST, parse_read, parse_write

A0 = MessageQueue("t", "broker-a", 0)
A1 = MessageQueue("t", "broker-a", 1)
B10 = MessageQueue("t", "broker-b", 10)
B2 = MessageQueue("t", "broker-b", 2)


def test_importing_the_core_never_imports_pyspark() -> None:
    code = (
        "import sys, aiorocket, aiorocket.consumer, aiorocket.producer, "
        "aiorocket.consumer.pull_consumer, aiorocket.client.instance\n"
        "bad = [m for m in ('pyspark', 'pyarrow', 'py4j') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spark_finds_the_format_through_pyspark_rocketmq() -> None:
    from pyspark.sql.datasource import DataSource

    import pyspark_rocketmq
    from aiorocket.spark import RocketMQDataSource

    assert pyspark_rocketmq.DefaultSource is RocketMQDataSource
    assert issubclass(RocketMQDataSource, DataSource)
    assert RocketMQDataSource.name() == "rocketmq"


def test_offsets_json_is_canonical_whatever_the_insertion_order() -> None:
    one = to_json({B10: 5, A1: 2, B2: 7, A0: 1})
    two = to_json({A0: 1, B2: 7, A1: 2, B10: 5})
    assert json.dumps(one) == json.dumps(two)
    assert list(one["t"]) == ["broker-a", "broker-b"]
    assert list(one["t"]["broker-b"]) == ["2", "10"]  # numeric order, as the ids sort
    assert from_json(json.loads(json.dumps(one))) == {A0: 1, A1: 2, B2: 7, B10: 5}


def test_rate_limit_shares_in_proportion_and_moves_small_backlogs() -> None:
    start = {A0: 0, A1: 0, B2: 0}
    latest = {A0: 100, A1: 10, B2: 1}
    out = rate_limit(start, latest, 20)
    assert out[A0] == 18  # 20 * 100/111 = 18.0 -> floor
    assert out[A1] == 1  # 1.8 -> floor
    assert out[B2] == 1  # 0.18 < 1 -> ceil
    assert rate_limit(start, latest, 1000) == latest


def test_split_ranges_by_size_and_min_partitions() -> None:
    ranges = [Range(A0, 0, 10), Range(A1, 5, 5), Range(B2, 0, 30)]
    parts = split_ranges(ranges, min_partitions=None, max_records=7)
    assert [p.size for p in parts if p.mq == A0] == [5, 5]
    assert all(p.size <= 7 for p in parts)
    assert sum(p.size for p in parts) == 40
    parts = split_ranges(ranges, min_partitions=8, max_records=None)
    assert len(parts) >= 8
    assert sum(p.size for p in parts) == 40
    # contiguous, no overlap
    b = sorted((p.start, p.end) for p in parts if p.mq == B2)
    assert b[0][0] == 0 and b[-1][1] == 30
    assert all(x[1] == y[0] for x, y in itertools.pairwise(b))


def _read(stream: bool | None = False, **options: str) -> object:
    base = {"nameServer": "127.0.0.1:9876", "subscribe": "t"}
    base.update(options)
    return parse_read(base, stream=stream)


def test_offset_options() -> None:
    spec = _read(startingOffsets='{"t": {"broker-a": {"0": 5, "1": -2}}}').starting  # type: ignore[attr-defined]
    assert spec.kind == "offsets" and spec.offsets == {A0: 5, A1: EARLIEST}
    end = _read(endingOffsets='{"t": {"broker-b": {"2": -1}}}').ending  # type: ignore[attr-defined]
    assert end.offsets == {B2: LATEST} and end.default == LATEST
    assert _read().starting.kind == "earliest"  # type: ignore[attr-defined]
    assert _read(stream=True).starting.kind == "latest"  # type: ignore[attr-defined]
    assert _read(STARTINGTIMESTAMP="123").starting.timestamp == 123  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "stream", "needle"),
    [
        ({"startingOffsets": "latest"}, False, "not allowed for a batch read"),
        ({"endingOffsets": "earliest"}, False, "not allowed for a batch read"),
        ({"startingOffsets": '{"t": {"broker-a": {"0": -1}}}'}, False, "-1 (latest)"),
        ({"startingOffsets": '{"t": {"broker-a": {"x": 1}}}'}, False, "queue id 'x'"),
        ({"startingOffsets": '{"t": {"broker-a": {"0": -7}}}'}, False, "-2 (earliest)"),
        ({"startingOffsets": "soon"}, True, "must be 'earliest', 'latest'"),
        ({"startingTimestamp": "1", "startingOffsets": "earliest"}, True, "only one of"),
        ({"startingTimestamp": "yesterday"}, True, "epoch milliseconds"),
        ({"endingOffsets": "latest"}, True, "batch reads only"),
        ({"maxOffsetsPerTrigger": "10"}, False, "readStream only"),
        ({"maxOffsetsPerTrigger": "0"}, True, "integer >= 1"),
        ({"subscribe": "t", "assign": '{"t": {"broker-a": [0]}}'}, True, "exactly one of"),
        ({"assign": '{"t": {"broker-a": ["0"]}}', "subscribe": ""}, True, "option assign"),
        ({"subscribePattern": "(", "subscribe": ""}, True, "not a valid regex"),
        ({"nameServer": "nohost"}, True, "not host:port"),
        ({"commitOffsetsToGroup": "bad group"}, True, "invalid commitOffsetsToGroup group"),
    ],
)
def test_read_option_errors(options: dict[str, str], stream: bool, needle: str) -> None:
    with pytest.raises(ConfigError, match=__import__("re").escape(needle)):
        _read(stream=stream, **options)


def test_write_options() -> None:
    opts = parse_write({"nameserver": "h:1", "topic": " out ", "sendTimeoutMs": "500"})
    assert opts.topic == "out" and opts.send_timeout == 0.5
    with pytest.raises(ConfigError, match="nameServer is required"):
        parse_write({"topic": "x"})
    with pytest.raises(ConfigError, match="unknown rocketmq sink option"):
        parse_write({"nameServer": "h:1", "subscribe": "x"})


def test_write_options_through_a_proxy() -> None:
    opts = parse_write({"proxy": " 127.0.0.1:8081 ", "topic": "out"})
    assert opts.proxy == "127.0.0.1:8081" and opts.client.namesrv == ""
    assert parse_write({"nameServer": "h:1", "topic": "out"}).proxy is None
    # Exactly-once: over gRPC the rows wait for the broker's check-backs, 6 s at least.
    eos = {"deliveryGuarantee": "exactly-once", "checkpointLocation": "/c", "topic": "out"}
    assert parse_write({"proxy": "h:1", **eos}).txn_timeout == 6
    assert parse_write({"nameServer": "h:1", **eos}).txn_timeout == 300


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"proxy": "h:1", "nameServer": "h:2"}, "nameServer and proxy exclude each other"),
        ({"proxy": "nohost"}, "option proxy must be a Proxy's gRPC endpoint"),
        ({"proxy": "h:0"}, "option proxy must be a Proxy's gRPC endpoint"),
    ],
)
def test_write_option_errors_through_a_proxy(options: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=__import__("re").escape(needle)):
        parse_write(options)


def test_a_read_refuses_the_proxy() -> None:
    with pytest.raises(ConfigError, match="the Proxy does not serve; give nameServer"):
        parse_read({"proxy": "h:1", "subscribe": "t"}, stream=True)


def test_one_runtime_and_one_client_per_process_and_cluster() -> None:
    """Executor workers reuse one event loop and one client per cluster across tasks;
    a forked child (Spark's worker daemon forks) starts its own."""
    from aiorocket.spark import _runtime
    from aiorocket.spark._options import ClientOptions

    rt = _runtime.runtime()
    a = ClientOptions("127.0.0.1:1")
    first = rt.client(a)
    assert _runtime.runtime() is rt and rt.client(ClientOptions("127.0.0.1:1")) is first
    assert rt.client(ClientOptions("127.0.0.1:2")) is not first

    async def client_id(client: object) -> str:
        return str(client.client_id)  # type: ignore[attr-defined]

    assert _runtime.call(client_id, a) == first.client_id  # runs on the runtime's loop
    rt.pid = -1  # as seen from a forked child
    try:
        assert _runtime.runtime() is not rt
    finally:
        _runtime.runtime().close()
        _runtime._runtime = rt
        rt.pid = __import__("os").getpid()
