"""benchmarks/_replay.py (the ceiling benchmark's server): its pre-encoded pull answers
decode as the real records a consumer expects, at the offsets it asked for."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import decode_messages

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_replay", BENCH / "_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_replay"] = module
    spec.loader.exec_module(module)
    return module


replay_mod = _load()


def _pull(queue_id: int, offset: int, n: int) -> RemotingCommand:
    ext = {"topic": "t", "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(n), "consumerGroup": "g", "suspendTimeoutMillis": "1000"}  # fmt: skip
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext)


def test_pull_answers_are_real_records_at_the_asked_offsets() -> None:
    replay = replay_mod.Replay("t", per_queue=100, queues=4, size=1024, max_batch=64)
    resp = replay.answer(_pull(3, 40, 32))
    assert resp is not None and resp.code == ResponseCode.SUCCESS
    msgs = decode_messages(resp.body, check_crc=True)
    assert [m.queue_offset for m in msgs] == list(range(40, 72))
    assert {m.queue_id for m in msgs} == {3} and {m.topic for m in msgs} == {"t"}
    assert all(len(m.body) == 1024 for m in msgs)
    assert len({m.commit_log_offset for m in msgs}) == 32
    assert resp.ext_fields["nextBeginOffset"] == "72"


def test_the_end_of_a_queue_is_short_then_held() -> None:
    replay = replay_mod.Replay("t", per_queue=100, queues=1, size=16, max_batch=64)
    resp = replay.answer(_pull(0, 90, 32))
    assert resp is not None
    assert [m.queue_offset for m in decode_messages(resp.body)] == list(range(90, 100))
    assert replay.answer(_pull(0, 100, 32)) is None  # held as a long poll


def test_start_up_requests_are_answered() -> None:
    replay = replay_mod.Replay("t", per_queue=10, queues=2, size=16)
    replay.addr = "127.0.0.1:1"
    route = replay.answer(
        RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "t"})
    )
    assert route is not None and json.loads(route.body)["queueDatas"][0]["readQueueNums"] == 2
    other = replay.answer(
        RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "x"})
    )
    assert other is not None and other.code == ResponseCode.TOPIC_NOT_EXIST
    hb = {"clientID": "c1", "consumerDataSet": [{"groupName": "g"}]}
    replay.answer(RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(hb).encode()))
    ask = {"consumerGroup": "g"}
    members = replay.answer(
        RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields=ask)
    )
    assert members is not None and json.loads(members.body) == {"consumerIdList": ["c1"]}
