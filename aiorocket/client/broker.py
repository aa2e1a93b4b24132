"""Broker operations over remoting: one coroutine per request type.

This layer knows request headers and response fields, nothing about consumer or
producer policy (retries, fault tolerance, rebalance): those live in the layers above.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiorocket._send_result import send_result
from aiorocket.client.pull_request import PullHeader, PullRequest
from aiorocket.client.results import PullResult, PullStatus, SendResult, SendStatus
from aiorocket.errors import (
    BrokerResponseError,
    ProtocolError,
    RocketMQError,
    UnsupportedBrokerFeatureError,
    error_for_response,
)
from aiorocket.message import (
    PROPERTY_MESSAGE_TYPE,
    REPLY_MESSAGE_TYPE,
    MessageExt,
    MessageQueue,
)
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.features import (
    BrokerFeature,
    feature_of_properties,
    feature_of_request,
    is_4x,
    version_name,
)
from aiorocket.protocol.message_codec import UndecodableRecord, decode_messages
from aiorocket.remoting.connection import StallCheck, WireTiming
from aiorocket.remoting.pool import ConnectionPool

if TYPE_CHECKING:
    from aiorocket.protocol.message_codec import Stamp

# PullSysFlag bits.
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4

_SEND_OK_CODES = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}

#: the numbers of a pull's answer (PullMessageResponseHeader)
_PULL_NUMBERS = ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")

DEFAULT_TOPIC = "TBW102"
#: The group the admin tools read messages as (MixAll.TOOLS_CONSUMER_GROUP).
TOOLS_GROUP = "TOOLS_CONSUMER"
#: MessageSysFlag.TRANSACTION_PREPARED_TYPE: a half message.
_TRANSACTION_PREPARED = 0x4


def response_error(resp: RemotingCommand, request_code: int, addr: str = "") -> RocketMQError:
    """The typed error of a non-success answer. A request of a feature newer than the
    broker (POP or lite on 4.x, recall before 5.3.2, ...: the broker names its release in
    every answer) is ``UnsupportedBrokerFeatureError`` whatever code the broker chose
    (REQUEST_CODE_NOT_SUPPORTED from 4.9.7 and 5.3.3), so that no caller retries it."""
    feature = feature_of_request(request_code)
    if feature is not None and 0 < resp.version < feature.since_code:
        return unsupported(feature, addr, resp.version)
    return error_for_response(resp.code, resp.remark, request_code)


def unsupported(feature: BrokerFeature, addr: str, version: int) -> UnsupportedBrokerFeatureError:
    return UnsupportedBrokerFeatureError(
        feature.name, feature.since, broker=addr or "?", broker_version=version_name(version)
    )


#: a reply's properties as encoded (NAME \x01 value \x02): aiorocket.producer.reply
_REPLY_MARK = f"{PROPERTY_MESSAGE_TYPE}\x01{REPLY_MESSAGE_TYPE}\x02"
#: the reply mark after another property
_REPLY_MARK_AFTER = f"\x02{_REPLY_MARK}"
#: the member itself, without the enum class's attribute look-up a message
_SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2


def _send_code(properties: str, batch: bool) -> RequestCode:
    """The request a message goes in: a reply (MSG_TYPE=reply) goes as SEND_REPLY_MESSAGE_V2,
    the same header, which the broker pushes to the requester besides storing it."""
    if batch:
        return RequestCode.SEND_BATCH_MESSAGE
    if properties.startswith(_REPLY_MARK) or _REPLY_MARK_AFTER in properties:
        return RequestCode.SEND_REPLY_MESSAGE_V2
    return _SEND_MESSAGE_V2


def check_response(resp: RemotingCommand, request_code: int, addr: str = "") -> RemotingCommand:
    """``resp`` if it is a success, else the typed error of its code."""
    if resp.code != ResponseCode.SUCCESS:
        raise response_error(resp, request_code, addr)
    return resp


_check = check_response


def create_topic_fields(
    topic: str,
    *,
    read_queues: int,
    write_queues: int,
    perm: int,
    order: bool,
    attributes: str | None,
) -> dict[str, str]:
    """The UPDATE_AND_CREATE_TOPIC header (shared with the test-cluster admin helpers)."""
    ext = {
        "topic": topic,
        "defaultTopic": DEFAULT_TOPIC,
        "readQueueNums": str(read_queues),
        "writeQueueNums": str(write_queues),
        "perm": str(perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "true" if order else "false",
    }
    if attributes:
        ext["attributes"] = attributes
    return ext


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def _send_ext(
    mq: MessageQueue,
    properties: str,
    producer_group: str,
    flag: int,
    sys_flag: int,
    reconsume_times: int | None,
    max_reconsume_times: int | None,
    batch: bool,
    default_topic: str = DEFAULT_TOPIC,
    default_topic_queue_nums: int = 4,
) -> dict[str, str]:
    """SendMessageRequestHeaderV2 (short field names, B.7)."""
    ext = {
        "a": producer_group,
        "b": mq.topic,
        "c": default_topic,  # a broker creating the topic copies this topic's config
        "d": str(default_topic_queue_nums),
        "e": str(mq.queue_id),
        "f": str(sys_flag),
        "g": str(time.time_ns() // 1_000_000),
        "h": str(flag),
        "i": properties,
        "j": str(reconsume_times or 0),
        "k": "false",
        "m": "true" if batch else "false",
        "n": mq.broker_name,
    }
    if max_reconsume_times is not None:
        ext["l"] = str(max_reconsume_times)
    return ext


def send_request(
    mq: MessageQueue, body: bytes, properties: str, producer_group: str, flag: int,
    sys_flag: int, batch: bool, default_topic: str, default_topic_queue_nums: int,
    reconsume_times: int | None = None, max_reconsume_times: int | None = None,
) -> RemotingCommand:  # fmt: skip
    """``BrokerClient.send_message``'s request (its feature check is the caller's:
    ``feature_of_properties``), also for a caller that sends it on a connection of its
    own (the producer's sender: two coroutines a send less, benchmarks/README.md, "The
    plain send, round 1")."""
    ext = _send_ext(
        mq, properties, producer_group, flag, sys_flag, reconsume_times, max_reconsume_times,
        batch, default_topic, default_topic_queue_nums,
    )  # fmt: skip
    return RemotingCommand(_send_code(properties, batch), 0, 0, None, ext, body)


def send_answer(
    resp: RemotingCommand, code: int, mq: MessageQueue, msg_id: str, sys_flag: int
) -> SendResult:
    """The result of the send of request ``code`` to ``mq`` that ``resp`` answers, or
    its typed error (``error_for_response``)."""
    status = _SEND_OK_CODES.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise error_for_response(resp.code, resp.remark, code)
    ext_fields = resp.ext_fields
    queue_id = resp.ext_int("queueId", mq.queue_id)
    return send_result(
        status,
        msg_id,
        mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, queue_id),
        resp.ext_int("queueOffset", -1),
        ext_fields.get("msgId", ""),
        # RocketMQ 4.x (4.9.7) answers a half message without a transactionId: the
        # id is then the message's own (UNIQ_KEY), which is what 5.x answers too.
        ext_fields.get("transactionId") or (msg_id if sys_flag & _TRANSACTION_PREPARED else None),
        ext_fields.get("recallHandle") or None,
    )


