"""A lite consumer's close over gRPC against the simulated lite Proxy
(``aiorocket.testing.sim.lite_proxy``): what it did not finish goes to the next member
of the group at once, not to a receive the close cut that the Proxy still holds."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.consumer import ConsumerMessage
from aiorocket.testing.sim.history import History
from aiorocket.testing.sim.lite_proxy import SimLiteProxy
from aiorocket.testing.sim.nemesis import Schedule

pytestmark = pytest.mark.anyio

SETTINGS = {"long_poll_timeout": 5.0, "invisible_duration": 30.0, "shutdown_timeout": 0.2}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib


async def test_what_a_closed_lite_consumer_releases_goes_to_the_next_member() -> None:
    """The CI failure of tests/integration/test_lite.py's
    test_messages_unsettled_at_close_come_back[grpc]: a handler hangs on m-1, the close
    releases m-1..m-3. Released while the client still subscribed their lite topic, the
    receive the close cut (parked at the Proxy until its long poll ends) took them
    again, into a stream nobody reads: invisible for 30 s. The close drops the lite
    subscriptions first: the next member gets them at once, nothing is lost on the wire."""
    history = History(anyio.current_time)
    proxy = SimLiteProxy(Schedule(0, "grpc_lite", {}, []), history, exclusive=False)
    started = anyio.Event()

    async def stuck(msg: ConsumerMessage) -> None:
        if msg.body == b"m-1":
            started.set()
            await anyio.sleep_forever()

    got: list[bytes] = []
    all_in = anyio.Event()

    async def member(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 3:
            all_in.set()

    async with proxy:
        for i in range(4):
            proxy.store_lite(f"m-{i}", 0, i)  # lite topic r0
        first = proxy.consumer(stuck, "first", SETTINGS)
        await first.subscribe_lite("r0")
        async with first:
            with anyio.fail_after(10):
                await started.wait()
        second = proxy.consumer(member, "second", SETTINGS)
        await second.subscribe_lite("r0")
        async with second:
            with anyio.fail_after(5):  # not after the 30 s invisible time
                await all_in.wait()
    assert got == [b"m-1", b"m-2", b"m-3"]
    assert history.keys("lost_on_wire") == set()
