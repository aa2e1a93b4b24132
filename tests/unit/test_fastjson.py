"""The broker's JSON dialect: object and bare-number map keys, read and written."""

from __future__ import annotations

import pytest

from aiorocket.errors import ProtocolError
from aiorocket.message import MessageQueue
from aiorocket.protocol import fastjson


def test_object_keys_and_number_keys_parse() -> None:
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"t"}:{"maxOffset":2},'
        b'{"brokerName":"broker-b","queueId":0,"topic":"t"}:{"maxOffset":0}},"tps":0.0,'
        b'"brokerAddrs":{0:"127.0.0.1:10911", 1 : "x"},"list":[1,{"a":[]}],"e":{}}'
    )
    obj = fastjson.loads(body)
    queues = {fastjson.queue_of(k): v["maxOffset"] for k, v in obj["offsetTable"].items()}
    assert queues == {MessageQueue("t", "broker-a", 1): 2, MessageQueue("t", "broker-b", 0): 0}
    assert obj["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "x"}
    assert obj["list"] == [1, {"a": []}] and obj["e"] == {}


def test_written_queue_maps_read_back() -> None:
    mqs = [MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)]
    text = fastjson.dumps_with({"a": 1}, {"mq": fastjson.dumps_queue_map((m, 5) for m in mqs)})
    obj = fastjson.loads(text)
    assert obj["a"] == 1
    assert {fastjson.queue_of(k): v for k, v in obj["mq"].items()} == dict.fromkeys(mqs, 5)


@pytest.mark.parametrize("bad", [b'{"a":1', b'{{"a":1}}', b'{"a":1} x', b"[1,,2]"])
def test_malformed_bodies_raise_protocol_error(bad: bytes) -> None:
    with pytest.raises(ProtocolError):
        fastjson.loads(bad)
