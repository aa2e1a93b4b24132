"""The simulated pull broker's member list (aiorocket.testing.sim.pull): an entry per
connection, as a 5.x broker keeps a group's ``channelInfoTable`` keyed by channel
(``ConsumerGroupInfo``): UNREGISTER_CLIENT removes the entry of the connection it came
on (``unregisterChannel``), a close the broker reads removes that connection's entry
(``doChannelCloseEvent``), the scan an entry not refreshed for 120 s."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import ServerSession
from aiorocket.testing.sim.history import History
from aiorocket.testing.sim.nemesis import Schedule
from aiorocket.testing.sim.pull import CHANNEL_EXPIRY, PULL_GROUP, SimPullBroker, SimPullCluster


class _Stream:
    """A connection's server end: what the broker writes to it is kept."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.written.append(data)

    async def aclose(self) -> None:
        pass


def _session() -> ServerSession:
    return ServerSession(_Stream())  # type: ignore[arg-type]


def _broker() -> SimPullBroker:
    schedule = Schedule(0, "pull_remoting", {"server_seed": 1}, [])
    cluster = SimPullCluster(schedule, History(trio.current_time), brokers=1, queues=1)
    return cluster.brokers[0]


async def _heartbeat(broker: SimPullBroker, session: ServerSession, client: str) -> None:
    body = json.dumps({"clientID": client, "consumerDataSet": []}).encode()
    await broker._handle(session, RemotingCommand(code=RequestCode.HEART_BEAT, body=body))


async def _unregister(broker: SimPullBroker, session: ServerSession, client: str) -> None:
    ext = {"clientID": client, "consumerGroup": PULL_GROUP}
    await broker._handle(session, RemotingCommand(code=RequestCode.UNREGISTER_CLIENT,
                                                  ext_fields=ext))  # fmt: skip


def _run(test: Any) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_unregister_on_another_connection_leaves_a_silent_ones_entry_to_the_scan() -> None:
    """Seed 1111's case: a member's connection goes half-open, its unregister there is
    lost, the one sent again on a new connection removes nothing (that connection has
    no entry); the silent connection's entry goes at the scan. The checker does not
    hold it against the client: none of its requests could remove it."""

    async def test() -> None:
        broker = _broker()
        old, new = _session(), _session()
        await _heartbeat(broker, old, "sim-joiner")
        await _heartbeat(broker, _session(), "sim-first")
        old.stall()  # half-open: the broker reads nothing more on it, not its close
        await _unregister(broker, new, "sim-joiner")
        assert broker.members() == ["sim-first", "sim-joiner"]
        assert broker.remembers("sim-joiner", since=0.0) == []
        await trio.sleep(CHANNEL_EXPIRY + 1)
        assert "sim-joiner" not in broker.members()

    _run(test)


def test_an_unregister_removes_its_connections_entry_and_a_read_close_the_others() -> None:
    """A client reconnected is listed once per connection; the unregister on the new one
    removes that entry, the old one's close (read by the broker) the other, and the
    others are told both times."""

    async def test() -> None:
        broker = _broker()
        old, new, other = _session(), _session(), _session()
        await _heartbeat(broker, other, "sim-first")
        await _heartbeat(broker, old, "sim-joiner")
        await _heartbeat(broker, new, "sim-joiner")
        assert broker.members() == ["sim-first", "sim-joiner", "sim-joiner"]
        told = len(other.stream.written)  # type: ignore[attr-defined]
        await _unregister(broker, new, "sim-joiner")
        assert broker.members() == ["sim-first", "sim-joiner"]
        # still listed on a live connection: the checker holds that against it
        assert broker.remembers("sim-joiner", since=0.0) == ["listed as a member"]
        assert broker.server.on_close is not None
        await broker.server.on_close(old)
        assert broker.members() == ["sim-first"]
        assert broker.remembers("sim-joiner", since=0.0) == []
        assert len(other.stream.written) == told + 2  # type: ignore[attr-defined]

    _run(test)


def test_a_heartbeat_applied_after_its_connections_close_stays_until_the_scan() -> None:
    """5.x registers the channel of a heartbeat it applies after handling that
    channel's close (``ClientManageProcessor.heartBeat`` does not ask whether it is
    active): the entry stays until the scan, and the checker holds it against the
    client (docs/simulator.md, seed 9360)."""

    async def test() -> None:
        broker = _broker()
        session = _session()
        await _heartbeat(broker, session, "sim-joiner")
        assert broker.server.on_close is not None
        await broker.server.on_close(session)
        await _heartbeat(broker, session, "sim-joiner")
        assert broker.remembers("sim-joiner", since=0.0) == ["listed as a member"]
        await trio.sleep(CHANNEL_EXPIRY + 1)
        assert broker.members() == []

    _run(test)
