"""A scripted NameServer and broker group for push-consumer fault tests.

Only what a real cluster will not do on demand lives here: a broker group whose master
is down while its slave runs, a slave that refuses reads, a broker that forgets a
consumer. The broker keeps messages, offsets and heartbeats in memory.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio

from aiorocket.client.pop import (
    ACK_MESSAGE,
    BATCH_ACK_MESSAGE,
    CHANGE_MESSAGE_INVISIBLETIME,
    POP_MESSAGE,
)
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, PullConsumer
from aiorocket.consumer.allocation import AllocateStrategy
from aiorocket.consumer.engine import Engine
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.rebalance import RebalanceState
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.logs import capture_logs

TOPIC = "orders"
QUEUES = 2
#: a pop's answers when it found nothing: the broker's long-poll queue was full; the poll
#: ended (ResponseCode.POLLING_FULL / POLLING_TIMEOUT)
POLLING_FULL, POLLING_TIMEOUT = 209, 210


class FakeBroker:
    """One broker of a group: ``role_id`` 0 is the master, others are slaves.

    ``serve_reads=False`` makes a slave answer pulls as a real one with
    ``slaveReadEnable=false`` does: PULL_RETRY_IMMEDIATELY with a next offset past the
    messages it found (and did not send).
    """

    def __init__(self, name: str, role_id: int) -> None:
        self.name = name
        self.role_id = role_id
        self.serve_reads = True
        #: the broker id pull answers suggest for the next pull (suggestWhichBrokerId).
        self.suggest = 0
        self.messages: dict[int, list[bytes]] = defaultdict(list)
        #: (queue id, offset) -> a stored record served as is, in place of the message's
        #: (a corrupt one, say)
        self.records: dict[tuple[int, int], bytes] = {}
        self.offsets: dict[tuple[str, int], int] = {}
        self.offset_stored = anyio.Event()  # set (and replaced) at every offset commit
        #: queue id -> a commit (UPDATE_CONSUMER_OFFSET) of that queue, once received,
        #: waits for this event before it is applied
        self.commit_holds: dict[int, anyio.Event] = {}
        self.commit_received = anyio.Event()  # set (and replaced) as a held commit arrives
        #: queue id -> how many of its next commits are answered SYSTEM_ERROR (each one
        #: journaled "commit <queue id> failed")
        self.commit_errors: dict[int, int] = {}
        #: the queue id of every QUERY_CONSUMER_OFFSET
        self.offset_queries: list[int] = []
        #: (queue ids, the stored offsets) as each UNLOCK_BATCH_MQ arrived: where the
        #: queues' next owner starts
        self.offsets_at_unlock: list[tuple[set[int], dict[tuple[str, int], int]]] = []
        self.heartbeats: list[tuple[str, dict[str, Any]]] = []  # (session id, body)
        self.members: set[str] = set()
        #: False: heartbeats are answered SYSTEM_ERROR and the sender is not registered.
        self.accept_heartbeats = True
        self.heartbeat_seen = anyio.Event()  # set (and replaced) at every heartbeat
        #: the next pull stalls its connection: never read from or answered again.
        self.stall_next_pull = False
        self.stalled = anyio.Event()
        self.pulls: list[RemotingCommand] = []
        #: queue id -> the next pull of it is answered PULL_OFFSET_MOVED, this next offset.
        self.move_next_pull: dict[int, int] = {}
        #: queue lock owners (LOCK_BATCH_MQ), by (topic, queue id): client ids
        self.lock_owners: dict[tuple[str, int], str] = {}
        #: "refuse": lock answers hold no queue; "fail": they are SYSTEM_ERROR.
        self.locking = "grant"
        self.lock_requests: list[set[tuple[str, int]]] = []
        self.lock_seen = anyio.Event()  # set (and replaced) at every LOCK_BATCH_MQ
        #: seconds a LOCK_BATCH_MQ waits, once received, before it is applied (a 5.x
        #: broker runs it on a pool of admin threads: a later UNLOCK may go first)
        self.lock_delay = 0.0
        self.lock_received = anyio.Event()  # set (and replaced) as a delayed lock arrives
        self.locks_delayed = 0  # delayed locks received and not applied yet
        #: set: a LOCK_BATCH_MQ received waits for this event before it is applied
        self.lock_hold: anyio.Event | None = None
        #: the next UNLOCK_BATCH_MQ is not applied: its connection is closed instead
        self.drop_next_unlock = False
        #: UNLOCK_BATCH_MQ is received and never answered (a frozen broker)
        self.silent_unlocks = False
        #: "unlock <queue ids>" is appended at every UNLOCK_BATCH_MQ (tests share it with
        #: handlers, to see what happened first)
        self.journal: list[str] = []
        self.pulled = anyio.Event()  # set (and replaced) at every pull
        self.arrived = anyio.Event()
        #: client ids listed once more, as a real broker lists a client still holding
        #: an old channel (one it replaced after a half-open connection) next to the new.
        self.stale_channels: list[str] = []
        self.server = FakeRemotingServer(self.handle)

    @property
    def addr(self) -> str:
        return self.server.address

    def add(self, queue_id: int, *bodies: bytes) -> None:
        self.messages[queue_id].extend(bodies)
        self.arrived.set()
        self.arrived = anyio.Event()

    def move_pulls(self, queue_id: int, offset: int) -> None:
        """Answer the queue's next pull (one waiting in a long poll included)
        PULL_OFFSET_MOVED, next offset ``offset``: the position fell out of range."""
        self.move_next_pull[queue_id] = offset
        self.arrived.set()
        self.arrived = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        code, ext = cmd.code, cmd.ext_fields
        if code == RequestCode.PULL_MESSAGE and self.stall_next_pull:
            self.stall_next_pull = False
            session.stall()
            self.stalled.set()
            return
        resp = RemotingCommand.response_to(cmd)
        if code == RequestCode.HEART_BEAT:
            body = json.loads(cmd.body)
            self.heartbeats.append((str(id(session)), body))
            self.heartbeat_seen.set()
            self.heartbeat_seen = anyio.Event()
            if self.accept_heartbeats:
                self.members.add(body["clientID"])
            else:
                resp.code, resp.remark = ResponseCode.SYSTEM_ERROR, "scripted refusal"
        elif code == RequestCode.UNREGISTER_CLIENT:
            self.members.discard(ext["clientID"])
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted(self.members) + self.stale_channels
            resp.body = json.dumps({"consumerIdList": ids}).encode()
        elif code == RequestCode.QUERY_CONSUMER_OFFSET:
            self.offset_queries.append(int(ext["queueId"]))
            key = (ext["topic"], int(ext["queueId"]))
            if key in self.offsets:
                resp.ext_fields = {"offset": str(self.offsets[key])}
            else:
                resp.code = ResponseCode.QUERY_NOT_FOUND
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET and self.commit_errors.get(
            int(ext["queueId"])
        ):
            self.commit_errors[int(ext["queueId"])] -= 1
            self.journal.append(f"commit {ext['queueId']} failed")
            resp.code, resp.remark = ResponseCode.SYSTEM_ERROR, "scripted commit failure"
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            hold = self.commit_holds.get(int(ext["queueId"]))
            if hold is not None:
                self.commit_received.set()
                self.commit_received = anyio.Event()
                await hold.wait()
            self.offsets[(ext["topic"], int(ext["queueId"]))] = int(ext["commitOffset"])
            self.offset_stored.set()
            self.offset_stored = anyio.Event()
        elif code in (RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            resp.ext_fields = {"offset": "0"}
        elif code == RequestCode.GET_MAX_OFFSET:
            resp.ext_fields = {"offset": str(len(self.messages[int(ext["queueId"])]))}
        elif code == RequestCode.PULL_MESSAGE:
            resp = await self._pull(cmd)
        elif code == RequestCode.UNLOCK_BATCH_MQ and self.drop_next_unlock:
            self.drop_next_unlock = False
            self.journal.append("unlock dropped")
            await session.close()
            return
        elif code == RequestCode.UNLOCK_BATCH_MQ and self.silent_unlocks:
            self.journal.append("unlock unanswered")
            return
        elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            if code == RequestCode.LOCK_BATCH_MQ and self.lock_delay:
                self.lock_received.set()
                self.lock_received = anyio.Event()
                self.locks_delayed += 1
                try:
                    await anyio.sleep(self.lock_delay)
                finally:
                    self.locks_delayed -= 1
            if code == RequestCode.LOCK_BATCH_MQ and self.lock_hold is not None:
                self.lock_received.set()
                self.lock_received = anyio.Event()
                await self.lock_hold.wait()
            resp = self._lock(cmd)
        else:
            resp.code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        if not cmd.is_oneway:
            await session.send(resp)

    def _lock(self, cmd: RemotingCommand) -> RemotingCommand:
        body = json.loads(cmd.body)
        client = body["clientId"]
        keys = {(m["topic"], int(m["queueId"])) for m in body["mqSet"]}
        resp = RemotingCommand.response_to(cmd)
        if cmd.code == RequestCode.UNLOCK_BATCH_MQ:
            self.journal.append("unlock " + ",".join(str(q) for _, q in sorted(keys)))
            self.offsets_at_unlock.append(({q for _, q in keys}, dict(self.offsets)))
            for key in keys:
                if self.lock_owners.get(key) == client:
                    del self.lock_owners[key]
            return resp
        self.lock_requests.append(keys)
        self.lock_seen.set()
        self.lock_seen = anyio.Event()
        if self.locking == "fail":
            resp.code, resp.remark = ResponseCode.SYSTEM_ERROR, "scripted lock failure"
            return resp
        granted = []
        for topic, queue_id in sorted(keys):
            owner = self.lock_owners.setdefault((topic, queue_id), client)
            if owner == client and self.locking == "grant":
                granted.append({"topic": topic, "brokerName": self.name, "queueId": queue_id})
        resp.body = json.dumps({"lockOKMQSet": granted}).encode()
        return resp

    async def _pull(self, cmd: RemotingCommand) -> RemotingCommand:
        self.pulls.append(cmd)
        self.pulled.set()
        self.pulled = anyio.Event()
        ext = cmd.ext_fields
        queue_id, offset = int(ext["queueId"]), int(ext["queueOffset"])
        stored = self.messages[queue_id]
        if offset >= len(stored):
            with anyio.move_on_after(int(ext["suspendTimeoutMillis"]) / 1000):
                await self.arrived.wait()
        moved = self.move_next_pull.pop(queue_id, None)
        if moved is not None:
            fields = {"nextBeginOffset": str(moved), "minOffset": str(moved),
                      "maxOffset": str(len(stored))}  # fmt: skip
            return RemotingCommand.response_to(
                cmd, ResponseCode.PULL_OFFSET_MOVED, ext_fields=fields
            )
        bodies = stored[offset : offset + int(ext["maxMsgNums"])]
        fields = {
            "nextBeginOffset": str(offset + len(bodies)),
            "minOffset": "0",
            "maxOffset": str(len(stored)),
            "suggestWhichBrokerId": str(self.suggest),
        }
        if not bodies:
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_NOT_FOUND, ext_fields=fields)
        if self.role_id != 0 and not self.serve_reads:
            return RemotingCommand.response_to(
                cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=fields
            )
        body = b"".join(
            self.records.get((queue_id, offset + i))
            or encode_stored_message(
                ext["topic"],
                b,
                queue_id=queue_id,
                queue_offset=offset + i,
                commit_log_offset=1000 * queue_id + offset + i,
            )
            for i, b in enumerate(bodies)
        )
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=body)


class FakeCluster:
    """A NameServer serving :data:`TOPIC` on the given broker groups.

    ``groups`` maps a broker name to its brokers; a group's master can be taken out of
    the route (``master_down``) while its slave keeps running, as the NameServer shows
    a group whose master stopped.
    """

    def __init__(self, groups: dict[str, list[FakeBroker]]) -> None:
        self.groups = groups
        self.master_down: set[str] = set()
        self.namesrv_silent = False  # the NameServer stops answering
        self.topic_exists = True  # False: TOPIC has no route (not created yet)
        self.route_queries = 0
        self.route_topics: list[str] = []  # the topic of each route query
        self.route_asked = anyio.Event()  # set (and replaced) at every route query
        #: set: a route query waits for this event before it is answered
        self.route_hold: anyio.Event | None = None
        self.namesrv = FakeRemotingServer(self._route)

    def _visible(self, name: str) -> list[FakeBroker]:
        return [b for b in self.groups[name] if b.role_id != 0 or name not in self.master_down]

    async def _route(self, session: ServerSession, cmd: RemotingCommand) -> None:
        self.route_queries += 1
        self.route_asked.set()
        self.route_asked = anyio.Event()
        self.route_topics.append(cmd.ext_fields.get("topic", ""))
        if self.namesrv_silent:
            return
        if self.route_hold is not None:
            await self.route_hold.wait()
        topic = cmd.ext_fields.get("topic", "")
        if topic != TOPIC or not self.topic_exists:
            await session.send(
                RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, f"no {topic}")
            )
            return
        route = {
            "queueDatas": [
                {"brokerName": n, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6}
                for n in self.groups
            ],
            "brokerDatas": [
                {
                    "cluster": "c",
                    "brokerName": n,
                    "brokerAddrs": {str(b.role_id): b.addr for b in self._visible(n)},
                }
                for n in self.groups
            ],
        }
        await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))


@asynccontextmanager
async def running(cluster: FakeCluster) -> AsyncIterator[FakeCluster]:
    async with AsyncExitStack() as stack:
        for brokers in cluster.groups.values():
            for b in brokers:
                await stack.enter_async_context(b.server)
        await stack.enter_async_context(cluster.namesrv)
        yield cluster


#: consumer settings that make a fake-cluster test take a second, not a minute.
FAST: dict[str, Any] = {
    "long_poll_timeout": 0.5,
    "pull_request_timeout": 6.0,
    "pull_backoff_on_error": 0.1,
    "persist_offset_interval": 0.2,
    "request_timeout": 2.0,
}


def take_all(
    group: str, cid: str, queues: Sequence[MessageQueue], cids: Sequence[str]
) -> list[MessageQueue]:
    """An allocation strategy that gives this consumer every queue."""
    return list(queues)


def take_none(
    group: str, cid: str, queues: Sequence[MessageQueue], cids: Sequence[str]
) -> list[MessageQueue]:
    """An allocation strategy that gives this consumer nothing (revokes all it has)."""
    return []


class Collector:
    """A handler recording message bodies; ``done`` is set once ``expected`` arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.got: list[bytes] = []
        self.done = anyio.Event()

    async def __call__(self, msg: ConsumerMessage) -> None:
        self.got.append(msg.body)
        if len(self.got) >= self.expected:
            self.done.set()


