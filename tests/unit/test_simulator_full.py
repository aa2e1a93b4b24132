"""``producer_sends_full`` (docs/simulator.md, "Full requests with every `start_send` slot
taken"): ``producer_sends``' seed with full senders added, which reaches the
auto-batcher's turn (``aiorocket.producer.accumulate._TopicLane.turn``) that
``producer_sends`` never does."""

from __future__ import annotations

from typing import Any

import pytest

from aiorocket.producer import accumulate
from aiorocket.testing.sim import draw, run
from aiorocket.testing.sim.nemesis import FULL
from aiorocket.testing.sim.producer_draws import draw_full

#: seeds run on every commit (each takes the turn at least once on sim/turn's client)
FULL_SEEDS = [1, 3]


def test_the_full_variant_is_its_base_run_with_the_full_senders() -> None:
    """Seed S of ``producer_sends_full`` is seed S of ``producer_sends`` (its faults, its
    parameters but the producer's ``auto_batch`` and ``max_rate``: the seeds pinned
    for ``producer_sends`` do not move) with the full senders and their faults added,
    drawn from a stream of their own; the base workload draws none of them."""
    kinds: set[str] = set()
    for seed in range(30):
        base, variant = draw(seed, "producer_sends"), draw(seed, "producer_sends" + FULL)
        assert "full" not in base.params
        assert not [f for f in base.faults if f.args.get("key", "").startswith("f")]
        assert variant.faults[: len(base.faults)] == base.faults
        more, added = draw_full(seed, "producer_sends", dict(base.params))
        assert variant.faults[len(base.faults) :] == added
        assert variant.params == {k: v for k, v in base.params.items() if k != "max_rate"} | more
        assert variant.params["auto_batch"] and "max_rate" not in variant.params
        kinds |= {f.kind for f in added}
    assert {"broker_slow", "send_error", "reset_after_store", "send_cancel",
            "full_cancel", "full_close"} <= kinds  # fmt: skip


@pytest.mark.parametrize("seed", FULL_SEEDS)
def test_producer_sends_full_seed_takes_the_turn(seed: int, monkeypatch: Any) -> None:
    """The run passes, and an answer took the topic's turn (a turn taken is given back
    once: ``_give_turn``), under the variant's faults."""
    turns = 0
    give_turn = accumulate.AutoBatcher._give_turn

    def counted(self: accumulate.AutoBatcher, lane: Any, later: bool) -> None:
        nonlocal turns
        turns += 1
        give_turn(self, lane, later)

    monkeypatch.setattr(accumulate.AutoBatcher, "_give_turn", counted)
    report = run(seed, "producer_sends" + FULL)
    assert report.ok, str(report)
    assert turns >= 1
    assert report.history.of("send_ok")


#: closes under a written send (found by a 1,000-seed run; each failed
#: ``send_reported_truly`` before the sender kept an earlier attempt's "may be stored"
#: through the closed pool's refusal of the retry)
CLOSE_SEEDS = [90183, 90664, 90708, 90860, 90922]


@pytest.mark.parametrize("seed", CLOSE_SEEDS)
def test_a_send_closed_under_after_a_written_attempt_says_it_may_be_stored(seed: int) -> None:
    """``full_close`` closes the producer while a plain send's first attempt is written
    to a slow broker: the retry meets the closed pool (``ClientClosedError``), and the
    send's error must still say "may be stored" (the broker stores the first attempt's
    request later), not a bare refusal."""
    report = run(seed, "producer_sends" + FULL)
    assert report.ok, str(report)
    assert any(e.info.get("uncertain") for e in report.history.of("send_failed"))
