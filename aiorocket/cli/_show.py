"""How a stored message is shown: one JSON document, a block of fields, or one line.

What an operator reads: the ids, queue and offset, tags and keys, the application's
properties apart from the ones clients and brokers set, the times, the reconsume count,
and the body as text (hex when it is not UTF-8 text, or as asked).
"""

from __future__ import annotations

import base64
from typing import Any

from aiorocket.cli._common import ms_text
from aiorocket.message import MessageExt, is_system_property

BODY_FORMATS = ["text", "hex", "base64"]


def body_shown(body: bytes, body_format: str) -> tuple[str, str]:
    """``(text, encoding)``: the body in ``body_format``; ``text`` falls back to hex for
    bytes that are not printable UTF-8."""
    if body_format == "base64":
        return base64.b64encode(body).decode(), "base64"
    if body_format == "text":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return body.hex(), "hex"
        if all(c.isprintable() or c in "\t\r\n" for c in text):
            return text, "text"
    return body.hex(), "hex"


def split_properties(msg: MessageExt) -> tuple[dict[str, str], dict[str, str]]:
    """(the application's properties, the system ones), each sorted by name."""
    user: dict[str, str] = {}
    system: dict[str, str] = {}
    for k, v in sorted(msg.properties.items()):
        (system if is_system_property(k) else user)[k] = v
    return user, system


def message_json(msg: MessageExt, body_format: str = "text") -> dict[str, Any]:
    user, system = split_properties(msg)
    body, encoding = body_shown(msg.body, body_format)
    return {
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "topic": msg.topic,
        "broker": msg.broker_name,
        "queue": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "born_time": ms_text(msg.born_timestamp),
        "born_ms": msg.born_timestamp,
        "born_host": msg.born_host,
        "store_time": ms_text(msg.store_timestamp),
        "store_ms": msg.store_timestamp,
        "store_host": msg.store_host,
        "reconsume_times": msg.reconsume_times,
        "properties": user,
        "system_properties": system,
        "body_size": len(msg.body),
        "body_encoding": encoding,
        "body": body,
    }


def _pairs(props: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in props.items()) or "-"


def message_block(msg: MessageExt, body_format: str) -> list[tuple[str, str]]:
    """The fields of ``message get``, one (label, value) per line."""
    doc = message_json(msg, body_format)
    body_label = f"body ({doc['body_size']} B, {doc['body_encoding']})"
    return [
        ("msg id", doc["msg_id"]),
        ("offset msg id", doc["offset_msg_id"]),
        ("topic", doc["topic"]),
        ("queue", f"{doc['broker']}:{doc['queue']} offset {doc['queue_offset']}"),
        ("tags", doc["tags"] or "-"),
        ("keys", " ".join(doc["keys"]) or "-"),
        ("properties", _pairs(doc["properties"])),
        ("born", f"{doc['born_time']} by {doc['born_host'] or '?'}"),
        ("stored", f"{doc['store_time']} on {doc['store_host'] or '?'}"),
        ("reconsume times", str(doc["reconsume_times"])),
        ("system properties", _pairs(doc["system_properties"])),
        (body_label, doc["body"]),
    ]


def message_line(msg: MessageExt, body_format: str) -> str:
    """One line of ``tail``: queue@offset, store time, id, tags, keys, properties, body."""
    doc = message_json(msg, body_format)
    parts = [
        f"{doc['broker']}:{doc['queue']}@{doc['queue_offset']}",
        doc["store_time"],
        doc["msg_id"],
    ]
    if doc["tags"]:
        parts.append(f"tags={doc['tags']}")
    if doc["keys"]:
        parts.append("keys=" + ",".join(doc["keys"]))
    parts += [f"{k}={v}" for k, v in doc["properties"].items()]
    if doc["reconsume_times"]:
        parts.append(f"reconsumed={doc['reconsume_times']}")
    body: str = doc["body"]
    if doc["body_encoding"] != "text":
        body = f"{doc['body_encoding']}:{body}"
    return "  ".join(parts) + "  | " + body.replace("\n", "\\n")
