"""Idempotent consumption (``dedup=``): the memory store, and the runtime around a real
WorkerPool and settler (tests/unit/test_dispatch.py's harness), without a broker."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.consumer.dedup import Claim, Dedup, DedupStore, MemoryDedupStore
from aiorocket.errors import ConfigError
from aiorocket.received import ConsumerMessage
from tests.unit.test_dispatch import Harness, workers

pytestmark = pytest.mark.anyio


def feed(h: Harness, *keys: str) -> list[ConsumerMessage]:
    """Messages with these ids (UNIQ_KEY), fed as a pull task does."""
    start = h.pq.tracker.next_offset
    msgs = [ConsumerMessage("t", k.encode(), {"UNIQ_KEY": k}, 0, start + i, start + i)
            for i, k in enumerate(keys)]  # fmt: skip
    for m in msgs:
        m._pq, m._generation, m._settler = h.pq, h.pq.tracker.generation, h.settler
    h.pq.on_pulled(msgs, start + len(msgs))
    h.pool.deliver(h.pq, msgs)
    return msgs


# -- the memory store ---------------------------------------------------------------


async def store_contract(store: DedupStore) -> None:
    """What every store does (tests/integration/test_dedup_redis.py runs it on Redis)."""
    assert await store.claim("k", "a", 10) is Claim.NEW
    assert await store.claim("k", "b", 10) is Claim.IN_PROGRESS
    await store.release("k", "b")  # not the holder: nothing
    assert await store.claim("k", "b", 10) is Claim.IN_PROGRESS
    await store.release("k", "a")
    assert await store.claim("k", "b", 10) is Claim.NEW
    await store.mark_done("k", 10)
    assert await store.claim("k", "c", 10) is Claim.DONE
    await store.release("k", "b")  # a late release does not forget a done key
    assert await store.claim("k", "c", 10) is Claim.DONE
    # A renewal extends the holder's claim only.
    renew = store.renew  # type: ignore[attr-defined]  # optional in the protocol
    assert await store.claim("r", "a", 10) is Claim.NEW
    assert await renew("r", "a", 20) is True
    assert await renew("r", "b", 20) is False
    assert await renew("gone", "a", 20) is False
    await store.mark_done("r", 10)
    assert await renew("r", "a", 20) is False


async def test_memory_store_claims_done_and_releases() -> None:
    await store_contract(MemoryDedupStore())


async def test_memory_store_claims_and_done_keys_expire() -> None:
    now = [1000.0]
    store = MemoryDedupStore(clock=lambda: now[0])
    assert await store.claim("crashed", "a", 5) is Claim.NEW  # its handler never ends
    now[0] += 4.9
    assert await store.claim("crashed", "b", 5) is Claim.IN_PROGRESS
    now[0] += 0.2
    assert await store.claim("crashed", "b", 5) is Claim.NEW  # expired: handled again
    await store.mark_done("crashed", 60)
    now[0] += 61
    assert await store.claim("crashed", "c", 5) is Claim.NEW


async def test_memory_store_is_bounded() -> None:
    store = MemoryDedupStore(max_keys=3)
    for k in "abcd":
        await store.claim(k, "t", 10)
        await store.mark_done(k, 10)
    assert len(store) == 3
    assert await store.claim("a", "t", 10) is Claim.NEW  # the oldest went first
    assert await store.claim("d", "t", 10) is Claim.DONE
    with pytest.raises(ConfigError):
        MemoryDedupStore(max_keys=0)


# -- the runtime ----------------------------------------------------------------------


class Recorder:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or set()

    async def __call__(self, msg: ConsumerMessage) -> None:
        self.calls.append(msg.body.decode())
        if msg.body.decode() in self.fail:
            raise RuntimeError("boom")


async def test_a_message_handled_already_is_settled_without_the_handler() -> None:
    store = MemoryDedupStore()
    handle = Recorder()
    async with workers(handle, dedup=Dedup(store), consume_concurrency=1) as h:
        feed(h, "m1", "m2")
        await h.consumed(2)
        feed(h, "m1", "m3", "m2")  # redeliveries of m1 and m2
        await h.consumed(5)
    assert handle.calls == ["m1", "m2", "m3"]
    assert h.sent_back == []
    assert h.pq.tracker.committable() == 5  # the copies are settled (committed) too
    assert await store.claim("g:m1", "x", 10) is Claim.DONE  # keys are per group


async def test_a_handler_outlasting_its_claim_keeps_it_renewed() -> None:
    """claim_ttl shorter than the call: the claim is renewed while the handler runs, so
    a copy delivered meanwhile (another member, a redelivery) finds it held, not expired
    and free to run beside it; once the call ends the key is done."""
    store = MemoryDedupStore()
    started, finish = anyio.Event(), anyio.Event()

    async def slow(msg: ConsumerMessage) -> None:
        started.set()
        await finish.wait()

    async with workers(slow, dedup=Dedup(store, claim_ttl=0.15), consume_timeout=30,
                       consume_concurrency=1) as h:  # fmt: skip
        feed(h, "m1")
        with anyio.fail_after(10):
            await started.wait()
        await anyio.sleep(0.6)  # the time itself is what is tested: four claim_ttl
        assert await store.claim("g:m1", "other", 10) is Claim.IN_PROGRESS
        finish.set()
        await h.consumed(1)
    assert await store.claim("g:m1", "other", 10) is Claim.DONE


class NoRenewStore:
    """A store of the three required methods only."""

    async def claim(self, key: str, token: str, ttl: float) -> Claim:
        return Claim.NEW

    async def mark_done(self, key: str, ttl: float) -> None: ...

    async def release(self, key: str, token: str) -> None: ...


async def test_a_short_claim_needs_a_store_that_renews() -> None:
    consumer = Consumer("g", "127.0.0.1:1", handler=Recorder(), consume_timeout=60,
                        dedup=Dedup(NoRenewStore(), claim_ttl=5))  # fmt: skip
    consumer.subscribe("t")
    with pytest.raises(ConfigError, match="no renew"):
        async with consumer:
            pass


async def test_a_failed_handler_releases_its_claim_so_the_retry_runs_it() -> None:
    store = MemoryDedupStore()
    handle = Recorder(fail={"m1"})
    async with workers(handle, dedup=Dedup(store), consume_concurrency=1) as h:
        feed(h, "m1")
        with anyio.fail_after(10):
            await h.sent.wait()
        assert h.sent_back == [(0, 0)]
        handle.fail.clear()
        feed(h, "m1")  # the retry
        await h.consumed(2)
    assert handle.calls == ["m1", "m1"]
    assert await store.claim("g:m1", "x", 10) is Claim.DONE


async def test_a_handler_cut_by_the_consume_timeout_releases_its_claim() -> None:
    store = MemoryDedupStore()

    async def hang(msg: ConsumerMessage) -> None:
        await anyio.sleep_forever()

    async with workers(hang, dedup=Dedup(store), consume_timeout=0.2,
                       consume_concurrency=1) as h:  # fmt: skip
        feed(h, "m1")
        with anyio.fail_after(10):
            await h.sent.wait()  # failed back to the broker: retried later
    assert await store.claim("g:m1", "x", 10) is Claim.NEW


async def test_a_key_claimed_elsewhere_is_failed_back_not_dropped_nor_handled() -> None:
    store = MemoryDedupStore()
    await store.claim("g:m1", "another-member", 60)
    handle = Recorder()
    async with workers(handle, dedup=Dedup(store), consume_concurrency=1) as h:
        feed(h, "m1")
        with anyio.fail_after(10):
            await h.sent.wait()
    assert handle.calls == []
    assert h.sent_back == [(0, 0)]  # it comes back after the holder finished or expired
    assert await store.claim("g:m1", "x", 10) is Claim.IN_PROGRESS  # theirs, untouched


class BrokenStore(MemoryDedupStore):
    """A store that is down (raises) or hangs on every call."""

    in_process = False  # a remote store: bounded by store_timeout

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    async def _broken(self) -> Any:
        if self.how == "hang":
            await anyio.sleep_forever()
        raise ConnectionError("store down")

    async def claim(self, key: str, token: str, ttl: float) -> Claim:
        return await self._broken()  # type: ignore[no-any-return]

    async def mark_done(self, key: str, ttl: float) -> None:
        await self._broken()

    async def release(self, key: str, token: str) -> None:
        await self._broken()


@pytest.mark.parametrize("how", ["raise", "hang"])
async def test_a_store_that_fails_or_hangs_costs_dedup_not_the_message(how: str) -> None:
    handle = Recorder(fail={"m2"})
    async with workers(handle, dedup=Dedup(BrokenStore(how), store_timeout=0.1),
                       consume_concurrency=2) as h:  # fmt: skip
        feed(h, "m1", "m2")
        with anyio.fail_after(10):
            await h.sent.wait()
            await h.consumed(1)
    assert sorted(handle.calls) == ["m1", "m2"]  # handled unclaimed
    assert h.sent_back == [(1, 0)]  # the failed one retried, the other settled


async def test_a_batch_gets_the_messages_not_handled_yet_once_each() -> None:
    store = MemoryDedupStore()
    await store.mark_done("g:old", 60)
    batches: list[list[str]] = []

    async def handle(batch: list[ConsumerMessage]) -> None:
        batches.append([m.body.decode() for m in batch])

    async with workers(None, batch_handler=handle, consume_batch_size=4,
                       dedup=Dedup(store), consume_concurrency=1) as h:  # fmt: skip
        feed(h, "old", "new", "new", "other")
        await h.consumed(4)
    assert batches == [["new", "other"]]
    assert h.pq.tracker.committable() == 4


async def test_a_key_function_merges_copies_sent_twice() -> None:
    handle = Recorder()
    dedup = Dedup(MemoryDedupStore(), key=lambda m: m.body.decode().split("/")[0])
    async with workers(handle, dedup=dedup, consume_concurrency=1) as h:
        feed(h, "order-1/a", "order-1/b", "order-2/a")  # two sends of order-1: two ids
        await h.consumed(3)
    assert handle.calls == ["order-1/a", "order-2/a"]


async def test_dedup_needs_a_handler_and_valid_settings() -> None:
    consumer = Consumer("g", "127.0.0.1:1", dedup=Dedup(MemoryDedupStore()))
    consumer.subscribe("t")
    with pytest.raises(ConfigError, match="needs a handler"):
        async with consumer:
            pass
    with pytest.raises(ConfigError, match="claim_ttl"):
        Consumer("g", handler=Recorder(), dedup=Dedup(MemoryDedupStore(), claim_ttl=0))
    with pytest.raises(ConfigError, match="must be a Dedup"):
        Consumer("g", handler=Recorder(), dedup=MemoryDedupStore())
    with pytest.raises(ConfigError, match="not a PullConsumer"):
        PullConsumer("g", "127.0.0.1:1", dedup=Dedup(MemoryDedupStore()))


class SlowStore(MemoryDedupStore):
    """A remote store whose done marks and releases of m1 outlast the consume timeout."""

    in_process = False

    async def mark_done(self, key: str, ttl: float) -> None:
        if key == "g:m1":
            await anyio.sleep(0.5)
        await super().mark_done(key, ttl)

    async def release(self, key: str, token: str) -> None:
        if key == "g:m1":
            await anyio.sleep(0.5)
        await super().release(key, token)


@pytest.mark.parametrize("fail", [False, True])
async def test_a_consume_timeout_during_the_done_mark_or_release_settles_the_message(
    fail: bool,
) -> None:
    """The watchdog may cut the call while the store records its outcome: the message
    is then settled as a timed-out call (retried), never left unsettled."""
    store = SlowStore()
    handle = Recorder(fail={"m1"} if fail else set())
    async with workers(handle, dedup=Dedup(store), consume_timeout=0.2,
                       consume_concurrency=1) as h:  # fmt: skip
        feed(h, "m1")
        with anyio.fail_after(10):
            await h.sent.wait()  # settled as a failure: comes back
        feed(h, "m2")  # and the worker goes on
        await h.consumed(2)
    assert h.sent_back == [(0, 0)]
    assert handle.calls == ["m1", "m2"]
    # The outcome was recorded all the same (shielded): the retry is acked if it succeeded.
    assert await store.claim("g:m1", "x", 10) is (Claim.NEW if fail else Claim.DONE)
