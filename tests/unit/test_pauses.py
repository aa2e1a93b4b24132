"""What ``Consumer.pause`` records (``aiorocket.consumer.pauses``): topics, queues,
everything, resuming one topic of everything, and the namespace."""

from __future__ import annotations

from aiorocket.consumer.pauses import Pauses
from aiorocket.message import MessageQueue
from aiorocket.namespace import unwrap


def test_topics_queues_and_everything() -> None:
    p = Pauses()
    q = MessageQueue("a", "broker-a", 0)
    assert not p.any and not p.queue_paused(q)
    p.pause([q])
    assert p.queue_paused(q) and not p.queue_paused(MessageQueue("a", "broker-a", 1))
    assert not p.topic_paused("a")
    p.pause(["b"])
    assert p.topic_paused("b") and p.queue_paused(MessageQueue("b", "x", 3))
    assert p.paused(["a", "b"]) == {q, "b"}
    p.resume([])
    assert not p.any
    p.pause([])
    assert p.idle(["a", "b"]) and p.queue_paused(MessageQueue("%RETRY%g", "x", 0))
    p.resume(["a"])  # everything else stays paused, the retry queues too
    assert not p.topic_paused("a") and p.topic_paused("b") and not p.idle(["a", "b"])
    assert p.queue_paused(MessageQueue("%RETRY%g", "x", 0))
    assert p.paused(["a", "b"]) == {"b"}
    p.pause(["a"])
    assert p.idle(["a", "b"])


def test_names_are_the_applications() -> None:
    p = Pauses(lambda topic: unwrap("ns", topic))
    p.pause(["orders"])
    assert p.topic_paused("ns%orders") and p.queue_paused(MessageQueue("ns%orders", "b", 0))
    assert not p.topic_paused("ns%other")


def test_a_change_calls_back() -> None:
    p, calls = Pauses(), []
    p.on_change.append(lambda: calls.append(1))
    p.pause(["a"])
    p.resume(["a"])
    assert len(calls) == 2


def test_some_is_any_after_every_change() -> None:
    """A guard ("Round 18": the pull task reads ``some``, not ``queue_paused``, while
    nothing is paused): ``some`` says what ``any`` says after every pause and resume,
    so a queue that ``queue_paused`` calls paused is never pulled."""
    p = Pauses()
    q = MessageQueue("a", "broker-a", 0)
    steps: list[tuple[str, list[str | MessageQueue]]] = [
        ("pause", [q]), ("resume", [q]), ("pause", ["b"]), ("pause", [q]),
        ("resume", ["b"]), ("resume", []), ("pause", []), ("resume", ["a"]),
        ("resume", []), ("pause", ["a", q]), ("resume", [q, "a"]),
    ]  # fmt: skip
    assert p.some is p.any is False
    for name, targets in steps:
        getattr(p, name)(targets)
        assert p.some is p.any
        assert p.some or not p.queue_paused(q)
