"""Simulated brokers for the request-reply workload (issue 44): the requester's side of
a 5.5.0 broker's ReplyMessageProcessor, with its own truth.

``SimReplyBroker`` extends the producer's broker (``producer_broker.SimSendBroker``):

* a request (a message carrying ``CORRELATION_ID`` / ``REPLY_TO_CLIENT`` / ``TTL``) is
  stored as any send, the broker adding ``CLUSTER`` (``request_stored``: key, its
  correlation id, the requester's client id), then handed to the replier (the run's
  consumer) decoded from its stored record through the project's codec; the nemesis
  may answer a request's first attempts with an error instead (nothing stored);
* a reply (SEND_REPLY_MESSAGE_V2, to ``sim_REPLY_TOPIC``) is pushed
  (PUSH_REPLY_MESSAGE_TO_CLIENT) on the connection the client id in its
  ``REPLY_TO_CLIENT`` heartbeated on (``reply_pushed``), or answered SYSTEM_ERROR when
  no such connection is open (as 5.5.0 answers "channel not found"); the nemesis may
  lose the push, delay it (past the request's timeout), push it twice, or push a stray
  reply whose correlation id no request has;
* modelled simpler than 5.5.0: the reply is not stored in the reply topic (nothing here
  consumes it), and the push is not awaited (the broker's push is a sync call with a
  timeout of its own; its outcome does not change the replier's answer here).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import decode_messages, encode_properties
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.sim.compat import (
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_REPLY_TO_CLIENT,
)
from aiorocket.testing.sim.producer_broker import SimSendBroker, SimSendCluster
from aiorocket.testing.sim.remoting import TOPIC
from aiorocket.testing.sim.servers import send_route

if TYPE_CHECKING:
    from aiorocket.testing.fake_remoting import ServerSession
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["CLUSTER", "REPLY_TOPIC", "SimReplyBroker", "SimReplyCluster"]

#: the simulated cluster's name (servers.send_route's) and so its reply topic
CLUSTER = "sim"
REPLY_TOPIC = f"{CLUSTER}_REPLY_TOPIC"


def _request_index(key: str) -> int:
    return int(key.rsplit("-", 1)[1]) if key.startswith("q-") else -1


class SimReplyBroker(SimSendBroker):
    """A broker with the request-reply side (module docstring)."""

    cluster: SimReplyCluster

    def __init__(self, name: str, cluster: SimReplyCluster) -> None:
        super().__init__(name, cluster)
        #: the connection each client id heartbeats on
        self.clients: dict[str, ServerSession] = {}

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:  # the client's answer to a push
            return
        code = cmd.code
        if code == RequestCode.HEART_BEAT:
            client_id = json.loads(cmd.body or b"{}").get("clientID")
            if client_id:
                self.clients[client_id] = session
        elif code == RequestCode.SEND_REPLY_MESSAGE_V2:
            await session.send(await self._reply(cmd))
            return
        await super().handle(session, cmd)

    async def _store_send(self, session: ServerSession,
                          cmd: RemotingCommand) -> RemotingCommand | None:  # fmt: skip
        records = self._records(cmd)
        key = records[0][1].get("KEYS") or records[0][0].decode(errors="replace")
        index = _request_index(key)
        for f in self.cluster.schedule.of("request_error"):
            if f.args["request"] == index and self.attempts[key] < f.args["count"]:
                self.attempts[key] += 1
                self.history.add("request_refused", key, broker=self.name)
                return RemotingCommand.response_to(cmd, int(f.args["code"]), "sim: refused")
        resp = await super()._store_send(session, cmd)
        props = records[0][1]
        if resp is not None and resp.code == ResponseCode.SUCCESS and \
                PROPERTY_CORRELATION_ID in props:  # fmt: skip
            props = {**props, PROPERTY_CLUSTER: CLUSTER}
            self.history.add("request_stored", key, broker=self.name,
                             correlation=props[PROPERTY_CORRELATION_ID],
                             client=props.get(PROPERTY_REPLY_TO_CLIENT, ""))  # fmt: skip
            record = encode_stored_message(TOPIC, records[0][0], props, store_host=self.addr,
                                           queue_id=int(resp.ext_fields["queueId"]),
                                           queue_offset=int(resp.ext_fields["queueOffset"]),
                                           commit_log_offset=self.commit_log)  # fmt: skip
            msg = decode_messages(record, broker_name=self.name)[0]
            self.cluster.to_replier.send_nowait(msg)
        return resp

    async def _reply(self, cmd: RemotingCommand) -> RemotingCommand:
        (body, props), = self._records(cmd)
        correlation = props.get(PROPERTY_CORRELATION_ID, "")
        client = props.get(PROPERTY_REPLY_TO_CLIENT, "")
        session = self.clients.get(client)
        if session is None or getattr(session, "closed", False):
            return RemotingCommand.response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"push reply message fail, channel of {client} "
                "not found")  # fmt: skip
        key = body.decode(errors="replace").removeprefix("reply:")
        faults = {f.kind: f.args for f in self.cluster.schedule.faults
                  if f.args.get("request") == _request_index(key)}  # fmt: skip
        if "reply_lost" in faults:
            self.history.add("reply_lost", key, correlation=correlation)
        else:
            delay = float(faults.get("reply_delay", {}).get("seconds", 0.0))
            times = 2 if "reply_twice" in faults else 1
            self.cluster.tg.start_soon(
                self._push, session, cmd, key, correlation, delay, times)
        return RemotingCommand.response_to(cmd, ext_fields={"msgId": "", "queueId": "0",
                                                            "queueOffset": "0"})  # fmt: skip

    async def _push(self, session: ServerSession, cmd: RemotingCommand, key: str,
                    correlation: str, delay: float, times: int) -> None:  # fmt: skip
        await anyio.sleep(delay)
        ext = cmd.ext_fields
        fields = {"producerGroup": ext.get("a", ""), "topic": ext.get("b", REPLY_TOPIC),
                  "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "0",
                  "sysFlag": ext.get("f", "0"), "bornTimestamp": ext.get("g", "0"),
                  "flag": ext.get("h", "0"), "properties": ext.get("i", ""),
                  "reconsumeTimes": "0", "unitMode": "false", "bornHost": "127.0.0.1:1",
                  "storeHost": self.addr, "storeTimestamp": str(int(anyio.current_time() * 1000))}
        for _ in range(times):
            self.history.add("reply_pushed", key, correlation=correlation, broker=self.name)
            await session.send(RemotingCommand.request(
                RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, dict(fields), cmd.body))  # fmt: skip

    async def push_stray(self, client: str) -> None:
        """A reply no request waits for (a correlation id nobody made)."""
        session = self.clients.get(client)
        if session is None:
            return
        props = {PROPERTY_CORRELATION_ID: "stray-0", PROPERTY_REPLY_TO_CLIENT: client,
                 "MSG_TYPE": "reply"}  # fmt: skip
        self.history.add("reply_pushed", "stray", correlation="stray-0", broker=self.name)
        fields = {"topic": REPLY_TOPIC, "queueId": "0", "sysFlag": "0",
                  "properties": encode_properties(props), "storeHost": self.addr}  # fmt: skip
        await session.send(RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, fields, b"reply:stray"))  # fmt: skip


class SimReplyCluster(SimSendCluster):
    """``SimSendCluster`` of ``SimReplyBroker``s, routing the reply topic too; the
    requests it stored go to ``from_brokers`` (the replier's receive stream)."""

    brokers: list[SimReplyBroker]  # type: ignore[assignment]

    def __init__(self, schedule: Schedule, history: History, *, brokers: int,
                 queues: int) -> None:  # fmt: skip
        super().__init__(schedule, history, brokers=brokers, queues=queues)
        self.brokers = [SimReplyBroker(b.name, self) for b in self.brokers]
        self.to_replier, self.from_brokers = anyio.create_memory_object_stream[Any](1000)

    async def _route(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("topic", "") == REPLY_TOPIC:
            await send_route(session, cmd, self.brokers, 1)
            return
        await super()._route(session, cmd)

    async def __aenter__(self) -> SimReplyCluster:
        await super().__aenter__()
        self.tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(self.tg.cancel_scope.cancel)
        return self
