"""Simulated brokers for the producer workloads: what was stored, where, exactly as
sent, and what became of each transaction (its half message, its end, the check-backs).

``SimSendBroker`` extends the POP broker (``remoting.SimPopBroker``) with the
producer's side of a 5.5.0 broker, keeping its own truth:

* every send, single or batch (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE), is stored in
  its queue at the next offset *before* the answer (``send_stored``: key, broker,
  queue, offset, message id, a CRC of the inflated body); the nemesis may answer an
  error instead (nothing stored), answer late, or close the connection after storing;
* a half message (sys flag TRANSACTION_PREPARED) is kept apart (the half topic), at
  its own offset; END_TRANSACTION must name its commit-log offset, its half offset and
  its producer group (else it is ignored, as the broker ignores a half it cannot find);
  a commit stores the message in its real queue (``txn_visible``), a rollback discards
  it (``txn_rolled_back``), UNKNOWN leaves it to the check-backs;
* a half unresolved ``TXN_TIMEOUT`` after its birth is checked back every
  ``CHECK_INTERVAL`` (CHECK_TRANSACTION_STATE, oneway, the stored half as body) on one
  live connection of a client that heartbeated its producer group; after ``CHECK_MAX``
  checks the broker discards it (``transactionCheckMax``);
* modelled simpler than 5.5.0: a half is resolved once; a second end of a resolved
  half is ignored and noted (``txn_end_late``). (5.5.0 looks up the half by offset
  without asking whether an op message already resolved it.)
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from aiorocket.producer.batch import decode_records
from aiorocket.protocol.codes import RemotingFlag, RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import (
    decode_properties,
    decompress_body,
    offset_message_id,
)
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.sim.remoting import SimCluster, SimPopBroker

if TYPE_CHECKING:
    from aiorocket.testing.fake_remoting import ServerSession
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["CHECK_INTERVAL", "CHECK_MAX", "TXN_TIMEOUT", "SimSendBroker", "SimSendCluster"]

#: virtual seconds: a half this old is checked back, every CHECK_INTERVAL, CHECK_MAX times
TXN_TIMEOUT, CHECK_INTERVAL, CHECK_MAX = 3.0, 1.0, 15
_PREPARED, _COMPRESSED = 0x4, 0x1
_COMMIT, _ROLLBACK = 8, 12


@dataclass(slots=True)
class Half:
    key: str
    topic: str
    body: bytes
    props: dict[str, str]
    queue_id: int
    offset: int
    commit_log_offset: int
    group: str
    born: float
    #: "half", "committed", "rolled_back"
    state: str = "half"
    checks: int = 0


def _key(body: bytes, props: dict[str, str]) -> str:
    return props.get("KEYS") or body.decode(errors="replace")


class SimSendBroker(SimPopBroker):
    """A broker with the producer's side (module docstring)."""

    def __init__(self, name: str, cluster: SimCluster) -> None:
        super().__init__(name, cluster)
        self.offsets: dict[int, int] = defaultdict(int)
        self.commit_log = 0
        self.halves: dict[int, Half] = {}
        #: producer group of each connection that heartbeated one
        self.producers: dict[ServerSession, str] = {}
        self.ends_lost: set[str] = set()
        #: attempts of each message (by key) seen here
        self.attempts: dict[str, int] = defaultdict(int)

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        code = cmd.code
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE,
                    RequestCode.SEND_BATCH_MESSAGE):  # fmt: skip
            resp = await self._store_send(session, cmd)
            if resp is not None:
                await session.send(resp)
        elif code == RequestCode.END_TRANSACTION:
            self._end(cmd)
            if not cmd.is_oneway:
                await session.send(RemotingCommand.response_to(cmd))
        elif code == RequestCode.HEART_BEAT:
            for p in json.loads(cmd.body or b"{}").get("producerDataSet", []):
                self.producers[session] = p["groupName"]
            await session.send(RemotingCommand.response_to(cmd))
        elif code == RequestCode.UNREGISTER_CLIENT:
            self.producers.pop(session, None)
            if not cmd.is_oneway:
                await session.send(RemotingCommand.response_to(cmd))
        else:
            await super().handle(session, cmd)

    # -- sends -----------------------------------------------------------------------

    def _faults(self, kind: str, keys: list[str]) -> list[dict[str, Any]]:
        """The faults of ``kind`` striking this attempt: those of a key it carries, on
        this broker, for the first ``count`` attempts of that key here."""
        return [f.args for f in self.cluster.schedule.of(kind)
                if f.args["broker"] == self.name and f.args["key"] in keys
                and self.attempts[f.args["key"]] <= f.args["count"]]  # fmt: skip

    async def _store_send(self, session: ServerSession,
                          cmd: RemotingCommand) -> RemotingCommand | None:  # fmt: skip
        self.cluster.sends += 1
        records = self._records(cmd)
        keys = [_key(body, p) for body, p in records]
        for k in keys:
            self.attempts[k] += 1
            if "max_rate" in self.cluster.schedule.params:  # send_rate_within_limit
                self.history.add("send_arrived", k, broker=self.name)
        for args in self._faults("send_error", keys):
            return RemotingCommand.response_to(cmd, int(args["code"]), "sim: send refused")
        for args in self._faults("broker_slow", keys):
            await anyio.sleep(float(args["seconds"]))
        ext = cmd.ext_fields
        topic = ext.get("b", ext.get("topic", ""))
        queue_id = int(ext.get("e", ext.get("queueId", "0")))
        sys_flag = int(ext.get("f", ext.get("sysFlag", "0")))
        half = bool(sys_flag & _PREPARED)
        first, ids = -1, []
        for body, p in records:
            self.commit_log += 1
            clo = self.commit_log
            if half:
                offset = len(self.halves)
                self.halves[clo] = Half(_key(body, p), topic, body, p, queue_id, offset, clo,
                                        p.get("PGROUP", ""), anyio.current_time())  # fmt: skip
            else:
                offset = self.offsets[queue_id]
                self.offsets[queue_id] += 1
            first = offset if first < 0 else first
            ids.append(offset_message_id(self.addr, clo))
            self.history.add("send_stored", _key(body, p), broker=self.name, queue=queue_id,
                             offset=offset, msg_id=p.get("UNIQ_KEY", ""),
                             crc=zlib.crc32(body), half=half)  # fmt: skip
        if self._faults("reset_after_store", keys):
            await session.close()  # stored; the answer never comes
            return None
        fields = {"msgId": ",".join(ids), "queueId": str(queue_id), "queueOffset": str(first)}
        if half:
            fields["transactionId"] = f"TX-{self.name}-{self.commit_log}"
        return RemotingCommand.response_to(cmd, ext_fields=fields)

    @staticmethod
    def _records(cmd: RemotingCommand) -> list[tuple[bytes, dict[str, str]]]:
        """(inflated body, properties) of each message the request carries."""
        ext = cmd.ext_fields
        sys_flag = int(ext.get("f", ext.get("sysFlag", "0")))
        props = decode_properties(ext.get("i", ext.get("properties", "")))
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            return [(body, {**props, **decode_properties(p)})
                    for _, body, p in decode_records(cmd.body)]  # fmt: skip
        body = decompress_body(cmd.body, sys_flag) if sys_flag & _COMPRESSED else cmd.body
        return [(body, props)]

    # -- transactions ----------------------------------------------------------------

    def _end(self, cmd: RemotingCommand) -> None:
        ext = cmd.ext_fields
        half = self.halves.get(int(ext.get("commitLogOffset", "-1")))
        from_check = ext.get("fromTransactionCheck") == "true"
        outcome = {_COMMIT: "commit", _ROLLBACK: "rollback"}.get(
            int(ext.get("commitOrRollback", "0")), "unknown")  # fmt: skip
        if half is None or str(half.offset) != ext.get("tranStateTableOffset") or \
                half.group != ext.get("producerGroup"):  # fmt: skip
            self.history.add("txn_end_unmatched", "", broker=self.name, ext=dict(ext))
            return
        lost = {f.args["key"] for f in self.cluster.schedule.of("end_lost")}
        if half.key in lost and not from_check and half.key not in self.ends_lost:
            self.ends_lost.add(half.key)  # the first end of the client is lost
            self.history.add("note", half.key, what="end_transaction lost")
            return
        self.history.add("txn_end", half.key, outcome=outcome, from_check=from_check,
                         broker=self.name)  # fmt: skip
        if half.state != "half":
            self.history.add("txn_end_late", half.key, outcome=outcome, state=half.state)
            return
        if outcome == "commit":
            half.state = "committed"
            offset = self.offsets[half.queue_id]
            self.offsets[half.queue_id] += 1
            self.history.add("txn_visible", half.key, broker=self.name, offset=offset)
        elif outcome == "rollback":
            half.state = "rolled_back"
            self.history.add("txn_rolled_back", half.key, broker=self.name)

    def unresolved(self) -> list[Half]:
        return [h for h in self.halves.values() if h.state == "half"]

    async def check_backs(self) -> None:
        """The broker's transaction check service (module docstring)."""
        early = {f.args["key"]: f.args["after"] for f in self.cluster.schedule.of("check_early")}
        while True:
            await anyio.sleep(0.2)
            now = anyio.current_time()
            for half in self.unresolved():
                after = early.pop(half.key, None)
                due = half.born + TXN_TIMEOUT + half.checks * CHECK_INTERVAL
                if after is not None:
                    due = half.born + after  # a check-back while the local transaction runs
                if now < due:
                    continue
                half.checks += 1
                if half.checks > CHECK_MAX:
                    half.state = "rolled_back"
                    self.history.add("txn_rolled_back", half.key, broker=self.name, by="broker")
                    continue
                await self._check_back(half)

    async def _check_back(self, half: Half) -> None:
        sessions = [s for s, g in self.producers.items() if g == half.group
                    and not getattr(s, "closed", False)]  # fmt: skip
        if not sessions:
            return
        session = self.cluster.rng.choice(sessions)
        props = {**half.props, "TRAN_MSG": "true"}
        body = encode_stored_message(
            half.topic, half.body, props, queue_id=half.queue_id, queue_offset=half.offset,
            commit_log_offset=half.commit_log_offset, store_host=self.addr,
            sys_flag=_PREPARED,
        )  # fmt: skip
        ext = {
            "tranStateTableOffset": str(half.offset),
            "commitLogOffset": str(half.commit_log_offset),
            "msgId": half.props.get("UNIQ_KEY", ""),
            "transactionId": f"TX-{self.name}-{half.commit_log_offset}",
            "offsetMsgId": offset_message_id(self.addr, half.commit_log_offset),
        }  # fmt: skip
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, body)
        cmd.flag = RemotingFlag.ONEWAY
        self.history.add("txn_check", half.key, broker=self.name, n=half.checks)
        await session.send(cmd)


class SimSendCluster(SimCluster):
    """``SimCluster`` of ``SimSendBroker``s, running their check-back services."""

    def __init__(self, schedule: Schedule, history: History, *, brokers: int,
                 queues: int) -> None:  # fmt: skip
        super().__init__(schedule, history, brokers=brokers, queues=queues)
        self.brokers = [SimSendBroker(b.name, self) for b in self.brokers]

    def unresolved(self) -> list[Half]:
        return [h for b in self.brokers for h in b.unresolved()]  # type: ignore[attr-defined]

    async def __aenter__(self) -> SimSendCluster:
        await super().__aenter__()
        tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tg.cancel_scope.cancel)  # runs before the group's exit
        for b in self.brokers:
            tg.start_soon(b.check_backs)  # type: ignore[attr-defined]
        return self
