"""The simulated lite broker and the checker at the edges of what a client can see
(issue 40's lite_remoting findings 1001 and 1007): a pop answered into a connection the
client no longer reads, and an unsubscribe notice written into a silent one.

Both are what a 5.5.0 broker does (docs/simulator.md): a long poll woken just before
the broker sees the client hang up pops and writes its answer into the closed
connection (PopLiteLongPollingService.wakeUp checks the channel once, then pops and
writes on another thread); an eviction's NOTIFY_UNSUBSCRIBE_LITE is sent once and
nothing of it is kept. The client cannot read the one nor learn the other: the history
says so (``lost_on_wire``, ``lite_notice_lost``) and the checker does not blame it.
"""

from __future__ import annotations

import json

import anyio
import pytest

from aiorocket.client.lite import LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.testing.sim.history import History
from aiorocket.testing.sim.lite import LITE_GROUP, LITE_PARENT, SimLiteCluster
from aiorocket.testing.sim.memnet import in_memory_network, memory_stream_pair
from aiorocket.testing.sim.nemesis import Schedule

pytestmark = pytest.mark.anyio

CLIENT = "sim-first-0"


def _request(code: int, ext: dict[str, str], body: bytes = b"") -> bytes:
    return encode_command(RemotingCommand.request(code, ext, body))


def _ctl(action: str, topics: list[str]) -> bytes:
    entry = {"clientId": CLIENT, "group": LITE_GROUP, "topic": LITE_PARENT,
             "action": action, "liteTopicSet": topics}  # fmt: skip
    return _request(LITE_SUBSCRIPTION_CTL, {}, json.dumps({"subscriptionSet": [entry]}).encode())


def _pop() -> bytes:
    return _request(POP_LITE_MESSAGE, {
        "clientId": CLIENT, "consumerGroup": LITE_GROUP, "topic": LITE_PARENT,
        "maxMsgNum": "4", "invisibleTime": "10000", "pollTime": "20000",
    })  # fmt: skip


async def _quiet() -> None:
    for _ in range(20):  # the broker's tasks run what the writes woke
        await anyio.lowlevel.checkpoint()


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _cluster(history: History, *, exclusive: bool) -> SimLiteCluster:
    schedule = Schedule(0, "lite_remoting", {"server_seed": 1}, [])
    return SimLiteCluster(schedule, history, brokers=1, exclusive=exclusive)


@pytest.mark.parametrize(("hung_up", "named"), [(True, "lost_on_wire"), (False, "delivered")])
async def test_a_pop_answered_after_the_client_hung_up_is_lost_on_wire(
    hung_up: bool, named: str
) -> None:
    """Seed 1001: a parked lite pop woken by a new message at the instant the close cut
    it. The client had stopped reading that connection; the broker, not yet aware,
    pops and answers: the message is invisible for its invisible time and the client
    never saw it (``lost_on_wire``, not ``delivered``: not the client's to release).
    On a connection still read, the same answer is ``delivered``."""
    history = History(anyio.current_time)
    with in_memory_network():
        async with await _cluster(history, exclusive=False) as cluster:
            broker = cluster.brokers[0]
            client, served = memory_stream_pair()
            broker.server.serve_stream(served)
            await client.send(_ctl("PARTIAL_ADD", ["r0"]))
            await client.send(_pop())
            await _quiet()
            if hung_up:
                client._receive.close()  # the close hung up: nothing reads the answers now
            broker.store("r0.0-0", "r0", 0)
            await _quiet()
            await client.aclose()
    kinds = [e.kind for e in history.events if e.key == "r0.0-0"]
    assert kinds == ["stored", named]