class BrokerClient:
    """Typed broker requests on top of a ``ConnectionPool``."""

    def __init__(self, pool: ConnectionPool, timeout: float = 3.0) -> None:
        self.pool = pool
        self.timeout = timeout

    async def call(
        self,
        addr: str,
        code: int,
        ext: dict[str, str],
        body: bytes = b"",
        timeout: float | None = None,
        stall: StallCheck | None = None,
        timing: WireTiming | None = None,
    ) -> RemotingCommand:
        """One request to ``addr``; the answer whatever its code (``stall``, ``timing``:
        see ``aiorocket.remoting.connection.Connection.request``)."""
        return await self.pool.request(
            addr, RemotingCommand.request(code, ext, body), timeout or self.timeout, stall,
            timing,
        )  # fmt: skip

    _call = call

    async def require(
        self, addr: str, feature: BrokerFeature, probe: MessageQueue | None = None
    ) -> None:
        """Raise ``UnsupportedBrokerFeatureError`` if the broker at ``addr`` is older than
        ``feature``. Its release comes with every answer on the connection; before the
        first one, a GET_MAX_OFFSET of ``probe`` (answered by every release, its outcome
        not needed) asks for it. Without ``probe`` nor an answer yet, nothing is known:
        the broker's own answer to the feature's request decides then."""
        conn = await self.pool.get(addr)
        if conn.peer_version is None and probe is not None:
            mq = probe
            ext = {"topic": mq.topic, "queueId": str(mq.queue_id), "bname": mq.broker_name}
            await conn.request(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, ext),
                               self.timeout)  # fmt: skip
        version = conn.peer_version
        # 0: a server that does not say (a test fake); it is given the benefit of the doubt.
        if version is not None and 0 < version < feature.since_code:
            raise unsupported(feature, addr, version)

    # -- producing -----------------------------------------------------------------

    async def send_message(
        self,
        addr: str,
        mq: MessageQueue,
        body: bytes,
        properties: str,
        *,
        producer_group: str,
        msg_id: str,
        flag: int = 0,
        sys_flag: int = 0,
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
        batch: bool = False,
        timeout: float | None = None,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = 4,
        stall: StallCheck | None = None,
        timing: WireTiming | None = None,
    ) -> SendResult:
        """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE when ``batch``); ``properties`` is pre-encoded.

        A broker with ``autoCreateTopicEnable`` that does not have the topic creates it
        from ``default_topic`` with ``default_topic_queue_nums`` queues. A message with a
        property of a feature newer than the broker (a 4.x broker stores a 5.x timer
        message and delivers it at once) raises ``UnsupportedBrokerFeatureError`` first.
        ``timing`` gets the send request's time on the wire (not a feature probe's).

        The producer's plain send (``producer.sender.Sender.send``) repeats these steps
        inline with ``send_request``/``send_answer`` (two coroutines a send less:
        benchmarks/README.md, "The plain send, round 1"): a change here goes there too.
        """
        feature = feature_of_properties(properties)
        if feature is not None:
            await self.require(addr, feature, mq)
        cmd = send_request(
            mq, body, properties, producer_group, flag, sys_flag, batch, default_topic,
            default_topic_queue_nums, reconsume_times, max_reconsume_times,
        )  # fmt: skip
        resp = await self.send_command(addr, cmd, timeout or self.timeout, stall, timing)
        return send_answer(resp, cmd.code, mq, msg_id, sys_flag)

    async def send_command(
        self, addr: str, cmd: RemotingCommand, timeout: float, stall: StallCheck | None,
        timing: WireTiming | None,
    ) -> RemotingCommand:  # fmt: skip
        """``call``'s request, made: the answer to a send (the producer's sender awaits
        ``pool.live(addr)``'s ``request`` itself when there is a live connection)."""
        conn = self.pool.live(addr) or await self.pool.get(addr)
        return await conn.request(cmd, timeout, stall, timing)

    async def send_message_oneway(
        self,
        addr: str,
        mq: MessageQueue,
        body: bytes,
        properties: str,
        *,
        producer_group: str,
        flag: int = 0,
        sys_flag: int = 0,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = 4,
    ) -> None:
        """SEND_MESSAGE_V2 as a oneway request: no answer, no result."""
        feature = feature_of_properties(properties)
        if feature is not None:
            await self.require(addr, feature, mq)
        ext = _send_ext(
            mq, properties, producer_group, flag, sys_flag, None, None, False,
            default_topic, default_topic_queue_nums,
        )  # fmt: skip
        await self.pool.oneway(
            addr, RemotingCommand.request(_send_code(properties, False), ext, body)
        )

    async def end_transaction(
        self,
        addr: str,
        *,
        producer_group: str,
        tran_state_table_offset: int,
        commit_log_offset: int,
        commit_or_rollback: int,
        msg_id: str,
        transaction_id: str | None,
        from_check: bool,
        topic: str = "",
        confirm: bool = False,
    ) -> None:
        """END_TRANSACTION for the half message at ``commit_log_offset``.

        Oneway, as the Java client sends it, unless ``confirm``: then the broker's answer
        is awaited and a refusal raised (e.g. ``ILLEGAL_OPERATION`` for a half message
        past its check-immunity time, which only a check-back may end now).
        """
        ext = {
            "producerGroup": producer_group,
            "tranStateTableOffset": str(tran_state_table_offset),
            "commitLogOffset": str(commit_log_offset),
            "commitOrRollback": str(commit_or_rollback),
            "fromTransactionCheck": "true" if from_check else "false",
            "msgId": msg_id,
        }
        if transaction_id:
            ext["transactionId"] = transaction_id
        if topic:
            ext["topic"] = topic
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, ext)
        if confirm:
            _check(await self.pool.request(addr, cmd, self.timeout), RequestCode.END_TRANSACTION)
        else:
            await self.pool.oneway(addr, cmd)

    # -- pulling -------------------------------------------------------------------

    async def pull(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        *,
        max_nums: int = 32,
        sys_flag: int = PULL_SUSPEND,
        commit_offset: int = 0,
        suspend_timeout_ms: int = 15_000,
        sub_version: int = 0,
        subscription: str | None = None,
        expression_type: str | None = None,
        timeout: float = 30.0,
        decode: bool = True,
        message_class: type[MessageExt] = MessageExt,
        keep_undecodable: bool = False,
        stamp: Stamp | None = None,
        header: PullHeader | None = None,
    ) -> PullResult:
        """PULL_MESSAGE. A record that cannot be decoded fails the whole pull with
        ``MessageDecodeError``, unless ``keep_undecodable``: then it is left out of
        ``messages`` and listed in ``undecodable``. ``stamp``: see ``decode_messages``.

        ``header``: the request's fixed fields encoded once, by a caller that pulls a
        queue many times (the puller): ``PullHeader`` of this ``group``, ``mq``,
        ``suspend_timeout_ms``, ``sub_version``, ``subscription`` and
        ``expression_type``, which are then not read."""
        if header is None:
            header = PullHeader(
                group, mq, suspend_timeout_ms=suspend_timeout_ms, sub_version=sub_version,
                subscription=subscription, expression_type=expression_type,
            )  # fmt: skip
        request = PullRequest(header, offset, max_nums, sys_flag, commit_offset)
        # The pool's connection without call's, request's and get's coroutines (once a
        # pull: benchmarks/README.md, "Round 11")
        conn = self.pool.live(addr) or await self.pool.get(addr)
        resp = await conn.request(request, timeout)
        status = _PULL_STATUS.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise error_for_response(resp.code, resp.remark, RequestCode.PULL_MESSAGE)
        messages: list[MessageExt] = []
        undecodable: list[UndecodableRecord] = []
        summary: list[int] = []  # the messages' one body length, if the decoder knows it
        offsets: list[Sequence[int]] = []  # ... and their offsets
        if status is PullStatus.FOUND and decode:
            # read where it was received, not copied out first (benchmarks/ceiling.py;
            # benchmarks/README.md, "Round 12")
            data, start, end = resp.body_in_place()
            messages = decode_messages(
                data,
                broker_name=mq.broker_name,
                message_class=message_class,
                undecodable=undecodable if keep_undecodable else None,
                stamp=stamp,
                start=start,
                end=end,
                summary=summary,
                offsets=offsets,
            )
        # the four numbers without an ext_int call each (once a pull); a malformed one
        # raises ext_int's error
        get = resp.ext_fields.get
        try:
            next_begin, low, high, suggested = (
                int(get("nextBeginOffset", offset)), int(get("minOffset", 0)),
                int(get("maxOffset", 0)), int(get("suggestWhichBrokerId", 0)),
            )  # fmt: skip
        except ValueError:
            for name in _PULL_NUMBERS:
                resp.ext_int(name, 0)
            raise
        # by position: a class called with keywords gets them as a dict, made and read
        # once a pull (benchmarks/README.md, "Round 18")
        return PullResult(
            status, next_begin, low, high, messages, suggested, undecodable,
            summary[0] if summary else -1, offsets[0] if offsets else None,
        )  # fmt: skip

    # -- offsets -------------------------------------------------------------------

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset, or None when it has none (QUERY_NOT_FOUND)."""
        ext = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "bname": mq.broker_name,
            # Without this the broker answers 0 for a new group whose queue still has
            # its first message in memory, overriding consume-from-where.
            "setZeroIfNotFound": "false",
        }
        resp = await self._call(addr, RequestCode.QUERY_CONSUMER_OFFSET, ext)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return _check(resp, RequestCode.QUERY_CONSUMER_OFFSET).ext_int("offset")

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int, *, oneway: bool = False
    ) -> None:
        ext = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "commitOffset": str(offset),
            "bname": mq.broker_name,
        }
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if oneway:
            await self.pool.oneway(addr, cmd)
        else:
            _check(
                await self.pool.request(addr, cmd, self.timeout), RequestCode.UPDATE_CONSUMER_OFFSET
            )

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        ext = {
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "committed": "true",
            "bname": mq.broker_name,
        }
        resp = await self._call(addr, RequestCode.GET_MAX_OFFSET, ext)
        return _check(resp, RequestCode.GET_MAX_OFFSET).ext_int("offset")

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id), "bname": mq.broker_name}
        resp = await self._call(addr, RequestCode.GET_MIN_OFFSET, ext)
        return _check(resp, RequestCode.GET_MIN_OFFSET).ext_int("offset")

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, *, upper: bool = False
    ) -> int:
        """The first offset stored at or after ``timestamp_ms`` (LOWER boundary by default)."""
        ext = {
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "timestamp": str(timestamp_ms),
            "boundaryType": "UPPER" if upper else "LOWER",
            "bname": mq.broker_name,
        }
        resp = await self._call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext)
        offset = _check(resp, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP).ext_int("offset")
        if not is_4x(resp.version):
            return offset
        # RocketMQ 4.x (4.9.7) ignores boundaryType (5.0) and answers the offset whose
        # store time is nearest: one step off when that message is on the wrong side.
        stored = await self._store_time(addr, mq, offset)
        if stored is not None and (stored > timestamp_ms if upper else stored < timestamp_ms):
            return offset - 1 if upper else offset + 1
        return offset

    async def _store_time(self, addr: str, mq: MessageQueue, offset: int) -> int | None:
        """The store time of the message at ``offset`` (None: there is none)."""
        result = await self.pull(
            addr, TOOLS_GROUP, mq, offset, max_nums=1, sys_flag=PULL_SUBSCRIPTION,
            suspend_timeout_ms=0, subscription="*", timeout=self.timeout,
        )  # fmt: skip
        if result.status is not PullStatus.FOUND or not result.messages:
            return None
        return result.messages[0].store_timestamp

    # -- membership ----------------------------------------------------------------

    async def heartbeat(self, addr: str, data: Mapping[str, Any]) -> RemotingCommand:
        body = json.dumps(data, separators=(",", ":")).encode()
        resp = await self._call(addr, RequestCode.HEART_BEAT, {}, body)
        return _check(resp, RequestCode.HEART_BEAT)

    async def unregister_client(
        self, addr: str, client_id: str, *, producer_group: str = "", consumer_group: str = ""
    ) -> None:
        ext = {"clientID": client_id}
        if producer_group:
            ext["producerGroup"] = producer_group
        if consumer_group:
            ext["consumerGroup"] = consumer_group
        resp = await self._call(addr, RequestCode.UNREGISTER_CLIENT, ext)
        _check(resp, RequestCode.UNREGISTER_CLIENT)

    async def get_consumer_ids(self, addr: str, group: str) -> list[str]:
        resp = await self._call(
            addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
        )
        if resp.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (resp.remark or ""):
            return []
        _check(resp, RequestCode.GET_CONSUMER_LIST_BY_GROUP)
        try:
            ids = json.loads(resp.body).get("consumerIdList") or []
            return [str(i) for i in ids]
        except (ValueError, AttributeError, TypeError, RecursionError) as exc:
            raise ProtocolError(f"consumer list of {group!r} is malformed: {exc!r}") from None

    async def lock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        body = json.dumps(
            {
                "consumerGroup": group,
                "clientId": client_id,
                "onlyThisBroker": False,
                "mqSet": [_mq_json(mq) for mq in mqs],
            }
        ).encode()
        resp = _check(
            await self._call(addr, RequestCode.LOCK_BATCH_MQ, {}, body), RequestCode.LOCK_BATCH_MQ
        )
        try:
            locked = json.loads(resp.body).get("lockOKMQSet") or []
            return {MessageQueue(m["topic"], m["brokerName"], int(m["queueId"])) for m in locked}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise ProtocolError(f"lock answer is malformed: {exc!r}") from None

    async def unlock_batch(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        body = json.dumps(
            {
                "consumerGroup": group,
                "clientId": client_id,
                "onlyThisBroker": False,
                "mqSet": [_mq_json(mq) for mq in mqs],
            }
        ).encode()
        resp = await self._call(addr, RequestCode.UNLOCK_BATCH_MQ, {}, body)
        _check(resp, RequestCode.UNLOCK_BATCH_MQ)

    # -- retry -----------------------------------------------------------------------

    async def send_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        *,
        delay_level: int,
        max_reconsume_times: int,
        origin_topic: str | None = None,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: re-deliver later through ``%RETRY%<group>`` (or the DLQ)."""
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": group,
            "delayLevel": str(delay_level),
            "originMsgId": msg.msg_id,
            "originTopic": origin_topic or msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": str(max_reconsume_times),
            "bname": msg.broker_name,
        }
        resp = await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext)
        _check(resp, RequestCode.CONSUMER_SEND_MSG_BACK)

    # -- admin -----------------------------------------------------------------------

    async def create_topic(
        self,
        addr: str,
        topic: str,
        *,
        read_queues: int = 8,
        write_queues: int = 8,
        perm: int = 6,
        order: bool = False,
        attributes: str | None = None,
    ) -> None:
        ext = create_topic_fields(
            topic,
            read_queues=read_queues,
            write_queues=write_queues,
            perm=perm,
            order=order,
            attributes=attributes,
        )
        _check(
            await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext),
            RequestCode.UPDATE_AND_CREATE_TOPIC,
        )


__all__ = ["BrokerClient", "BrokerResponseError", "send_answer", "send_request"]
