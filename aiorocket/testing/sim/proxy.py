"""A simulated 5.x Proxy (gRPC) with its own truth, on the fake Proxy's wire
(``aiorocket.testing.fake_grpc``: grpclib, asyncio only).

The model keeps, per message: stored, delivered (to which receive, under which receipt
handle), invisible until when or auto-renewed, acked, dead-lettered. What it models of
5.5.0 and says so:

* a receive with ``auto_renew`` is renewed by the Proxy itself until it is acked, its
  invisible duration changed, or the client terminates (``renewMaxTimeMillis`` is 3 h:
  forever, within a run). So a message the client drops is *held*, not redelivered;
* an ack or a change naming a receipt handle that is no longer the message's is
  answered OK and does nothing (acks after a renewal: apache/rocketmq#9583);
* a compressed body is labelled GZIP whatever its codec (the Proxy does not read the
  store's codec bits);
* FIFO groups (``fifo=True``): a receive hands out a group's unsettled messages in
  order, and none of the group again while any of them is out (invisible);
* messages of a receive whose stream breaks (or whose connection is reset) before they
  were written stay visible: the Proxy releases what it could not write;
* NotifyClientTermination ends the Proxy's hold on what it received for the client
  (DefaultReceiptHandleManager): written to a stream that broke, or never handled, it
  becomes visible again;
* a receive from a client whose settings it does not hold (none applied yet, or
  dropped by its NotifyClientTermination, as 5.5.0's ``ClientActivity`` does) is
  refused INTERNAL_SERVER_ERROR ``"settings" is null`` (``ReceiveMessageActivity`` reads
  them first) and recorded ``receive_refused``;
* the clients it lists (``registered``, the fake Proxy's): a settings message registers
  its client (``ClientActivity.processAndWriteClientSettings``), the termination
  removes it. The Proxy runs Telemetry messages, Heartbeat and NotifyClientTermination
  on one pool of several threads (``GrpcMessagingApplication``:
  ``clientManagerThreadPoolExecutor``), so a settings message can be applied after a
  termination sent later: with ``settings_late`` drawn, each settings message of a
  client after its first (a new telemetry stream's, the re-registration after a
  release) is applied (and answered) that many seconds after it arrived, or just after
  a termination that comes meanwhile. A client listed after its close is a member of its
  group nobody removes until the Proxy expires it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import lz4.frame
import zstandard

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.sim.proxy (the simulated Proxy)"):
    from grpclib.const import Status as GrpcStatus
    from grpclib.exceptions import GRPCError
    from grpclib.server import Server

from aiorocket.grpc import _pb as pb
from aiorocket.testing.fake_grpc import SETTINGS_IS_NULL, FakeProxy, _client_id
from aiorocket.testing.sim.arrival import ArrivalDelays
from aiorocket.testing.sim.pool_busy import ConsumerPool

if TYPE_CHECKING:
    from grpclib.server import Stream

    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["SimProxy"]

_OK = pb.Status(code=pb.Code.OK, message="OK")
_COMPRESS = {"zlib": zlib.compress, "lz4": lz4.frame.compress,
             "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}  # fmt: skip


def _lost(data: object) -> None:
    """A silenced connection's write: the bytes go nowhere."""


@dataclass(slots=True)
class ProxyMessage:
    key: str
    group: str | None = None
    codec: str | None = None
    #: "ready", "inflight", "acked", "dlq"
    state: str = "ready"
    handle: str = ""
    auto_renew: bool = False
    visible_at: float = 0.0
    attempt: int = 0
    #: a lite message's lite topic (``lite_proxy``)
    lite_topic: str | None = None


