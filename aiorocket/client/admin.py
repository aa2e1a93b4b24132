"""Admin requests to brokers and NameServers: one coroutine per request type.

The operators' requests (cluster info, topic and consume statistics, connections,
subscription groups, message lookup, offset reset), answered in the broker's JSON
dialect ([`aiorocket.protocol.fastjson`][]). This layer parses answers into plain
values; [`aiorocket.admin`][] composes them across brokers into typed results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiorocket.client.broker import BrokerClient, check_response
from aiorocket.errors import (
    MessageNotFoundError,
    ProtocolError,
    TopicNotExistError,
)
from aiorocket.message import MessageExt, MessageQueue
from aiorocket.protocol import fastjson
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.features import is_4x
from aiorocket.protocol.message_codec import decode_messages

__all__ = ["REPULL_FIELD", "AdminRequests", "ConsumeOffsets", "TopicOffsets", "parse_cluster_info"]


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """One queue's range in GET_TOPIC_STATS_INFO."""

    min_offset: int
    max_offset: int
    last_update_ms: int


@dataclass(frozen=True, slots=True)
class ConsumeOffsets:
    """One queue's entry in GET_CONSUME_STATS."""

    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int


def _queue_table(obj: Any, what: str) -> dict[MessageQueue, Any]:
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ProtocolError(f"{what} has no offsetTable")
    return {fastjson.queue_of(k): v for k, v in table.items()}


