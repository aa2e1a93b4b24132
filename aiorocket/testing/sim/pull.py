"""Simulated brokers for the pull consumer (remoting), with their own truth.

Each broker keeps ``PULL_TOPIC``'s queues and the group's retry topic (one queue), the
group's consumer offsets, its members (heartbeats) and queue locks. What it models of
5.5.0 and says so:

* consumer offsets (UPDATE_CONSUMER_OFFSET, and those a pull carries with its commit
  flag) live in memory and are written to disk every ``FLUSH_INTERVAL`` seconds
  (``flushConsumerOffsetInterval``, 5 s): a broker that crashes (``broker_restart``)
  comes back with the offsets of its last write, or none for a queue never written;
  its messages survive (the commit log is on disk). While it is down it is out of the
  route (the NameServer drops a broker whose channel closed) and every connection to
  it is reset;
* CONSUMER_SEND_MSG_BACK stores a copy for the group's retry topic (``RETRY_TOPIC``
  property, ``reconsume_times`` + 1) that is written there once its delay is over (5.x
  keeps it in the schedule topic's queue of its level until then: a short delay never
  waits behind a longer one's copy); past the group's
  ``maxReconsumeTimes`` (or with delay level -1) it goes to the DLQ. The copy keeps the
  message's properties, its ``UNIQ_KEY`` (its id) among them, and names the first
  delivery's offset id as ``ORIGIN_MESSAGE_ID`` (``consumerSendMsgBack`` copies the
  properties and calls ``setOriginMessageId``); here every copy also keeps the first's
  commit-log offset (the model finds the message by it);
* LOCK_BATCH_MQ grants a queue to one client for ``LOCK_TTL`` seconds (renewed by the
  next lock), UNLOCK_BATCH_MQ frees it; a crash forgets the locks. 5.x runs both on a
  pool of admin threads, so a lock is applied after a drawn lag (up to ``LOCK_LAG``,
  from a random stream of its own) and an unlock sent after it may go first;
* members are listed per connection, as 5.x keeps a group's ``channelInfoTable`` keyed by
  channel (``ConsumerGroupInfo``): HEART_BEAT adds or refreshes the entry of the
  connection it came on, UNREGISTER_CLIENT removes the entry of the connection it came on
  (``ConsumerManager.unregisterConsumer`` -> ``ConsumerGroupInfo.unregisterChannel``),
  whatever client id it names; a connection's close the broker reads removes its entry
  (``ClientHousekeepingService.onChannelClose`` -> ``doChannelCloseEvent``), and an
  entry not refreshed for ``CHANNEL_EXPIRY`` goes at the scan (``scanNotActiveChannel``).
  So a client reconnected is listed twice until its old connection's entry goes, and an
  entry on a half-open connection (whose close the broker never reads) stays until the
  scan, whatever the client sends on another;
* the nemesis's ``commit_fault`` / ``query_fault`` (``offset_faults``) fail
  UPDATE_CONSUMER_OFFSET / QUERY_CONSUMER_OFFSET for a window (``commit_failed``,
  ``query_failed`` in the history; a lost answer's commit is stored, so ``committed``
  too);
* NOTIFY_CONSUMER_IDS_CHANGED goes to every listed connection when an entry is added
  or removed (a heartbeat on a new connection, an unregister, a close).

Every pulled message is in the history (``pulled``: broker, queue, offset), and every
commit the broker took (``committed``): the checker bounds duplicates by them.
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from aiorocket._message_id import offset_message_id
from aiorocket.client.broker import PULL_COMMIT_OFFSET
from aiorocket.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.sim.feature_draws import BROKER_DELAY_LEVELS
from aiorocket.testing.sim.offset_faults import offset_fault
from aiorocket.testing.sim.servers import SimServers, send_route
from aiorocket.testing.sim.silence import Silence

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["PULL_GROUP", "PULL_TOPIC", "RETRY", "SimPullBroker", "SimPullCluster"]

PULL_TOPIC, PULL_GROUP = "sim-pull", "sim-pull-group"
RETRY = f"%RETRY%{PULL_GROUP}"
#: seconds between two writes of the consumer offsets to disk (5.5.0's default)
FLUSH_INTERVAL = 5.0
#: seconds a queue lock lasts without renewal (the broker's 60 s, shortened)
LOCK_TTL = 30.0
#: the longest a lock request waits before it is applied (seconds, virtual)
LOCK_LAG = 0.02
#: seconds a message sent back waits in the retry topic
RETRY_DELAY = 5.0
#: the stored messages' store host (their offset ids')
STORE_HOST = "127.0.0.1:10911"


@dataclass(slots=True)
class Stored:
    key: str
    index: int
    reconsume: int = 0
    visible_at: float = 0.0


@dataclass(slots=True)
class Channel:
    """A member's entry for one connection (5.x ``ClientChannelInfo``)."""

    client: str
    #: its last heartbeat (``lastUpdateTimestamp``)
    updated: float


