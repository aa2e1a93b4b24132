"""A worker that stops cleanly on SIGTERM (Kubernetes, systemd, docker stop) or Ctrl-C:
running handlers finish, their offsets are committed, and it leaves its group.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import os
import signal

import anyio

from aiorocket import Consumer, ConsumerMessage, stop_on_signals


async def bill(msg: ConsumerMessage) -> None:
    await anyio.sleep(0.1)  # the work; a SIGTERM lets it finish


async def main() -> None:
    consumer = Consumer("example-graceful", handler=bill)
    consumer.subscribe("orders")
    # the clients first (outside), the signals' block last (inside)
    async with consumer, stop_on_signals() as stopped:
        # A worker waits here until it is told to stop: `await anyio.sleep_forever()`.
        # This example sends itself the SIGTERM after a second.
        await anyio.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep_forever()
    # The consumer closed normally: handlers finished, offsets committed, group left.
    print("stopped by signal", stopped.signum)


anyio.run(main)
