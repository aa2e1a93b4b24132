"""OpenTelemetry metrics and tracing for a service's consumers and producer (extra ``otel``).

Importing this module imports ``opentelemetry``;
[`RocketMQService`][aiorocket.integrations.service.RocketMQService] imports it only when the package
is installed, so a service without it pays nothing.

Tracing: ``Telemetry.instrument_producer`` makes each ``producer.send`` a PRODUCER
span (``send <topic>``) and writes its W3C trace context (``traceparent``,
``tracestate``) into the message's properties; ``Telemetry.instrument_handler``
makes each handler call a CONSUMER span (``process <topic>``) whose parent is the
context found in the message's properties, i.e. the producer's span.

Metrics (OpenTelemetry messaging semantic conventions where one exists; attributes
``messaging.system=rocketmq``, ``messaging.destination.name``,
``messaging.consumer.group.name``, ``messaging.operation.name``, ``error.type``):

Histograms have bucket boundaries in seconds (``DURATION_BUCKETS``, ``DELAY_BUCKETS``,
given as the instruments' advisory: a View of your own still overrides them).

* ``messaging.client.sent.messages`` (counter) and ``messaging.client.operation.duration``
  (histogram, s) for each send, failures with ``error.type``;
* ``messaging.client.operation.duration`` also for each pull that returned messages
  (``messaging.operation.name=pull``, ``messaging.operation.type=receive``, per queue:
  pull latency; long polls that found nothing are left out);
* ``messaging.client.consumed.messages`` (counter: handler calls, failures with
  ``error.type``) and ``messaging.process.duration`` (histogram, s);
* ``aiorocket.consumer.retried`` and ``aiorocket.consumer.dead_lettered`` (counters:
  failed calls sent back for a retry, and those that were the last attempt; per group
  and topic, without ``error.type``, from 0 on). A call cancelled by a close (past the
  shutdown timeout) is counted nowhere: its message is left unsettled and delivered
  again; its span has ``aiorocket.released=true``. A call the consume timeout cancels
  is a failure;
* ``aiorocket.message.delay`` (histogram, s): handler start minus the broker's store
  time (end-to-end delay);
* ``aiorocket.consumer.cached`` and ``aiorocket.consumer.in_flight`` (observable gauges,
  per group);
* ``aiorocket.consumer.assigned_queues`` (observable gauge, per group): queues of the
  subscribed topics this member consumes (``Consumer.receivable_queues``: its assigned
  queues when pulling, the routes' readable queues for POP over remoting, the Proxy's
  assignments over gRPC): 0 for every member of a group means nothing is consumed (the
  topic is missing, the members subscribe differently, no broker);
* ``aiorocket.trace.records`` (observable counter, per ``aiorocket.trace.group`` and
  ``aiorocket.trace.outcome``: ``sent``, ``dropped``, ``failed``): the message trace
  records of the consumers and producers that trace (``trace=True``, docs/trace.md);
  ``dropped`` counts those a full trace buffer let go, ``failed`` those not stored;
* ``aiorocket.consumer.lag`` (observable gauge, per queue: ``messaging.destination.name``,
  ``messaging.destination.partition.id`` = queue id, ``aiorocket.broker.name``): the
  broker's max offset minus the committed offset, refreshed every ``lag_interval``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from aiorocket._extras import needs_extra

with needs_extra("otel", "aiorocket.integrations.telemetry (OpenTelemetry)"):
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.metrics import CallbackOptions, Observation

from aiorocket._trace import Tracer
from aiorocket.consumer import Consumer, ConsumerMessage, Reconsume
from aiorocket.message import Message, MessageQueue
from aiorocket.producer import Producer

__all__ = ["DELAY_BUCKETS", "DURATION_BUCKETS", "Telemetry"]

SYSTEM = "rocketmq"
_SCOPE = "aiorocket"

#: bucket boundaries (seconds) of the send, pull and handler duration histograms: the
#: SDK's default boundaries are meant for milliseconds (0, 5, 10 ... 10000) and would put
#: every call in the first bucket. Sub-millisecond sends up to a minute-long handler.
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0,
)  # fmt: skip
#: bucket boundaries (seconds) of ``aiorocket.message.delay`` (store to handler start):
#: milliseconds when keeping up, up to an hour behind during a backlog.
DELAY_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip


def _failed(result: object) -> bool:
    return result is False or isinstance(result, Reconsume)


def _released(msg: ConsumerMessage, exc: BaseException) -> bool:
    """A cancelled call that was not the consume timeout: the consumer closed past its
    shutdown timeout, and the message stays unsettled (delivered again): no failure,
    no retry, no dead letter."""
    return isinstance(exc, anyio.get_cancelled_exc_class()) and not msg._timed_out


def _last_attempt(msg: ConsumerMessage, result: object) -> bool:
    """Whether this failure sends ``msg`` to the dead-letter queue, by its transport."""
    level = result.delay_level if isinstance(result, Reconsume) else 0
    settler = msg._settler
    return settler is not None and settler.dead_letters(msg, level)


class Telemetry:
    """The instruments, and the wrappers that feed them.

    Parameters
    ----------
    meter_provider:
        Where metrics go (default: the global one, ``metrics.get_meter_provider()``).
    tracer_provider:
        Where spans go (default: the global one).
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        from aiorocket._version import __version__

        meter = (meter_provider or metrics.get_meter_provider()).get_meter(_SCOPE, __version__)
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(
            _SCOPE, __version__
        )
        self.sent = meter.create_counter(
            "messaging.client.sent.messages", unit="{message}",
            description="Messages the producer attempted to send",
        )  # fmt: skip
        self.operation_duration = meter.create_histogram(
            "messaging.client.operation.duration", unit="s",
            description="Duration of a send (retries included) or of a pull that returned messages",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )  # fmt: skip
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}",
            description="Messages handed to a handler",
        )  # fmt: skip
        self.process_duration = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Duration of a handler call",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )  # fmt: skip
        self.retried = meter.create_counter(
            "aiorocket.consumer.retried", unit="{message}",
            description="Failed handler calls whose message is sent back for a retry",
        )  # fmt: skip
        self.dead_lettered = meter.create_counter(
            "aiorocket.consumer.dead_lettered", unit="{message}",
            description="Failed handler calls that were the message's last attempt (to the DLQ)",
        )  # fmt: skip
        self.delay = meter.create_histogram(
            "aiorocket.message.delay", unit="s",
            description="Handler start minus the broker's store time of the message",
            explicit_bucket_boundaries_advisory=DELAY_BUCKETS,
        )  # fmt: skip
        self._consumers: list[Consumer] = []
        self._lag: dict[tuple[str, str, str, int], int] = {}
        meter.create_observable_gauge(
            "aiorocket.consumer.lag", [self._observe_lag], unit="{message}",
            description="Broker max offset minus committed offset, per queue",
        )  # fmt: skip
        meter.create_observable_gauge(
            "aiorocket.consumer.cached", [self._observe("cached")], unit="{message}",
            description="Messages pulled and not yet finished",
        )  # fmt: skip
        meter.create_observable_gauge(
            "aiorocket.consumer.in_flight", [self._observe("running")], unit="{message}",
            description="Handler calls running",
        )  # fmt: skip
        meter.create_observable_gauge(
            "aiorocket.consumer.assigned_queues", [self._observe_assigned], unit="{queue}",
            description="Queues of the subscribed topics assigned to this member",
        )  # fmt: skip
        self._tracers: list[Tracer] = []
        meter.create_observable_counter(
            "aiorocket.trace.records", [self._observe_trace], unit="{record}",
            description="Message trace records sent, dropped (buffer full) or failed (not stored)",
        )  # fmt: skip

    def _observe(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            for consumer in self._consumers:
                if consumer.started and consumer.consume_mode == "pull":
                    total = sum(getattr(s, field) for s in consumer.stats(advance=False))
                    group = {"messaging.system": SYSTEM,
                             "messaging.consumer.group.name": consumer.group}  # fmt: skip
                    yield Observation(total, group)

        return callback

    def _observe_assigned(self, options: CallbackOptions) -> Iterable[Observation]:
        for consumer in self._consumers:
            if consumer.started:  # every transport: pull, POP, gRPC (receivable_queues)
                yield Observation(consumer.receivable_queues(),
                                  {"messaging.system": SYSTEM,
                                   "messaging.consumer.group.name": consumer.group})  # fmt: skip

    def _observe_trace(self, options: CallbackOptions) -> Iterable[Observation]:
        for tracer in self._tracers:
            for outcome in ("sent", "dropped", "failed"):
                attrs = {"messaging.system": SYSTEM, "aiorocket.trace.group": tracer.group,
                         "aiorocket.trace.outcome": outcome}  # fmt: skip
                yield Observation(getattr(tracer, outcome), attrs)

    def record_lag(self, report: dict[str, Any]) -> None:
        """Keep the per-queue lag of a health report (``RocketMQService.health()``) for
        the ``aiorocket.consumer.lag`` gauge (the service refreshes it periodically)."""
        self._lag = {
            (c["group"], q["topic"], q["broker"], q["queue_id"]): q["lag"]
            for c in report["consumers"]
            for q in c["queues"]
            if q["lag"] is not None
        }

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        for (group, topic, broker, queue_id), lag in self._lag.items():
            attrs = {
                "messaging.system": SYSTEM,
                "messaging.consumer.group.name": group,
                "messaging.destination.name": topic,
                "messaging.destination.partition.id": str(queue_id),
                "aiorocket.broker.name": broker,
            }
            yield Observation(lag, attrs)

    def watch(self, consumer: Consumer) -> None:
        """Report ``consumer``'s cached and in-flight counts in the gauges, and the
        duration of its pulls that returned messages in ``operation_duration``."""
        self._consumers.append(consumer)
        if consumer.tracer is not None:
            self._tracers.append(consumer.tracer)
        per_queue: dict[MessageQueue, dict[str, str]] = {}
        record = self.operation_duration.record

        def observe(mq: MessageQueue, seconds: float, _messages: int) -> None:
            attrs = per_queue.get(mq)
            if attrs is None:  # built once per queue: this runs once per pull
                attrs = per_queue[mq] = {
                    "messaging.system": SYSTEM,
                    "messaging.destination.name": mq.topic,
                    "messaging.destination.partition.id": str(mq.queue_id),
                    "messaging.consumer.group.name": consumer.group,
                    "messaging.operation.name": "pull",
                    "messaging.operation.type": "receive",
                    "aiorocket.broker.name": mq.broker_name,
                }
            record(seconds, attrs)

        if consumer.consume_mode == "pull":  # over gRPC there are no pulls of queues
            consumer.observe_pulls(observe)

    # -- consumer side -------------------------------------------------------------------

    def instrument_handler(
        self, handler: Callable[[ConsumerMessage], Any], group: str
    ) -> Callable[[ConsumerMessage], Awaitable[Any]]:
        """``handler`` (async) with a CONSUMER span per call, child of the producer's
        span, and the consumer metrics; whether a failure was the message's last attempt
        is its settler's decision (the transport's retry rule)."""

        seen_topics: set[str] = set()

        @functools.wraps(handler)
        async def instrumented(msg: ConsumerMessage) -> Any:
            attrs = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": msg.topic,
                "messaging.consumer.group.name": group,
                "messaging.operation.name": "process",
            }
            if msg.topic not in seen_topics:
                # The counters exist at 0 from the topic's first message on: Prometheus'
                # rate() and increase() see no increase in the first sample of a series,
                # so the first message dead-lettered would otherwise go unnoticed.
                seen_topics.add(msg.topic)
                self.retried.add(0, attrs)
                self.dead_lettered.add(0, attrs)
            start = time.time()
            if msg.store_timestamp:
                self.delay.record(max(start - msg.store_timestamp / 1000, 0.0), attrs)
            parent = propagate.extract(msg.properties)
            error: str | None = None
            released = False
            span_attrs = {**attrs, "messaging.operation.type": "process",
                          "messaging.message.id": msg.msg_id}  # fmt: skip
            # Exceptions are recorded here, not by the span: a call cancelled by a close
            # is no error (its message is left unsettled and delivered again).
            with self.tracer.start_as_current_span(
                f"process {msg.topic}", context=parent, kind=trace.SpanKind.CONSUMER,
                attributes=span_attrs, record_exception=False, set_status_on_exception=False,
            ) as span:  # fmt: skip
                try:
                    result = await handler(msg)
                except BaseException as exc:
                    if _released(msg, exc):
                        released = True
                        span.set_attribute("aiorocket.released", True)
                        raise
                    error = type(exc).__qualname__
                    span.record_exception(exc)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, error))
                    raise
                else:
                    if _failed(result):
                        error = "reconsume"
                        span.set_status(trace.Status(trace.StatusCode.ERROR, "reconsume"))
                    return result
                finally:
                    if not released:
                        failed = result if error == "reconsume" else False
                        self._count_call(msg, attrs, error, failed, start)

        return instrumented

    def _count_call(
        self, msg: ConsumerMessage, attrs: dict[str, str], error: str | None, result: object,
        start: float,
    ) -> None:
        """The metrics of a finished call: ``error`` None for a success, else whether
        the failure was the message's last attempt (``result``: the failed return)."""
        if error is not None:
            last = _last_attempt(msg, result)
            (self.dead_lettered if last else self.retried).add(1, attrs)
            attrs["error.type"] = error
        self.consumed.add(1, attrs)
        self.process_duration.record(time.time() - start, attrs)

    # -- producer side -------------------------------------------------------------------

    def instrument_producer(self, producer: Producer) -> Producer:
        """Make ``producer.send`` a PRODUCER span carrying its trace context in the
        message's properties, with the send metrics (other send methods unchanged)."""
        if producer.tracer is not None:
            self._tracers.append(producer.tracer)
        send = producer.send

        @functools.wraps(send)
        async def traced_send(msg: Message, *args: Any, **kwargs: Any) -> Any:
            attrs = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": msg.topic,
                "messaging.operation.name": "send",
            }
            start = time.monotonic()
            with self.tracer.start_as_current_span(
                f"send {msg.topic}", kind=trace.SpanKind.PRODUCER,
                attributes={**attrs, "messaging.operation.type": "send"},
            ) as span:  # fmt: skip
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                msg.properties.update(carrier)
                try:
                    result = await send(msg, *args, **kwargs)
                except BaseException as exc:
                    attrs["error.type"] = type(exc).__qualname__
                    raise
                else:
                    span.set_attribute("messaging.message.id", result.msg_id)
                    return result
                finally:
                    self.sent.add(1, attrs)
                    self.operation_duration.record(time.monotonic() - start, attrs)

        setattr(producer, "send", traced_send)  # noqa: B010 - the instance's own attribute
        return producer
