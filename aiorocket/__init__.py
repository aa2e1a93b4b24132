"""aiorocket: an asyncio-native (anyio) client and consumer framework for Apache RocketMQ."""

from aiorocket.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConnectionClosedError,
    NameServerUnavailableError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
)
from aiorocket.message import Message, MessageExt, MessageQueue

__version__ = "0.1.0.dev0"

__all__ = [
    "BrokerResponseError",
    "ClientClosedError",
    "ConnectionClosedError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "NameServerUnavailableError",
    "ProtocolError",
    "RequestTimeoutError",
    "RocketMQError",
    "__version__",
]
