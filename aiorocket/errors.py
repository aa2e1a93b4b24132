"""Typed exceptions raised by aiorocket.

Every error a caller can see derives from ``RocketMQError``, so one ``except``
clause is enough to catch "anything the client library raised". Errors that come
from a broker or NameServer answer carry the response ``code`` and ``remark``; which
class a response code raises, and whether it is retriable, is decided in one table
(``error_for_response``), used by the producer, the consumer and the admin client.

``retriable`` (as aiokafka's ``KafkaError.retriable``) says whether the same call may
succeed if made again without changing anything: a dropped connection, a timeout, a busy
broker. Clients retry these themselves within their timeouts; an application sees them
only when the retries ran out.
"""

from __future__ import annotations

from aiorocket._response_code import ResponseCode

__all__ = [
    "AccessDeniedError",
    "BrokerResponseError",
    "ClientClosedError",
    "CommitFailedError",
    "ConfigError",
    "ConnectionClosedError",
    "ConsumerNotOnlineError",
    "DataLossError",
    "FilterExpressionError",
    "FrameTooLargeError",
    "GroupNotFoundError",
    "GrpcStatusError",
    "LiteQuotaExceededError",
    "MessageDecodeError",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "NameServerUnavailableError",
    "NoRouteError",
    "ProtocolError",
    "ProxyResponseError",
    "ProxyUnavailableError",
    "ReplyTimeoutError",
    "RequestTimeoutError",
    "ResponseTooLargeError",
    "RocketMQError",
    "ServiceNotAvailableError",
    "SystemBusyError",
    "TlsError",
    "TopicNotExistError",
    "UnsupportedBrokerFeatureError",
    "UnsupportedTransportError",
    "error_for_response",
]


class RocketMQError(Exception):
    """Base class of every aiorocket error."""

    #: the same call may succeed if made again (a transient condition).
    retriable: bool = False


class ProtocolError(RocketMQError):
    """Bytes on the wire do not follow the remoting protocol.

    The connection that produced them is closed; other connections are unaffected.
    """


class FrameTooLargeError(ProtocolError):
    """A frame announces a length above the 16 MiB limit (or below the minimum)."""