def parse_cluster_info(body: bytes) -> dict[str, dict[int, str]]:
    """A GET_BROKER_CLUSTER_INFO answer: broker name -> {broker id: address}."""
    obj = fastjson.loads(body, "cluster info") if body else {}
    out: dict[str, dict[int, str]] = {}
    try:
        for name, data in ((obj or {}).get("brokerAddrTable") or {}).items():
            addrs = data.get("brokerAddrs") or {}
            out[str(name)] = {int(k): str(v) for k, v in addrs.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise ProtocolError(f"cluster info is malformed: {exc!r}") from None
    return out


#: GET_CONSUMER_RUNNING_INFO's ext field naming a topic just reset: an aiorocket member
#: sends its pulls of that topic in flight again, to get the reset now (see
#: aiorocket.consumer.operator_requests); other clients ignore it
REPULL_FIELD = "aiorocketRepullTopic"

class AdminRequests:
    """Typed admin requests sent through a ``BrokerClient``'s pool.

    Parameters
    ----------
    broker:
        The broker client whose connection pool and timeout the requests use.
    """

    def __init__(self, broker: BrokerClient) -> None:
        self._broker = broker

    async def _ok(self, addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> Any:
        resp = check_response(await self._broker.call(addr, code, ext, body), code)
        return fastjson.loads(resp.body, RequestCode(code).name) if resp.body else None

    # -- topics ------------------------------------------------------------------------

    async def topic_stats(self, addr: str, topic: str) -> dict[MessageQueue, TopicOffsets]:
        """GET_TOPIC_STATS_INFO on one broker: its queues of ``topic``."""
        obj = await self._ok(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        return {
            mq: TopicOffsets(
                int(v.get("minOffset", 0)),
                int(v.get("maxOffset", 0)),
                int(v.get("lastUpdateTimestamp", 0)),
            )
            for mq, v in _queue_table(obj, "topic stats").items()
        }

    # -- groups --------------------------------------------------------------------------

    async def group_configs(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> its config on one broker."""
        obj = await self._ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        table = (obj or {}).get("subscriptionGroupTable") or {}
        return {str(k): dict(v) for k, v in table.items()}

    async def consume_stats(
        self, addr: str, group: str, topic: str | None = None
    ) -> dict[MessageQueue, ConsumeOffsets]:
        """GET_CONSUME_STATS on one broker: per queue, the max and committed offsets."""
        ext = {"consumerGroup": group}
        if topic:
            ext["topic"] = topic
        obj = await self._ok(addr, RequestCode.GET_CONSUME_STATS, ext)
        return {
            mq: ConsumeOffsets(
                int(v.get("brokerOffset", 0)),
                int(v.get("consumerOffset", 0)),
                int(v.get("lastTimestamp", 0)),
            )
            for mq, v in _queue_table(obj, "consume stats").items()
        }

    async def topic_groups(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups with offsets of (or subscribed to)
        ``topic`` on one broker."""
        obj = await self._ok(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        return sorted(str(g) for g in (obj or {}).get("groupList") or [])

    async def consumer_connections(self, addr: str, group: str) -> dict[str, Any]:
        """GET_CONSUMER_CONNECTION_LIST: the group's connections, subscriptions and model.

        Raises [`ConsumerNotOnlineError`][aiorocket.errors.ConsumerNotOnlineError] when no member is
        connected to that broker.
        """
        obj = await self._ok(
            addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}
        )
        return dict(obj or {})

    async def consumer_running_info(
        self, addr: str, group: str, client_id: str, *, timeout: float | None = None,
        extra: dict[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """GET_CONSUMER_RUNNING_INFO, forwarded by the broker to the client ``client_id``
        (with ``extra`` ext fields: the broker forwards them as they are)."""
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        ext.update(extra or {})
        resp = await self._broker.call(
            addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext, timeout=timeout
        )
        check_response(resp, RequestCode.GET_CONSUMER_RUNNING_INFO)
        return dict(fastjson.loads(resp.body, "consumer running info") or {})

    async def consume_message_directly(
        self,
        addr: str,
        group: str,
        client_id: str,
        msg_id: str,
        *,
        topic: str = "",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: the broker sends the stored message ``msg_id`` (an
        offset message id of that broker) to the client, whose handler consumes it."""
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id}
        if topic:
            ext["topic"] = topic
        resp = await self._broker.call(
            addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, timeout=timeout
        )
        check_response(resp, RequestCode.CONSUME_MESSAGE_DIRECTLY)
        return dict(fastjson.loads(resp.body, "consume result") or {})

    async def reset_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        """INVOKE_BROKER_TO_RESET_OFFSET for one queue, to an explicit offset.

        The broker (5.x, ``useServerSideResetOffset``) stores the offset, refuses older
        commits of the group's consumers for that queue, and hands the new position to
        their next pull.
        """
        ext = {
            "topic": mq.topic,
            "group": group,
            "queueId": str(mq.queue_id),
            "offset": str(offset),
            "timestamp": "0",
            "isForce": "true",
            "bname": mq.broker_name,
        }
        code = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
        resp = await self._broker.call(addr, code, ext)
        if resp.code == ResponseCode.CONSUMER_NOT_ONLINE or (
            is_4x(resp.version) and resp.code == ResponseCode.SYSTEM_ERROR
        ):
            # A RocketMQ 4.x broker (4.9.7) resets through the group's online consumers
            # only (CONSUMER_NOT_ONLINE without), and refuses a topic with a queue the
            # group has no offset on (SYSTEM_ERROR "consumer group not exist"): the offset
            # is then stored directly, as 4.x's mqadmin does.
            await self._broker.update_consumer_offset(addr, group, mq, offset)
            return
        check_response(resp, code, addr)

    # -- messages ------------------------------------------------------------------------

    async def view_message(
        self, addr: str, commit_log_offset: int, broker_name: str = ""
    ) -> MessageExt:
        """VIEW_MESSAGE_BY_ID: the message stored at ``commit_log_offset`` of one broker."""
        resp = await self._broker.call(
            addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(commit_log_offset)}
        )
        check_response(resp, RequestCode.VIEW_MESSAGE_BY_ID)
        messages = decode_messages(resp.body, broker_name=broker_name)
        if not messages:
            raise MessageNotFoundError(f"no message at offset {commit_log_offset} of {addr}")
        return messages[0]

    async def query_messages(
        self,
        addr: str,
        topic: str,
        key: str,
        *,
        unique_key: bool = False,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int = 2**62,
        broker_name: str = "",
    ) -> list[MessageExt]:
        """QUERY_MESSAGE by key (``KEYS``), or by message id (``UNIQ_KEY``) with
        ``unique_key``, on one broker's index; [] when none matches."""
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin_ms),
            "endTimestamp": str(end_ms),
        }
        if unique_key:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await self._broker.call(addr, RequestCode.QUERY_MESSAGE, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        check_response(resp, RequestCode.QUERY_MESSAGE)
        return decode_messages(resp.body, broker_name=broker_name)

    # -- brokers -----------------------------------------------------------------------

    async def runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's figures (version, TPS, totals, disk)."""
        obj = await self._ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO, {})
        return {str(k): str(v) for k, v in ((obj or {}).get("table") or {}).items()}

    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: every setting of one broker (a properties text)."""
        resp = await self._broker.call(addr, RequestCode.GET_BROKER_CONFIG, {})
        check_response(resp, RequestCode.GET_BROKER_CONFIG)
        config: dict[str, str] = {}
        for line in resp.body.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.lstrip().startswith("#"):
                config[key.strip()] = value.strip()
        return config

    async def update_broker_config(self, addr: str, settings: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: set these keys on one broker (in memory and its file)."""
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
        await self._ok(addr, RequestCode.UPDATE_BROKER_CONFIG, {}, body)

    # -- topics and groups: changes ------------------------------------------------------

    async def topic_config(self, addr: str, topic: str) -> dict[str, Any]:
        """GET_TOPIC_CONFIG: queues, permission, order flag and attributes on one broker."""
        code = RequestCode.GET_TOPIC_CONFIG
        resp = await self._broker.call(addr, code, {"topic": topic})
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            # RocketMQ 4.x (4.9.7) has no GET_TOPIC_CONFIG (5.0 added it): the topic's
            # entry of the broker's whole table, as mqadmin reads it there.
            table = await self._ok(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {}) or {}
            conf = (table.get("topicConfigTable") or {}).get(topic)
            if conf is None:
                raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no topic {topic!r}",
                                         request_code=code)  # fmt: skip
            return dict(conf)
        check_response(resp, code, addr)
        return dict(fastjson.loads(resp.body, code.name) or {}) if resp.body else {}

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        await self._ok(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})

    async def create_group(self, addr: str, config: dict[str, Any]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a SubscriptionGroupConfig document."""
        body = json.dumps(config, separators=(",", ":")).encode()
        await self._ok(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)

    async def delete_group(self, addr: str, group: str, *, clean_offset: bool = True) -> None:
        """DELETE_SUBSCRIPTIONGROUP (and, with ``clean_offset``, its committed offsets)."""
        ext = {"groupName": group, "cleanOffset": "true" if clean_offset else "false"}
        await self._ok(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext)

    # -- producers -------------------------------------------------------------------------

    async def producers(self, addr: str) -> dict[str, list[dict[str, Any]]]:
        """GET_ALL_PRODUCER_INFO: producer group -> its connected producers on one broker."""
        obj = await self._ok(addr, RequestCode.GET_ALL_PRODUCER_INFO, {})
        data = (obj or {}).get("data") or {}
        return {str(g): [dict(p) for p in (ps or [])] for g, ps in data.items()}
