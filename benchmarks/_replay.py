"""A replay server for ceiling.py: NameServer and broker in one loopback process.

It answers what a consumer asks at start (route, heartbeat, member list, offsets) and
answers every pull at once with a pre-encoded batch of real store records (1 KiB bodies
by default), so that the consumer, not the broker, is the limit. Only the queue offsets
of the pre-encoded records are patched per answer. Each queue holds ``per_queue``
messages; a pull past the end is held for its long-poll time and answered
PULL_NOT_FOUND, as a broker does.

POP over remoting (``consume_mode="pop"``) is answered the same way: a pop takes the
next messages of the queue with the most left (check point fields as a 5.x broker gives
them), one with nothing left is held for its ``pollTime`` and answered POLLING_TIMEOUT;
acks, batch acks and renewals are answered SUCCESS (the replay keeps no invisibility:
nothing comes back, each message is popped once).

    python benchmarks/_replay.py TOPIC PER_QUEUE [--queues 8] [--size 1024] [--cpu 0]

prints ``PORT <n>`` once listening, then serves until killed (or stdin closes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import sys

from aiorocket.client.pop import (
    ACK_MESSAGE,
    BATCH_ACK_MESSAGE,
    CHANGE_MESSAGE_INVISIBLETIME,
    POP_MESSAGE,
)
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import FrameDecoder, encode_header
from aiorocket.protocol.store_record import encode_stored_message

BROKER = "replay-broker"
_OFFSETS = struct.Struct(">qq")  # queue offset, commit-log offset
_OFFSETS_AT = 20  # after total size, magic, body CRC, queue id, flag
_POLLING_TIMEOUT = 210  # a long-polling pop that found nothing


class Replay:
    """What the server knows: the topic, its queues and the groups' offsets and members.

    Parameters
    ----------
    topic:
        The only topic with a route; others are TOPIC_NOT_EXIST (as the retry topic
        of a fresh group is on a broker with auto-create off).
    per_queue:
        Messages in each queue.
    queues:
        Read/write queues of the topic.
    size:
        Body bytes of every message.
    max_batch:
        The largest pull answered in one batch (RocketMQ's default cap is 32; the
        consumer's ``pull_batch_size`` goes up to 1024).
    """

    def __init__(
        self, topic: str, per_queue: int, queues: int, size: int, max_batch: int = 1024
    ) -> None:
        self.topic = topic
        self.per_queue = per_queue
        self.queues = queues
        self.addr = ""
        self.members: dict[str, set[str]] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.pulls = 0
        self.popped = [0] * queues  # the next offset a pop takes, per queue
        self.pop_time = 0
        self.acks = 0
        body = os.urandom(size)
        self.templates: list[bytes] = []
        self.record_len = 0
        for q in range(queues):
            one = encode_stored_message(topic, body, {"KEYS": "k", "TAGS": "t"}, queue_id=q)
            self.record_len = len(one)
            self.templates.append(one * max_batch)

    def route(self) -> bytes:
        return json.dumps({
            "queueDatas": [{"brokerName": BROKER, "readQueueNums": self.queues,
                            "writeQueueNums": self.queues, "perm": 6}],
            "brokerDatas": [{"cluster": "replay", "brokerName": BROKER,
                             "brokerAddrs": {"0": self.addr}}],
        }).encode()  # fmt: skip

    def answer(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """The response to ``cmd``; None for a pull held until its long-poll time."""
        code, ext = cmd.code, cmd.ext_fields
        resp = RemotingCommand.response_to(cmd)
        if code == RequestCode.PULL_MESSAGE:
            return self.pull(cmd)
        if code == POP_MESSAGE:
            return self.pop(cmd)
        if code in (ACK_MESSAGE, BATCH_ACK_MESSAGE):
            self.acks += 1
            return resp
        if code == CHANGE_MESSAGE_INVISIBLETIME:
            self.pop_time += 1
            resp.ext_fields = {"popTime": str(self.pop_time), "reviveQid": "0",
                               "invisibleTime": ext["invisibleTime"]}  # fmt: skip
            return resp
        if code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            resp.body = json.dumps({"groupName": ext["group"], "retryMaxTimes": 16}).encode()
            return resp
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            if ext.get("topic") == self.topic:
                resp.body = self.route()
            else:
                resp.code, resp.remark = ResponseCode.TOPIC_NOT_EXIST, "no such topic"
        elif code == RequestCode.HEART_BEAT:
            hb = json.loads(cmd.body)
            for data in hb.get("consumerDataSet", []):
                self.members.setdefault(data["groupName"], set()).add(hb["clientID"])
        elif code == RequestCode.UNREGISTER_CLIENT:
            self.members.get(ext.get("consumerGroup", ""), set()).discard(ext["clientID"])
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted(self.members.get(ext["consumerGroup"], ()))
            resp.body = json.dumps({"consumerIdList": ids}).encode()
        elif code == RequestCode.QUERY_CONSUMER_OFFSET:
            key = (ext["consumerGroup"], ext["topic"], int(ext["queueId"]))
            if key in self.offsets:
                resp.ext_fields = {"offset": str(self.offsets[key])}
            else:
                resp.code = ResponseCode.QUERY_NOT_FOUND
        elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
            key = (ext["consumerGroup"], ext["topic"], int(ext["queueId"]))
            self.offsets[key] = int(ext["commitOffset"])
        elif code in (RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            resp.ext_fields = {"offset": "0"}
        elif code == RequestCode.GET_MAX_OFFSET:
            resp.ext_fields = {"offset": str(self.per_queue)}
        else:
            resp.code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        return resp

    def pull(self, cmd: RemotingCommand) -> RemotingCommand | None:
        self.pulls += 1
        ext = cmd.ext_fields
        queue_id, offset = int(ext["queueId"]), int(ext["queueOffset"])
        n = min(int(ext["maxMsgNums"]), self.per_queue - offset)
        fields = {
            "nextBeginOffset": str(offset + max(n, 0)),
            "minOffset": "0",
            "maxOffset": str(self.per_queue),
            "suggestWhichBrokerId": "0",
        }
        if n <= 0:
            return None
        body = self.records(queue_id, offset, n)
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=body)

    def records(self, queue_id: int, offset: int, n: int) -> bytes:
        size = self.record_len
        body = bytearray(memoryview(self.templates[queue_id])[: n * size])
        base = queue_id * self.per_queue * size
        for i in range(n):  # the records' own offsets: what the consumer commits
            _OFFSETS.pack_into(body, i * size + _OFFSETS_AT, offset + i, base + (offset + i) * size)
        return bytes(body)

    def pop(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """The next messages of the queue with the most left; None when none is left."""
        self.pulls += 1
        ext = cmd.ext_fields
        queue_id = int(ext["queueId"])
        if queue_id < 0:
            queue_id = min(range(self.queues), key=self.popped.__getitem__)
        offset = self.popped[queue_id]
        n = min(int(ext["maxMsgNums"]), self.per_queue - offset)
        if n <= 0:
            return None
        self.popped[queue_id] += n
        self.pop_time += 1
        offsets = ",".join(str(offset + i) for i in range(n))
        fields = {
            "popTime": str(self.pop_time), "invisibleTime": ext["invisibleTime"],
            "reviveQid": "0", "restNum": str(sum(self.per_queue - p for p in self.popped)),
            "startOffsetInfo": f"0 {queue_id} {offset}",
            "msgOffsetInfo": f"0 {queue_id} {offsets}",
        }  # fmt: skip
        body = self.records(queue_id, offset, n)
        return RemotingCommand.response_to(cmd, ext_fields=fields, body=body)


def frame(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    header = encode_header(cmd)
    return struct.pack(">ii", 4 + len(header) + len(cmd.body), len(header)) + header, cmd.body


class Connection(asyncio.Protocol):
    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.held: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        for handle in self.held:
            handle.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            if cmd.is_response:
                continue
            resp = self.replay.answer(cmd)
            if resp is None:  # nothing left in the queue: hold the long poll
                ext = cmd.ext_fields
                delay = int(ext.get("suspendTimeoutMillis", ext.get("pollTime", "1000"))) / 1000
                loop = asyncio.get_running_loop()
                self.held.append(loop.call_later(delay, self.not_found, cmd))
            elif not cmd.is_oneway:
                self.write(resp)

    def not_found(self, cmd: RemotingCommand) -> None:
        if cmd.code == POP_MESSAGE:
            self.write(RemotingCommand.response_to(cmd, _POLLING_TIMEOUT))
            return
        ext = cmd.ext_fields
        fields = {"nextBeginOffset": ext["queueOffset"], "minOffset": "0",
                  "maxOffset": str(self.replay.per_queue)}  # fmt: skip
        self.write(RemotingCommand.response_to(cmd, ResponseCode.PULL_NOT_FOUND, ext_fields=fields))

    def write(self, resp: RemotingCommand) -> None:
        if self.transport is not None:
            self.transport.writelines(frame(resp))


async def serve(replay: Replay) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(replay), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    replay.addr = f"127.0.0.1:{port}"
    print(f"PORT {port}", flush=True)
    # stdin closing (the parent died or closed it) ends the server
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    server.close()
    print(f"PULLS {replay.pulls}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("topic")
    p.add_argument("per_queue", type=int)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU (Linux)")
    a = p.parse_args()
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    asyncio.run(serve(Replay(a.topic, a.per_queue, a.queues, a.size)))


if __name__ == "__main__":
    main()
