"""A lite consumer's subscription updates through the Proxy (RocketMQ 5.5, RIP-83).

A lite push consumer (client type LITE_PUSH_CONSUMER) subscribes to its group's bind
topic like any push consumer; which of the bind topic's lite topics it is served is a
separate set it keeps on the Proxy with ``SyncLiteSubscription``. The Apache Proxy
serves this only in cluster mode (5.5.0: in local mode it fails with a
NullPointerException, reported as INTERNAL_SERVER_ERROR; see docs/consumer/lite.md).

A sync is not gated by a session's release (``Session.admit``, which receives go
through), and needs not be: the 5.5.0 Proxy reads no client settings for it
(``ClientActivity.syncLiteSubscription``: the request's topic, group and lite topics
checked, then ``ClientProcessor.syncLiteSubscription``: bind topic, quota, rate limit,
then ``LiteSubscriptionService`` to every broker), so one that lands between a
termination and the settings sent again is not refused as a receive is. And a lite
consumer never releases: its receives are not auto-renewed, so a broken one sends no
termination (``SimpleConsumer._holds_what_it_wrote``). Were it to, the termination
would also drop its lite subscriptions on the brokers
(``GrpcClientSettingsManager.offlineClientLiteSubscription``: a COMPLETE_REMOVE, not
awaited, in no order with the resync that the settings after it start): one more reason
a lite consumer must not release.
"""

from __future__ import annotations

from collections.abc import Collection

from aiorocket.errors import (
    ConfigError,
    LiteQuotaExceededError,
    ProxyResponseError,
    UnsupportedTransportError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._simple import SimpleConsumer
from aiorocket.grpc._transport import check_status

__all__ = ["sync_lite_subscription"]

#: in the Apache Proxy's answer (5.5.0, local mode): it has no lite subscription service
_NO_LITE_SERVICE = "getLiteSubscriptionService()"


async def sync_lite_subscription(
    consumer: SimpleConsumer,
    bind_topic: str,
    action: pb.LiteSubscriptionAction,
    lite_topics: Collection[str],
    offset: tuple[str, int] | None = None,
) -> None:
    """Send one update of ``consumer``'s lite subscriptions of ``bind_topic``; ``offset``
    (kind, value): where added ones start (POLICY: LAST 0 / MIN 1 / MAX 2, OFFSET,
    TAIL_N, TIMESTAMP).

    The Proxy's refusals become typed errors: over the group's quota
    ``LiteQuotaExceededError``; a name it does not take (ILLEGAL_LITE_TOPIC: blank,
    too long, other than letters, digits, ``-`` and ``_``) ``ConfigError``; a Proxy
    without lite support (local mode) ``UnsupportedTransportError``.
    """
    c = consumer
    req = pb.SyncLiteSubscriptionRequest(
        action=action,
        topic=c.session.resource(bind_topic),
        group=c.session.resource(c.group),
        lite_topic_set=sorted(lite_topics),
    )
    if offset is not None:
        field = {"POLICY": "policy", "OFFSET": "offset", "TAIL_N": "tail_n"}.get(
            offset[0], "timestamp"
        )
        req.offset_option = pb.OffsetOption(**{field: offset[1]})
    resp = await c.transport.unary("SyncLiteSubscription", req, pb.SyncLiteSubscriptionResponse)
    try:
        check_status(resp.status, "SyncLiteSubscription")
    except ProxyResponseError as err:
        if err.code == pb.Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED:
            raise LiteQuotaExceededError(
                f"the Proxy refused {action.name} {sorted(lite_topics)} of {bind_topic!r} for "
                f"{c.group!r}: {err.message or 'lite subscription quota exceeded'}"
            ) from err
        if err.code == pb.Code.ILLEGAL_LITE_TOPIC:
            raise ConfigError(f"lite topic refused by the Proxy: {err.message}") from err
        if err.code == pb.Code.INTERNAL_SERVER_ERROR and _NO_LITE_SERVICE in err.message:
            raise UnsupportedTransportError(
                f"the Proxy {c.transport.endpoint} does not serve lite consumers (an Apache "
                "Proxy in local mode: run it with -pm cluster), or consume over remoting "
                f"(namesrv=...): {err.message}"
            ) from err
        raise