def consumer_of(
    cluster: FakeCluster,
    handler: Callable[[ConsumerMessage], Awaitable[None]] | None = None,
    **settings: Any,
) -> Consumer:
    """A consumer of :data:`TOPIC` in group ``g`` from the first offset, fast settings."""
    consumer = Consumer(
        "g", cluster.namesrv.address, handler=handler,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **{**FAST, **settings},
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    return consumer


async def consume(
    cluster: FakeCluster,
    count: int,
    until: Callable[[], bool] = lambda: True,
    **settings: Any,
) -> tuple[Consumer, list[ConsumerMessage], list[dict[str, Any]]]:
    """Run a :func:`consumer_of` the cluster until it handled ``count`` messages and
    ``until()`` holds (checked at every pull a broker of the cluster receives); the
    consumer (closed), the messages in handling order and the log events."""
    got: list[ConsumerMessage] = []
    done = anyio.Event()
    brokers = [b for group in cluster.groups.values() for b in group]

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg)
        if len(got) == count:
            done.set()

    async def any_pull() -> None:
        async with anyio.create_task_group() as tg:
            for b in brokers:
                tg.start_soon(_then_cancel, b.pulled.wait, tg.cancel_scope)

    async with running(cluster):
        consumer = consumer_of(cluster, handle, **settings)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(30):
                    await done.wait()
                    while not until():
                        await any_pull()
    return consumer, got, logs


