"""Operators' requests a broker forwards to a consumer, answered as a Java consumer does.

* GET_CONSUMER_RUNNING_INFO (307): subscriptions, per-queue process-queue state and
  consume rates (``mqadmin consumerStatus``, the dashboard, ``aiorocket group describe``);
* CONSUME_MESSAGE_DIRECTLY (309): run the handler on one stored message and report the
  result (``mqadmin consumeMessage``); nothing is committed or sent back;
  With the ext field ``aiorocketRepullTopic`` (``Admin.reset_offset`` sends it after a
  server-side reset, the only way an admin reaches a 5.x client), the pulls in flight
  of that topic's queues are given up and sent again, so the broker's answer hands the
  reset over now instead of when the held long poll times out (up to
  ``long_poll_timeout`` later); other clients ignore the field;
* RESET_CONSUMER_CLIENT_OFFSET (220): the broker's older reset path
  (``useServerSideResetOffset=false``): the queues named restart at the new offsets, their
  cached messages are dropped (a handler still running for one settles nothing), and the
  new offset is committed at once, so the next commit cannot move it back.

The engine registers ``OperatorRequests.register`` with its request dispatcher.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio

from aiorocket._stacks import process_stacks
from aiorocket._version import __version__
from aiorocket.client.admin import REPULL_FIELD
from aiorocket.consumer.stats import Snapshot, queue_stats
from aiorocket.errors import ProtocolError
from aiorocket.protocol import fastjson
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import decode_messages
from aiorocket.received import ConsumerMessage
from aiorocket.remoting.dispatcher import RequestDispatcher
from aiorocket.results import failure_delay_level

if TYPE_CHECKING:
    from aiorocket.consumer.committer import AutoCommit
    from aiorocket.consumer.handler import Handler
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.remoting.connection import Connection

__all__ = ["OperatorRequests"]


class OperatorRequests:
    """Answers the broker-forwarded operator requests for one consumer.

    Parameters
    ----------
    state:
        The consumer's shared state, which the answers describe.
    namesrv_addrs:
        The NameServer addresses (reported in the running info).
    handler:
        The handler CONSUME_MESSAGE_DIRECTLY runs; None for an iterated consumer.
    commits:
        Commits a queue's offset reset by the broker.
    """

    def __init__(
        self,
        state: ConsumerState,
        namesrv_addrs: Sequence[str],
        handler: Handler | None,
        commits: AutoCommit,
    ) -> None:
        self._state = state
        self._namesrv_addrs = namesrv_addrs
        self._handler = handler
        self._commits = commits
        self._last: Snapshot | None = None
        self._handlers = {
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_directly,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self.reset_offset,
        }

    def register(self, dispatcher: RequestDispatcher) -> None:
        for code, handler in self._handlers.items():
            dispatcher.register(code, handler)

    def unregister(self, dispatcher: RequestDispatcher) -> None:
        for code, handler in self._handlers.items():
            dispatcher.unregister(code, handler)

    def _for_us(self, cmd: RemotingCommand) -> bool:
        return cmd.ext_fields.get("consumerGroup", cmd.ext_fields.get("group")) == (
            self._state.group
        )

    @staticmethod
    def _refuse(cmd: RemotingCommand, remark: str) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark)

    # -- GET_CONSUMER_RUNNING_INFO --------------------------------------------------------

    async def running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not self._for_us(cmd):
            return self._refuse(cmd, f"this client consumes group {self._state.group!r}")
        self._repull(cmd.ext_fields.get(REPULL_FIELD))
        jstack = cmd.ext_fields.get("jstackEnable") == "true"  # mqadmin consumerStatus -s
        body = self.running_info_json(jstack=jstack).encode()
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)

    def _repull(self, topic: str | None) -> None:
        """Give up the pulls in flight of ``topic``'s queues: each is sent again at once
        (from the same position), and the broker answers it with the offset an operator
        reset it to (see the module docstring)."""
        if not topic:
            return
        woken = 0
        for mq, pq in list(self._state.process_queues.items()):
            if mq.topic == topic and pq.request_scope is not None:
                pq.request_scope.cancel()
                woken += 1
        self._state.log.debug("pulls_renewed_for_reset", topic=topic, queues=woken)

    def running_info_json(self, *, jstack: bool = False) -> str:
        """ConsumerRunningInfo in the broker's JSON dialect (MessageQueue-keyed mqTable);
        with ``jstack``, what every task awaits (``aiorocket._stacks``) in its jstack."""
        c = self._state
        cfg = c.config
        stats, self._last = queue_stats(c.process_queues, self._last)
        now_ms = time.time_ns() // 1_000_000
        now, loop_now = time.monotonic(), anyio.current_time()

        def wall(at: float | None, clock: float = now) -> int:  # as epoch ms (0: never)
            return 0 if at is None else now_ms - int((clock - at) * 1000)

        mq_table = []
        for s in stats:
            pq = c.process_queues.get(s.queue)
            mq_table.append(
                (
                    s.queue,
                    {
                        "commitOffset": s.committed_offset,
                        "cachedMsgMinOffset": s.committed_offset if s.cached else 0,
                        "cachedMsgMaxOffset": s.next_offset - 1 if s.cached else 0,
                        "cachedMsgCount": s.cached,
                        "cachedMsgSizeInMiB": s.cached_bytes // (1024 * 1024),
                        "transactionMsgMinOffset": 0,
                        "transactionMsgMaxOffset": 0,
                        "transactionMsgCount": 0,
                        "locked": bool(pq and pq.locked),
                        "tryUnlockTimes": 0,
                        "lastLockTimestamp": (
                            wall(pq.last_lock_time, loop_now) if pq and pq.locked else 0
                        ),
                        "droped": bool(pq and pq.dropped),
                        "lastPullTimestamp": wall(pq.last_pull_completed if pq else None),
                        "lastConsumeTimestamp": wall(pq.last_consumed if pq else None),
                    },
                )
            )
        status: dict[str, dict[str, float]] = {}
        for s in stats:
            topic = status.setdefault(
                s.queue.topic,
                {"pullRT": 0.0, "pullTPS": 0.0, "consumeRT": 0.0, "consumeOKTPS": 0.0,
                 "consumeFailedTPS": 0.0, "consumeFailedMsgs": 0},
            )  # fmt: skip
            topic["pullTPS"] += s.pull_rate
            topic["consumeOKTPS"] += s.consume_rate
        properties = {
            "PROP_NAMESERVER_ADDR": ";".join(self._namesrv_addrs),
            "PROP_CONSUME_TYPE": "CONSUME_ACTIVELY" if c.pull_mode else "CONSUME_PASSIVELY",
            "PROP_CONSUME_ORDERLY": "true" if cfg.orderly else "false",
            "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_concurrency),
            "PROP_CONSUMER_START_TIMESTAMP": str(c.started_at_ms),
            "PROP_CLIENT_VERSION": f"aiorocket {__version__}",
            "consumerGroup": c.group,
            "messageModel": cfg.message_model.value,
            "consumeFromWhere": cfg.consume_from_where.value,
            "pullBatchSize": str(cfg.pull_batch_size),
            "pullThresholdForQueue": str(cfg.pull_threshold_for_queue),
            "consumeMessageBatchMaxSize": str(cfg.consume_batch_size),
            # what decides the retries of a push/pull member (the broker's retryMaxTimes
            # only when the client sends none): mqadmin and group describe show it
            "maxReconsumeTimes": str(cfg.max_reconsume_times),
            "language": "PYTHON",
        }
        subscriptions = [_subscription_json(s.to_heartbeat()) for s in c.subscriptions.values()]
        return fastjson.dumps_with(
            {
                "properties": properties,
                "subscriptionSet": subscriptions,
                "statusTable": status,
                "userConsumerInfo": {},
                "jstack": process_stacks() if jstack else "",
            },
            {"mqTable": fastjson.dumps_queue_map(mq_table)},
        )

    # -- CONSUME_MESSAGE_DIRECTLY -------------------------------------------------------

    async def consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        c = self._state
        if not self._for_us(cmd):
            return self._refuse(cmd, f"this client consumes group {c.group!r}")
        handler = self._handler
        if handler is None:
            return self._refuse(cmd, "this consumer has no handler (it is iterated)")
        try:
            decoded = decode_messages(
                cmd.body,
                broker_name=cmd.ext_fields.get("brokerName", ""),
                message_class=ConsumerMessage,
            )
        except ProtocolError as exc:
            return self._refuse(cmd, f"the message cannot be decoded: {exc}")
        if not decoded:
            return self._refuse(cmd, "no message in the request")
        msg = cast("ConsumerMessage", decoded[0])
        started = time.perf_counter()
        try:
            level = failure_delay_level(await handler.invoke([msg]), 0)
            result, remark = ("CR_SUCCESS", "") if level is None else ("CR_LATER", "")
        except Exception as exc:  # reported to the operator, like Java's CR_THROW_EXCEPTION
            result, remark = "CR_THROW_EXCEPTION", repr(exc)
        spent = int((time.perf_counter() - started) * 1000)
        c.log.info("consumed_directly", topic=msg.topic, msg_id=msg.msg_id, result=result)
        body = {
            "order": c.config.orderly,
            "autoCommit": True,
            "consumeResult": result,
            "remark": remark,
            "spentTimeMills": spent,
        }
        return RemotingCommand.response_to(
            cmd, ResponseCode.SUCCESS, body=json.dumps(body).encode()
        )

    # -- RESET_CONSUMER_CLIENT_OFFSET ---------------------------------------------------

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        c = self._state
        if not self._for_us(cmd):
            return None if cmd.is_oneway else self._refuse(cmd, "another group")
        try:
            table = fastjson.loads(cmd.body, "reset offset body").get("offsetTable") or {}
            offsets = {fastjson.queue_of(k): int(v) for k, v in table.items()}
        except (ProtocolError, AttributeError, TypeError, ValueError) as exc:
            c.log.warning("reset_offset_malformed", broker=conn.address, error=str(exc))
            return None if cmd.is_oneway else self._refuse(cmd, "malformed body")
        # Whatever this client committed for these queues no longer holds: the reset
        # wins over it, even for a queue that is not ours now (see consumer.offsets).
        c.resume_floors.forget(offsets)
        reset = []
        for mq, offset in offsets.items():
            pq = c.process_queues.get(mq)
            if pq is None or pq.dropped or offset < 0:
                continue
            pq.reset(offset)  # drops cached messages; late completions count for nothing
            pq.tracker.mark_dirty()
            reset.append(pq)
        for pq in reset:
            await self._commits.commit(pq)  # committed now: a later commit starts from here
        c.log.warning(
            "offsets_reset_by_broker",
            topic=cmd.ext_fields.get("topic"),
            queues=len(reset),
            broker=conn.address,
        )
        return None if cmd.is_oneway else RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)


def _subscription_json(heartbeat: dict[str, Any]) -> dict[str, Any]:
    """SubscriptionData as the Java tools read it (the heartbeat's fields)."""
    return {
        "classFilterMode": False,
        "topic": heartbeat["topic"],
        "subString": heartbeat["subString"],
        "tagsSet": heartbeat.get("tagsSet", []),
        "codeSet": heartbeat.get("codeSet", []),
        "subVersion": heartbeat.get("subVersion", 0),
        "expressionType": heartbeat.get("expressionType", "TAG"),
    }
