"""Workload: ``grpc_receive`` (a consumer with a handler through the Proxy, the same
draws) with the Proxy restarted at a random point (issue 38 item 14's shape).

``RestartingProxy`` forgets every client at a restart, as 5.5.0 does, and a client at
its NotifyClientTermination (``ClientActivity.notifyClientTermination`` removes its
settings): a receive from a client that has not sent its settings on a Telemetry stream
since is refused (INTERNAL_SERVER_ERROR, ``"settings" is null``: ``SimProxy``, a
``receive_refused`` the checker counts against the client); its renewals of what it handed out stop
(those messages come back after their invisible duration); what the brokers hold stays.
When it answers again three more messages are stored (published meanwhile) and it
records ``proxy_back`` with how many messages then wait visible;
``resumes_after_restart`` holds the consumer to receiving again soon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.sim.grpc_restart (the gRPC restart workload)"):
    from aiorocket.grpc import _pb as pb
    from aiorocket.testing.fake_grpc import _client_id
    from aiorocket.testing.sim.grpc_workload import _drain, _phase
    from aiorocket.testing.sim.proxy import SimProxy

if TYPE_CHECKING:
    from grpclib.server import Stream

    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["RestartingProxy", "grpc_restart"]

Handler = Callable[[Any], Awaitable[None]]


class RestartingProxy(SimProxy):
    """The simulated Proxy, restartable (module docstring)."""

    def __init__(self, schedule: Schedule, history: History) -> None:
        super().__init__(schedule, history)
        self.known: set[str] = set()

    async def _telemetry(self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand]) -> None:
        # Its connection is one the restart drops, as the real one's are: not admitted,
        # the session's connection outlived the restart once the receives had their own
        # (issue 43, goal 5b, round 8), and its settings were never sent again.
        await self._admit(stream)
        async for cmd in stream:
            kind, settings = pb.oneof(cmd, "command")
            if kind == "settings":
                self.known.add(_client_id(stream))
                self.on_settings(_client_id(stream))
                await stream.send_message(pb.TelemetryCommand(status=pb.Status(
                    code=pb.Code.OK, message="OK"), settings=settings))  # fmt: skip

    def on_settings(self, client: str) -> None:
        """``client``'s settings came on a Telemetry stream."""

    def _drop_settings(self, cid: str) -> None:
        # 5.5.0's ClientActivity.notifyClientTermination removes the client's settings
        # (GrpcClientSettingsManager.removeAndGetClientSettings) as it reads the request:
        # a receive after it and before new settings is refused as after a restart
        super()._drop_settings(cid)
        self.known.discard(cid)

    def _has_settings(self, client: str) -> bool:
        return client in self.known

    async def bounce(self, down: float) -> None:
        """Go down for ``down`` seconds and come back knowing no client."""
        self.known.clear()
        for m in self.store:  # its renewals stop; the broker's invisible time runs out
            m.auto_renew = False
        await self.stop()
        await asyncio.sleep(down)
        await self.start()

    async def restart_after(self, down: float) -> None:
        await self.bounce(down)
        for i in range(3):  # published while it was away: the consumer must get them soon
            self.add(f"late-{i}")
        waiting = len([m for m in self.store if m.state == "ready"
                       or (m.state == "inflight" and m.visible_at <= self.now())])  # fmt: skip
        self.history.add("proxy_back", "", waiting=waiting)


async def grpc_restart(schedule: Schedule, history: History, handler: Handler | None) -> None:
    from aiorocket.testing.sim._client import SimHandler

    codecs = {f.args["message"]: f.args["codec"] for f in schedule.of("compressed_as_gzip")}
    closes = [f.args["seconds"] for f in schedule.of("close_at")]
    restart = schedule.of("proxy_restart")[0].args
    proxy = RestartingProxy(schedule, history)
    async with proxy:
        for i in range(schedule.params["messages"]):
            proxy.add(f"m-{i}", codec=codecs.get(i))
        sim_handler = SimHandler(schedule, history, handler)

        async def restarter() -> None:
            await asyncio.sleep(restart["seconds"])
            await proxy.restart_after(restart["down"])

        task = asyncio.ensure_future(restarter())
        try:
            await _phase(proxy, history, sim_handler, closes[0] if closes else None, "first")
            await task  # the restart is part of the run, whenever the phase ended
            await _drain(proxy, history, sim_handler)
        finally:
            task.cancel()
        history.add("end")