@dataclass(slots=True)
class Queues:
    """One broker's messages: (topic, queue id) -> messages in offset order."""

    by_queue: dict[tuple[str, int], list[Stored]] = field(default_factory=dict)

    def of(self, topic: str, queue_id: int) -> list[Stored]:
        return self.by_queue.setdefault((topic, queue_id), [])


#: 5.5.0's channelExpiredTimeout: a member silent this long is dropped (seconds)
CHANNEL_EXPIRY = 120.0


class SimPullBroker:
    """One broker (see the module docstring)."""

    def __init__(self, name: str, cluster: SimPullCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.history = cluster.history
        self.queues = Queues()
        self.offsets: dict[tuple[str, int], int] = {}
        self.flushed: dict[tuple[str, int], int] = {}
        #: the group's members, an entry per connection (see the module docstring)
        self.channels: dict[ServerSession, Channel] = {}
        self.locks: dict[tuple[str, int], tuple[str, float]] = {}
        self.down_until = 0.0
        self.pulls = 0
        #: (topic, queue id) -> the offset below which ``acked`` was recorded
        self.acked_upto: dict[tuple[str, int], int] = {}
        #: sent-back copies not due yet: 5.x keeps them in SCHEDULE_TOPIC_XXXX (a queue
        #: per delay level) and writes each to the retry topic when due, so a copy never
        #: waits behind a longer delay's (see ``_send_back``)
        self.scheduled: list[Stored] = []
        self.arrived = anyio.Event()
        self.server = FakeRemotingServer(self.handle)
        self.server.on_close = self._channel_closed
        self.silence = Silence(name, self.server, self.history)

    @property
    def addr(self) -> str:
        return self.server.address

    @property
    def down(self) -> bool:
        return anyio.current_time() < self.down_until

    def store(self, key: str, queue_id: int, index: int) -> None:
        stored = Stored(key, index)
        self.cluster.latest[key] = stored
        self.queues.of(PULL_TOPIC, queue_id).append(stored)
        self.history.add("stored", key, broker=self.name, queue=queue_id)
        self._wake()

    def _wake(self) -> None:
        self.arrived.set()
        self.arrived = anyio.Event()

    def settled(self) -> bool:
        """Every message of every queue is below the group's committed offset (and no
        sent-back copy still waits its delay)."""
        self._due()
        return not self.scheduled and all(
            self.offsets.get(q, 0) >= len(ms) for q, ms in self.queues.by_queue.items()
        )

    # -- faults ------------------------------------------------------------------

    async def crash(self, down: float) -> None:
        """SIGKILL and restart: unflushed offsets and locks lost, connections reset."""
        self.down_until = anyio.current_time() + down
        lost = {f"{t}:{q}": (o, self.flushed.get((t, q))) for (t, q), o in self.offsets.items()
                if self.flushed.get((t, q)) != o}  # fmt: skip
        self.history.add("broker_crashed", "", broker=self.name, lost=lost)
        self.offsets = dict(self.flushed)
        self.locks.clear()
        self.channels.clear()
        await self.reset()
        self._wake()

    async def reset(self) -> None:
        """Every connection to the broker reset (the broker keeps running)."""
        self.history.add("connections_reset", "", broker=self.name)
        sessions, self.server.sessions = self.server.sessions, []
        for session in sessions:
            session.stalled = True
            with anyio.CancelScope(shield=True):
                await session.close()
        # the broker closed them itself: its close event drops their entries
        for session in sessions:
            self.channels.pop(session, None)

    def members(self) -> list[str]:
        """The client ids listed, once per entry (``getAllClientId``), after the scan
        dropped the entries not refreshed for ``CHANNEL_EXPIRY``."""
        now = anyio.current_time()
        for session in [s for s, c in self.channels.items() if now - c.updated > CHANNEL_EXPIRY]:
            del self.channels[session]
        return sorted(c.client for c in self.channels.values())

    async def _channel_closed(self, session: ServerSession) -> None:
        if self.channels.pop(session, None) is not None and not self.down:
            await self.cluster.ids_changed(self)

    def remembers(self, client: str, since: float) -> list[str]:
        """What the broker still keeps of ``client`` after its close (begun at
        ``since``): its membership (it did not unregister) and queue locks in force (it
        did not unlock). Not judged (empty) when the broker was down, reset or silent
        during the close: the client's goodbye could not reach it then."""
        mine = [e for e in self.history.events if e.info.get("broker") == self.name]
        faults = ("broker_crashed", "connections_reset", "half_open")
        silent = [e.at for e in mine if e.kind == "half_open" and e.at < since]
        # silent when the close began: no request on a new connection since the fault
        still_silent = bool(silent) and not any(
            e.kind == "reconnected" and silent[-1] <= e.at < since for e in mine
        )
        if self.down_until > since or still_silent or any(
            e.kind in faults and e.at >= since for e in mine
        ):
            return []
        now = anyio.current_time()
        # An entry on a silenced connection is out of the client's reach: the broker
        # reads neither its unregister there nor that connection's close (and one sent
        # on another connection removes that one's entry only); the scan drops it
        # CHANNEL_EXPIRY after its last heartbeat, as a real broker's would.
        self.members()
        listed = [s for s, c in self.channels.items() if c.client == client and not s.stalled]
        kept = ["listed as a member"] if listed else []
        locked = sorted(f"{t}:{q}" for (t, q), (owner, until) in self.locks.items()
                        if owner == client and until > now)  # fmt: skip
        if locked:
            kept.append(f"locks {', '.join(locked)}")
        return kept

    async def flush(self) -> None:
        while True:
            await anyio.sleep(FLUSH_INTERVAL)
            if not self.down:
                self.flushed = dict(self.offsets)

    # -- requests --------------------------------------------------------------------

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return
        if self.down:
            with anyio.CancelScope(shield=True):
                await session.close()  # refused: the process is not there
            return
        self.silence.seen(session)
        try:
            resp = await self._handle(session, cmd)
        except Exception:  # the simulator's own bug: the run reports it as a crash
            self.cluster.errors.append(traceback.format_exc(limit=6))
            return
        if resp is not None and not cmd.is_oneway:
            await session.send(resp)

    async def _handle(self, session: ServerSession, cmd: RemotingCommand) -> RemotingCommand | None:
        code, ext = cmd.code, cmd.ext_fields
        resp = RemotingCommand.response_to(cmd)
        if code == RequestCode.HEART_BEAT:
            # registered even if the broker handled the connection's close already (a
            # heartbeat applied late): that entry goes at the scan only
            client = json.loads(cmd.body)["clientID"]
            new = session not in self.channels
            self.channels[session] = Channel(client, anyio.current_time())
            if new:
                await self.cluster.ids_changed(self)
        elif code == RequestCode.UNREGISTER_CLIENT:
            if self.channels.pop(session, None) is not None:
                await self.cluster.ids_changed(self)
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            resp.body = json.dumps({"consumerIdList": self.members()}).encode()
        elif code == RequestCode.QUERY_CONSUMER_OFFSET:
            how = offset_fault(self.cluster.schedule, "query_fault", self.name)
            if how is not None:
                self.history.add("query_failed", "", broker=self.name, how=how)
                if how == "timeout":
                    return None
                return RemotingCommand.response_to(cmd, int(how), "sim query error")
            key = (ext["topic"], int(ext["queueId"]))
            if key in self.offsets:
                resp.ext_fields = {"offset": str(self.offsets[key])}
            else:
                resp.code = ResponseCode.QUERY_NOT_FOUND
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            how = offset_fault(self.cluster.schedule, "commit_fault", self.name)
            if how is not None:
                self.history.add("commit_failed", "", broker=self.name, how=how,
                                 queue=f"{ext['topic']}:{ext['queueId']}",
                                 offset=int(ext["commitOffset"]))  # fmt: skip
                if how == "lost_answer":
                    self._commit(ext["topic"], int(ext["queueId"]), int(ext["commitOffset"]))
                if how in ("timeout", "lost_answer"):
                    return None
                return RemotingCommand.response_to(cmd, int(how), "sim commit error")
            self._commit(ext["topic"], int(ext["queueId"]), int(ext["commitOffset"]))
        elif code in (RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            resp.ext_fields = {"offset": "0"}
        elif code == RequestCode.GET_MAX_OFFSET:
            self._due()
            n = len(self.queues.of(ext["topic"], int(ext["queueId"])))
            resp.ext_fields = {"offset": str(n)}
        elif code == RequestCode.PULL_MESSAGE:
            return await self._pull(cmd)
        elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            if code == RequestCode.LOCK_BATCH_MQ:
                await anyio.sleep(self.cluster.lock_lag.uniform(0, LOCK_LAG))
            return self._lock(cmd)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            self._send_back(ext)
        elif code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            resp.body = json.dumps({"groupName": PULL_GROUP, "retryMaxTimes": 16}).encode()
        return resp

    def _commit(self, topic: str, queue_id: int, offset: int) -> None:
        self.offsets[(topic, queue_id)] = offset
        self.history.add("committed", "", broker=self.name, queue=f"{topic}:{queue_id}",
                         offset=offset)  # fmt: skip
        # the messages consumed for good: below the commit, and no copy of it sent back
        stored = self.queues.of(topic, queue_id)
        upto = self.acked_upto.get((topic, queue_id), 0)
        for m in stored[upto:offset]:
            if self.cluster.latest.get(m.key) is m:
                self.history.add("acked", m.key, broker=self.name)
        self.acked_upto[(topic, queue_id)] = max(upto, min(offset, len(stored)))

    def _fault(self, cmd: RemotingCommand) -> RemotingCommand | None:
        index = self.pulls
        self.pulls += 1
        for f in self.cluster.schedule.of("pull_error"):
            if f.args["broker"] == self.name and \
                    f.args["from"] <= index < f.args["from"] + f.args["count"]:  # fmt: skip
                return RemotingCommand.response_to(cmd, f.args["code"], "sim pull error")
        return None

    async def _pull(self, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        topic, queue_id, offset = ext["topic"], int(ext["queueId"]), int(ext["queueOffset"])
        if int(ext.get("sysFlag", "0")) & PULL_COMMIT_OFFSET:
            self._commit(topic, queue_id, int(ext["commitOffset"]))
        fault = self._fault(cmd)
        if fault is not None:
            return fault
        stored = self.queues.of(topic, queue_id)
        self._due()
        with anyio.move_on_after(int(ext["suspendTimeoutMillis"]) / 1000):
            while not self._ready(stored, offset):
                with anyio.move_on_after(0.5):
                    await self.arrived.wait()
                self._due()
        self._due()
        fields = {"minOffset": "0", "maxOffset": str(len(stored)), "suggestWhichBrokerId": "0"}
        if offset > len(stored):
            fields["nextBeginOffset"] = str(len(stored))
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_OFFSET_MOVED,
                                               ext_fields=fields)  # fmt: skip
        ready = self._ready(stored, offset)[: int(ext["maxMsgNums"])]
        fields["nextBeginOffset"] = str(offset + len(ready))
        if not ready:
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_NOT_FOUND, ext_fields=fields)
        records = []
        for i, m in enumerate(ready):
            self.history.add("pulled", m.key, broker=self.name, queue=f"{topic}:{queue_id}",
                             offset=offset + i)  # fmt: skip
            props = {"UNIQ_KEY": f"SIMP{self.name}{m.index:08d}", "KEYS": m.key}
            if topic == RETRY:
                props[PROPERTY_RETRY_TOPIC] = PULL_TOPIC
                props[PROPERTY_ORIGIN_MESSAGE_ID] = offset_message_id(
                    STORE_HOST, 3_000_000 + m.index)  # fmt: skip
            records.append(encode_stored_message(
                topic, m.key.encode(), props, queue_id=queue_id, queue_offset=offset + i,
                commit_log_offset=3_000_000 + m.index, reconsume_times=m.reconsume,
                store_host=STORE_HOST,
            ))  # fmt: skip
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=b"".join(records))

    def _due(self) -> None:
        """Write the sent-back copies now due to the retry topic, earliest first (5.x's
        ``ScheduleMessageService`` delivering each level's queue)."""
        now = anyio.current_time()
        due = sorted((m for m in self.scheduled if m.visible_at <= now),
                     key=lambda m: m.visible_at)  # fmt: skip
        if due:
            self.scheduled = [m for m in self.scheduled if m.visible_at > now]
            self.queues.of(RETRY, 0).extend(due)

    @staticmethod
    def _ready(stored: list[Stored], offset: int) -> list[Stored]:
        """The messages from ``offset`` on that are visible (a retry waits its delay)."""
        now = anyio.current_time()
        out = []
        for m in stored[offset:]:
            if m.visible_at > now:
                break
            out.append(m)
        return out

    def _send_back(self, ext: dict[str, str]) -> None:
        index = int(ext["offset"]) - 3_000_000
        key, reconsume = self.cluster.keys[index], 0
        for ms in (*self.queues.by_queue.values(), self.scheduled):
            for m in ms:
                if m.index == index:
                    reconsume = max(reconsume, m.reconsume)
        if int(ext["delayLevel"]) < 0 or reconsume + 1 > int(ext["maxReconsumeTimes"]):
            self.history.add("dead_lettered", key, by="client")
            return
        # a level the client names waits that level's time (a default broker's levels);
        # 0, the broker's choice, waits RETRY_DELAY here
        level = int(ext["delayLevel"])
        levels = BROKER_DELAY_LEVELS
        wait = levels[min(level, len(levels)) - 1] if level else RETRY_DELAY
        at = anyio.current_time() + wait
        copy = Stored(key, index, reconsume + 1, at)
        self.cluster.latest[key] = copy
        # in the schedule topic until due (HookUtils.transformDelayLevelMessage), then
        # written to the retry topic (_due)
        self.scheduled.append(copy)
        self.history.add("sent_back", key, broker=self.name, attempt=reconsume + 1)

    def _lock(self, cmd: RemotingCommand) -> RemotingCommand:
        body = json.loads(cmd.body)
        client = body["clientId"]
        now = anyio.current_time()
        keys = sorted({(m["topic"], int(m["queueId"])) for m in body["mqSet"]})
        resp = RemotingCommand.response_to(cmd)
        if cmd.code == RequestCode.UNLOCK_BATCH_MQ:
            for key in keys:
                if self.locks.get(key, ("", 0.0))[0] == client:
                    del self.locks[key]
            return resp
        granted = []
        for topic, queue_id in keys:
            owner, until = self.locks.get((topic, queue_id), (client, 0.0))
            if owner == client or until <= now:
                self.locks[(topic, queue_id)] = (client, now + LOCK_TTL)
                granted.append({"topic": topic, "brokerName": self.name, "queueId": queue_id})
        resp.body = json.dumps({"lockOKMQSet": granted}).encode()
        return resp


