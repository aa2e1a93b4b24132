"""Group membership on the brokers: heartbeats (with subscriptions) and unregistering."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiorocket.errors import AccessDeniedError, RocketMQError, TopicNotExistError

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer


def heartbeat_data(consumer: Consumer) -> dict[str, Any]:
    cfg = consumer.config
    return {
        "clientID": consumer.client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": consumer.group,
                "consumeType": "CONSUME_ACTIVELY" if consumer.pull_mode else "CONSUME_PASSIVELY",
                "messageModel": cfg.message_model.value,
                "consumeFromWhere": cfg.consume_from_where.value,
                "subscriptionDataSet": [s.to_heartbeat() for s in consumer.subscriptions.values()],
                "unitMode": False,
            }
        ],
        "heartbeatFingerprint": 0,
    }


async def broker_addrs(consumer: Consumer) -> set[str]:
    namesrv = consumer.client.namesrv
    # Routes are cached after the first time; then this asks only for missing ones.
    for topic, exc in (await namesrv.prefetch(consumer.subscriptions)).items():
        if not isinstance(exc, TopicNotExistError):
            consumer.log.warning("route_failed", topic=topic, error=str(exc))
    addrs: set[str] = set()
    for topic in consumer.subscriptions:
        route = namesrv.cached_route(topic)
        if route is not None:
            # Slaves too (as the Java consumer does): they serve the pulls of a group
            # whose master is down, and need the subscription for them.
            addrs.update(route.all_addrs())
    return addrs


async def send_heartbeats(consumer: Consumer, *, starting: bool = False) -> None:
    """Heartbeat to every broker of the subscribed topics (failures are logged).

    ``starting``: when every broker refused the heartbeat for lack of permission (ACL:
    no Sub on the group or a subscribed topic), raise that AccessDeniedError: the
    consumer could never consume, and the error names what is missing.
    """
    if consumer.manual_assignment is not None:
        return  # a manually assigned pull consumer is not a group member
    data = heartbeat_data(consumer)
    addrs = sorted(await broker_addrs(consumer))
    denied: list[AccessDeniedError] = []
    for addr in addrs:
        error = await _heartbeat(consumer, addr, data)
        if isinstance(error, AccessDeniedError):
            denied.append(error)
    if starting and denied and len(denied) == len(addrs):
        raise denied[0]


async def heartbeat_to(consumer: Consumer, addr: str) -> None:
    """Heartbeat to ``addr`` if it is a broker of a subscribed topic (cached routes only).

    Sent when a connection to a broker is (re-)established: a broker that restarted,
    or expired our channel while the network was down, knows nothing of us until then,
    and the Java client would not tell it for up to a heartbeat interval.
    """
    if consumer.manual_assignment is not None:
        return
    namesrv = consumer.client.namesrv
    routes = [namesrv.cached_route(topic) for topic in consumer.subscriptions]
    if any(route is not None and addr in route.all_addrs() for route in routes):
        await _heartbeat(consumer, addr, heartbeat_data(consumer))


async def _heartbeat(consumer: Consumer, addr: str, data: dict[str, Any]) -> RocketMQError | None:
    try:
        await consumer.client.broker.heartbeat(addr, data)
    except RocketMQError as exc:
        consumer.log.warning("heartbeat_failed", broker=addr, error=str(exc))
        return exc
    return None


async def unregister(consumer: Consumer) -> None:
    if not consumer.started or consumer.manual_assignment is not None:
        return
    for addr in sorted(await broker_addrs(consumer)):
        try:
            await consumer.client.broker.unregister_client(
                addr, consumer.client_id, consumer_group=consumer.group
            )
        except RocketMQError as exc:
            consumer.log.warning("unregister_failed", broker=addr, error=str(exc))