class SimProxy(FakeProxy):
    """The simulated Proxy (see the module docstring)."""

    def __init__(self, schedule: Schedule, history: History, *, fifo: bool = False) -> None:
        super().__init__()
        self.schedule = schedule
        self.history = history
        self.fifo = fifo
        self.store: list[ProxyMessage] = []
        self.receives = 0
        self.ack_calls = 0
        self._refused_until = 0.0
        #: counts connection resets (a receive started before one writes no more)
        self.generation = 0
        #: ids of the connections a half-open fault silenced (until a call on a new one)
        self._silent: set[int] | None = None
        self._ever_silent: set[int] = set()
        #: the half-open faults still to come, by the delivery they strike before
        self._silence_at = {f.args["delivered"] for f in schedule.of("half_open")
                            if "delivered" in f.args}  # fmt: skip
        self.deliveries = 0
        #: per receive whose stream is open, the keys it wrote (``lite_proxy``)
        self.writing: list[list[str]] = []
        #: what the workload adds to each ``half_open`` event (its bound)
        self.half_open_info: dict[str, Any] = {}
        late = [f.args["seconds"] for f in schedule.of("settings_late")]
        self._settings_late: float | None = late[0] if late else None
        #: clients whose first settings came (only those after are applied late)
        self._settings_from: set[str] = set()
        #: the network holding what clients write on some connections (``arrival``)
        self._arrivals = ArrivalDelays(schedule.of("arrival_delay"), history)
        #: the consumer pool's busy spells (``pool_busy``)
        self._pool = ConsumerPool(schedule.of("pool_busy"), history)

    #: the topic every message is of
    topic = "t"

    def add(self, key: str, *, group: str | None = None, codec: str | None = None,
            lite_topic: str | None = None) -> None:  # fmt: skip
        self.store.append(ProxyMessage(key, group, codec, lite_topic=lite_topic))
        self.history.add("stored", key)

    def now(self) -> float:
        return self.history.now()

    def settled(self) -> bool:
        return all(m.state in ("acked", "dlq") for m in self.store)

    def _visible(self) -> list[ProxyMessage]:
        now = self.now()
        for m in self.store:
            if m.state == "inflight" and not m.auto_renew and m.visible_at <= now:
                m.state = "ready"
                self.history.add("revived", m.key, attempt=m.attempt)
        # FIFO: a group whose messages are out (inflight) gets none; else its unsettled
        # messages in order, in one receive (the broker pops an orderly queue's batch
        # and holds the queue until the batch is settled)
        # (a lite topic is its messages' FIFO group: ``lite_proxy``)
        busy = {m.lite_topic or m.group for m in self.store
                if self.fifo and m.state == "inflight"}  # fmt: skip
        return [m for m in self.store if m.state == "ready"
                and (m.lite_topic or m.group) not in busy]  # fmt: skip

    def _has_settings(self, client: str) -> bool:
        """Whether the Proxy holds ``client``'s settings (a settings message applied,
        no NotifyClientTermination since: the fake's)."""
        return client in self._known

    def _ready_for(self, stream: Stream[Any, Any]) -> list[ProxyMessage]:
        """What a receive on ``stream`` may hand out now (``lite_proxy``: only the
        client's lite subscriptions)."""
        return self._visible()

    def _renews(self, m: ProxyMessage) -> bool:
        """Whether the Proxy's own renewal of an auto-renewed receive keeps ``m``."""
        return True

    def _settling(self, handle: str, lite_topic: str | None) -> ProxyMessage | None:
        """The message an ack or change names (``lite_proxy``: with its lite topic)."""
        return self._by_handle(handle)

    def _wire(self, m: ProxyMessage) -> pb.Message:
        body, encoding = m.key.encode(), pb.Encoding.IDENTITY
        if m.codec is not None:
            # 5.5.0 labels every compressed body GZIP, whatever the producer's codec
            body, encoding = _COMPRESS[m.codec](body), pb.Encoding.GZIP
        return pb.Message(
            topic=pb.Resource(name=self.topic),
            system_properties=pb.SystemProperties(
                message_id=f"id-{m.key}", receipt_handle=m.handle,
                delivery_attempt=m.attempt, message_group=m.group,
                born_timestamp=datetime.now(timezone.utc), body_encoding=encoding,
                lite_topic=m.lite_topic,
            ),
            body=body,
        )  # fmt: skip

    async def _receive(self, stream: Stream[Any, Any]) -> None:
        written: list[str] = []  # the keys this receive wrote, while its stream is open
        self.writing.append(written)
        try:
            await self._serve_receive(stream, written)
        finally:
            self.writing.remove(written)

    async def _serve_receive(self, stream: Stream[Any, Any], written: list[str]) -> None:
        await self._take(stream)
        generation = self.generation
        req = await stream.recv_message()
        assert req is not None
        self._pool.arrived(receive=True)
        await self._pool.turn()  # (the consumer pool runs it: then the settings are read)
        if not self._has_settings(_client_id(stream)):
            # 5.5.0's ReceiveMessageActivity reads the client's settings first; the
            # client promises never to send one then (docs/grpc.md), so the checker
            # counts it (``receive_refused``: ``receives_after_settings``)
            self.history.add("receive_refused", "", why="settings is null")
            await stream.send_message(SETTINGS_IS_NULL)
            return
        index = self.receives
        self.receives += 1
        timeout = req.long_polling_timeout.total_seconds() if req.long_polling_timeout else 5.0
        deadline = self.now() + min(timeout, 5.0)
        invisible = req.invisible_duration.total_seconds() if req.invisible_duration else 30
        try:
            while not self._ready_for(stream) and self.now() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)  # (time-driven)
        except asyncio.CancelledError:  # the client cut the stream while it was parked
            self._cut_while_parked(stream, deadline, invisible, max(1, req.batch_size or 32))
            raise
        ready = self._ready_for(stream)
        batch = ready[: max(1, req.batch_size or 32)]
        if not batch:
            await stream.send_message(
                pb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.MESSAGE_NOT_FOUND))
            )
            return
        brk = next((f.args for f in self.schedule.of("stream_break")
                    if f.args["receive"] == index), None)  # fmt: skip
        await stream.send_message(pb.ReceiveMessageResponse(status=_OK))
        for n, m in enumerate(batch):
            if brk is not None and n == brk["after"]:
                break
            if self.deliveries in self._silence_at:  # the connections go silent here
                self._silence_at.discard(self.deliveries)
                self.half_open(**self.half_open_info)
            if self.generation != generation or self._silenced(stream) or self._closed(stream):
                # the connection was reset under this receive: the Proxy cannot write
                # the rest, and releases what it could not write (on a silenced one,
                # 5.5.0 would write into it and keep renewing what it wrote while the
                # client lives: no client can act on that, so it is left out)
                return
            self._hand_out(m, invisible, auto_renew=bool(req.auto_renew) and self._renews(m))
            await stream.send_message(pb.ReceiveMessageResponse(message=self._wire(m)))
            written.append(m.key)
        if brk is not None:
            if brk["how"] == "reset":
                self.drop_connections()
                await asyncio.Event().wait()
            raise GRPCError(GrpcStatus.UNAVAILABLE, "sim: stream broken")

    def _hand_out(self, m: ProxyMessage, invisible: float, *, auto_renew: bool) -> None:
        """``m`` popped for a receive: out, under a new receipt handle, until it is
        settled or (not renewed) its invisible time ends."""
        self.deliveries += 1
        m.attempt += 1
        m.state, m.handle = "inflight", f"{m.key}#{m.attempt}"
        m.auto_renew, m.visible_at = auto_renew, self.now() + invisible
        self.history.add("delivered", m.key, attempt=m.attempt, auto_renew=auto_renew)

    def _cut_while_parked(
        self, stream: Stream[Any, Any], deadline: float, invisible: float, batch: int
    ) -> None:
        """A receive the client cut while it was parked: not modelled here (5.5.0's poll
        at the broker outlives the stream, and what it pops is nacked at once, visible
        again a second later); the lite Proxy's differs (``SimLiteProxy``)."""

    def half_open(self, **info: Any) -> None:
        """Every client connection open now goes silent, open (a NAT entry evicted, a
        frozen host): the Proxy reads nothing more from them (PINGs unanswered too) and
        what it writes is lost; a new connection works. A receive writing at that
        moment writes no more (what it has not written stays visible, as on a reset);
        ``reconnected`` once a call comes on a new connection."""
        self.generation += 1
        # (with ``arrival_delay``, also those whose every call is still held)
        held: list[Any] = self._arrivals.transports()
        silenced = list(set(getattr(self, "_transports", ())) | set(held))
        for transport in silenced:
            transport.pause_reading()
            transport.write = transport.writelines = _lost
        self._silent = {id(t) for t in silenced}
        self._ever_silent |= self._silent
        self.history.add("half_open", "", broker="proxy", connections=len(silenced), **info)

    def _silenced(self, stream: Stream[Any, Any]) -> bool:
        transport = getattr(getattr(stream, "_stream", None), "_transport", None)
        return id(transport) in self._ever_silent

    def _closed(self, stream: Stream[Any, Any]) -> bool:
        """The call's connection is closed (a request read just before a reset)."""
        transport = getattr(getattr(stream, "_stream", None), "_transport", None)
        return transport is not None and bool(transport.is_closing())

    def _saw_call(self, stream: Stream[Any, Any]) -> None:
        silent = getattr(self, "_silent", None)
        transport = getattr(getattr(stream, "_stream", None), "_transport", None)
        if silent is not None and transport is not None and id(transport) not in silent:
            self._silent = None
            self.history.add("reconnected", "", broker="proxy")

    async def _admit(self, stream: Stream[Any, Any]) -> None:
        """Every call's connection (the fake's own handlers, heartbeats and Telemetry
        included, come here): ``reconnected`` on a new one after a silence."""
        self._saw_call(stream)
        base = getattr(super(), "_admit", None)
        if base is not None:
            await base(stream)
        else:  # ``_track`` before 3ce7fa0: the simulator also runs against older trees
            getattr(self, "_track")(stream)  # noqa: B009  (absent on newer fakes)

    async def _take(self, stream: Stream[Any, Any]) -> None:
        """The fake Proxy's bookkeeping of a call's connection."""
        await self._admit(stream)

    def _by_handle(self, handle: str) -> ProxyMessage | None:
        return next((m for m in self.store if m.handle == handle and m.state == "inflight"),
                    None)  # fmt: skip

    async def _ack(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        self._pool.arrived(receive=False)
        await self._pool.turn()
        index = self.ack_calls
        self.ack_calls += 1
        for f in self.schedule.of("ack_refused"):
            if index == f.args["from_ack"]:
                self._refused_until = self.now() + f.args["seconds"]
        if self.now() < self._refused_until:
            # (``until``: the checker does not count a Proxy refusing acks against them)
            self.history.add("ack_refused", "", broker="proxy", until=self._refused_until)
            raise GRPCError(GrpcStatus.UNAVAILABLE, "sim: ack refused")
        entries = []
        for entry in req.entries:
            m = self._settling(entry.receipt_handle, entry.lite_topic)
            if m is not None:
                m.state = "acked"
                self.history.add("acked", m.key)
            entries.append(pb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=_OK
            ))  # fmt: skip
        await stream.send_message(pb.AckMessageResponse(status=_OK, entries=entries))

    async def _change(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        self._pool.arrived(receive=False)
        await self._pool.turn()
        seconds = req.invisible_duration.total_seconds() if req.invisible_duration else 0.0
        m = self._settling(req.receipt_handle, req.lite_topic)
        new = f"{req.receipt_handle}+"
        if m is not None:
            m.handle, m.auto_renew, m.visible_at = new, False, self.now() + seconds
            self.history.add("released" if seconds == 0 else "renewed", m.key, seconds=seconds)
        await stream.send_message(
            pb.ChangeInvisibleDurationResponse(status=_OK, receipt_handle=new)
        )

    async def _dead_letter(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        m = self._by_handle(req.receipt_handle)
        if m is not None:
            m.state = "dlq"
            self.history.add("dead_lettered", m.key, by="client")
        await stream.send_message(pb.ForwardMessageToDeadLetterQueueResponse(status=_OK))

    async def _apply(self, kind: str, cid: str, apply: Callable[[], None]) -> None:
        if kind == "settings" and self._settings_late is not None:
            if cid in self._settings_from:  # not a start's: its timing is the run's
                self.lag[kind] = self._settings_late
            self._settings_from.add(cid)
        await super()._apply(kind, cid, apply)

    def __mapping__(self) -> dict[str, Any]:
        out = super().__mapping__()
        path, plain = next((k, v) for k, v in out.items() if k.endswith("/NotifyClientTermination"))

        async def terminated(stream: Stream[Any, Any]) -> None:
            await plain.func(stream)
            self.terminate()  # one client per phase: all it held

        out[path] = plain._replace(func=terminated)
        return out

    def _new_server(self) -> Server:
        server = super()._new_server()
        if self._arrivals:  # grpclib's server passes its factory at start: set it before
            wrapped: Any = self._arrivals.wrap(server._protocol_factory)
            server._protocol_factory = wrapped  # type: ignore[method-assign]
        return server

    async def __aenter__(self) -> SimProxy:
        await self.start()
        return self

    def drop_connections(self) -> None:
        self.generation += 1
        held = self._arrivals.transports()  # (before the fake forgets its own)
        super().drop_connections()
        for transport in held:  # a reset or a restart closes them too
            transport.close()

    def terminate(self) -> None:
        """The client said goodbye (or its connections are gone): the Proxy stops
        renewing what it held for it."""
        for m in self.store:
            if m.state == "inflight" and m.auto_renew:
                m.auto_renew, m.visible_at = False, self.now()