class ResponseTooLargeError(FrameTooLargeError):
    """The answer to a request was larger than the frame limit. Its body was read and
    thrown away, so the connection stays open; ``size`` is the frame's length.

    The consumer meets it when a pull answer (large messages x batch size) does not
    fit: it pulls that queue in smaller batches.
    """

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class MessageDecodeError(ProtocolError):
    """A stored-message record in a pull response is truncated or corrupt.

    ``position`` is the byte offset of the bad record in the body, when known.
    """

    def __init__(self, message: str, *, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class ConnectionClosedError(RocketMQError):
    """The connection closed (or failed) while a request was waiting for its answer.

    Retriable: the next request to that address opens a new connection. A request that
    timed out closes its connection too, failing the others pending on it with this.
    """

    retriable = True


class NameServerUnavailableError(ConnectionClosedError):
    """No NameServer answered: each address refused the connection, stayed silent past
    the request timeout, or spoke something other than RocketMQ remoting."""


class TlsError(ConnectionClosedError):
    """The TLS handshake with a server failed: its certificate is not trusted (unknown
    CA, expired, another host name), or it does not speak TLS on that port. Retrying
    does not help until the configuration (``tls=`` context, CA file) changes."""

    retriable = False


class ProxyUnavailableError(ConnectionClosedError):
    """The gRPC Proxy endpoint could not be reached (refused, unreachable, not gRPC)
    or the connection to it broke during the call."""


class RequestTimeoutError(RocketMQError, TimeoutError):
    """No answer arrived within the request's timeout."""

    retriable = True


class ReplyTimeoutError(RequestTimeoutError):
    """No reply arrived within ``Producer.request``'s timeout. The request was sent (or
    may have been): the replier may still process it, so asking again may run it twice.
    A reply that arrives later is dropped."""


class BrokerStalledError(RequestTimeoutError):
    """The broker did not answer within its stall bound (a multiple of its recent
    latency) while other brokers did: the request was abandoned, the connection kept.
    The broker may still store it when it resumes; a send retried elsewhere after this
    may be stored twice (at-least-once)."""


class ConfigError(RocketMQError, ValueError):
    """A client was configured with an invalid value."""


class MessageTooLargeError(RocketMQError, ValueError):
    """A message body exceeds the maximum size; nothing was sent."""


class BrokerResponseError(RocketMQError):
    """The broker or NameServer answered a request with a non-success code.

    ``retriable`` follows the code (see ``error_for_response``).
    """

    def __init__(self, code: int, remark: str | None, *, request_code: int | None = None) -> None:
        self.code = code
        self.remark = remark
        self.request_code = request_code
        self.retriable = code in _RETRIABLE_CODES
        name = _response_name(code)
        super().__init__(f"{name} ({code}): {remark or ''}".rstrip(": "))


class SystemBusyError(BrokerResponseError):
    """The broker is overloaded (SYSTEM_BUSY, 2: its request queue or page cache is busy);
    retriable."""


class TopicNotExistError(BrokerResponseError):
    """The NameServer has no route for the topic (TOPIC_NOT_EXIST, 17)."""


class ServiceNotAvailableError(BrokerResponseError):
    """The broker refuses service (SERVICE_NOT_AVAILABLE, 14), e.g. a full disk."""


class AccessDeniedError(BrokerResponseError):
    """The broker refused the request (NO_PERMISSION, 16): ACL authentication failed (an
    unknown user, a wrong secret key) or the user lacks the permission on the resource
    (topic or group) the request names. The message names the request and the resource."""


class GroupNotFoundError(BrokerResponseError):
    """The broker has no such consumer group (SUBSCRIPTION_GROUP_NOT_EXIST, 26)."""


class FilterExpressionError(BrokerResponseError, ConfigError):
    """The broker refuses a subscription's filter (SUBSCRIPTION_PARSE_FAILED, 23): an SQL92
    expression that does not parse, or SQL92 on a broker without ``enablePropertyFilter``.

    A consumer checks its SQL92 subscriptions with the broker when it starts (the
    broker's pulls would otherwise ignore a filter it cannot compile and deliver every
    message). ``topic`` and ``expression`` name the refused subscription.
    """

    def __init__(
        self,
        code: int,
        remark: str | None,
        *,
        request_code: int | None = None,
        topic: str = "",
        expression: str = "",
    ) -> None:
        super().__init__(code, remark, request_code=request_code)
        self.topic = topic
        self.expression = expression


class ConsumerNotOnlineError(BrokerResponseError):
    """The consumer group has no connected member (CONSUMER_NOT_ONLINE, 206)."""


class BrokerNotFoundError(ConfigError):
    """A broker named by the caller is not in the cluster (a ConfigError: the name is
    the mistake; the CLI exits 3, as for any name that does not exist)."""


class MessageNotFoundError(RocketMQError):
    """No stored message has the id or key asked for."""


class ProxyResponseError(RocketMQError):
    """The RocketMQ gRPC Proxy answered with a non-OK ``Status`` (apache.rocketmq.v2 Code).

    ``code`` is the numeric code (e.g. 40402 TOPIC_NOT_FOUND), ``name`` its name,
    ``rpc`` the call that got it; ``retriable`` is decided where the status is read
    (the gRPC transport's table of the Proxy's codes).
    """

    def __init__(
        self, code: int, message: str, *, name: str = "", rpc: str = "", retriable: bool = False
    ) -> None:
        self.code = code
        self.message = message
        self.name = name or "CODE"
        self.rpc = rpc
        self.retriable = retriable
        where = f" [{rpc}]" if rpc else ""
        super().__init__(f"{self.name} ({code}){where}: {message}".rstrip(": "))


class GrpcStatusError(RocketMQError):
    """A gRPC call ended with a transport-level gRPC status (e.g. UNIMPLEMENTED)."""

    def __init__(self, status: int, name: str, message: str | None, *, rpc: str = "") -> None:
        self.status = status
        self.name = name
        self.message = message
        self.rpc = rpc
        super().__init__(f"gRPC {name} ({status}) [{rpc}]: {message or ''}".rstrip(": "))


class UnsupportedTransportError(ConfigError):
    """The feature exists only on the other transport (remoting or gRPC Proxy)."""


class UnsupportedBrokerFeatureError(RocketMQError):
    """The broker runs a RocketMQ release older than the one that brought the feature
    (POP consumption and timer messages: 5.0; recall: 5.3.2; priority: 5.4; lite topics:
    5.5). Raised at once, before anything is stored where the broker would take the
    request and ignore the feature (a timer or priority message); not retriable.

    ``feature`` names it, ``since`` is the release it needs, ``broker`` the address and
    ``broker_version`` the release the broker reported (e.g. "4.9.7").
    """

    def __init__(self, feature: str, since: str, *, broker: str, broker_version: str) -> None:
        self.feature = feature
        self.since = since
        self.broker = broker
        self.broker_version = broker_version
        super().__init__(
            f"{feature}: needs RocketMQ {since} or later; the broker at {broker} runs "
            f"{broker_version}"
        )


class LiteQuotaExceededError(RocketMQError):
    """A lite consumer would hold more lite subscriptions than its group allows (the
    group's ``lite.sub.client.quota``, RocketMQ 5.5: 2000 per client by default); nothing
    changed. Unsubscribe lite topics no longer needed, or raise the group's quota."""


class NoRouteError(RocketMQError):
    """No broker can serve the request (no route, no writable queue, no master).

    Not retriable by default (a topic that does not exist stays so); ``retriable=True``
    where the same request may find a route when made again: settling a message whose
    broker has no master right now (a failover, a restart), which a running consumer
    sends again while its route comes back."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class DataLossError(RocketMQError):
    """Messages a reader asked for are no longer stored (deleted, or the queue was reset)."""


class ClientClosedError(RocketMQError):
    """The client (producer, consumer or connection pool) has been closed."""


class CommitFailedError(RocketMQError):
    """An application's offset commit was refused and nothing was stored: a queue it
    names is no longer assigned to this consumer, or the offset is behind the group's
    stored offset found after a lost connection (another member consumed the queue
    meanwhile). Storing it would move the group back, and the messages in between would
    be consumed again. As Kafka's ``CommitFailedException`` after a rebalance: the
    messages processed since the last commit may be processed by another member too.
    """


def _response_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "RESPONSE"


#: Broker response code -> the exception it raises, and whether it is retriable. The one
#: place where broker answers become exceptions; codes not here raise a plain,
#: non-retriable ``BrokerResponseError``. Retriable: the broker's own trouble, which
#: another attempt (later, or on another broker) may not meet; these are the codes after
#: which the Java producer tries again, but NO_PERMISSION (see below).
_RESPONSE_ERRORS: dict[int, tuple[type[BrokerResponseError], bool]] = {
    ResponseCode.SYSTEM_ERROR: (BrokerResponseError, True),
    ResponseCode.SYSTEM_BUSY: (SystemBusyError, True),
    ResponseCode.SERVICE_NOT_AVAILABLE: (ServiceNotAvailableError, True),  # e.g. disk full
    ResponseCode.TOPIC_NOT_EXIST: (TopicNotExistError, True),  # not yet created, routes lag
    # NO_PERMISSION: an ACL refusal does not go away by itself. (The producer still tries
    # another broker after it, as Java does: a broker whose write permission is off
    # answers it too, and another broker may take the message.)
    ResponseCode.NO_PERMISSION: (AccessDeniedError, False),
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: (GroupNotFoundError, False),
    ResponseCode.CONSUMER_NOT_ONLINE: (ConsumerNotOnlineError, False),
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: (FilterExpressionError, False),
}
_RETRIABLE_CODES = frozenset(code for code, (_, retriable) in _RESPONSE_ERRORS.items() if retriable)


#: RocketMQ 4.x's plain ACL (4.9.7) refuses a request by throwing from its request hook: the
#: answer is SYSTEM_ERROR with the exception as its remark, not 5.x's NO_PERMISSION.
_ACL_4X_REMARK = "org.apache.rocketmq.acl.common.AclException"


def error_for_response(
    code: int, remark: str | None, request_code: int | None = None
) -> BrokerResponseError:
    """The exception for a broker's non-success answer (the table above)."""
    if code == ResponseCode.SYSTEM_ERROR and remark and remark.startswith(_ACL_4X_REMARK):
        denied = AccessDeniedError(code, remark, request_code=request_code)
        denied.retriable = False  # as NO_PERMISSION: a refusal does not go away by itself
        return denied
    cls = _RESPONSE_ERRORS.get(code, (BrokerResponseError, False))[0]
    return cls(code, remark, request_code=request_code)
