"""Fault scenario 6: a consumer frozen for longer than the broker's channel expiry.

Two members share a group: one in this process, one in a process of its own
(``frozen_member.py``), which the test freezes with SIGSTOP, as a long GC pause, a
suspended VM or a debugger would. The broker hears no heartbeat from it, expires its
channel (``channelExpiredTimeout``, 10 s here instead of 120 s, so that the test takes
seconds), removes it from the group and closes its connection; the other member takes
every queue, starting from the committed offsets. After SIGCONT the frozen member finds
its connections closed, connects and heartbeats again, and rejoins: the queues are
shared again. Nothing acknowledged is lost; the messages consumed twice are at most what
the frozen member held: its cached and uncommitted messages of the queues it owned.

The rejoin is a second handover: half the queues move back, and the thawed member starts
them at the offsets the other member committed, so whatever that member had consumed
past its last commit is consumed again (its in-flight window, docs/reliability.md). Left
to chance, that window is large: the thaw comes right after the other member took every
queue, while it catches up the backlog of the freeze (16-20 s of it on a loaded
machine), and its commits (with each pull, and every 0.5 s) trail its handler by up to
a hundred messages a queue (a CI run failed with 162 duplicates; in a run under load
that counted who consumed what, 194: 96 + 96 consumed by the other member first, then by
the thawed one from that member's stale commit, 2 the frozen member's own). The test
keeps that window empty (nothing is sent from the expiry until the queues are shared
again, and the thaw waits until the other member's commits cover everything), so what
it counts is the frozen member's window alone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from aiorocket.admin import Admin
from aiorocket.consumer import Consumer
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.scenario import Tally, produce_steadily

from .helpers import throwaway_cluster
from .test_fault_campaign import CONSUMER, PRODUCER, TopicAssignment

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: The broker drops a client it has not heard from for this long (ms); it looks every 10 s.
CHANNEL_EXPIRY_MS = 10_000
#: The frozen member's window: per queue at most this many cached messages, plus a batch.
THRESHOLD, BATCH = 16, 8
QUEUES = 4
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRocketMQ]:
    expiry = {"channelExpiredTimeout": CHANNEL_EXPIRY_MS}
    yield from throwaway_cluster("frozen", brokers=1, proxy=False, broker_props=expiry)


class Member:
    """The other process: what it consumed, counted line by line as it reports it."""

    def __init__(self, process: Process, tally: Tally) -> None:
        self.process, self.tally = process, tally
        self.consumed: Counter[bytes] = Counter()
        self._changed = anyio.Event()

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = ""
        async for chunk in TextReceiveStream(self.process.stdout):
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                self.consumed[bytes.fromhex(line)] += 1
                self.tally.record(bytes.fromhex(line))
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_consumed(self, predicate: Callable[[bytes], bool]) -> None:
        """Until it has consumed a body for which ``predicate`` is true."""
        while not any(predicate(body) for body in self.consumed):
            await self._changed.wait()


async def test_consumer_frozen_past_the_channel_expiry_rejoins_and_loses_nothing(
    cluster: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("frozen"), unique_name("g")
    await cluster.create_topic(topic, queues=QUEUES)
    settings = {**CONSUMER, "pull_threshold_for_queue": THRESHOLD, "pull_batch_size": BATCH}
    del settings["consume_from_where"]  # an enum; the member sets FIRST_OFFSET itself
    tally, stop, mine = Tally(), anyio.Event(), TopicAssignment(topic)
    consumer = Consumer(group, cluster.namesrv_addr, handler=tally.handler, listener=mine,
                        **CONSUMER)  # fmt: skip
    consumer.subscribe(topic)
    producer = Producer(unique_name("p"), cluster.namesrv_addr, **PRODUCER)
    argv = [sys.executable, "-m", "tests.integration.frozen_member",
            cluster.namesrv_addr, group, topic, json.dumps(settings)]  # fmt: skip
    async with await anyio.open_process(argv, cwd=ROOT, stderr=None) as process:
        member = Member(process, tally)
        try:
            async with consumer, producer, Admin(cluster.namesrv_addr) as admin, \
                    anyio.create_task_group() as tg:  # fmt: skip
                tg.start_soon(member.read)
                paused, quiet = anyio.Event(), anyio.Event()

                async def produce_until_paused() -> None:
                    await produce_steadily(producer, topic, tally, rate=50, stop=paused)
                    quiet.set()  # its last send returned

                tg.start_soon(produce_until_paused)
                with anyio.fail_after(60):  # both members consume, two queues each
                    await mine.wait_for(QUEUES // 2)
                    await member.wait_consumed(lambda body: True)
                os.kill(process.pid, signal.SIGSTOP)
                frozen_at = anyio.current_time()
                try:
                    # Expiry, the broker's next 10 s look, then a rebalance: all queues here.
                    with anyio.fail_after(CHANNEL_EXPIRY_MS / 1000 + 10 + 30):
                        await mine.wait_for(QUEUES)
                    expired_after = anyio.current_time() - frozen_at
                    # Half the queues move back at the rejoin: with nothing sent until
                    # then and our commits up to the end, we have no window to repeat.
                    paused.set()
                    with anyio.fail_after(30):
                        await quiet.wait()
                        await tally.wait_all_consumed()
                        while (await admin.lag(group, topic)).total:  # noqa: ASYNC110
                            await anyio.sleep(0.1)  # commits every 0.5 s: no event here
                finally:
                    os.kill(process.pid, signal.SIGCONT)
                with anyio.fail_after(60):  # it rejoins, and consumes what is new
                    await mine.wait_for(QUEUES // 2)
                    tg.start_soon(lambda: produce_steadily(producer, topic, tally, rate=50,
                                                           stop=stop, prefix="n"))  # fmt: skip
                    await member.wait_consumed(lambda body: body.startswith(b"n-"))
                rejoined_after = anyio.current_time() - frozen_at - expired_after
                stop.set()
                with anyio.fail_after(60):
                    await tally.wait_all_consumed()  # by either member
                process.terminate()  # the member drains and commits; its output ends
        finally:
            if process.returncode is None:
                process.kill()
    print(f"consumer SIGSTOP past channel expiry: all queues moved {expired_after:.1f}s "
          f"after the freeze, shared again {rejoined_after:.1f}s after that; "
          f"{sum(member.consumed.values())} by the frozen member;", tally.summary())  # fmt: skip
    assert not tally.lost
    # The frozen member's in-flight window: the queues it owned, each with its cache and
    # one batch on the way, consumed or not when it froze. (The other member's window at
    # the rejoin is empty by construction: see the module's docstring.)
    assert tally.duplicates <= QUEUES // 2 * (THRESHOLD + BATCH)
