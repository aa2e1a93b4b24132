"""Simulated 5.5 brokers of a LITE parent topic (remoting), with their own truth.

Each broker keeps, for one group bound to ``LITE_PARENT``: the messages of each lite
topic (its LMQ, queue 0), which are out to a client (invisible until when, under the
pop time of the pop or renewal that made them so), acked, dead-lettered; and each
client's lite subscriptions (LITE_SUBSCRIPTION_CTL). What it models of 5.5.0 and says
so:

* a pop (POP_LITE_MESSAGE) hands out messages of the lite topics the client subscribed
  on this broker; the next messages of a lite topic only once those out are acked (FIFO
  per lite topic); a message whose invisible time ends unsettled comes back in place,
  its delivery count (``orderCountInfo``) one higher;
* an ack or renewal naming a pop time the broker no longer holds for that offset is
  answered SUCCESS and does nothing; a renewal or release keeps the pop time (5.5.0's
  ``processChangeInvisibleTimeForLite``: only the next visible time changes), so the
  handle the client builds from its answer names the same check point;
* in an exclusive group (``lite.sub.model`` Exclusive) a lite topic belongs to the
  member that subscribed it last: the broker drops it for the others and tells them
  (NOTIFY_UNSUBSCRIBE_LITE). The nemesis plays that other member (``contested``): it
  subscribes a lite topic right after our client's PARTIAL_ADD (the broker's answer
  and its notice in one write, as they can arrive), or at a time of the run; from then
  on it consumes that lite topic's messages itself (``acked`` by ``other``);
* a COMPLETE_ADD (the client's periodic resync) sets the client's subscriptions to what
  it names: naming a lite topic the broker gave to the other member takes it back
  (``lite_taken_back`` in the history: the client kept what the broker dropped); one
  another of our clients holds is shared with it, not taken (5.5 evicts at a
  PARTIAL_ADD only);
* a paused broker (SIGSTOP) answers nothing until it resumes, then answers late: a long
  poll parked before the pause too (it hands out nothing stored meanwhile until then);
  what it queued meanwhile runs in an order of its own (a renewal sent before a
  release may run after it, the last change run setting the visible time; a release
  naming a check point a redelivery replaced is ``release_stale``).

Requests are answered through the project's own frame codec and store-record encoder.
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.client.lite import (
    LITE_BIND_TOPIC,
    LITE_SUB_MODEL,
    LITE_SUBSCRIPTION_CTL,
    NOTIFY_UNSUBSCRIBE_LITE,
    POP_LITE_MESSAGE,
    TRIGGER_LITE_DISPATCH,
    lmq_name,
)
from aiorocket.client.pop import ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME
from aiorocket.consumer import Consumer
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.sim.compat import GET_LITE_CLIENT_INFO
from aiorocket.testing.sim.history import Event
from aiorocket.testing.sim.servers import SimServers, send_route
from aiorocket.testing.sim.silence import Deliveries, Silence, answer_pop

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["LITE_GROUP", "LITE_PARENT", "OTHER", "SimLiteBroker", "SimLiteCluster"]

LITE_PARENT, LITE_GROUP = "sim-lite", "sim-lite-group"
#: the member of an exclusive group the nemesis plays
OTHER = "other-member"
_POLLING_TIMEOUT = 210


@dataclass(frozen=True, slots=True)
class Notice:
    """A NOTIFY_UNSUBSCRIBE_LITE of ``broker`` for ``client``'s ``lite_topic``, encoded."""

    broker: str
    client: str
    lite_topic: str
    data: bytes

    def lost(self, history: History) -> None:
        """Its write did not reach the client (a silenced connection, or one the client
        closed): ``lite_notice_lost``. A 5.5.0 broker sends it once and keeps no trace
        of the eviction (``LiteSubscriptionRegistryImpl.excludeClientByLmqName``), so
        nothing tells the client later."""
        history.add("lite_notice_lost", "", broker=self.broker, client=self.client,
                    lite_topic=self.lite_topic)  # fmt: skip


@dataclass(slots=True)
class LiteMsg:
    key: str
    lite_topic: str
    offset: int
    index: int
    #: "ready", "inflight", "acked", "dlq"
    state: str = "ready"
    visible_at: float = 0.0
    pop_time: int = 0
    count: int = 0


