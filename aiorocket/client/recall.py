"""RECALL_MESSAGE (RocketMQ 5.3.2+): withdraw a timer message before its delivery time.

A broker answers the send of a timer message (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC``,
not a delay level) with a *recall handle*: base64url of ``v1 <topic> <brokerName>
<deliveryTimestamp> <messageId>``. A recall sent to that broker before the delivery time
stores a marker that makes the timer drop the message; after it the broker refuses the
recall (the message is delivered). Brokers refuse every recall unless
``recallMessageEnable=true`` (off by default).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiorocket.client.broker import response_error
from aiorocket.errors import AccessDeniedError, ConfigError

if TYPE_CHECKING:
    from aiorocket.client.broker import BrokerClient

__all__ = ["RECALL_MESSAGE", "RecallHandle", "recall_message"]

RECALL_MESSAGE = 370


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """A recall handle read back."""

    topic: str
    broker_name: str
    delivery_ms: int
    message_id: str

    @classmethod
    def parse(cls, handle: str) -> RecallHandle:
        try:
            raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
            version, topic, broker, ts, msg_id = raw.split(" ")
            if version != "v1":
                raise ValueError(version)
            return cls(topic, broker, int(ts), msg_id)
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise ConfigError(f"not a recall handle: {handle!r}") from None


async def recall_message(
    broker: BrokerClient, addr: str, producer_group: str, topic: str, handle: str
) -> str:
    """RECALL_MESSAGE to the broker at ``addr``; returns the recalled message's id."""
    ext = {"producerGroup": producer_group, "topic": topic, "recallHandle": handle}
    resp = await broker.call(addr, RECALL_MESSAGE, ext)
    if resp.code != 0:
        err = response_error(resp, RECALL_MESSAGE, addr)
        if isinstance(err, AccessDeniedError):
            raise AccessDeniedError(
                resp.code, f"{resp.remark} (the broker needs recallMessageEnable=true)",
                request_code=RECALL_MESSAGE,
            ) from None
        raise err
    return resp.ext_fields.get("msgId", "")
