"""The simulated Proxy's producer side: sends stored as the truth, half messages, their
ends and the orphaned-transaction recovery, across Proxy restarts.

``SimProducerProxy`` extends ``proxy.SimProxy`` (the consumer side). What it models of
5.5.0 and says so:

* SendMessage stores each message before it answers (``send_stored``: key, offset, message
  id, a CRC of the body), one entry per message; FIFO messages (a message group) in the
  group's queue; offsets are the Proxy's own sequence (the client is told no queue);
* a half message (message type TRANSACTION) is kept apart; EndTransaction names it by
  transaction id; a commit makes it visible (``txn_visible``), a rollback discards it;
* a half unresolved ``TXN_TIMEOUT`` after its birth is recovered every
  ``CHECK_INTERVAL``: a RecoverOrphanedTransactionCommand on the Telemetry stream of a
  client that published settings, at most ``CHECK_MAX`` times, then discarded;
* a restart (``restart``) ends every stream and connection and forgets every client's
  settings; what the brokers hold (messages, halves) stays.

The nemesis makes sends slow or refused (TOO_MANY_REQUESTS, retriable) per message key.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.sim.producer_proxy (the simulated Proxy)"):
    from grpclib.const import Cardinality, Handler

from aiorocket.grpc import _pb as pb
from aiorocket.testing.sim.proxy import SimProxy

if TYPE_CHECKING:
    from grpclib.server import Stream

    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["CHECK_INTERVAL", "CHECK_MAX", "TXN_TIMEOUT", "SimProducerProxy"]

#: seconds (real: the gRPC runs are on asyncio): recovery of a half this old, every
#: CHECK_INTERVAL, CHECK_MAX times
TXN_TIMEOUT, CHECK_INTERVAL, CHECK_MAX = 1.0, 0.5, 15
_PATH = "/apache.rocketmq.v2.MessagingService/"
_OK = pb.Status(code=pb.Code.OK, message="OK")


@dataclass(slots=True)
class ProxyHalf:
    key: str
    message: pb.Message
    txn_id: str
    born: float
    state: str = "half"
    checks: int = 0


@dataclass(slots=True)
class _Clients:
    #: Telemetry streams of clients that published settings
    streams: list[Any] = field(default_factory=list)


def _key(m: pb.Message) -> str:
    keys = m.system_properties.keys
    return keys[0] if keys else bytes(m.body).decode(errors="replace")


class SimProducerProxy(SimProxy):
    """The simulated Proxy with its producer side (module docstring)."""

    def __init__(self, schedule: Schedule, history: History) -> None:
        super().__init__(schedule, history)
        self.offset = 0
        self.halves: dict[str, ProxyHalf] = {}
        self.attempts: dict[str, int] = defaultdict(int)
        self.ends_lost: set[str] = set()
        self.clients = _Clients()
        #: send requests stored so far, and the half-open faults still to come by the
        #: request they strike before (its answer is lost, the message stored)
        self.send_calls = 0
        self._silence_at_send = {f.args["sent"] for f in schedule.of("half_open")
                                 if "sent" in f.args}  # fmt: skip

    def __mapping__(self) -> dict[str, Handler]:
        out = super().__mapping__()
        out[_PATH + "EndTransaction"] = Handler(
            self._end, Cardinality.UNARY_UNARY, pb.EndTransactionRequest,
            pb.EndTransactionResponse,
        )  # fmt: skip
        return out

    # -- sends -----------------------------------------------------------------------

    def _faults(self, kind: str, key: str) -> list[dict[str, Any]]:
        return [f.args for f in self.schedule.of(kind)
                if f.args["key"] == key and self.attempts[key] <= f.args["count"]]  # fmt: skip

    async def _send(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        keys = [_key(m) for m in req.messages]
        for k in keys:
            self.attempts[k] += 1
        if any(self._faults("send_refused", k) for k in keys):
            await stream.send_message(pb.SendMessageResponse(status=pb.Status(
                code=pb.Code.TOO_MANY_REQUESTS, message="sim: too many requests")))  # fmt: skip
            return
        for k in keys:
            for args in self._faults("proxy_slow", k):
                await asyncio.sleep(args["seconds"])
        if self.send_calls in self._silence_at_send:  # silent: stored, answer lost
            self._silence_at_send.discard(self.send_calls)
            self.half_open(**self.half_open_info)
        self.send_calls += 1
        entries = []
        for m, key in zip(req.messages, keys, strict=True):
            half = m.system_properties.message_type == pb.MessageType.TRANSACTION
            self.offset += 1
            txn_id = ""
            if half:
                txn_id = f"TX-{self.offset}"
                self.halves[txn_id] = ProxyHalf(key, m, txn_id, self.now())
            self.history.add("send_stored", key, broker="", queue=-1, offset=self.offset,
                             msg_id=m.system_properties.message_id,
                             crc=zlib.crc32(bytes(m.body)), half=half,
                             group=m.system_properties.message_group)  # fmt: skip
            entries.append(pb.SendResultEntry(status=_OK, message_id=m.system_properties.message_id,
                                              transaction_id=txn_id, offset=self.offset))
        await stream.send_message(pb.SendMessageResponse(status=_OK, entries=entries))

    # -- transactions ----------------------------------------------------------------

    async def _end(self, stream: Stream[Any, Any]) -> None:
        await self._take(stream)
        req = await stream.recv_message()
        assert req is not None
        half = self.halves.get(req.transaction_id)
        from_check = req.source == pb.TransactionSource.SOURCE_SERVER_CHECK
        outcome = {pb.TransactionResolution.COMMIT: "commit",
                   pb.TransactionResolution.ROLLBACK: "rollback"}.get(req.resolution, "unknown")
        if half is None:
            self.history.add("txn_end_unmatched", "", txn_id=req.transaction_id)
        elif half.key in {f.args["key"] for f in self.schedule.of("end_lost")} and \
                not from_check and half.key not in self.ends_lost:  # fmt: skip
            # the Proxy answered, its oneway end to the broker was lost
            self.ends_lost.add(half.key)
            self.history.add("note", half.key, what="end_transaction lost")
        else:
            self.history.add("txn_end", half.key, outcome=outcome, from_check=from_check)
            if half.state != "half":
                self.history.add("txn_end_late", half.key, outcome=outcome, state=half.state)
            elif outcome == "commit":
                half.state = "committed"
                self.history.add("txn_visible", half.key)
            elif outcome == "rollback":
                half.state = "rolled_back"
                self.history.add("txn_rolled_back", half.key)
        await stream.send_message(pb.EndTransactionResponse(status=_OK))

    def unresolved(self) -> list[ProxyHalf]:
        return [h for h in self.halves.values() if h.state == "half"]

    async def _telemetry(self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand]) -> None:
        self.clients.streams.append(stream)
        try:
            await super()._telemetry(stream)
        finally:
            if stream in self.clients.streams:
                self.clients.streams.remove(stream)

    async def recover(self) -> None:
        """The orphaned-transaction recovery (module docstring), until cancelled."""
        while True:
            await asyncio.sleep(0.1)
            now = self.now()
            for half in self.unresolved():
                if now < half.born + TXN_TIMEOUT + half.checks * CHECK_INTERVAL:
                    continue
                half.checks += 1
                if half.checks > CHECK_MAX:
                    half.state = "rolled_back"
                    self.history.add("txn_rolled_back", half.key, by="broker")
                    continue
                # not on a silenced connection's stream: 5.5.0 keeps one Telemetry
                # observer per client id, the newest (a reconnected client's)
                streams = [st for st in self.clients.streams if not self._silenced(st)]
                if not streams:
                    continue
                self.history.add("txn_check", half.key, n=half.checks)
                cmd = pb.TelemetryCommand(recover_orphaned_transaction_command=(
                    pb.RecoverOrphanedTransactionCommand(message=half.message,
                                                         transaction_id=half.txn_id)))  # fmt: skip
                try:
                    await streams[0].send_message(cmd)
                except Exception as exc:  # the stream ended meanwhile: asked again later
                    self.history.add("note", half.key, what="recovery not sent", error=repr(exc))

    async def stop(self) -> None:
        self.clients.streams.clear()
        await super().stop()

    async def restart_after(self, down: float) -> None:
        """Go away (every stream, connection and client's settings) and come back on
        the same port ``down`` seconds later; what the brokers hold stays."""
        await self.stop()
        await asyncio.sleep(down)
        await self.start()
