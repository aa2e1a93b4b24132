"""A consumer group member in a process of its own, for the SIGSTOP scenario
(``test_frozen_consumer.py``), which freezes and thaws it with signals.

``python -m tests.integration.frozen_member NAMESRV GROUP TOPIC SETTINGS_JSON`` consumes
TOPIC in GROUP and writes each body it is given, hex-encoded, as one line on stdout
(flushed at once: the test counts them as they come). SIGTERM closes the consumer
gracefully (in-flight handlers finish, offsets are committed) and ends the process.
"""

from __future__ import annotations

import json
import signal
import sys

import anyio

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage


async def main(namesrv: str, group: str, topic: str, settings: str) -> None:
    async def handler(msg: ConsumerMessage) -> None:
        sys.stdout.write(msg.body.hex() + "\n")
        sys.stdout.flush()

    consumer = Consumer(group, namesrv, handler=handler, **json.loads(settings),
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async with consumer:
            async for _ in signals:
                break


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
