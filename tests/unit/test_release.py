"""``aiorocket._release.release_all``: the one way received messages are given back to
their group at once (a cut gRPC receive, a pop consumer's nacks, refusals and close)."""

from __future__ import annotations

import anyio
import pytest

from aiorocket._release import CONCURRENCY, release_all
from aiorocket.errors import RequestTimeoutError, RocketMQError

pytestmark = pytest.mark.anyio


async def test_release_all_returns_what_failed_or_did_not_finish_in_time() -> None:
    errors: list[tuple[int, RocketMQError]] = []
    running = 0
    most = 0

    async def release(i: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            if i == 3:
                raise RequestTimeoutError("no answer")
            if i == 5:
                await anyio.sleep_forever()
            await anyio.sleep(0.01)
        finally:
            running -= 1

    with anyio.fail_after(5):
        left = await release_all(list(range(40)), release, 0.5,
                                 on_error=lambda i, e: errors.append((i, e)))  # fmt: skip
    assert left == [3, 5]
    assert [i for i, _ in errors] == [3]
    assert most == CONCURRENCY


async def test_release_all_runs_to_its_bound_when_the_caller_is_cancelled() -> None:
    released: list[int] = []

    async def release(i: int) -> None:
        await anyio.sleep(0.05)
        released.append(i)

    with anyio.CancelScope() as scope:
        scope.cancel()  # a close cutting the receive that releases what it had
        await release_all([1, 2], release, 1.0)
    assert sorted(released) == [1, 2]