async def _then_cancel(wait: Callable[[], Awaitable[object]], scope: anyio.CancelScope) -> None:
    await wait()
    scope.cancel()


# -- reaching into a running consumer's engine (tests of its internals only) ----------


def engine_of(consumer: Consumer | PullConsumer) -> Engine:
    """The engine of a started consumer."""
    if isinstance(consumer, PullConsumer):
        engine = consumer._engine
        assert engine is not None, "start the consumer first"
        return engine
    return consumer._backend.engine("the engine")


def queues_of(consumer: Consumer | PullConsumer) -> dict[MessageQueue, ProcessQueue]:
    """The consumer's owned ProcessQueues."""
    return engine_of(consumer).state.process_queues


def reallocate(consumer: Consumer | PullConsumer, strategy: AllocateStrategy) -> None:
    """Switch the allocation strategy and ask for a rebalance pass now."""
    engine = engine_of(consumer)
    engine.rebalancer.allocate = strategy
    engine.state.request_rebalance()


def rebalance_memory(consumer: Consumer | PullConsumer) -> RebalanceState:
    """The rebalancer's memory and counters (passes, allocations, member queries)."""
    return engine_of(consumer).rebalancer.memory


class PopBroker(FakeBroker):
    """A 5.x broker's POP over remoting (``consume_mode="pop"``), queue 0 of TOPIC: a
    pop takes every visible message not acked, invisible for the pop's invisible time,
    then visible again (as the broker's revive does, without the retry topic).

    ``polling_full`` pops are answered POLLING_FULL (209) first, at once (the broker's
    long-poll queue is full); with ``empty_at_once`` every pop is answered PULL_NOT_FOUND
    at once (a broker that does not hold the poll). ``refuse_send_back``:
    CONSUMER_SEND_MSG_BACK is answered SYSTEM_ERROR. A record of ``records`` (queue 0)
    is served in place of its message's. ``start_ahead``: each pop's check point starts
    that far past its first message (a 5.x broker that corrected a wrong stored pop
    offset keeps the stale one as the start, see aiorocket.client.pop).
    """

    def __init__(self, name: str = "broker-a") -> None:
        super().__init__(name, 0)
        self.visible_at: dict[int, float] = {}
        self.acked: set[int] = set()
        self.deliveries: dict[int, int] = defaultdict(int)
        self.polling_full = 0
        self.empty_at_once = False
        self.pops = 0
        self.popped = anyio.Event()  # set (and replaced) at every pop
        self.pops_with_messages = 0
        self.refuse_send_back = False
        #: commit-log offsets of the records sent back (to the DLQ)
        self.sent_back: list[int] = []
        self.start_ahead = 0

    def _ready(self) -> list[int]:
        now = anyio.current_time()
        return [
            i for i in range(len(self.messages[0]))
            if i not in self.acked and self.visible_at.get(i, 0.0) <= now
        ]  # fmt: skip

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        code, ext = cmd.code, cmd.ext_fields
        if code == POP_MESSAGE:
            await session.send(await self._pop(cmd))
        elif code == BATCH_ACK_MESSAGE:
            for ack in json.loads(cmd.body)["acks"]:
                bits = int.from_bytes(base64.b64decode(ack["b"]), "little")
                self.acked.update(ack["so"] + k for k in range(bits.bit_length()) if bits >> k & 1)
            await session.send(RemotingCommand.response_to(cmd))
        elif code == ACK_MESSAGE:
            self.acked.add(int(ext["offset"]))
            await session.send(RemotingCommand.response_to(cmd))
        elif code == CHANGE_MESSAGE_INVISIBLETIME:
            offset, invisible = int(ext["offset"]), int(ext["invisibleTime"])
            self.visible_at[offset] = anyio.current_time() + invisible / 1000
            fields = {"popTime": "0", "invisibleTime": str(invisible), "reviveQid": "0"}
            await session.send(RemotingCommand.response_to(cmd, ext_fields=fields))
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            resp = RemotingCommand.response_to(cmd)
            if self.refuse_send_back:
                resp.code, resp.remark = ResponseCode.SYSTEM_ERROR, "scripted refusal"
            else:
                self.sent_back.append(int(ext["offset"]))
            await session.send(resp)
        elif code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            body = json.dumps({"groupName": ext["group"], "retryMaxTimes": 16}).encode()
            await session.send(RemotingCommand.response_to(cmd, body=body))
        else:
            await super().handle(session, cmd)

    async def _pop(self, cmd: RemotingCommand) -> RemotingCommand:
        self.pops += 1
        self.popped.set()
        self.popped = anyio.Event()
        if self.polling_full:
            self.polling_full -= 1
            return RemotingCommand.response_to(cmd, POLLING_FULL, "polling full")
        if self.empty_at_once:
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_NOT_FOUND)
        ext = cmd.ext_fields
        with anyio.move_on_after(int(ext["pollTime"]) / 1000):
            while not self._ready():  # noqa: ASYNC110  (visibility is a matter of time)
                await anyio.sleep(0.02)
        ready = self._ready()[: int(ext["maxMsgNums"])]
        if not ready:
            return RemotingCommand.response_to(cmd, POLLING_TIMEOUT)
        self.pops_with_messages += 1
        invisible = int(ext["invisibleTime"])
        for i in ready:
            self.visible_at[i] = anyio.current_time() + invisible / 1000
            self.deliveries[i] += 1
        body = b"".join(
            self.records.get((0, i))
            or encode_stored_message(
                TOPIC, self.messages[0][i], queue_offset=i, commit_log_offset=1000 + i
            )
            for i in ready
        )
        fields = {"popTime": "1", "invisibleTime": str(invisible), "reviveQid": "0",
                  "startOffsetInfo": f"0 0 {ready[0] + self.start_ahead}", "restNum": "0",
                  "msgOffsetInfo": f"0 0 {','.join(map(str, ready))}"}  # fmt: skip
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=body)
