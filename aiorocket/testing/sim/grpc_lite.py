"""Workload: a lite consumer through the Proxy (``Consumer(proxy=..., bind_topic=...)``
with a handler) against ``SimLiteProxy``: the application of ``lite_remoting``
(``lite_workload.lite_phases``: lite topics subscribed before the start or at a time of
the run, some unsubscribed and subscribed again, a refused ``subscribe_lite`` tried
again a second later; messages stored on the lite topics over the run; a second member
for what is left), and the Proxy's faults: SyncLiteSubscription refused (the start's
and the resyncs included), receive streams broken after k messages, every connection
dropped at a time (the Proxy drops the client's lite subscriptions with its Telemetry
stream, at once or, ``late_offline``, seconds later: after the client's new stream and
resync), the Proxy restarted, acks refused, the other member of an exclusive group
taking lite topics, half-open connections, handler faults, the application cancelled
from outside and ``close()`` at a random point.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.sim.grpc_lite (the gRPC lite workload)"):
    from aiorocket.testing.sim.grpc_workload import RECONNECT
    from aiorocket.testing.sim.lite_proxy import SimLiteProxy

from aiorocket.testing.sim.lite_workload import lite_handler, lite_phases

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["grpc_lite"]

SETTINGS: dict[str, Any] = {
    "long_poll_timeout": 2.0, "request_timeout": 2.0, "invisible_duration": 10.0,
    "consume_timeout": 20.0, "shutdown_timeout": 5.0, "max_reconsume_times": 3,
}  # fmt: skip
#: how long (virtual seconds) each phase may run
PHASE = 90.0

Handler = Callable[[Any], Awaitable[None]]


async def grpc_lite(schedule: Schedule, history: History, handler: Handler | None) -> None:
    proxy = SimLiteProxy(schedule, history, exclusive=schedule.params["exclusive"])
    async with proxy:
        proxy.half_open_info["within"] = RECONNECT
        await lite_phases(proxy, schedule, history, lite_handler(schedule, history, handler),
                          settings=SETTINGS, span=PHASE, nemesis=[proxy.run_nemesis])  # fmt: skip
        proxy.unsettled()  # revives what is due
        history.add("end")
    if proxy.errors:
        raise RuntimeError("the simulated Proxy failed:\n" + proxy.errors[0])