class SimLiteBroker:
    """One broker (see the module docstring)."""

    def __init__(self, name: str, cluster: SimLiteCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.history = cluster.history
        self.lite: dict[str, list[LiteMsg]] = {}
        #: client id -> its lite subscriptions here
        self.subs: dict[str, set[str]] = {}
        #: clients with a subscription record here (5.5.0: until COMPLETE_REMOVE)
        self.known: set[str] = set()
        #: lite topic -> its owner in an exclusive group
        self.owner: dict[str, str] = {}
        #: (client id, lite topic) the broker took from that client for the other member
        self.evicted: set[tuple[str, str]] = set()
        self.sessions: dict[str, ServerSession] = {}
        self.ctls = 0
        self._pop_time = 0
        self.changed = anyio.Event()
        self.server = FakeRemotingServer(self.handle)
        self.silence = Silence(name, self.server, self.history)

    @property
    def addr(self) -> str:
        return self.server.address

    # -- the model -------------------------------------------------------------------

    def store(self, key: str, lite_topic: str, index: int) -> None:
        queue = self.lite.setdefault(lite_topic, [])
        queue.append(LiteMsg(key, lite_topic, len(queue), index))
        self.history.add("stored", key, broker=self.name, lite_topic=lite_topic)
        self._by_other(lite_topic)
        self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def revive(self) -> None:
        now = anyio.current_time()
        for queue in self.lite.values():
            for m in queue:
                due = self.cluster.revive_due(self.name, m.visible_at)
                if m.state == "inflight" and due <= now:
                    m.count += 1
                    m.state = "ready"
                    self.history.events.append(Event(due, "revived", m.key, {"attempt": m.count}))
                    if m.count > self.cluster.retry_max:
                        m.state = "dlq"
                        self.history.add("dead_lettered", m.key, by="broker")
        for lite_topic in list(self.lite):
            self._by_other(lite_topic)

    def _by_other(self, lite_topic: str) -> None:
        """The other member consumes what is ready of a lite topic it owns."""
        if self.owner.get(lite_topic) != OTHER:
            return
        for m in self.lite.get(lite_topic, []):
            if m.state == "ready":
                m.state = "acked"
                self.history.add("acked", m.key, broker=self.name, by=OTHER)

    def take(self, lite_topic: str, *, session: ServerSession | None = None) -> list[Notice]:
        """The other member subscribes ``lite_topic`` (exclusive): every client that had
        it loses it; returns the notices to send (to ``session``'s client first)."""
        self.owner[lite_topic] = OTHER
        notices = []
        for client, topics in sorted(self.subs.items()):
            if lite_topic in topics:
                topics.discard(lite_topic)
                self.evicted.add((client, lite_topic))
                self.history.add("lite_evicted", "", broker=self.name, client=client,
                                 lite_topic=lite_topic)  # fmt: skip
                notice = RemotingCommand(code=NOTIFY_UNSUBSCRIBE_LITE, ext_fields={
                    "consumerGroup": LITE_GROUP, "clientId": client, "liteTopic": lite_topic,
                })  # fmt: skip
                sent = Notice(self.name, client, lite_topic, encode_command(notice))
                target = self.sessions.get(client)
                if target is not None and target is not session:
                    self.cluster.notify_later(target, sent)
                else:
                    notices.append(sent)
        self._by_other(lite_topic)
        return notices

    def unsettled(self) -> list[str]:
        return [m.key for q in self.lite.values() for m in q if m.state not in ("acked", "dlq")]

    # -- requests --------------------------------------------------------------------

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return  # the client's answer to a notice
        try:
            await self._handle(session, cmd)
        except Exception:  # the simulator's own bug: the run reports it as a crash
            self.cluster.errors.append(traceback.format_exc(limit=6))

    async def _handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        self.silence.seen(session)
        arrived = anyio.current_time()  # a paused broker handles it only once it resumes
        await self.cluster.paused(self.name)
        self.revive()
        ext = cmd.ext_fields
        client = ext.get("clientId") or ext.get("clientID")
        if client:
            self.sessions[client] = session
        resp = RemotingCommand.response_to(cmd)
        code = cmd.code
        if code == RequestCode.HEART_BEAT:
            body = json.loads(cmd.body)
            self.sessions[body["clientID"]] = session
        elif code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            attributes = {LITE_BIND_TOPIC: LITE_PARENT}
            if self.cluster.exclusive:
                attributes[LITE_SUB_MODEL] = "Exclusive"
            config = {"groupName": ext["group"], "retryMaxTimes": self.cluster.retry_max,
                      "attributes": attributes}  # fmt: skip
            resp.body = json.dumps(config).encode()
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            resp.body = json.dumps({"consumerIdList": sorted(self.subs)}).encode()
        elif code == LITE_SUBSCRIPTION_CTL:
            await self._ctl(session, cmd)
            return
        elif code == POP_LITE_MESSAGE:
            deliveries: Deliveries = []
            resp = await self._pop(session, cmd, deliveries)
            await answer_pop(session, resp, self.history, deliveries)
            return
        elif code == ACK_MESSAGE:
            resp = self._fault("ack_error", cmd) or self._ack(cmd, arrived)
        elif code == CHANGE_MESSAGE_INVISIBLETIME:
            resp = self._change(cmd, arrived)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            index = int(ext["offset"]) - 2_000_000
            for q in self.lite.values():
                for m in q:
                    if m.index == index:
                        self.history.add("dead_lettered", m.key, by="client")
        elif code == TRIGGER_LITE_DISPATCH:
            self._wake()
        elif code == GET_LITE_CLIENT_INFO:
            resp.body = self._client_info(ext["clientId"])
        if not cmd.is_oneway:
            await session.send(resp)

    def _fault(self, kind: str, cmd: RemotingCommand) -> RemotingCommand | None:
        index = self.cluster.count(kind, self.name)
        for f in self.cluster.schedule.of(kind):
            if f.args.get("broker", self.name) == self.name and \
                    f.args["from"] <= index < f.args["from"] + f.args["count"]:  # fmt: skip
                if kind == "ack_error":  # the checker gives refused acks the close's time
                    self.history.add("ack_refused", "", broker=self.name)
                return RemotingCommand.response_to(cmd, f.args["code"], f"sim {kind}")
        return None

    async def _ctl(self, session: ServerSession, cmd: RemotingCommand) -> None:
        resp = self._fault("ctl_error", cmd)
        for f in self.cluster.schedule.of("ctl_delay"):
            if f.args["broker"] == self.name and f.args["ctl"] == self.ctls:
                await anyio.sleep(f.args["seconds"])
        self.ctls += 1
        if resp is not None:
            await session.send(resp)
            return
        notices: list[Notice] = []
        for entry in json.loads(cmd.body)["subscriptionSet"]:
            client, action = entry["clientId"], entry["action"]
            topics = set(entry["liteTopicSet"])
            self.sessions[client] = session
            mine = self.subs.setdefault(client, set())
            self.history.add("lite_ctl", "", broker=self.name, client=client, action=action,
                             topics=sorted(topics))  # fmt: skip
            if action in ("COMPLETE_ADD", "COMPLETE_REMOVE"):
                mine.clear()
            (self.known.discard if action == "COMPLETE_REMOVE" else self.known.add)(client)
            if action.endswith("ADD"):
                for t in sorted(topics):
                    if action == "COMPLETE_ADD" and (client, t) in self.evicted:
                        self.history.add("lite_taken_back", "", broker=self.name,
                                         client=client, lite_topic=t)  # fmt: skip
                    if action == "PARTIAL_ADD":
                        self.evicted.discard((client, t))
                    if self.cluster.exclusive:
                        self._own(client, t, evict=action == "PARTIAL_ADD")
                    mine.add(t)
                if action == "PARTIAL_ADD" and self.cluster.exclusive:
                    for t in sorted(topics):
                        if self.cluster.contest_at_add(t):
                            notices += self.take(t, session=session)
            else:
                mine -= topics
        self._wake()
        # the answer and the notices of a lite topic taken right after it, in one write
        answer = RemotingCommand.response_to(cmd)
        answer.version = session.version  # as ServerSession.send sets it
        written = await session.send_raw(encode_command(answer) + b"".join(n.data for n in notices))
        if not written:
            for n in notices:
                n.lost(self.history)

    def _client_info(self, client: str) -> bytes:
        """GET_LITE_CLIENT_INFO's body: the client's lite topics here as LMQ names, a count
        of -1 for a client without a subscription record (5.5.0's answer)."""
        info: dict[str, object] = {"clientId": client, "group": LITE_GROUP,
                                   "parentTopic": LITE_PARENT, "liteTopicCount": -1}  # fmt: skip
        if client in self.known:
            topics = sorted(self.subs.get(client, set()))
            info["liteTopicCount"] = len(topics)
            info["liteTopicSet"] = [lmq_name(LITE_PARENT, t) for t in topics]
        return json.dumps(info).encode()

    def _own(self, client: str, lite_topic: str, *, evict: bool) -> None:
        """``client`` subscribed ``lite_topic`` in an exclusive group. A PARTIAL_ADD
        (``evict``) takes it from the client holding it; a COMPLETE_ADD evicts nobody:
        5.5's ``LiteSubscriptionRegistryImpl.addCompleteSubscription`` only adds the
        client beside the holder (``excludeClientByLmqName`` runs in
        ``addPartialSubscription`` alone), and the two share the lite topic (the
        dispatcher hands its events to either). A COMPLETE_ADD naming one the other
        member took still takes it back here (``lite_taken_back``: the checker's)."""
        previous = self.owner.get(lite_topic)
        holds = previous not in (None, client, OTHER) and \
            lite_topic in self.subs.get(previous, set())  # fmt: skip
        if holds and not evict:
            return  # shared: the holder stays the owner, both may pop it
        self.owner[lite_topic] = client
        if holds and previous is not None:
            self.subs[previous].discard(lite_topic)

    def _ready_topics(self, client: str) -> list[str]:
        out = []
        for t in sorted(self.subs.get(client, set())):
            queue = self.lite.get(t, [])
            if self.cluster.exclusive and self.owner.get(t) == OTHER:
                continue  # (a client sharing it with the owner pops it too: ``_own``)
            if any(m.state == "inflight" for m in queue):
                continue  # FIFO: nothing more of it while some are out
            if any(m.state == "ready" for m in queue):
                out.append(t)
        return out

    async def _pop(self, session: ServerSession, cmd: RemotingCommand,
                   deliveries: Deliveries) -> RemotingCommand:  # fmt: skip
        """The answer to a pop; its messages' history entries go to ``deliveries``."""
        ext = cmd.ext_fields
        client = ext["clientId"]
        with anyio.move_on_after(int(ext["pollTime"]) / 1000):
            while not self._ready_topics(client):
                with anyio.move_on_after(0.25):
                    await self.changed.wait()
                self.revive()
        # A long poll parked before a pause is frozen with the broker (SIGSTOP stops its
        # long-polling service too): a message stored meanwhile is handed out only after
        # it resumes (the wait above only stands for the threads that would wake it).
        await self.cluster.paused(self.name)
        self.revive()
        topics = self._ready_topics(client)
        if not topics or getattr(session, "closed", False):  # (older fakes lack it)
            return RemotingCommand.response_to(cmd, _POLLING_TIMEOUT)
        self.cluster.rng.shuffle(topics)
        invisible = int(ext["invisibleTime"])
        self._pop_time = max(self._pop_time + 1, int(anyio.current_time() * 1000))
        records, counts = [], []
        left = int(ext["maxMsgNum"])
        for t in topics:
            for m in [m for m in self.lite[t] if m.state == "ready"][: min(left, 2)]:
                m.state, m.pop_time = "inflight", self._pop_time
                m.visible_at = anyio.current_time() + invisible / 1000
                deliveries.append((m.key, {"broker": self.name, "attempt": m.count + 1,
                                           "until": m.visible_at, "client": client}))
                props = {PROPERTY_LITE_TOPIC: t, "INNER_MULTI_QUEUE_OFFSET": str(m.offset),
                         "UNIQ_KEY": f"SIML{self.name}{m.index:08d}", "KEYS": m.key}  # fmt: skip
                records.append(encode_stored_message(
                    LITE_PARENT, m.key.encode(), props, queue_offset=m.offset,
                    commit_log_offset=2_000_000 + m.index, reconsume_times=m.count,
                ))  # fmt: skip
                counts.append(str(m.count))
                left -= 1
            if left <= 0:
                break
        fields = {"popTime": str(self._pop_time), "invisibleTime": str(invisible),
                  "reviveQid": "999", "orderCountInfo": ";".join(counts)}  # fmt: skip
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=b"".join(records))

    def _find(self, cmd: RemotingCommand) -> LiteMsg | None:
        ext = cmd.ext_fields
        pop_time = int(ext["extraInfo"].split(" ")[1])
        for m in self.lite.get(ext.get("liteTopic", ""), []):
            if m.offset == int(ext["offset"]) and m.state == "inflight" and m.pop_time == pop_time:
                return m
        self.history.add("note", "", what="ack/renewal of an unknown check point",
                         lite_topic=ext.get("liteTopic"), offset=ext["offset"])  # fmt: skip
        return None

    def _ack(self, cmd: RemotingCommand, sent: float) -> RemotingCommand:
        m = self._find(cmd)
        if m is not None:
            m.state = "acked"
            # ``sent``: when the request reached the broker (earlier than now if the
            # broker was paused then): the checker needs it to judge such an ack
            self.history.add("acked", m.key, broker=self.name, sent=sent)
            self._wake()
        return RemotingCommand.response_to(cmd)

    def _change(self, cmd: RemotingCommand, sent: float) -> RemotingCommand:
        """A lite message's new visible time, under the pop time it was popped with: 5.5.0
        (``ChangeInvisibleTimeProcessor.processChangeInvisibleTimeForLite``) updates the
        consumer order info's next visible time for the offset and that pop time, and
        answers the same pop time with the invisible time counted from it, so the
        handle keeps its check point: an ack (``ackLite``: ``commitAndNext`` under the
        pop time) lands whether a renewal queued with it ran first or not, and the last
        change run sets the visible time (lite_remoting seed 44040). A change naming a
        pop time the broker no longer holds (the message popped again, or acked) does
        nothing and is answered as one that did."""
        m = self._find(cmd)
        invisible = int(cmd.ext_fields["invisibleTime"])
        if m is None and not invisible:
            self._stale_release(cmd, sent)
        pop_time = int(cmd.ext_fields["extraInfo"].split(" ")[1])
        visible_at = anyio.current_time() + invisible / 1000
        if m is not None:
            m.visible_at = visible_at
            # ``sent``: a release a renewal queued with it at a paused broker undid
            self.history.add("renewed" if invisible else "released", m.key,
                             until=m.visible_at, broker=self.name, sent=sent)  # fmt: skip
        fields = {"popTime": str(pop_time),
                  "invisibleTime": str(int(visible_at * 1000) - pop_time),
                  "reviveQid": "999"}  # fmt: skip
        return RemotingCommand.response_to(cmd, ext_fields=fields)


    def _stale_release(self, cmd: RemotingCommand, sent: float) -> None:
        """A release naming a check point this broker no longer holds (``_find`` noted
        it), in the history as ``release_stale`` with when it reached the broker
        (``sent``): requests queued at a paused broker run in an order of its own when
        it resumes, so a renewal sent earlier may have replaced the check point first
        (lite_remoting seed 42136); the checker needs the message and ``sent``."""
        ext = cmd.ext_fields
        for m in self.lite.get(ext.get("liteTopic", ""), []):
            if m.offset == int(ext["offset"]) and m.state == "inflight":
                self.history.add("release_stale", m.key, broker=self.name, sent=sent)


