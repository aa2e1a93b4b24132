"""Components that own background tasks can be built outside an event loop.

The Spark runtime builds its ``ClientInstance`` in a plain thread and enters it later in
a loop of its own; a task group made in a constructor needs a running loop, so building
one there failed with ``NoEventLoopError`` (commit 2b75cbf broke the Spark sink so).
"""

from __future__ import annotations

import anyio
import pytest

from aiorocket._tasks import BackgroundTasks
from aiorocket.client.instance import ClientInstance


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_client_instance_built_outside_a_loop_starts_and_closes_in_one(backend: str) -> None:
    client = ClientInstance("127.0.0.1:1", request_timeout=0.5)  # no loop runs here

    async def main() -> None:
        async with client:
            pass

    anyio.run(main, backend=backend)


def test_background_tasks_cancel_their_tasks_on_exit_and_can_be_entered_again() -> None:
    tasks = BackgroundTasks()  # no loop runs here
    cancelled: list[int] = []

    async def forever(n: int) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(n)

    async def main() -> None:
        for n in (1, 2):
            async with tasks as tg:
                tg.start_soon(forever, n)
                await anyio.wait_all_tasks_blocked()

    anyio.run(main)
    assert cancelled == [1, 2]
