"""Admin requests for test set-up, sent with aiorocket's own remoting connection.

One short-lived connection per request: set-up is rare and this keeps the helpers
usable from any event loop (asyncio or trio) without a shared pool.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

import anyio

from aiorocket.client.broker import create_topic_fields
from aiorocket.errors import RocketMQError
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.remoting.connection import Connection
from aiorocket.security import Credentials

#: Not (yet) in aiorocket.protocol.codes; RequestCode.java.
GET_SUBSCRIPTIONGROUP_CONFIG = RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG
PERM_READ_WRITE = 6


class AdminError(RocketMQError):
    """An admin request was refused or the cluster did not converge in time."""


#: address -> (admin credentials, TLS context) of servers started with ACL or TLS on:
#: the set-up requests to them are signed / encrypted (see LocalRocketMQ.start).
_SECURITY: dict[str, tuple[Credentials | None, ssl.SSLContext | None]] = {}


def register_security(
    addrs: Iterable[str], credentials: Credentials | None, ssl_context: ssl.SSLContext | None
) -> None:
    for addr in addrs:
        _SECURITY[addr] = (credentials, ssl_context)


async def request(
    addr: str,
    code: int,
    ext_fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    timeout: float = 3.0,
) -> RemotingCommand:
    """Send one request on a fresh connection; return the response whatever its code."""
    credentials, ssl_context = _SECURITY.get(addr, (None, None))
    conn = await Connection.connect(
        addr, timeout=timeout, credentials=credentials, ssl_context=ssl_context
    )
    response: RemotingCommand | None = None
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        await tg.start(conn.run)
        try:
            cmd = RemotingCommand.request(code, dict(ext_fields or {}), body)
            response = await conn.request(cmd, timeout=timeout)
        except Exception as exc:  # re-raised below, outside the task group
            error = exc
        finally:
            await conn.aclose()
    if error is not None:
        raise error
    assert response is not None
    return response


def _check(resp: RemotingCommand, what: str) -> None:
    if resp.code != ResponseCode.SUCCESS:
        raise AdminError(f"{what} failed: code {resp.code}: {resp.remark}")


async def get_route(namesrv: str, topic: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """The NameServer's TopicRouteData for ``topic`` as a dict, or None if it has none."""
    resp = await request(
        namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=timeout
    )
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    _check(resp, f"route query for {topic!r} on {namesrv}")
    route: dict[str, Any] = json.loads(resp.body)
    return route


def route_queues(route: Mapping[str, Any] | None) -> dict[str, tuple[int, int]]:
    """broker name -> (readQueueNums, writeQueueNums) of a route."""
    if not route:
        return {}
    return {
        q["brokerName"]: (int(q["readQueueNums"]), int(q["writeQueueNums"]))
        for q in route.get("queueDatas") or []
    }


def route_brokers(route: Mapping[str, Any] | None) -> dict[str, str]:
    """broker name -> master address of a route."""
    if not route:
        return {}
    out: dict[str, str] = {}
    for b in route.get("brokerDatas") or []:
        master = (b.get("brokerAddrs") or {}).get("0")
        if master:
            out[b["brokerName"]] = master
    return out


async def create_topic_on(
    broker_addr: str,
    topic: str,
    *,
    read_queues: int,
    write_queues: int,
    perm: int = PERM_READ_WRITE,
    order: bool = False,
    attributes: str | None = None,
    timeout: float = 5.0,
) -> None:
    """UPDATE_AND_CREATE_TOPIC (17) on one broker (protocol doc B.10)."""
    ext = create_topic_fields(
        topic,
        read_queues=read_queues,
        write_queues=write_queues,
        perm=perm,
        order=order,
        attributes=attributes,
    )
    resp = await request(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, timeout=timeout)
    _check(resp, f"create topic {topic!r} on {broker_addr}")


