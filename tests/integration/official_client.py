"""The official Python client's side of the interop test (``test_grpc_interop.py``).

Runs in its own virtual environment (rocketmq-python-client and its grpcio pins), so it
imports nothing from aiorocket. One JSON object per line on stdout:

    official_client.py produce ENDPOINT TOPIC MESSAGES_JSON   -> {"sent": message_id} per message
    official_client.py consume ENDPOINT TOPIC GROUP COUNT     -> {"ready": true}, then one
        {"body", "tag", "keys", "properties"} per message received (body hex), then exits
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def produce(endpoint: str, topic: str, messages: str) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    for spec in json.loads(messages):
        msg = Message()
        msg.topic = topic
        msg.body = bytes.fromhex(spec["body"])
        msg.tag = spec["tag"]
        for key in spec["keys"]:
            msg.keys = key  # its setter adds one key to the set
        for key, value in spec["properties"].items():
            msg.add_property(key, value)
        emit({"sent": producer.send(msg).message_id})
    producer.shutdown()


class Printer(MessageListener):  # type: ignore[misc]
    def __init__(self, count: int) -> None:
        self.count = count
        self.lock = threading.Lock()
        self.done = threading.Event()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            emit({
                "body": bytes(message.body).hex(), "tag": message.tag,
                "keys": sorted(message.keys or []), "properties": dict(message.properties),
            })  # fmt: skip
            self.count -= 1
            if self.count <= 0:
                self.done.set()
        return ConsumeResult.SUCCESS


def consume(endpoint: str, topic: str, group: str, count: str) -> None:
    listener = Printer(int(count))
    config = ClientConfiguration(endpoint, Credentials())
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression()})
    consumer.startup()
    emit({"ready": True})
    listener.done.wait(120)
    os._exit(0)  # its shutdown waits for receives in flight; nothing is left to ack


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"produce": produce, "consume": consume}[command](*args)