class SimLiteCluster(SimServers[SimLiteBroker]):
    """A NameServer routing ``LITE_PARENT`` to ``brokers`` lite brokers, and the brokers."""

    def __init__(self, schedule: Schedule, history: History, *, brokers: int,
                 exclusive: bool, retry_max: int = 16) -> None:  # fmt: skip
        self.schedule = schedule
        self.history = history
        self.rng = random.Random(schedule.params["server_seed"])
        self.exclusive = exclusive
        self.retry_max = retry_max
        self.brokers = [SimLiteBroker(f"sim-broker-{chr(97 + i)}", self) for i in range(brokers)]
        self.namesrv = FakeRemotingServer(self._route)
        self._counts: dict[tuple[str, str], int] = {}
        self._contested = {f.args["lite_topic"] for f in schedule.of("contested")
                           if f.args.get("at_add")}  # fmt: skip
        self._notices: list[tuple[ServerSession, Notice]] = []
        #: the simulated servers' own failures (a bug of the simulator, not the client's)
        self.errors: list[str] = []

    def count(self, kind: str, broker: str) -> int:
        n = self._counts.get((kind, broker), 0)
        self._counts[(kind, broker)] = n + 1
        return n

    def contest_at_add(self, lite_topic: str) -> bool:
        """The other member takes ``lite_topic`` right after our first add of it."""
        if lite_topic in self._contested:
            self._contested.discard(lite_topic)
            return True
        return False

    def notify_later(self, session: ServerSession, notice: Notice) -> None:
        self._notices.append((session, notice))

    def revive_due(self, name: str, visible_at: float) -> float:
        """When a message invisible until ``visible_at`` is revived: a paused broker
        revives nothing; after it resumes, the requests queued meanwhile (acks) come
        first (a second)."""
        for f in self.schedule.of("broker_pause"):
            end = f.args["at"] + f.args["seconds"]
            if f.args["broker"] == name and f.args["at"] <= visible_at < end + 1.0:
                return float(end) + 1.0
        return visible_at

    async def paused(self, name: str) -> None:
        """A broker paused (SIGSTOP) answers once it resumes."""
        now = anyio.current_time()
        for f in self.schedule.of("broker_pause"):
            if f.args["broker"] == name and f.args["at"] <= now < f.args["at"] + f.args["seconds"]:
                await anyio.sleep(f.args["at"] + f.args["seconds"] - now)

    def unsettled(self) -> list[str]:
        for b in self.brokers:
            b.revive()
        return [k for b in self.brokers for k in b.unsettled()]

    # -- what ``lite_workload`` asks of its servers (``SimLiteProxy`` answers the same)

    def consumer(self, handler: Any, client_id: str, settings: dict[str, Any]) -> Consumer:
        """A lite consumer of ``LITE_PARENT`` in ``LITE_GROUP`` on these brokers."""
        return Consumer(LITE_GROUP, self.namesrv.address, handler=handler,
                        bind_topic=LITE_PARENT, client_id=client_id, **settings)  # fmt: skip

    def store_lite(self, key: str, k: int, index: int) -> None:
        """Store message ``key`` (index ``index`` of the run) on lite topic ``r{k}``."""
        self.brokers[k % len(self.brokers)].store(key, f"r{k}", index)

    def evicted_from(self, client: str) -> set[str]:
        """The lite topics a broker took from ``client`` (and told it)."""
        return {t for b in self.brokers for c, t in b.evicted if c == client}

    def inflight(self) -> list[tuple[str, float]]:
        """(key, visible at) of every message out to a client now."""
        for b in self.brokers:
            b.revive()
        return [(m.key, m.visible_at) for b in self.brokers for q in b.lite.values()
                for m in q if m.state == "inflight"]  # fmt: skip

    async def run_nemesis(self) -> None:
        """Contested lite topics taken at a time of the run (not at an add); a paused
        broker takes the other member's subscription once it resumes (after what was
        queued)."""
        takes = sorted((self.revive_due(b.name, f.args["at"]), b.name, f.args["lite_topic"])
                       for f in self.schedule.of("contested") if not f.args.get("at_add")
                       for b in self.brokers)  # fmt: skip
        by_name = {b.name: b for b in self.brokers}
        for at, name, lite_topic in takes:
            await anyio.sleep(max(0.0, at - anyio.current_time()))
            by_name[name].take(lite_topic)
            await self._flush_notices()

    def record_pauses(self) -> None:
        """Put each ``broker_pause`` (``paused`` applies it) in the history, as
        ``broker_paused`` / ``broker_resumed`` events where they belong in time, once the
        run is over: an ack sent to a paused broker lands when it resumes, which only
        these let the checker tell from a late ack. Not by a timer of the run's: one at
        the resume's instant would reorder the requests the broker wakes for then."""
        now = anyio.current_time()
        for f in self.schedule.of("broker_pause"):
            for at, kind in ((f.args["at"], "broker_paused"),
                             (f.args["at"] + f.args["seconds"], "broker_resumed")):  # fmt: skip
                if at <= now:
                    self.history.insert(at, kind, broker=f.args["broker"])

    async def _flush_notices(self) -> None:
        notices, self._notices = self._notices, []
        for session, notice in notices:
            if not await session.send_raw(notice.data):
                notice.lost(self.history)

    async def _route(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return
        topic = cmd.ext_fields.get("topic", "")
        if topic != LITE_PARENT:
            await session.send(RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"no {topic}"))  # fmt: skip
            return
        await send_route(session, cmd, self.brokers, 1)
