"""A ProcessQueue's lifecycle (aiorocket.consumer.process_queue): the transition rule on
its own, then the real ProcessQueue moved by pause, resume and drop. No fakes."""

from __future__ import annotations

import itertools

import anyio
import pytest

from aiorocket.consumer.process_queue import (
    TRANSITIONS,
    InvalidQueueTransition,
    ProcessQueue,
    QueueState,
    next_state,
)
from aiorocket.message import MessageQueue

A, P, D = QueueState.ACTIVE, QueueState.PAUSED, QueueState.DROPPED
ALLOWED = {(A, P), (A, D), (P, A), (P, D)}


@pytest.mark.parametrize(("current", "wanted"), list(itertools.product(QueueState, repeat=2)))
def test_every_pair_of_states(current: QueueState, wanted: QueueState) -> None:
    if current is wanted or (current, wanted) in ALLOWED:
        assert next_state(current, wanted) is wanted
    else:
        with pytest.raises(InvalidQueueTransition, match=f"{current.value}.*{wanted.value}"):
            next_state(current, wanted)


def test_the_table_is_exactly_the_allowed_moves() -> None:
    assert {(c, w) for c, targets in TRANSITIONS.items() for w in targets} == ALLOWED
    assert TRANSITIONS[D] == frozenset()  # dropped is final


def queue() -> ProcessQueue:
    return ProcessQueue(MessageQueue("t", "broker-a", 0), 0)


def test_a_queue_starts_active() -> None:
    pq = queue()
    assert pq.state is A and not pq.paused and not pq.dropped


def test_pause_and_resume() -> None:
    pq = queue()
    pq.pause()
    pq.pause()  # twice: no change
    assert pq.state is P and pq.paused and not pq.dropped
    pq.resume()
    assert pq.state is A and not pq.paused


def test_a_dropped_queue_stays_dropped() -> None:
    pq = queue()
    pq.pause()
    pq.drop()
    assert pq.state is D and pq.dropped and not pq.paused
    pq.pause()  # the application's pause of a queue a rebalance just revoked
    pq.resume()
    pq.drop()  # and the close dropping everything again
    assert pq.state is D


@pytest.mark.anyio
async def test_resume_wakes_the_queue_waiting_pull_task() -> None:
    pq = queue()
    pq.pause()
    woke = anyio.Event()

    async def pull_task() -> None:
        while pq.paused:
            await pq.wait_changed()
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pull_task)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        pq.resume()
    assert woke.is_set()
