"""The simulator's rate limits (issue 44): the consumer's ``topic_max_rate``
(``topic_rate_within_limit``) and the producer's ``max_rate``
(``send_rate_within_limit``): fixed seeds that draw them pass, and the checker catches
a planted violation, in a history and in a client whose buckets never wait."""

from __future__ import annotations

import anyio.lowlevel
import pytest

from aiorocket.consumer.rate import RateLimit
from aiorocket.producer.pace import SendRate
from aiorocket.testing.sim import Bounds, History, check, draw, run

#: seeds that draw topic_max_rate (pull_remoting 13: 1/s over 6 queues' pull tasks;
#: pop_remoting 0 and 17, grpc_receive 27 and 37: the topic's own receive loop, the
#: shared ones not started) and max_rate (producer_sends 16, 29: 5 and 2/s, sends
#: cancelled while they wait for their turn; 3076: one cancelled at the very instant of
#: its turn, the client's wait cancelled before it ended: test_a_cancel_at_its_turn_...)
TOPIC_SEEDS = [("pull_remoting", 13), ("pop_remoting", 0), ("pop_remoting", 17),
               ("grpc_receive", 27), ("grpc_receive", 37)]  # fmt: skip
SEND_SEEDS = [16, 29, 3076]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _caught(*steps: tuple[float, str, str, dict[str, object]]) -> set[str]:
    clock = _Clock()
    history = History(clock)
    for at, kind, key, info in steps:
        clock.now = at
        history.add(kind, key, **info)
    return {v.invariant for v in check(history, Bounds(ack=3.0, hand_on=5.0))}


_TOPIC_LIMIT = (0.0, "topic_rate_limit", "",
                {"consumer": "first", "topic": "t", "rate": 2.0, "burst": 4.0})  # fmt: skip
_SEND_LIMIT = (0.0, "send_rate_limit", "", {"rate": 2.0, "burst": 3.0})


@pytest.mark.parametrize(
    ("invariant", "steps"),
    [
        ("topic_rate_within_limit", [  # 6 of the topic in half a second
            _TOPIC_LIMIT, *((0.1 * i, "delivered", f"m-{i}", {}) for i in range(6))]),
        ("send_rate_within_limit", [  # 5 sends reach the brokers in half a second
            _SEND_LIMIT, *((0.1 * i, "send_arrived", f"p-{i}", {}) for i in range(5))]),
        ("send_rate_within_limit", [  # cancelled before its turn, sent all the same
            _SEND_LIMIT, (0.0, "send_called", "p-0", {"turn": 1.5}),
            (0.5, "send_cancelled_waiting", "p-0", {"turn": 1.5}),
            (1.5, "send_arrived", "p-0", {"broker": "a"})]),
    ],
)
def test_checker_catches_a_planted_violation(
    invariant: str, steps: list[tuple[float, str, str, dict[str, object]]]
) -> None:
    assert invariant in _caught(*steps)


def test_the_limits_as_documented_pass() -> None:
    """The burst at once then the rate; the retry queue's and another topic's messages
    are not the limited topic's; a retry of a send is the same send."""
    caught = _caught(
        _TOPIC_LIMIT, _SEND_LIMIT,
        *((0.0, "delivered", f"m-{i}", {}) for i in range(4)),
        (0.0, "pulled", "r-0", {"queue": "%RETRY%g:0"}),
        (0.0, "delivered", "o-0", {"topic": "other"}),
        (0.5, "delivered", "m-4", {}), (1.0, "delivered", "m-5", {}),
        *((0.0, "send_arrived", f"p-{i}", {"broker": "a"}) for i in range(3)),
        (0.0, "send_arrived", "p-0", {"broker": "b"}), (0.5, "send_arrived", "p-3", {}),
    )  # fmt: skip
    assert caught & {"topic_rate_within_limit", "send_rate_within_limit"} == set()


@pytest.mark.parametrize(("workload", "seed"), TOPIC_SEEDS)
def test_topic_max_rate_seeds_pass(workload: str, seed: int) -> None:
    assert "topic_max_rate" in draw(seed, workload).params
    report = run(seed, workload)
    assert report.history.of("topic_rate_limit")
    assert report.ok, report.violations


@pytest.mark.parametrize("seed", SEND_SEEDS)
def test_send_max_rate_seeds_pass(seed: int) -> None:
    report = run(seed, "producer_sends")
    assert report.history.of("send_rate_limit")
    assert report.history.of("send_cancelled_waiting")  # the refund is exercised
    assert report.ok, report.violations


@pytest.mark.parametrize("client_gave_back", [True, False])
def test_a_cancel_at_its_turn_follows_the_client_bucket(client_gave_back: bool) -> None:
    """Turns (the model of max_rate's bucket): a send cancelled at the very instant its
    turn comes may have had its token back or not (two timers due together); the
    client's bucket decides, so the next turns are the client's (producer_sends 3076:
    the model a token short, every later turn 0.5 s late, a 0.5 s send judged
    'timed out after 0.00 s')."""
    from aiorocket.testing.sim.send_rate import Turns

    clock = _Clock()
    history = History(clock)
    turns = Turns(2.0, history)
    for key in ("a", "b", "c"):
        turns.call(key)  # a, b at 0 (the bucket's second's worth), c at 0.5
    clock.now = 0.5
    mine = -0.0  # the model's tokens at 0.5 without a refund
    turns.cancelled("c", lambda: mine + (1.0 if client_gave_back else 0.0))
    assert bool(history.of("send_cancelled_waiting")) is client_gave_back
    assert turns.call("d") == (0.5 if client_gave_back else 1.0)


async def _no_wait(self: object, n: int = 1) -> None:
    await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize(("workload", "seed"), [*TOPIC_SEEDS, ("producer_sends", 16)])
def test_a_bucket_that_never_waits_is_caught(
    monkeypatch: pytest.MonkeyPatch, workload: str, seed: int
) -> None:
    """The planted client defect: the buckets let every receive (send) go at once."""
    monkeypatch.setattr(RateLimit, "ready", _no_wait)
    monkeypatch.setattr(SendRate, "acquire", _no_wait)
    invariant = "send_rate_within_limit" if workload == "producer_sends" else \
        "topic_rate_within_limit"  # fmt: skip
    assert invariant in {v.invariant for v in run(seed, workload).violations}
