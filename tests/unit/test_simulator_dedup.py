"""Idempotent consumption under the simulator (aiorocket.testing.sim.dedup_sim): seeds
of the pull workload that draw ``dedup=`` pass, each member sharing one store, and the
invariant ``handled_once_with_dedup`` catches a store that deduplicates nothing."""

from __future__ import annotations

import pytest

from aiorocket.consumer.dedup import Claim, MemoryDedupStore
from aiorocket.testing.sim import INVARIANTS, History, draw, run

#: pull_remoting seeds that draw dedup=: 42 and 68 redeliver messages handled already
#: (a rebalance, a broker crash), so a store that claims nothing lets their handlers
#: succeed twice; 0, 65 (claim_ttl 2 s, renewed) and 79 (orderly) besides
DEDUP_SEEDS = [0, 42, 65, 68, 79]


@pytest.mark.parametrize("seed", DEDUP_SEEDS)
def test_pull_remoting_with_dedup_seed(seed: int) -> None:
    assert "dedup_claim_ttl" in draw(seed, "pull_remoting").params
    report = run(seed, "pull_remoting")
    assert report.history.of("dedup_on")
    assert report.violations == [], report.violations


def test_a_store_that_deduplicates_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    async def always_new(self: MemoryDedupStore, key: str, token: str, ttl: float) -> Claim:
        return Claim.NEW

    monkeypatch.setattr(MemoryDedupStore, "claim", always_new)
    report = run(42, "pull_remoting")
    assert "handled_once_with_dedup" in {v.invariant for v in report.violations}


def test_the_invariant_judges_runs_with_dedup_only() -> None:
    invariant = INVARIANTS["handled_once_with_dedup"]
    twice = [("handler_ok", "m-0"), ("handler_ok", "m-0")]
    plain = History(lambda: 0.0)
    for kind, key in twice:
        plain.add(kind, key)
    assert invariant(plain, None) == []  # type: ignore[arg-type]
    deduped = History(lambda: 0.0)
    deduped.add("dedup_on", "", claim_ttl=None)
    for kind, key in twice:
        deduped.add(kind, key)
    assert [v.key for v in invariant(deduped, None)] == ["m-0"]  # type: ignore[arg-type]
