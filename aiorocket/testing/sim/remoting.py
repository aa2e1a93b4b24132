"""Simulated NameServer and 5.x brokers speaking POP over remoting, with their own truth.

Each broker keeps a model of what a real 5.5.0 broker guarantees for one topic and one
group: the messages stored per queue, which are visible, invisible until when (each
under the check point of the pop or renewal that made it so), acked, and
dead-lettered. What it models of 5.5.0 and says so:

* a message whose invisible time ends unsettled is revived into the group's pop retry
  topic (a new offset there, ``reconsume_times`` + 1) and, with the default
  ``popResponseReturnActualRetryTopic=false``, returned *under its original topic*
  with its real check point in the ``POP_CK`` property;
* an ack or a renewal naming a check point the broker does not hold is answered
  SUCCESS and does nothing (the message comes back);
* a renewal (CHANGE_MESSAGE_INVISIBLETIME) acks the old check point and writes a new
  one for that message alone, starting at its own offset; one refused (the nemesis's
  ``change_error``) changes nothing: the message comes back under its old check point,
  as 5.x's ``ChangeInvisibleTimeProcessor`` answers SYSTEM_ERROR when the new check
  point is not stored (the old one is then not acked) and the remoting layer SYSTEM_BUSY
  when the ack executor's queue is full; a refused release (invisible time 0) is
  recorded (``release_refused``: the contract's "one whose release fails comes back
  after its invisible time");
* a long-polling pop whose client hung up pops nothing;
* an orderly pop (``order=true``) takes nothing of a queue while a batch of it is out,
  its check points carry revive queue 999, its messages come back in place (same queue
  and offset, ``orderCountInfo`` counting the attempts), not through the retry topic;
* past ``retryMaxTimes`` revivals the broker dead-letters the message itself;
  CONSUMER_SEND_MSG_BACK with delay level -1 puts a copy in the DLQ (the pop check
  point stays: without an ack the message comes back).

Requests are answered through the project's own frame codec and store-record encoder.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from aiorocket.client.pop import (
    ACK_MESSAGE,
    BATCH_ACK_MESSAGE,
    CHANGE_MESSAGE_INVISIBLETIME,
    ORDER_REVIVE_QUEUE,
    POP_MESSAGE,
)
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import (
    SYSFLAG_COMPRESSED,
    CompressionType,
    offset_message_id,
)
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.sim.history import Event
from aiorocket.testing.sim.servers import SimServers, send_route
from aiorocket.testing.sim.silence import Deliveries, Silence, answer_pop

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["GROUP", "TOPIC", "SimCluster", "SimPopBroker"]

TOPIC, GROUP = "sim-topic", "sim-group"
RETRY_QUEUE = 0
_POLLING_TIMEOUT = 210
_CODECS = {"zlib": CompressionType.ZLIB, "lz4": CompressionType.LZ4,
           "zstd": CompressionType.ZSTD}  # fmt: skip
#: this many requests of one kind within STORM_WINDOW virtual seconds is a storm
STORM_REQUESTS, STORM_WINDOW = 40, 0.05


@dataclass(slots=True)
class SimMessage:
    key: str
    queue_id: int
    offset: int
    compressed: str | None = None
    undecodable: bool = False
    #: "ready", "inflight", "acked", "dlq"
    state: str = "ready"
    visible_at: float = 0.0
    #: (mark, queue id, start, pop time) of the check point holding it, and its offset
    ck: tuple[str, int, int, int] | None = None
    ck_offset: int = 0
    reconsume: int = 0
    retry_offset: int | None = None
    orderly: bool = False


class SimPopBroker:
    """One broker (see the module docstring)."""

    def __init__(self, name: str, cluster: SimCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.history = cluster.history
        self.messages: list[SimMessage] = []
        self.by_retry_offset: dict[int, SimMessage] = {}
        self.next_retry_offset = 0
        self.pops = self.acks = self.changes = 0
        self._last_pop_time = 0
        self._recent: list[float] = []
        self.stormed = False
        self.server = FakeRemotingServer(self.handle)
        self.silence = Silence(name, self.server, self.history)

    @property
    def addr(self) -> str:
        return self.server.address

    # -- the model -------------------------------------------------------------------

    def store(self, key: str, queue_id: int, **kw: object) -> None:
        offset = sum(1 for m in self.messages if m.queue_id == queue_id)
        self.messages.append(SimMessage(key, queue_id, offset, **kw))  # type: ignore[arg-type]
        self.history.add("stored", key, broker=self.name, undecodable=bool(kw.get("undecodable")))

    def revive(self) -> None:
        """Messages whose invisible time ended unsettled: retried, or dead-lettered."""
        now = anyio.current_time()
        for m in self.messages:
            if m.state == "inflight" and m.visible_at <= now:
                m.reconsume += 1
                m.ck = None
                self.history.events.append(
                    Event(m.visible_at, "revived", m.key, {"attempt": m.reconsume})
                )
                if m.reconsume > self.cluster.retry_max:
                    m.state = "dlq"
                    self.history.add("dead_lettered", m.key, by="broker")
                    continue
                m.state = "ready"
                if m.orderly:  # an orderly pop's message comes back in place, in order
                    continue
                m.retry_offset = self.next_retry_offset
                self.by_retry_offset[m.retry_offset] = m
                self.next_retry_offset += 1

    def _pop_time(self) -> int:
        self._last_pop_time = max(self._last_pop_time + 1, int(anyio.current_time() * 1000))
        return self._last_pop_time

    def _settle(self, ck: tuple[str, int, int, int], offset: int) -> bool:
        for m in self.messages:
            if m.state == "inflight" and m.ck == ck and m.ck_offset == offset:
                m.state = "acked"
                self.history.add("acked", m.key, broker=self.name)
                return True
        self.history.add("note", "", what="ack of an unknown check point", ck=ck, offset=offset)
        return False

    async def _storm_check(self) -> None:
        now = anyio.current_time()
        if self.stormed:
            # a client that never waits would stop virtual time: answer it late
            await anyio.sleep(STORM_WINDOW)
            return
        self._recent = [t for t in self._recent if now - t < STORM_WINDOW] + [now]
        if len(self._recent) > STORM_REQUESTS:
            self.stormed = True
            self.history.add("storm", "", broker=self.name, requests=len(self._recent),
                             window=STORM_WINDOW)  # fmt: skip

    # -- requests --------------------------------------------------------------------

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        self.silence.seen(session)
        self.revive()
        resp = RemotingCommand.response_to(cmd)
        code, ext = cmd.code, cmd.ext_fields
        if code == POP_MESSAGE:
            deliveries: Deliveries = []
            resp = await self._pop(session, cmd, deliveries)
            await answer_pop(session, resp, self.history, deliveries)
            return
        elif code == BATCH_ACK_MESSAGE:
            resp = self._fault("ack", cmd) or self._batch_ack(cmd)
        elif code == ACK_MESSAGE:
            resp = self._fault("ack", cmd) or self._ack(cmd)
        elif code == CHANGE_MESSAGE_INVISIBLETIME:
            resp = self._fault("change", cmd) or self._change(cmd)
        elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
            resp = await self._send(cmd)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            index = int(ext["offset"]) - 1_000_000
            if 0 <= index < len(self.messages):
                self.history.add("dead_lettered", self.messages[index].key, by="client")
        elif code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            body = {"groupName": ext["group"], "retryMaxTimes": self.cluster.retry_max}
            resp.body = json.dumps(body).encode()
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            resp.body = json.dumps({"consumerIdList": ["sim-client"]}).encode()
        elif code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                      RequestCode.QUERY_CONSUMER_OFFSET):  # fmt: skip
            resp.ext_fields = {"offset": "0"}
        if not cmd.is_oneway:
            await session.send(resp)

    def _fault(self, kind: str, cmd: RemotingCommand) -> RemotingCommand | None:
        count = self.acks if kind == "ack" else self.changes
        if kind == "ack":
            self.acks += 1
        else:
            self.changes += 1
        for f in self.cluster.schedule.of(kind + "_error"):
            start = f.args["from_" + kind]
            if start <= count < start + f.args["count"]:
                if kind == "ack":  # the checker gives refused acks the close's time
                    self.history.add("ack_refused", "", broker=self.name)
                elif int(cmd.ext_fields["invisibleTime"]) == 0:
                    # the client did release it; it comes back after its invisible time
                    # (received_handed_on counts the try, none_lost the comeback)
                    m = self._named(cmd)
                    if m is not None:
                        self.history.add("release_refused", m.key, broker=self.name)
                return RemotingCommand.response_to(cmd, f.args["code"], f"sim {kind} error")
        return None

    async def _pop(self, session: ServerSession, cmd: RemotingCommand,
                   deliveries: Deliveries) -> RemotingCommand:  # fmt: skip
        """The answer to a pop; its messages' history entries go to ``deliveries``."""
        index = self.cluster.pops
        self.cluster.pops += 1
        await self._storm_check()
        for f in self.cluster.schedule.of("pop_error"):
            if f.args["from_pop"] <= index < f.args["from_pop"] + f.args["count"]:
                # the checker gives a silence during the receive backoff it starts the
                # backoff's time (reconnects_after_half_open)
                self.history.add("pop_refused", "", broker=self.name)
                return RemotingCommand.response_to(cmd, f.args["code"], "sim pop error")
        for f in self.cluster.schedule.of("pop_delay"):
            if f.args["pop"] == index:
                await anyio.sleep(f.args["seconds"])
        ext = cmd.ext_fields
        with anyio.move_on_after(int(ext["pollTime"]) / 1000):
            while not self._sources():
                await anyio.sleep(0.05)
                self.revive()
        order = ext.get("order") == "true"
        sources = self._sources(order)
        if not sources or session.closed:
            # a parked pop of a client that hung up pops nothing (the broker checks that
            # the channel is still active when it wakes a long poll)
            return RemotingCommand.response_to(cmd, _POLLING_TIMEOUT)
        mark, queue_id = self.cluster.rng.choice(sorted(sources))
        ready = sources[(mark, queue_id)][: int(ext["maxMsgNums"])]
        invisible = int(ext["invisibleTime"])
        pop_time = self._pop_time()
        offsets = [m.offset if mark == "0" else m.retry_offset for m in ready]
        start = min(o for o in offsets if o is not None)
        ck = (mark, queue_id, start, pop_time)
        records = []
        for m, offset in zip(ready, offsets, strict=True):
            assert offset is not None
            m.state, m.ck, m.ck_offset, m.orderly = "inflight", ck, offset, order
            m.visible_at = anyio.current_time() + invisible / 1000
            deliveries.append((m.key, {"broker": self.name, "attempt": m.reconsume + 1,
                                       "until": m.visible_at}))
            records.append(self._record(m, mark, offset, pop_time, invisible, start))
        revive_qid = ORDER_REVIVE_QUEUE if order else 0
        fields = {
            "popTime": str(pop_time), "invisibleTime": str(invisible),
            "reviveQid": str(revive_qid),
            "startOffsetInfo": f"{mark} {queue_id} {start}", "restNum": "0",
            "msgOffsetInfo": f"{mark} {queue_id} {','.join(map(str, offsets))}",
        }  # fmt: skip
        if order:
            fields["orderCountInfo"] = ";".join(
                f"0 qo{queue_id}%{m.offset} {m.reconsume}" for m in ready
            )
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=b"".join(records))

    def _sources(self, order: bool = False) -> dict[tuple[str, int], list[SimMessage]]:
        out: dict[tuple[str, int], list[SimMessage]] = {}
        # an orderly pop takes nothing of a queue while a batch of it is out (its lock)
        locked = {m.queue_id for m in self.messages if order and m.state == "inflight"}
        for m in self.messages:
            if m.state == "ready" and m.queue_id not in locked:
                key = ("1", RETRY_QUEUE) if m.retry_offset is not None else ("0", m.queue_id)
                out.setdefault(key, []).append(m)
        for ms in out.values():
            ms.sort(key=lambda m: m.offset if m.retry_offset is None else m.retry_offset)
        return out

    def _record(self, m: SimMessage, mark: str, offset: int, pop_time: int, invisible: int,
                start: int) -> bytes:  # fmt: skip
        index = self.messages.index(m)
        props = {"UNIQ_KEY": f"SIM{self.name}{index:08d}", "KEYS": m.key}
        if mark != "0":
            # 5.5.0 returns a retried message under its original topic, its real check
            # point in POP_CK (popResponseReturnActualRetryTopic=false)
            props["POP_CK"] = f"{start} {pop_time} {invisible} 0 {mark} {self.name} " \
                              f"{RETRY_QUEUE} {offset}"  # fmt: skip
            props["RETRY_TOPIC"] = f"%RETRY%{GROUP}_{TOPIC}"
        body = m.key.encode()
        kw: dict[str, object] = {}
        if m.undecodable:
            kw["sys_flag"] = SYSFLAG_COMPRESSED  # flagged compressed, does not inflate
        elif m.compressed:
            kw["compression"] = _CODECS[m.compressed]
        return encode_stored_message(
            TOPIC, body, props, queue_id=RETRY_QUEUE if mark != "0" else m.queue_id,
            queue_offset=offset, commit_log_offset=1_000_000 + index,
            reconsume_times=m.reconsume, **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    async def _send(self, cmd: RemotingCommand) -> RemotingCommand:
        """SEND_MESSAGE(_V2): stored (the truth: ``send_stored``, ``half`` for a
        transaction's half message) before the answer, which the nemesis may delay."""
        index = self.cluster.sends
        self.cluster.sends += 1
        ext = cmd.ext_fields
        flag = int(ext.get("f", ext.get("sysFlag", "0")))
        half = bool(flag & 0x4)
        for f in self.cluster.schedule.of("broker_slow"):
            if f.args["broker"] == self.name and f.args["from_send"] <= index < \
                    f.args["from_send"] + f.args["count"]:  # fmt: skip
                await anyio.sleep(f.args["seconds"])
        key = cmd.body.decode(errors="replace")
        self.history.add("send_stored", key, broker=self.name, half=half)
        offset = self.cluster.sends
        fields = {"msgId": offset_message_id(self.addr, 5000 + offset),
                  "queueId": ext.get("e", "0"), "queueOffset": str(offset)}  # fmt: skip
        if half:
            fields["transactionId"] = f"TX{offset}"
        return RemotingCommand.response_to(cmd, ext_fields=fields)

    def _batch_ack(self, cmd: RemotingCommand) -> RemotingCommand:
        for ack in json.loads(cmd.body)["acks"]:
            bits = int.from_bytes(base64.b64decode(ack["b"]), "little")
            ck = (str(ack["r"]), int(ack["q"]), int(ack["so"]), int(ack["pt"]))
            for k in range(bits.bit_length()):
                if bits >> k & 1:
                    self._settle(ck, ck[2] + k)
        return RemotingCommand.response_to(cmd)

    def _given(self, cmd: RemotingCommand) -> tuple[tuple[str, int, int, int], int]:
        ext = cmd.ext_fields
        p = ext["extraInfo"].split(" ")
        mark = "1" if ext["topic"].startswith("%RETRY%") else "0"
        return (mark, int(ext["queueId"]), int(p[0]), int(p[1])), int(ext["offset"])

    def _ack(self, cmd: RemotingCommand) -> RemotingCommand:
        self._settle(*self._given(cmd))
        return RemotingCommand.response_to(cmd)

    def _named(self, cmd: RemotingCommand) -> SimMessage | None:
        """The message in flight under the check point and offset a change names."""
        ck, offset = self._given(cmd)
        return next((m for m in self.messages
                     if m.state == "inflight" and m.ck == ck and m.ck_offset == offset),
                    None)  # fmt: skip

    def _change(self, cmd: RemotingCommand) -> RemotingCommand:
        ck, offset = self._given(cmd)
        invisible = int(cmd.ext_fields["invisibleTime"])
        pop_time = self._pop_time()
        m = self._named(cmd)
        if m is not None:
            m.ck = (ck[0], ck[1], offset, pop_time)
            m.visible_at = anyio.current_time() + invisible / 1000
            self.history.add("renewed" if invisible else "released", m.key,
                             until=m.visible_at)  # fmt: skip
        else:
            self.history.add("note", "", what="renewal of an unknown check point", ck=ck)
        fields = {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": "0"}
        return RemotingCommand.response_to(cmd, ext_fields=fields)


class SimCluster(SimServers[SimPopBroker]):
    """A NameServer routing TOPIC to ``brokers`` brokers, and the brokers."""

    def __init__(self, schedule: Schedule, history: History, *, brokers: int,
                 queues: int, retry_max: int = 3) -> None:  # fmt: skip
        self.schedule = schedule
        self.history = history
        self.rng = random.Random(schedule.params["server_seed"])
        self.queues = queues
        self.retry_max = retry_max
        self.pops = self.sends = 0
        self.brokers = [SimPopBroker(f"sim-broker-{chr(97 + i)}", self) for i in range(brokers)]
        self.namesrv = FakeRemotingServer(self._route)

    def all_settled(self) -> bool:
        for b in self.brokers:
            b.revive()
        return all(m.state in ("acked", "dlq") for b in self.brokers for m in b.messages)

    def unsettled(self) -> list[str]:
        return [m.key for b in self.brokers for m in b.messages if m.state not in ("acked", "dlq")]

    async def _route(self, session: ServerSession, cmd: RemotingCommand) -> None:
        topic = cmd.ext_fields.get("topic", "")
        if topic != TOPIC:
            await session.send(RemotingCommand.response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"no {topic}"))  # fmt: skip
            return
        await send_route(session, cmd, self.brokers, self.queues)
