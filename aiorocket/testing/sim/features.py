"""Issue 44's consumer features in a run (``feature_draws`` draws them): the consumer's
``max_rate`` and ``topic_max_rate``, the application's ``pause`` / ``resume`` at drawn
times, and the events the checker reads (``rate_limit``, ``topic_rate_limit``,
``paused``, ``resumed``).

A client without a feature (an old commit under the simulator) runs without it: the
draw is noted (``feature_missing``), not failed."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.consumer import Consumer
from aiorocket.results import Reconsume

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["pauser", "rate_kwargs", "retry_result", "supports_retry_delay", "topic_rate_kwargs"]

#: receive loops a consumer runs at once, unless the workload says (one batch each may
#: overdraw the bucket, twice when loops wake together: aiorocket.consumer.rate)
LOOPS = 8


def supports_retry_delay() -> bool:
    return any(f.name == "delay" for f in dataclasses.fields(Reconsume))


def retry_result(delay: float) -> Any:
    return Reconsume(delay=delay)  # type: ignore[call-arg,unused-ignore]


def _drawn(schedule: Schedule, history: History, setting: str) -> float | None:
    """The rate drawn for the consumer's ``setting``, None if not drawn or if the
    client has no such setting (noted: ``feature_missing``)."""
    rate: float | None = schedule.params.get(setting)
    if rate is None:
        return None
    from aiorocket.consumer.config import ConsumerConfig

    if not any(f.name == setting for f in dataclasses.fields(ConsumerConfig)):
        history.add("feature_missing", "", feature=setting)
        return None
    return rate


def rate_kwargs(schedule: Schedule, history: History, name: str,
                loops: int = LOOPS) -> dict[str, Any]:  # fmt: skip
    """The consumer's ``max_rate`` settings, if drawn (one message a receive, so the
    burst is small), and the event the checker bounds its receives by."""
    rate = _drawn(schedule, history, "max_rate")
    if rate is None:
        return {}
    history.add("rate_limit", "", consumer=name, rate=rate, burst=max(rate, 1.0) + 2 * loops)
    return {"max_rate": rate, "pull_batch_size": 1}


def topic_rate_kwargs(schedule: Schedule, history: History, name: str, topic: str,
                      loops: int) -> dict[str, Any]:  # fmt: skip
    """The consumer's ``topic_max_rate`` for ``topic`` (the workload's only one), if
    drawn, and the event the checker bounds that topic's receives by: ``loops`` wait for
    its bucket (a remoting pull task per queue; over POP and gRPC its own receive loop)."""
    rate = _drawn(schedule, history, "topic_max_rate")
    if rate is None:
        return {}
    history.add("topic_rate_limit", "", consumer=name, topic=topic, rate=rate,
                burst=max(rate, 1.0) + 2 * loops)  # fmt: skip
    return {"topic_max_rate": {topic: rate}, "pull_batch_size": 1}


async def pauser(consumer: Consumer, schedule: Schedule, history: History, topic: str,
                 name: str) -> None:  # fmt: skip
    """Pause and resume ``consumer`` as drawn (seconds from now): ``paused`` once
    ``pause()`` returned, ``resumed`` just before ``resume()`` is called."""
    if not hasattr(consumer, "pause"):
        if schedule.of("pause"):
            history.add("feature_missing", "", feature="pause")
        return
    start = anyio.current_time()
    for f in schedule.of("pause"):
        await anyio.sleep(max(0.0, start + f.args["at"] - anyio.current_time()))
        targets = () if f.args["what"] == "all" else (topic,)
        consumer.pause(*targets)
        history.add("paused", "", consumer=name, what=f.args["what"])
        await anyio.sleep(f.args["seconds"])
        history.add("resumed", "", consumer=name)
        consumer.resume(*targets)