async def delete_topic(namesrv: str, broker_addrs: Iterable[str], topic: str) -> None:
    """Delete ``topic`` on each broker (its consume queues go; offsets restart at 0 when
    it is created again) and on the NameServer (DELETE_TOPIC_IN_BROKER/_IN_NAMESRV)."""
    for addr in broker_addrs:
        resp = await request(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        _check(resp, f"delete topic {topic!r} on {addr}")
    resp = await request(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
    _check(resp, f"delete topic {topic!r} on the NameServer {namesrv}")


def group_config(
    group: str,
    *,
    orderly: bool = False,
    retry_max_times: int = 16,
    retry_queue_nums: int = 1,
    broadcast: bool = True,
    attributes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A SubscriptionGroupConfig as JSON fields (remoting/.../SubscriptionGroupConfig.java).

    Defaults are those of the Java class (checked against 5.5.0).
    """
    return {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": broadcast,
        "consumeMessageOrderly": orderly,
        "retryQueueNums": retry_queue_nums,
        "retryMaxTimes": retry_max_times,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
        "groupSysFlag": 0,
        "consumeTimeoutMinute": 15,
        "attributes": dict(attributes or {}),
    }


async def create_group_on(
    broker_addr: str, config: Mapping[str, Any], timeout: float = 5.0
) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body is the group config JSON."""
    body = json.dumps(config).encode()
    resp = await request(
        broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body, timeout=timeout
    )
    _check(resp, f"create group {config.get('groupName')!r} on {broker_addr}")


async def get_group_on(broker_addr: str, group: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """GET_SUBSCRIPTIONGROUP_CONFIG (352): the broker's config of ``group``, or None."""
    resp = await request(
        broker_addr, GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}, timeout=timeout
    )
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    config: dict[str, Any] = json.loads(resp.body)
    return config


async def wait_route(
    namesrv: str,
    topic: str,
    expected: Mapping[str, tuple[int, int]],
    timeout: float = 30.0,
    interval: float = 0.2,
) -> dict[str, Any]:
    """Poll the NameServer until the route of ``topic`` has ``expected`` queues per broker."""
    last: dict[str, Any] | None = None
    last_error: Exception | None = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                last = await get_route(namesrv, topic)
                last_error = None
            except (RocketMQError, OSError) as exc:
                last_error = exc
            queues = route_queues(last)
            complete = all(queues.get(b) == q for b, q in expected.items())
            if last is not None and complete and set(expected) <= set(route_brokers(last)):
                return last
            await anyio.sleep(interval)
    raise AdminError(
        f"route of {topic!r} on {namesrv} did not show {dict(expected)} within {timeout}s; "
        f"last route: {route_queues(last)}"
        + (f", last error: {last_error!r}" if last_error else "")
    )


def expected_queues(
    brokers: Iterable[str], read_queues: int, write_queues: int
) -> dict[str, tuple[int, int]]:
    return {b: (read_queues, write_queues) for b in brokers}


# -- ACL 2.0 users and their permissions (brokers with authenticationEnabled) ----------

AUTH_CREATE_USER = 3001
AUTH_CREATE_ACL = 3006


async def create_user_on(
    broker_addr: str, username: str, password: str, *, super_user: bool = False
) -> None:
    """AUTH_CREATE_USER: a user (access key ``username``, secret key ``password``)."""
    body = json.dumps({
        "username": username, "password": password,
        "userType": "Super" if super_user else "Normal", "userStatus": "enable",
    }).encode()  # fmt: skip
    resp = await request(broker_addr, AUTH_CREATE_USER, {"username": username}, body)
    _check(resp, f"create user {username!r} on {broker_addr}")


async def grant_on(broker_addr: str, username: str, resources: Mapping[str, Iterable[str]]) -> None:
    """AUTH_CREATE_ACL: allow ``username`` the actions on each resource
    (``{"Topic:orders": ["Pub", "Sub"], "Group:g1": ["Sub"]}``; ``Topic:*`` for all)."""
    entries = [
        {"resource": res, "actions": list(actions), "sourceIps": [], "decision": "Allow"}
        for res, actions in resources.items()
    ]
    subject = f"User:{username}"
    body = json.dumps({
        "subject": subject, "policies": [{"policyType": "Custom", "entries": entries}],
    }).encode()  # fmt: skip
    resp = await request(broker_addr, AUTH_CREATE_ACL, {"subject": subject}, body)
    _check(resp, f"grant {dict(resources)} to {username!r} on {broker_addr}")
