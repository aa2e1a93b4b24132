"""What the simulated remoting clusters (``remoting``, ``lite``, ``pull``) share: the
NameServer's route answer and the servers' lifetime."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, Generic, Protocol, TypeVar

from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

__all__ = ["SimServers", "send_route"]


class _Broker(Protocol):
    name: str
    server: FakeRemotingServer

    @property
    def addr(self) -> str: ...


async def send_route(
    session: ServerSession, cmd: RemotingCommand, brokers: Sequence[_Broker], queues: int
) -> None:
    """Answer ``cmd`` (GET_ROUTEINFO_BY_TOPIC) with a route of ``queues`` read/write
    queues on each of ``brokers``."""
    route = {
        "queueDatas": [{"brokerName": b.name, "readQueueNums": queues,
                        "writeQueueNums": queues, "perm": 6} for b in brokers],
        "brokerDatas": [{"cluster": "sim", "brokerName": b.name,
                         "brokerAddrs": {"0": b.addr}} for b in brokers],
    }  # fmt: skip
    await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))


B = TypeVar("B", bound=_Broker)
S = TypeVar("S", bound="SimServers[Any]")


class SimServers(Generic[B]):
    """A cluster's servers (its brokers', then its NameServer), run while inside."""

    brokers: list[B]
    namesrv: FakeRemotingServer

    async def __aenter__(self: S) -> S:
        self._stack = AsyncExitStack()
        for server in [*(b.server for b in self.brokers), self.namesrv]:
            await self._stack.enter_async_context(server)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()  # in the reverse order (cancel scopes nest)
