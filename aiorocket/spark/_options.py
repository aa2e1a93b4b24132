"""The connector's options: parsed and checked once, on the driver, into typed values.

Spark hands every option over as a string in a case-insensitive mapping. A wrong value
raises [`ConfigError`][aiorocket.errors.ConfigError] naming the option, so the mistake shows
up where the user made it (``load()``, ``start()``, ``save()``), not in a task.
Nothing here imports pyspark: the parsed values are plain, picklable dataclasses that
travel to executors inside the input partitions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue
from aiorocket.security import Credentials, tls_context

EARLIEST = -2
LATEST = -1

#: pulls of the reader go out under this group unless ``commitOffsetsToGroup`` names one
#: (a pull must name a group; nothing is committed for it).
DEFAULT_READ_GROUP = "spark-rocketmq-reader"
DEFAULT_PRODUCER_GROUP = "spark-rocketmq-sink"
DEFAULT_DEDUP_PROPERTY = "sparkDedupKey"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _int(opts: dict[str, str], name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"option {name} must be an integer >= {minimum}, got {raw!r}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """What a process needs to talk to the cluster (part of every input partition).

    Everything here is pickled into the partitions the executors read: TLS is kept as
    settings (a CA file path), made into an ``ssl.SSLContext`` where the client opens.
    """

    namesrv: str
    request_timeout: float = 3.0
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    security_token: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True

    def credentials(self) -> Credentials | None:
        if self.access_key is None or self.secret_key is None:
            return None
        return Credentials(self.access_key, self.secret_key, self.security_token)

    def tls_setting(self) -> ssl.SSLContext | bool:
        if not self.tls:
            return False
        return tls_context(self.tls_ca_file, verify=self.tls_verify)


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which queues to read: a topic list, a topic regex, or an explicit assignment."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[MessageQueue, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A start or end position, resolved against the brokers later.

    ``kind``: ``earliest``, ``latest``, ``group`` (the committed offsets of the group),
    ``offsets`` (per-queue offsets, ``EARLIEST``/``LATEST`` allowed as values),
    ``timestamp`` (one epoch-ms time for every queue) or ``timestamps`` (per queue).
    Queues a per-queue spec does not name fall back to ``default``.
    """

    kind: Literal["earliest", "latest", "group", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[MessageQueue, int] = field(default_factory=dict)
    timestamp: int = 0
    default: int = EARLIEST
    #: the option the spec came from, for error messages.
    option: str = ""


@dataclass(frozen=True, slots=True)
class Filter:
    """A tag expression (client re-checks exact tags) or an SQL92 selector."""

    expression: str = "*"
    sql: bool = False

    @property
    def tags(self) -> frozenset[str]:
        if self.sql or self.expression.strip() in ("", "*"):
            return frozenset()
        return frozenset(t.strip() for t in self.expression.split("||") if t.strip())


@dataclass(frozen=True, slots=True)
class ReadOptions:
    client: ClientOptions
    subscription: Subscription
    filter: Filter
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    pull_batch_size: int = 32
    #: pulls kept in flight per queue ahead of the one being converted.
    pull_depth: int = 4
    commit_group: str | None = None
    include_system_properties: bool = False
    group: str = DEFAULT_READ_GROUP


@dataclass(frozen=True, slots=True)
class WriteOptions:
    client: ClientOptions
    topic: str | None
    #: ``proxy``: the ``host:port`` of a 5.x Proxy (gRPC); the sink then sends through
    #: it instead of the brokers the NameServer names (``client.namesrv`` is empty).
    proxy: str | None = None
    producer_group: str = DEFAULT_PRODUCER_GROUP
    send_timeout: float = 3.0
    retries: int = 2
    dedup_property: str = DEFAULT_DEDUP_PROPERTY
    auto_batch: bool = True
    #: ``deliveryGuarantee=exactly-once``: rows go out as half messages that the
    #: driver's commit ends (see ``aiorocket.spark._txn``).
    exactly_once: bool = False
    #: directory of the commit records (exactly-once only).
    txn_log: str | None = None
    #: seconds a micro-batch has, from its first row sent to its commit, before only the
    #: broker's check-back may end its half messages (exactly-once only).
    txn_timeout: int = 300
    #: the broker's ``transactionCheckInterval`` in seconds (exactly-once through a
    #: Proxy: how long an answer may take, and a replay waits, are shares of it).
    check_interval: int = 30


_CLIENT_OPTIONS = {
    "nameserver", "rocketmq.namesrvaddr", "pulltimeoutms", "pulltimeout",
    # ACL and TLS: the same settings as a Producer/Consumer's credentials= and tls=
    "rocketmq.accesskey", "rocketmq.secretkey", "rocketmq.securitytoken",
    "rocketmq.tls", "rocketmq.tls.cafile", "rocketmq.tls.verify",
}  # fmt: skip
_READ_OPTIONS = _CLIENT_OPTIONS | {
    "subscribe", "topic", "subscribepattern", "assign", "subexpression", "filtersql",
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp",
    "failondataloss", "maxoffsetspertrigger", "minpartitions", "maxrecordsperpartition",
    "pullbatchsize", "pulldepth", "commitoffsetstogroup", "includesystemproperties",
}  # fmt: skip
#: options Spark itself adds to those a data source gets (pyspark 4.2 and 4.3): ``path``
#: from ``load(path)`` / ``save(path)`` / ``start(path)``, and for a streaming write
#: ``queryName`` and ``checkpointLocation`` (only when given as options, not as the
#: ``spark.sql.streaming.checkpointLocation`` conf). Accepted and ignored.
SPARK_OPTIONS = frozenset({"path", "queryname", "checkpointlocation"})
_WRITE_OPTIONS = _CLIENT_OPTIONS | {
    "topic", "producergroup", "sendtimeoutms", "retrytimes", "dedupkeyproperty", "autobatch",
    "deliveryguarantee", "transactionlog", "transactiontimeoutseconds", "proxy",
    "transactioncheckintervalseconds",
}  # fmt: skip


def _check_known(opts: dict[str, str], known: set[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in known and k not in SPARK_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown rocketmq {what} option(s): {', '.join(unknown)}")


def parse_client(opts: dict[str, str], *, proxy: bool = False) -> ClientOptions:
    """The cluster's address and credentials; ``proxy``: the sink goes through a Proxy
    (option ``proxy``), so no NameServer may be named."""
    namesrv = opts.get("nameserver") or opts.get("rocketmq.namesrvaddr")
    addrs: list[str] = []
    if proxy:
        if namesrv is not None:
            raise ConfigError("options nameServer and proxy exclude each other: the sink "
                              "sends through the brokers or through a Proxy")  # fmt: skip
    elif not namesrv or not namesrv.strip():
        raise ConfigError("option nameServer is required (e.g. '127.0.0.1:9876')")
    else:
        from aiorocket.client.namesrv import parse_namesrv_addrs

        addrs = parse_namesrv_addrs(namesrv)
    timeout_ms = _int(opts, "pullTimeoutMs", None) or _int(opts, "pullTimeout", 3000)
    assert timeout_ms is not None
    access, secret = opts.get("rocketmq.accesskey"), opts.get("rocketmq.secretkey")
    token = opts.get("rocketmq.securitytoken")
    if (access is None) != (secret is None) or (token is not None and access is None):
        raise ConfigError(
            "options rocketmq.accessKey and rocketmq.secretKey go together "
            "(rocketmq.securityToken needs them too)"
        )
    if access is not None and secret is not None:
        Credentials(access, secret, token)  # the same checks as the clients' (empty values)
    ca_file = opts.get("rocketmq.tls.cafile")
    tls = _bool(opts, "rocketmq.tls", ca_file is not None)
    if ca_file is not None and not os.path.isfile(ca_file):
        raise ConfigError(f"option rocketmq.tls.caFile: no such file {ca_file!r}")
    return ClientOptions(
        ";".join(addrs), timeout_ms / 1000.0, access, secret, token,
        tls=tls, tls_ca_file=ca_file, tls_verify=_bool(opts, "rocketmq.tls.verify", True),
    )  # fmt: skip


def _json(raw: str, option: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"option {option} is not valid JSON ({exc}): {raw!r}") from None


def parse_queue_map(raw: str, option: str, *, special: bool) -> dict[MessageQueue, int]:
    """``{"topic": {"broker": {"queueId": value}}}`` -> per-queue values.

    With ``special``, -2 (earliest) and -1 (latest) are accepted as offsets.
    """
    obj = _json(raw, option)
    shape = f'option {option} must look like {{"topic": {{"broker-a": {{"0": 42}}}}}}'
    if not isinstance(obj, dict) or not obj:
        raise ConfigError(f"{shape}, got {raw!r}")
    out: dict[MessageQueue, int] = {}
    lowest = LATEST - 1 if special else 0
    for topic, brokers in obj.items():
        if not isinstance(brokers, dict) or not brokers:
            raise ConfigError(f"{shape}: topic {topic!r} maps to {brokers!r}")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict) or not queues:
                raise ConfigError(f"{shape}: {topic!r}/{broker!r} maps to {queues!r}")
            for qid, value in queues.items():
                if not str(qid).isdigit():
                    raise ConfigError(f"{shape}: queue id {qid!r} is not a number")
                if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
                    allowed = (
                        "an offset >= 0, -2 (earliest) or -1 (latest)"
                        if special
                        else ("an integer >= 0")
                    )
                    raise ConfigError(
                        f"option {option}: {topic}/{broker}/{qid} must be {allowed}, got {value!r}"
                    )
                out[MessageQueue(str(topic), str(broker), int(qid))] = value
    return out


def parse_assign(raw: str) -> tuple[MessageQueue, ...]:
    """``{"topic": {"broker-a": [0, 1]}}``."""
    obj = _json(raw, "assign")
    shape = 'option assign must look like {"topic": {"broker-a": [0, 1]}}'
    if not isinstance(obj, dict) or not obj:
        raise ConfigError(f"{shape}, got {raw!r}")
    out: list[MessageQueue] = []
    for topic, brokers in obj.items():
        if not isinstance(brokers, dict) or not brokers:
            raise ConfigError(f"{shape}: topic {topic!r} maps to {brokers!r}")
        for broker, ids in brokers.items():
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
            ):
                raise ConfigError(f"{shape}: {topic!r}/{broker!r} maps to {ids!r}")
            out.extend(MessageQueue(str(topic), str(broker), i) for i in ids)
    return tuple(sorted(set(out)))


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "topic", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise ConfigError(
            "exactly one of the options subscribe (alias topic), subscribePattern, assign "
            f"is required, got {given or 'none'}"
        )
    kind = given[0]
    raw = opts[kind]
    if kind in ("subscribe", "topic"):
        topics = tuple(sorted({t.strip() for t in raw.split(",") if t.strip()}))
        if not topics:
            raise ConfigError(f"option {kind} names no topic: {raw!r}")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise ConfigError(f"option subscribePattern is not a valid regex: {exc}") from None
        return Subscription(pattern=raw)
    return Subscription(assign=parse_assign(raw))


def _filter(opts: dict[str, str]) -> Filter:
    sql = opts.get("filtersql")
    expr = opts.get("subexpression")
    if sql is not None and expr is not None:
        raise ConfigError("options subExpression and filterSql cannot be combined")
    if sql is not None:
        if not sql.strip():
            raise ConfigError("option filterSql must not be empty")
        return Filter(sql.strip(), sql=True)
    return Filter((expr or "*").strip() or "*")


def _timestamp(raw: str, option: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"option {option} must be epoch milliseconds (an integer >= 0), "
                          f"got {raw!r}")  # fmt: skip
    return value


def _spec(opts: dict[str, str], prefix: str, *, stream: bool | None) -> OffsetSpec:
    """``startingOffsets``/``startingTimestamp``/``startingOffsetsByTimestamp`` (or ending).

    ``stream`` None: the mode is not known yet; only checks common to both apply.
    """
    batch = stream is False
    names = {
        f"{prefix}offsets": f"{prefix}Offsets",
        f"{prefix}timestamp": f"{prefix}Timestamp",
        f"{prefix}offsetsbytimestamp": f"{prefix}OffsetsByTimestamp",
    }
    given = [k for k in names if k in opts]
    if len(given) > 1:
        raise ConfigError(f"only one of {', '.join(names[k] for k in given)} may be given")
    start = prefix == "starting"
    default_kind: Literal["earliest", "latest"] = "earliest" if batch and start else "latest"
    if not given:
        return OffsetSpec(default_kind, option=f"{prefix}Offsets")
    key = given[0]
    option = names[key]
    raw = opts[key]
    if key.endswith("bytimestamp"):
        stamps = parse_queue_map(raw, option, special=False)
        return OffsetSpec("timestamps", stamps, default=LATEST if not start else EARLIEST,
                          option=option)  # fmt: skip
    if key.endswith("timestamp"):
        return OffsetSpec("timestamp", timestamp=_timestamp(raw, option), option=option)
    word = raw.strip().lower()
    if word in ("earliest", "latest", "group"):
        if word == "group" and not start:
            raise ConfigError(f"option {option} cannot be 'group' (only startingOffsets)")
        if batch and start and word == "latest":
            raise ConfigError(
                "startingOffsets='latest' is not allowed for a batch read "
                "(it would read nothing); use 'earliest', JSON or a timestamp"
            )
        if batch and not start and word == "earliest":
            raise ConfigError("endingOffsets='earliest' is not allowed for a batch read")
        return OffsetSpec(word, option=option)  # type: ignore[arg-type]
    if not raw.strip().startswith("{"):
        raise ConfigError(
            f"option {option} must be 'earliest', 'latest'"
            + (", 'group'" if start else "")
            + f' or JSON like {{"topic": {{"broker-a": {{"0": 42}}}}}}, got {raw!r}'
        )
    offsets = parse_queue_map(raw, option, special=True)
    if batch and start and LATEST in offsets.values():
        raise ConfigError(f"{option}: -1 (latest) is not allowed as a batch start")
    if batch and not start and EARLIEST in offsets.values():
        raise ConfigError(f"{option}: -2 (earliest) is not allowed as a batch end")
    return OffsetSpec("offsets", offsets, default=EARLIEST if start else LATEST, option=option)


def parse_read(options: Mapping[str, str], *, stream: bool | None) -> ReadOptions:
    """The options of a read; ``stream`` None checks what both kinds of read share."""
    opts = _lower(options)
    if "proxy" in opts:
        raise ConfigError("option proxy: reading needs the brokers' pull API, which the Proxy "
                          "does not serve; give nameServer (the sink takes proxy)")  # fmt: skip
    _check_known(opts, _READ_OPTIONS, "source")
    client = parse_client(opts)
    if stream and any(k.startswith("ending") for k in opts):
        raise ConfigError("options ending* apply to batch reads only, not to readStream")
    starting = _spec(opts, "starting", stream=stream)
    ending = _spec(opts, "ending", stream=stream)
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", None)
    if max_per_trigger is not None and stream is False:
        raise ConfigError("option maxOffsetsPerTrigger applies to readStream only")
    commit_group = opts.get("commitoffsetstogroup")
    if commit_group is not None:
        from aiorocket._settings import check_group

        check_group(commit_group, "commitOffsetsToGroup")
    pull_batch = _int(opts, "pullBatchSize", 32)
    depth = _int(opts, "pullDepth", 4)
    assert pull_batch is not None and depth is not None
    return ReadOptions(
        client=client,
        subscription=_subscription(opts),
        filter=_filter(opts),
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_int(opts, "minPartitions", None),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", None),
        pull_batch_size=pull_batch,
        pull_depth=depth,
        commit_group=commit_group,
        include_system_properties=_bool(opts, "includeSystemProperties", False),
        group=commit_group or DEFAULT_READ_GROUP,
    )


def _txn_log(opts: dict[str, str]) -> str:
    """The directory of the exactly-once commit records: ``transactionLog``, else
    ``<checkpointLocation>/rocketmq-sink`` when the checkpoint is on a local disk."""
    given = opts.get("transactionlog")
    where = "option transactionLog"
    if given is None:
        ckpt = opts.get("checkpointlocation")
        if not ckpt:
            raise ConfigError(
                "deliveryGuarantee=exactly-once needs the option checkpointLocation on the "
                "writeStream (Spark does not pass the spark.sql.streaming.checkpointLocation "
                "conf to a data source) or the option transactionLog"
            )
        given, where = f"{ckpt.rstrip('/')}/rocketmq-sink", "option checkpointLocation"
    path = given[len("file:") :] if given.startswith("file:") else given
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path):
        raise ConfigError(
            f"{where}: {given!r} is not on a local filesystem; the exactly-once commit "
            "records need one the driver writes to (set the option transactionLog)"
        )
    return os.path.abspath(re.sub(r"^//+", "/", path))


