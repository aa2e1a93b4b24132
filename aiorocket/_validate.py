"""What a message must be before either transport sends it: a legal topic name, a body
of bytes within the size limit, consistent delay settings.

In the neutral core because the remoting producer (``aiorocket.producer.prepare``)
and the gRPC one (``aiorocket.grpc._convert``) both check it, and must say the same.
"""

from __future__ import annotations

import math
import re

from aiorocket.errors import ConfigError, MessageTooLargeError
from aiorocket.message import Message

__all__ = [
    "LITE_TOPIC_MAX_LENGTH",
    "TOPIC_MAX_LENGTH",
    "check_body",
    "check_lite_topic",
    "check_retry_delay",
    "check_schedule",
    "check_topic",
]

TOPIC_MAX_LENGTH = 127
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
#: the longest lite topic a 5.5 server takes by default (the Proxy's max_lite_topic_size)
LITE_TOPIC_MAX_LENGTH = 64
_LITE_TOPIC_RE = re.compile(r"^[a-zA-Z0-9_-]+$")


def check_topic(topic: str) -> None:
    if not topic:
        raise ConfigError("topic must not be empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise ConfigError(f"topic {topic[:20]!r}... is longer than {TOPIC_MAX_LENGTH} characters")
    if not _TOPIC_RE.match(topic):
        raise ConfigError(f"topic {topic!r} may only contain letters, digits, '%', '|', '-', '_'")


def check_lite_topic(lite_topic: object, max_length: int = LITE_TOPIC_MAX_LENGTH) -> None:
    """A lite topic name as the 5.5 Proxy accepts it (ILLEGAL_LITE_TOPIC otherwise):
    letters, digits, ``-`` and ``_``, at most ``max_length`` characters (the server's
    limit; 64 by default). The brokers take the same names over remoting."""
    if not isinstance(lite_topic, str) or not lite_topic:
        raise ConfigError(f"a lite topic must be a non-empty string, not {lite_topic!r}")
    if len(lite_topic) > max_length:
        raise ConfigError(
            f"lite topic {lite_topic[:20]!r}... is longer than {max_length} characters"
        )
    if not _LITE_TOPIC_RE.match(lite_topic):
        raise ConfigError(
            f"lite topic {lite_topic!r} may only contain letters, digits, '-' and '_'"
        )


def check_body(msg: Message, max_size: int) -> None:
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise ConfigError(f"message body must be bytes, not {type(msg.body).__name__}")
    size = len(msg.body)
    if size == 0:
        raise ConfigError("message body must not be empty")
    if size > max_size:
        raise MessageTooLargeError(
            f"message body of {size} bytes exceeds the maximum of {max_size} bytes"
        )


def check_schedule(msg: Message) -> None:
    if msg.delay_level < 0:
        raise ConfigError(f"delay_level must be >= 0, got {msg.delay_level}")
    if msg.delay_level and msg.deliver_time_ms is not None:
        raise ConfigError("set either delay_level or deliver_time_ms, not both")
    priority = msg.priority
    if priority is not None and (type(priority) is not int or priority < 0):
        raise ConfigError(f"priority must be an int >= 0, got {priority!r}")
    if msg.lite_topic is not None:
        check_lite_topic(msg.lite_topic)
        # As the official clients: a lite message is delivered at once, in its lite
        # topic's order.
        if msg.delay_level or msg.deliver_time_ms is not None or priority is not None:
            raise ConfigError("a lite message cannot be delayed or have a priority")
    if msg.deliver_time_ms is not None and msg.deliver_time_ms < 0:
        raise ConfigError(f"deliver_time_ms must be an epoch time in ms, got {msg.deliver_time_ms}")


def check_retry_delay(seconds: object) -> float:
    """A handler's retry delay (``Reconsume(delay=)``, ``nack(delay=)``): finite seconds
    >= 0, else ``ConfigError``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigError(f"retry delay {seconds!r}: seconds (a number >= 0) expected")
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"retry delay {seconds!r}: seconds (a number >= 0) expected")
    return float(seconds)
