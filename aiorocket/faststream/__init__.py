"""A [FastStream](https://faststream.ag2.ai/) broker for RocketMQ (the ``faststream`` extra).

```python
from faststream import FastStream
from aiorocket.faststream import RocketBroker

broker = RocketBroker(namesrv="127.0.0.1:9876")   # or RocketBroker(proxy="127.0.0.1:8081")
app = FastStream(broker)

@broker.subscriber("orders", group="billing")
async def handle(order: Order) -> None: ...
```

Built on aiorocket's [`Producer`][aiorocket.producer.Producer] and
[`Consumer`][aiorocket.consumer.Consumer] (both transports): each subscriber is one
consumer group, its handler runs on the consumer's runtime (concurrency, orderly,
broadcasting, consume timeout, graceful close), and FastStream's acknowledgement maps
onto aiorocket's settling (see ``docs/faststream.md``). A broker subclasses FastStream's
internal classes, so the extra pins the FastStream minor series it is built on.
"""

from __future__ import annotations

from aiorocket._extras import needs_extra

with needs_extra("faststream", "aiorocket.faststream"):
    import faststream  # noqa: F401

from aiorocket.faststream._broker import RocketBroker
from aiorocket.faststream._command import RocketPublishCommand, RocketResponse
from aiorocket.faststream._message import RocketMessage as RocketStreamMessage
from aiorocket.faststream._publisher import RocketPublisher
from aiorocket.faststream._router import RocketRoute, RocketRoutePublisher, RocketRouter
from aiorocket.faststream._subscriber import RocketSubscriber
from aiorocket.faststream.annotations import RocketMessage
from aiorocket.faststream.testing import TestRocketBroker

__all__ = [
    "RocketBroker",
    "RocketMessage",
    "RocketPublishCommand",
    "RocketPublisher",
    "RocketResponse",
    "RocketRoute",
    "RocketRoutePublisher",
    "RocketRouter",
    "RocketStreamMessage",
    "RocketSubscriber",
    "TestRocketBroker",
]