class SimPullCluster(SimServers[SimPullBroker]):
    """A NameServer routing ``PULL_TOPIC`` (``queues`` queues a broker) and the group's
    retry topic (one) to the brokers that are up, and the brokers."""

    def __init__(self, schedule: Schedule, history: History, *, brokers: int,
                 queues: int) -> None:  # fmt: skip
        self.schedule = schedule
        self.history = history
        self.rng = random.Random(schedule.params["server_seed"])
        self.lock_lag = random.Random(f"{schedule.params['server_seed']}:lock_lag")
        self.queues = queues
        self.brokers = [SimPullBroker(f"sim-broker-{chr(97 + i)}", self) for i in range(brokers)]
        self.namesrv = FakeRemotingServer(self._route)
        #: message index -> key
        self.keys: dict[int, str] = {}
        #: key -> its latest copy (the original, or the last sent back)
        self.latest: dict[str, Stored] = {}
        #: the simulated servers' own failures (a bug of the simulator, not the client's)
        self.errors: list[str] = []

    def store(self, key: str, index: int) -> None:
        broker = self.brokers[index % len(self.brokers)]
        self.keys[index] = key
        broker.store(key, (index // len(self.brokers)) % self.queues, index)

    def settled(self) -> bool:
        return all(b.settled() for b in self.brokers)

    async def ids_changed(self, broker: SimPullBroker) -> None:
        notice = RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                 ext_fields={"consumerGroup": PULL_GROUP})  # fmt: skip
        data = encode_command(notice)
        for session in list(broker.channels):
            await session.send_raw(data)

    async def run_nemesis(self) -> None:
        """Broker crashes at their times; offsets flushed every few seconds."""
        async with anyio.create_task_group() as tg:
            for b in self.brokers:
                tg.start_soon(b.flush)
            by_name = {b.name: b for b in self.brokers}
            faults = [f for f in self.schedule.faults
                      if f.kind in ("broker_restart", "connection_reset", "half_open")]
            for f in sorted(faults, key=lambda f: f.args["at"]):
                await anyio.sleep(max(0.0, f.args["at"] - anyio.current_time()))
                broker = by_name[f.args["broker"]]
                if f.kind == "broker_restart":
                    await broker.crash(f.args["down"])
                elif f.kind == "half_open":
                    broker.silence.start()
                else:
                    await broker.reset()

    async def _route(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return
        topic = cmd.ext_fields.get("topic", "")
        up = [b for b in self.brokers if not b.down]
        if topic not in (PULL_TOPIC, RETRY) or not up:
            await session.send(RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"no {topic}"))  # fmt: skip
            return
        await send_route(session, cmd, up, self.queues if topic == PULL_TOPIC else 1)
