"""Producer settings. Defaults follow the Java client (DefaultMQProducer, ClientConfig).

One deliberate difference: latency fault tolerance (``sendLatencyFaultEnable``) is on by
default here, so a slow or dead broker is avoided without configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiorocket._settings import check_finite_seconds, check_positive_ints, check_positive_numbers
from aiorocket._trace import TRACE_TOPIC, check_trace_settings
from aiorocket.errors import ConfigError
from aiorocket.namespace import check_namespace
from aiorocket.protocol.message_codec import CompressionType
from aiorocket.security import Credentials, TlsSetting, check_security

__all__ = [
    "BATCH_MAX_DELAY",
    "KIB",
    "MIB",
    "ProducerConfig",
]

KIB = 1024
MIB = 1024 * KIB
#: ``batch_max_delay``'s default: Java's ``batchMaxDelayMs`` (10 ms).
BATCH_MAX_DELAY = 0.010


@dataclass(slots=True)
class ProducerConfig:
    """Settings of [`Producer`][aiorocket.producer.Producer].

    Pass them as keyword arguments (``Producer(group, auto_batch=True)``) or as
    ``config=ProducerConfig(...)``; invalid values raise ``ConfigError``.
    """

    #: default per-call budget of send(), retries and waiting for an in-flight slot included.
    send_timeout: float = 3.0
    #: extra attempts after a failed send, each on another broker when there is one.
    retries: int = 2
    #: largest body accepted (before compression); checked before anything is sent.
    max_message_size: int = 4 * MIB
    #: bodies of at least this many bytes are compressed (when that makes them smaller).
    compress_over: int = 4 * KIB
    #: the codec of compressed bodies (ZLIB, as Java; LZ4 and ZSTD for 5.x consumers).
    compression: CompressionType = CompressionType.ZLIB
    #: 0-9 for ZLIB, up to 22 for ZSTD.
    compression_level: int = 5
    #: avoid, for a time growing with its latency, a broker whose last send was slow or failed
    #: (latency: from the request's write to its answer's read off the socket).
    latency_fault_tolerance: bool = True
    #: an unpinned send that one broker sits on (no answer within 5x its recent latency,
    #: at least 0.25 s, at most 1 s and a quarter of ``send_timeout``) while others answer
    #: is abandoned there and retried on another broker, and the stalled broker is
    #: avoided as after a failure (``aiorocket.producer.stall``). The abandoned
    #: request may still be stored when the broker wakes: that message may be stored
    #: twice. False: wait for it up to ``send_timeout``, as the Java client does.
    stall_retry: bool = True
    #: requests (sends, oneway sends, batches) that may be waiting for a broker at once.
    max_in_flight: int = 1024
    #: group concurrent plain sends of a topic into batch requests (Java ``autoBatch``; see
    #: ``aiorocket.producer.accumulate``): a batch fails or succeeds as a whole, and its
    #: messages land consecutively in one queue. ``None`` (default): off over remoting,
    #: as in Java; on over gRPC, where a call costs the client several times a small
    #: message's CPU: measured with 64 sends in flight, 4-5x the messages per second at
    #: a fifth of the CPU per message, and a lower send p99 (benchmarks/README.md,
    #: "gRPC"). Nothing waits for a timer, so a lone send leaves at once either way.
    auto_batch: bool | None = None
    #: the largest batch auto-batching builds, in bytes of message bodies over remoting
    #: (as Java's ``batchMaxBytes`` counts: 32 messages of 1 KiB, whose records, each
    #: with its header and properties, take more; a request's records stay within
    #: ``max_message_size`` too); over gRPC a message counts its body and 200 bytes.
    batch_max_bytes: int = 32 * KIB
    #: requests per topic under way at once with auto-batching; more messages wait and
    #: leave together in the next request that frees up. None (default): 4 over remoting
    #: (with 64 sends in flight, 2 left a third of them waiting for a request: 4
    #: measured 1.16x the messages per second at the same batch size, benchmarks/README.md,
    #: "The auto-batched producer"), 2 over gRPC, where a call costs the client more.
    batch_in_flight: int | None = None
    #: seconds at most that what a batch request could not carry (past
    #: ``batch_max_bytes``) waits for the next answer, arrival or a full batch before a
    #: free request takes it, partial (Java ``batchMaxDelayMs``, 10 ms); 0: at once.
    #: Remoting only: over gRPC a freed request takes all that waits, nothing is left over.
    batch_max_delay: float = BATCH_MAX_DELAY
    #: seconds between heartbeats to the brokers written to.
    heartbeat_interval: float = 30.0
    #: seconds between route refreshes from the NameServer.
    route_refresh_interval: float = 30.0
    #: timeout of the producer's other requests (routes, heartbeats, unregistering).
    request_timeout: float = 3.0
    #: transaction check-backs answered at once, and how many may wait (more are dropped:
    #: the broker asks again later).
    check_concurrency: int = 4
    check_backlog: int = 2000
    #: how long closing waits for the sends in flight (auto-batched requests carrying
    #: other callers' messages) to end. The unregistration that follows is bounded as a
    #: consumer's, by ``max(2 x request_timeout, 5 s)`` (``aiorocket._tasks.close_bound``).
    shutdown_timeout: float = 5.0
    #: a topic the NameServer has no route for is sent to the brokers of this topic's
    #: route, which create it (Java ``createTopicKey``; brokers with
    #: ``autoCreateTopicEnable``). Empty: no fallback, such a send raises NoRouteError.
    create_topic_key: str = "TBW102"
    #: queues per broker of a topic created that way (Java ``defaultTopicQueueNums``).
    default_topic_queue_nums: int = 4
    #: ACL identity (access key, secret key, optional security token) signing every
    #: request; see [`aiorocket.security`][]. Remoting transport only.
    credentials: Credentials | None = None
    #: TLS to the NameServers and brokers: True (system CAs, host names checked) or an
    #: ``ssl.SSLContext`` (e.g. [`aiorocket.security.tls_context`][] with a private CA).
    tls: TlsSetting = False
    #: servers reached at another address than the one they advertise (port forwarding,
    #: a tunnel, a test proxy): ``{"10.0.0.5:10911": "127.0.0.1:20911"}``.
    address_map: dict[str, str] | None = None
    #: a namespace (Java ``setNamespace``): every topic and group name is sent as
    #: ``<namespace>%<name>`` and handed back without it ([`aiorocket.namespace`][]).
    #: Empty: none. The gRPC producer hands it to the Proxy (``GrpcOptions.namespace``).
    namespace: str = ""
    #: write message trace records (Java ``enableMsgTrace``): what the RocketMQ Dashboard
    #: and ``mqadmin queryMsgTraceById`` show; see docs/trace.md. Off by default.
    trace: bool = False
    #: where they go (Java ``customizedTraceTopic``); over gRPC a topic of your own (the
    #: Proxy refuses system topics, ``RMQ_SYS_TRACE_TOPIC`` among them).
    trace_topic: str = TRACE_TOPIC
    #: messages per second this producer sends at most (``aiorocket.producer.pace``: a
    #: second's worth may go at once; a send waits for its turn before its ``timeout``
    #: starts); None: no limit. Every send counts: batches by their messages, requests,
    #: replies, oneway and transactional sends.
    max_rate: float | None = None

    def validate(self) -> None:
        check_security(self.credentials, self.tls)
        check_namespace(self.namespace)
        check_trace_settings(self.trace, self.trace_topic)
        if self.auto_batch is not None and not isinstance(self.auto_batch, bool):
            raise ConfigError(f"auto_batch must be True, False or None, got {self.auto_batch!r}")
        if not isinstance(self.stall_retry, bool):
            raise ConfigError(f"stall_retry must be True or False, got {self.stall_retry!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries must be an integer >= 0, got {self.retries!r}")
        positive_ints = {
            "max_message_size": self.max_message_size,
            "compress_over": self.compress_over,
            "max_in_flight": self.max_in_flight,
            "batch_max_bytes": self.batch_max_bytes,
            "check_concurrency": self.check_concurrency,
            "check_backlog": self.check_backlog,
            "default_topic_queue_nums": self.default_topic_queue_nums,
        }
        if self.batch_in_flight is not None:
            positive_ints["batch_in_flight"] = self.batch_in_flight
        check_positive_ints(positive_ints)
        positive_floats = {
            "send_timeout": self.send_timeout,
            "heartbeat_interval": self.heartbeat_interval,
            "route_refresh_interval": self.route_refresh_interval,
            "request_timeout": self.request_timeout,
        }
        if self.max_rate is not None:
            positive_floats["max_rate"] = self.max_rate
        check_positive_numbers(positive_floats)
        check_finite_seconds("batch_max_delay", self.batch_max_delay)
        if self.shutdown_timeout < 0:
            raise ConfigError("shutdown_timeout must be >= 0")
        try:
            self.compression = CompressionType(self.compression)
        except ValueError:
            raise ConfigError(f"unknown compression {self.compression!r}") from None
        top = 9 if self.compression is CompressionType.ZLIB else 22
        if not isinstance(self.compression_level, int) or not 0 <= self.compression_level <= top:
            raise ConfigError(
                f"compression_level must be 0..{top} for {self.compression.name}, "
                f"got {self.compression_level!r}"
            )
