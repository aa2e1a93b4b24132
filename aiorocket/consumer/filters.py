"""Checking SQL92 subscriptions with the broker before consuming.

A pull carrying an SQL92 expression the broker cannot compile is not refused: the
broker logs the parse error and applies no filter, so every message is delivered. The
Java consumer asks a broker of each such topic first (CHECK_CLIENT_CONFIG, as
``MQClientInstance.checkClientInBroker`` does at start) and fails to start on a
refusal; so do aiorocket's consumers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from aiorocket.client.instance import ClientInstance
from aiorocket.errors import FilterExpressionError, RocketMQError
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.subscription import EXPRESSION_TAG, Subscription

__all__ = ["check_filters"]


def _first_line(remark: str | None) -> str:
    """The broker's parse error without the parser's list of expected tokens."""
    text = (remark or "").split("Was expecting", 1)[0]
    return " ".join(text.replace("org.apache.rocketmq.filter.parser.", "").split())


async def check_filters(
    client: ClientInstance, group: str, subscriptions: Iterable[Subscription]
) -> None:
    """Ask one master broker of each SQL92-filtered topic whether it accepts the filter.

    Raises [`FilterExpressionError`][aiorocket.errors.FilterExpressionError] when one
    refuses. A topic without a route yet, or a broker that cannot answer (the Proxy's
    remoting port, an old broker), is not checked: consuming goes on as before.
    """
    for sub in subscriptions:
        if sub.expression_type == EXPRESSION_TAG:
            continue
        try:
            route = await client.namesrv.get_route(sub.topic)
        except RocketMQError:
            continue
        addrs = sorted(route.group_addrs().values())
        if not addrs:
            continue
        body = json.dumps(
            {"clientId": client.client_id, "group": group, "subscriptionData": sub.to_heartbeat()}
        ).encode()
        try:
            resp = await client.broker.call(addrs[0], RequestCode.CHECK_CLIENT_CONFIG, {}, body)
        except RocketMQError:
            continue  # the pulls meet the trouble and report it
        # SYSTEM_ERROR: a broker without enablePropertyFilter ("does not support ... SQL92").
        if resp.code in (ResponseCode.SUBSCRIPTION_PARSE_FAILED, ResponseCode.SYSTEM_ERROR):
            raise FilterExpressionError(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"invalid {sub.expression_type} filter {sub.expression!r} on topic "
                f"{sub.topic!r}: {_first_line(resp.remark)}",
                request_code=RequestCode.CHECK_CLIENT_CONFIG,
                topic=sub.topic,
                expression=sub.expression,
            )
