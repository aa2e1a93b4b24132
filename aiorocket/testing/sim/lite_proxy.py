"""The simulated Proxy serving lite consumers (RocketMQ 5.5, RIP-83): the restartable
simulated Proxy (``grpc_restart.RestartingProxy``) with each client's lite
subscriptions, for the ``grpc_lite`` workload.

What it models of a cluster-mode 5.5.0 Proxy (tests/integration/test_lite_grpc.py's
reference), and says so:

* ``SyncLiteSubscription`` keeps each client's lite topics of ``LITE_PARENT``
  (PARTIAL_ADD / PARTIAL_REMOVE change them, COMPLETE_ADD sets them, COMPLETE_REMOVE
  clears them); a receive hands out only the subscribed lite topics' messages, each
  named in ``system_properties.lite_topic``; a lite topic is FIFO (the next of its
  messages only once those out are settled; one whose invisible time ends comes back
  in place);
* an ack or a change of a lite message must name its lite topic: one that does not is
  answered OK and ignored (the message comes back); a change keeps the message's pop
  time, so a handle from before a renewal still settles it (``_by_handle``);
* the Proxy's own renewal of a lite message fails (5.5.0 renews the parent topic's
  queue, the broker answers NO_EXIST): an auto-renewed receive's lite messages come
  back after the receive's invisible duration, as those written to a receive stream
  that broke do (NotifyClientTermination frees none of them);
* the client's lite subscriptions are dropped when its Telemetry stream ends
  (ClientActivity.handleGrpcCancel -> offlineClientLiteSubscription: a connection
  dropped, a Proxy restart): the client must send them again (it does once the new
  stream has its settings: ``LiteSubscriptions.resync_soon``). Nothing orders that
  handling (a COMPLETE_REMOVE by client id to the brokers, asynchronous) after the new
  stream's settings and the client's resync: the nemesis's ``late_offline`` has the
  Proxy drop them ``seconds`` after the old stream ended, whatever the client sent
  meanwhile (a cold or loaded 5.5.0 Proxy does: the CI run of
  tests/integration/test_lite_grpc.py);
* in an exclusive group a lite topic belongs to the member that subscribed it last: the
  nemesis plays the other member (``contested``), right after our PARTIAL_ADD (its
  NotifyUnsubscribeLiteCommand written on the Telemetry stream before the add's answer)
  or at a time of the run; from then on the other member consumes that lite topic. A
  COMPLETE_ADD naming a lite topic the Proxy took (and told the client) takes it back
  (``lite_taken_back``). A notice for a client without a live Telemetry stream is lost
  (the client keeps the lite topic; its next resync takes it back: not judged);
* the quota is not enforced (5.5.0 accepts subscriptions past it);
* a receive the client cuts while it is parked (the close, a dropped connection) stays
  parked until its long poll ends (the Proxy's pop at the broker outlives the stream):
  what it finds meanwhile for the client, still subscribed, is popped into the cut
  stream, nobody reads it, and it stays invisible for the receive's invisible duration
  (the Proxy's nack of what it could not write names the parent topic: ignored for a
  lite message; ``lost_on_wire``). A released lite message is found by it at once
  (5.5.0's broker announces it to the lite topic's subscribers, this client among
  them): a client that releases at its close before it drops its subscriptions loses
  them for the invisible time (tests/integration/test_lite.py's
  test_messages_unsettled_at_close_come_back[grpc] in CI).

Not modelled: a receive's ``attempt_id``, ``offset_option`` (every subscription reads
from the first unsettled message), a notice racing a reconnect.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import TYPE_CHECKING, Any

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.sim.lite_proxy (the simulated lite Proxy)"):
    from grpclib.const import Cardinality, Handler

from aiorocket.consumer import Consumer
from aiorocket.grpc import _pb as pb
from aiorocket.testing.fake_grpc import _PATH, _client_id
from aiorocket.testing.sim.grpc_restart import RestartingProxy
from aiorocket.testing.sim.lite import LITE_GROUP, LITE_PARENT, OTHER

if TYPE_CHECKING:
    from grpclib.server import Stream

    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule
    from aiorocket.testing.sim.proxy import ProxyMessage

__all__ = ["SimLiteProxy"]


class SimLiteProxy(RestartingProxy):
    """The simulated Proxy with lite subscriptions (see the module docstring)."""

    topic = LITE_PARENT

    def __init__(self, schedule: Schedule, history: History, *, exclusive: bool) -> None:
        super().__init__(schedule, history)
        self.fifo = True  # a lite topic is FIFO
        self.exclusive = exclusive
        #: client id -> its lite subscriptions
        self.subs: dict[str, set[str]] = {}
        #: lite topic -> its owner in an exclusive group
        self.owner: dict[str, str] = {}
        #: (client id, lite topic) the Proxy took from that client and told it so
        self.evicted: set[tuple[str, str]] = set()
        self._telemetry_of: dict[str, Stream[Any, Any]] = {}
        self.syncs = 0
        self._contested = {f.args["lite_topic"] for f in schedule.of("contested")
                           if f.args.get("at_add")}  # fmt: skip
        self._codecs = {f.args["message"]: f.args["codec"]
                        for f in schedule.of("compressed_as_gzip")}  # fmt: skip
        #: the simulated Proxy's own failures (a bug of the simulator, not the client's)
        self.errors: list[str] = []
        #: the old Telemetry streams' ends being handled late (``late_offline``)
        self._late: set[asyncio.Task[None]] = set()

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._late):
            task.cancel()
        await super().__aexit__(*exc)

    # -- what ``lite_workload`` asks (``LiteTruth``) --------------------------------

    def consumer(self, handler: Any, client_id: str, settings: dict[str, Any]) -> Consumer:
        return Consumer(LITE_GROUP, proxy=self.endpoint, handler=handler, bind_topic=LITE_PARENT,
                        client_id=client_id, **settings)  # fmt: skip

    def store_lite(self, key: str, k: int, index: int) -> None:
        self.add(key, lite_topic=f"r{k}", codec=self._codecs.get(index))
        self._by_other()

    def unsettled(self) -> list[str]:
        self._visible()  # revives what is due
        self._by_other()
        return [m.key for m in self.store if m.state not in ("acked", "dlq")]

    def evicted_from(self, client: str) -> set[str]:
        return {t for c, t in self.evicted if c == client}

    def inflight(self) -> list[tuple[str, float]]:
        self._visible()
        return [(m.key, m.visible_at) for m in self.store if m.state == "inflight"]

    # -- the model -------------------------------------------------------------------

    def _by_other(self) -> None:
        """The other member consumes what is ready of the lite topics it owns."""
        for m in self.store:
            if m.state == "ready" and self.owner.get(m.lite_topic or "") == OTHER:
                m.state = "acked"
                self.history.add("acked", m.key, by=OTHER)

    def _ready_for(self, stream: Stream[Any, Any]) -> list[ProxyMessage]:
        return self._ready_for_client(_client_id(stream))

    def _ready_for_client(self, client: str) -> list[ProxyMessage]:
        mine = self.subs.get(client, set())
        self._by_other()
        return [m for m in self._visible() if m.lite_topic in mine and
                (not self.exclusive or self.owner.get(m.lite_topic) != OTHER)]  # fmt: skip

    def _cut_while_parked(
        self, stream: Stream[Any, Any], deadline: float, invisible: float, batch: int
    ) -> None:
        task = asyncio.get_running_loop().create_task(
            self._parked_after_cut(_client_id(stream), deadline, invisible, batch))  # fmt: skip
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _parked_after_cut(
        self, client: str, deadline: float, invisible: float, batch: int
    ) -> None:
        """The long poll of a receive the client cut (see the module docstring)."""
        while self.now() < deadline:
            ready = self._ready_for_client(client)[:batch]
            if ready:
                for m in ready:
                    self._hand_out(m, invisible, auto_renew=False)
                    self.history.add("lost_on_wire", m.key, broker="proxy",
                                     why="popped for a receive the client had cut")  # fmt: skip
                return
            await asyncio.sleep(0.02)  # (time-driven)

    def _renews(self, m: ProxyMessage) -> bool:
        return m.lite_topic is None  # 5.5.0's renewal of a lite message fails

    def _by_handle(self, handle: str) -> ProxyMessage | None:
        """The message ``handle`` names. A lite message's handles from one pop all name
        it, the one before a renewal too: 5.5.0's broker keeps a lite message's pop time
        at a change (``ChangeInvisibleTimeProcessor.processChangeInvisibleTimeForLite``:
        the consumer order info's next visible time under that pop time, answered with
        the same pop time), the Proxy builds the new handle from that answer, and an ack
        under the pop time lands (``AckMessageProcessor.ackLite``: ``commitAndNext``),
        so an ack sent with the old handle while a renewal was on its way is no stale
        ack (the model of the remoting brokers, ``lite.SimLiteBroker._change``, keeps
        it the same way). A handle of an earlier pop names nothing (the broker's pop
        time moved on); a normal message's old handle neither (apache/rocketmq#9583)."""
        m = super()._by_handle(handle)
        if m is None:
            pop = handle.rstrip("+")  # a change's new handle is the old one and a "+"
            m = next((m for m in self.store if m.lite_topic is not None
                      and m.state == "inflight" and m.handle.rstrip("+") == pop), None)  # fmt: skip
        return m

    def _settling(self, handle: str, lite_topic: str | None) -> ProxyMessage | None:
        m = self._by_handle(handle)
        if m is not None and m.lite_topic is not None and lite_topic != m.lite_topic:
            self.history.add("note", m.key, what="lite settle without its lite topic: ignored",
                             named=lite_topic)  # fmt: skip
            return None
        return m

    def on_settings(self, client: str) -> None:
        self.history.add("client_settings", "", client=client)

    def _offline(self, client: str, why: str) -> None:
        """Drops ``client``'s lite subscriptions (``live``: it has a Telemetry stream
        with its settings now, a late drop: it must send them again on its own)."""
        topics = self.subs.pop(client, set())
        if topics:
            stream = self._telemetry_of.get(client)
            live = stream is not None and not self._silenced(stream)
            self.history.add("lite_dropped", "", client=client, topics=sorted(topics), why=why,
                             live=live)  # fmt: skip

    async def _offline_late(self, client: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._offline(client, f"an old telemetry stream's end handled {seconds}s late")

    def _own(self, client: str, lite_topic: str, *, evict: bool) -> None:
        """As ``SimLiteBroker._own`` (the Proxy passes the action on to the brokers): a
        PARTIAL_ADD takes the lite topic from its holder, a COMPLETE_ADD shares it."""
        previous = self.owner.get(lite_topic)
        holds = previous not in (None, client, OTHER) and \
            lite_topic in self.subs.get(previous or "", set())  # fmt: skip
        if holds and not evict:
            return
        self.owner[lite_topic] = client
        if holds:
            self.subs.get(previous or "", set()).discard(lite_topic)

    def drop_connections(self) -> None:
        """Every connection closed at once: what was written as it closed is unread."""
        self._unread("connection closed as it was written")
        super().drop_connections()

    def _unread(self, why: str) -> None:
        """What a receive still open wrote, or any receive wrote in this instant, may
        not have been read by the client (grpclib fails a stream whose connection is
        lost before it read it; a receive the client cuts reads no more), and 5.5.0
        holds it for its invisible time (not renewed, not freed by the client's
        termination): ``lost_on_wire`` (the client cannot hand on or release what it
        never read), unless the client showed it had it."""
        last: dict[str, Any] = {}
        for e in self.history.events:
            last[e.key] = e
        now = self.now()
        open_ = {key for written in self.writing for key in written}
        for key, e in last.items():
            if e.kind == "delivered" and (key in open_ or now - e.at < 0.01):
                self.history.add("lost_on_wire", key, broker="proxy", why=why)

    async def take(self, lite_topic: str) -> None:
        """The other member subscribes ``lite_topic`` (exclusive): every client that had
        it loses it, told on its Telemetry stream."""
        self.owner[lite_topic] = OTHER
        for client, topics in sorted(self.subs.items()):
            if lite_topic not in topics:
                continue
            topics.discard(lite_topic)
            stream = self._telemetry_of.get(client)
            if stream is None or self._silenced(stream):
                self.history.add("note", "", what="lite notice lost (no live telemetry)",
                                 client=client, lite_topic=lite_topic)  # fmt: skip
                continue
            self.evicted.add((client, lite_topic))
            self.history.add("lite_evicted", "", broker="proxy", client=client,
                             lite_topic=lite_topic)  # fmt: skip
            notice = pb.TelemetryCommand(notify_unsubscribe_lite_command=(
                pb.NotifyUnsubscribeLiteCommand(lite_topic=lite_topic)))  # fmt: skip
            try:
                await stream.send_message(notice)
            except Exception:  # the stream ended meanwhile: the notice is lost
                self.evicted.discard((client, lite_topic))
        self._by_other()

    # -- requests --------------------------------------------------------------------

    def __mapping__(self) -> dict[str, Any]:
        out = super().__mapping__()
        out[_PATH + "SyncLiteSubscription"] = Handler(
            self._sync, Cardinality.UNARY_UNARY,
            pb.SyncLiteSubscriptionRequest, pb.SyncLiteSubscriptionResponse,
        )  # fmt: skip
        return out

    async def _telemetry(self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand]) -> None:
        await self._admit(stream)
        client = _client_id(stream)
        self._telemetry_of[client] = stream
        try:
            await super()._telemetry(stream)
        finally:  # ended by the client, cut with its connection, or a restart
            if self._telemetry_of.get(client) is stream:
                del self._telemetry_of[client]
            late = self.schedule.of("late_offline")
            if late:  # (a task of its own: this handler's stream is done)
                task = asyncio.get_running_loop().create_task(
                    self._offline_late(client, late[0].args["seconds"]))  # fmt: skip
                self._late.add(task)
                task.add_done_callback(self._late.discard)
            else:
                self._offline(client, "telemetry stream ended")
            self._unread("the client went away as it was written")

    async def _sync(self, stream: Stream[Any, Any]) -> None:
        try:
            await self._sync_one(stream)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:  # the simulator's own bug: the run reports it as a crash
            self.errors.append(traceback.format_exc(limit=6))
            raise

    async def _sync_one(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        index, self.syncs = self.syncs, self.syncs + 1
        client = _client_id(stream)
        action = pb.LiteSubscriptionAction(req.action).name
        for f in self.schedule.of("sync_error"):
            if f.args["from"] <= index < f.args["from"] + f.args["count"]:
                self.history.add("lite_ctl", "", broker="proxy", client=client, action=action,
                                 refused=f.args["code"])  # fmt: skip
                await stream.send_message(pb.SyncLiteSubscriptionResponse(
                    status=pb.Status(code=f.args["code"], message="sim sync_error")))  # fmt: skip
                return
        topics = set(req.lite_topic_set)
        self.history.add("lite_ctl", "", broker="proxy", client=client, action=action,
                         topics=sorted(topics))  # fmt: skip
        mine = self.subs.setdefault(client, set())
        if action in ("COMPLETE_ADD", "COMPLETE_REMOVE"):
            mine.clear()
        if action.endswith("ADD"):
            for t in sorted(topics):
                if action == "COMPLETE_ADD" and (client, t) in self.evicted:
                    self.history.add("lite_taken_back", "", broker="proxy", client=client,
                                     lite_topic=t)  # fmt: skip
                if action == "PARTIAL_ADD":
                    self.evicted.discard((client, t))
                if self.exclusive:
                    self._own(client, t, evict=action == "PARTIAL_ADD")
                mine.add(t)
            if action == "PARTIAL_ADD" and self.exclusive:
                for t in sorted(topics & self._contested):
                    self._contested.discard(t)
                    await self.take(t)  # its notice before the add's answer
        else:
            mine -= topics
        await stream.send_message(pb.SyncLiteSubscriptionResponse(status=pb.Status(
            code=pb.Code.OK, message="OK")))  # fmt: skip

    # -- the nemesis ------------------------------------------------------------------

    async def run_nemesis(self) -> None:
        """The other member's takes at a time of the run, the connections dropped, the
        Proxy restarted: each at its drawn time."""
        steps: list[tuple[float, str, dict[str, Any]]] = []
        for f in self.schedule.of("contested"):
            if not f.args.get("at_add"):
                steps.append((f.args["at"], "contested", f.args))
        for f in self.schedule.of("connection_drop"):
            steps.append((f.args["at"], "connection_drop", f.args))
        for f in self.schedule.of("proxy_restart"):
            steps.append((f.args["seconds"], "proxy_restart", f.args))
        for at, kind, args in sorted(steps, key=lambda s: s[0]):
            await asyncio.sleep(max(0.0, at - self.now()))
            if kind == "contested":
                await self.take(args["lite_topic"])
            elif kind == "connection_drop":
                self.history.add("note", "", what="every connection to the Proxy dropped")
                self.drop_connections()
            else:
                self.history.add("note", "", what="the Proxy restarts", down=args["down"])
                self.subs.clear()  # a restarted Proxy knows no subscription
                await self.bounce(args["down"])