def _proxy(opts: dict[str, str]) -> str | None:
    raw = opts.get("proxy")
    if raw is None:
        return None
    endpoint = raw.strip()
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"option proxy must be a Proxy's gRPC endpoint host:port "
                          f"(e.g. '127.0.0.1:8081'), got {raw!r}")  # fmt: skip
    return endpoint


def parse_write(options: Mapping[str, str], *, stream: bool = True) -> WriteOptions:
    opts = _lower(options)
    _check_known(opts, _WRITE_OPTIONS, "sink")
    proxy = _proxy(opts)
    client = parse_client(opts, proxy=proxy is not None)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option topic must not be empty")
    guarantee = opts.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise ConfigError(f"option deliveryGuarantee must be at-least-once or exactly-once, "
                          f"got {opts['deliveryguarantee']!r}")  # fmt: skip
    exactly_once = guarantee == "exactly-once"
    if exactly_once and not stream:
        raise ConfigError(
            "deliveryGuarantee=exactly-once applies to writeStream; a batch write (df.write) "
            "has no checkpoint to recover from and is at-least-once"
        )
    txn_log = _txn_log(opts) if exactly_once else None
    default_group = DEFAULT_PRODUCER_GROUP
    if txn_log is not None:
        # One group per query: the broker sends check-backs to any member of the group
        # named in a half message, and only this query's driver can answer for it.
        digest = hashlib.sha1(txn_log.encode()).hexdigest()[:12]
        default_group = f"{DEFAULT_PRODUCER_GROUP}-{digest}"
    group = opts.get("producergroup", default_group)
    from aiorocket._settings import check_group

    check_group(group, "producerGroup")
    timeout_ms = _int(opts, "sendTimeoutMs", 3000)
    retries = _int(opts, "retryTimes", 2, minimum=0)
    assert timeout_ms is not None and retries is not None
    return WriteOptions(
        client=client,
        topic=topic.strip() if topic else None,
        proxy=proxy,
        producer_group=group,
        send_timeout=timeout_ms / 1000.0,
        retries=retries,
        dedup_property=opts.get("dedupkeyproperty", DEFAULT_DEDUP_PROPERTY).strip(),
        auto_batch=_bool(opts, "autoBatch", True),
        exactly_once=exactly_once,
        txn_log=txn_log,
        # Over gRPC it is how soon the broker asks, and every row waits for its answer.
        txn_timeout=_int(opts, "transactionTimeoutSeconds", 6 if proxy else 300, minimum=6)
        or 300,
        check_interval=_int(opts, "transactionCheckIntervalSeconds", 30, minimum=3) or 30,
    )
