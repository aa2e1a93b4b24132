"""The JSON dialect of the Java broker's admin bodies (fastjson), read and written.

The broker serialises maps keyed by objects as objects with object keys
(``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}}``) and maps keyed
by numbers with bare number keys (``{"brokerAddrs":{0:"127.0.0.1:10911"}}``); neither is
JSON that ``json.loads`` accepts. ``loads`` reads both (an object key becomes a
``FrozenKey``); ``dumps_queue_map`` writes a MessageQueue-keyed map the way the
Java tools expect to read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiorocket.errors import ProtocolError
from aiorocket.message import MessageQueue

__all__ = ["FrozenKey", "dumps_queue_map", "dumps_with", "loads", "queue_json", "queue_of"]

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


class FrozenKey(tuple[tuple[str, Any], ...]):
    """An object used as a map key: its items, sorted, hashable."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenKey(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        self.pos = pos

    def expect(self, char: str) -> None:
        self.skip()
        if not self.text.startswith(char, self.pos):
            raise ValueError(f"expected {char!r} at {self.pos}")
        self.pos += 1

    def value(self) -> Any:
        self.skip()
        char = self.text[self.pos : self.pos + 1]
        if char == "{":
            return self.obj()
        if char == "[":
            return self.array()
        value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        return value

    def obj(self) -> dict[Any, Any]:
        self.expect("{")
        out: dict[Any, Any] = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            key = _freeze(self.value())  # a string, a bare number or an object
            self.expect(":")
            out[key] = self.value()
            self.skip()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "}":
                return out
            if char != ",":
                raise ValueError(f"expected ',' or '}}' at {self.pos - 1}")

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "]":
                return out
            if char != ",":
                raise ValueError(f"expected ',' or ']' at {self.pos - 1}")


def loads(body: bytes | str, what: str = "body") -> Any:
    """Parse a broker body; [`ProtocolError`][aiorocket.errors.ProtocolError] if it is malformed."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text)  # the common case: plain JSON
    except (ValueError, RecursionError):
        pass
    reader = _Reader(text)
    try:
        value = reader.value()
        reader.skip()
        if reader.pos != len(text):
            raise ValueError(f"trailing data at {reader.pos}")
    except (ValueError, IndexError, TypeError, RecursionError) as exc:
        # TypeError: an object key whose own keys mix types (they are sorted);
        # RecursionError: nesting deeper than the interpreter's stack.
        raise ProtocolError(f"{what} is malformed: {exc!r}") from None
    return value


def queue_of(key: Any) -> MessageQueue:
    """The MessageQueue of a (frozen or plain) ``{topic, brokerName, queueId}`` key."""
    fields = key.as_dict() if isinstance(key, FrozenKey) else key
    if isinstance(fields, str):  # a map written with string keys holding JSON
        fields = json.loads(fields)
    try:
        return MessageQueue(str(fields["topic"]), str(fields["brokerName"]), int(fields["queueId"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"message queue key {key!r} is malformed: {exc!r}") from None


def queue_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def dumps_queue_map(items: Iterable[tuple[MessageQueue, Any]]) -> str:
    """``{{queue}:value,...}``: a MessageQueue-keyed map as fastjson writes (and reads) it."""
    return "{" + ",".join(f"{_dump(queue_json(mq))}:{_dump(v)}" for mq, v in items) + "}"


def dumps_with(fields: Mapping[str, Any], raw: Mapping[str, str]) -> str:
    """A JSON object of ``fields`` plus ``raw`` members whose values are already encoded."""
    parts = [f"{_dump(k)}:{_dump(v)}" for k, v in fields.items()]
    parts += [f"{_dump(k)}:{v}" for k, v in raw.items()]
    return "{" + ",".join(parts) + "}"
