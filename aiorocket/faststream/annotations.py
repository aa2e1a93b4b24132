"""Handler parameter annotations: FastStream injects these from its context.

```python
from aiorocket.faststream.annotations import RocketMessage

@broker.subscriber("orders", group="billing")
async def handle(order: Order, message: RocketMessage) -> None:
    print(message.raw_message.tags, message.raw_message.reconsume_times)
```
"""

from __future__ import annotations

from typing import Annotated

from faststream import Context
from faststream.annotations import ContextRepo, Logger

from aiorocket.faststream._broker import RocketBroker as _Broker
from aiorocket.faststream._message import RocketMessage as _Message
from aiorocket.producer.producer import Producer as _Producer

__all__ = ["ContextRepo", "Logger", "Producer", "RocketBroker", "RocketMessage"]

#: the message being handled (``raw_message``: aiorocket's ConsumerMessage)
RocketMessage = Annotated[_Message, Context("message")]
#: the broker handling it
RocketBroker = Annotated[_Broker, Context("broker")]
#: the broker's aiorocket Producer
Producer = Annotated[_Producer, Context("broker._connection")]
