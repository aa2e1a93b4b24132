"""Fault scenario 7: the broker's disk fills up.

A throw-away broker keeps its store on a small tmpfs (128 MiB) and refuses writes above
35 % of it (``diskSpaceWarningLevelRatio``: RocketMQ clamps the setting to 35-90 %, so a
nearly empty disk of the host cannot be made "full" by the ratio alone). A steady
producer of incompressible 16 KiB bodies fills it; sends then fail with
:class:`ServiceNotAvailableError` whose message says why; the volume is grown
(``mount -o remount,size=``, what an operator does) and sends are accepted again. Every
acknowledged message is consumed.

The broker checks its disk first 60 s after it started (fixed in RocketMQ 5.5), then
every ``cleanResourceInterval``: the producer's rate is chosen so that the volume crosses
35 % at about that time and would need minutes more to fill up. (A broker writing into a
full tmpfs gets SIGBUS in its mapped files and answers with internal errors: that is not
the scenario.)

``cleanFileForciblyEnable=false``: by default a broker past the warning ratio deletes its
oldest commit-log files at once, consumed or not. No client can keep the at-least-once
promise across that, so a production broker that must not lose data runs with it off,
as this one does (docs/faults.md).

Needs ``mount`` (root, or a user namespace that allows it); skipped with the reason
otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.errors import ServiceNotAvailableError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.scenario import Tally, produce_steadily

from .helpers import throwaway_cluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

VOLUME_MIB, GROWN_MIB = 128, 512
#: Each message's body, and the rate: 800 KiB/s reach 35 % of 128 MiB in about 56 s.
BODY, RATE = 16 * 1024, 50


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def small_store() -> Iterator[Path]:
    """A small tmpfs for the broker's store, unmounted afterwards."""
    if shutil.which("mount") is None:
        pytest.skip("the disk-full scenario needs mount(8) for a small tmpfs")
    path = Path(tempfile.mkdtemp(prefix="aiorocket-smallstore-"))
    done = _run("mount", "-t", "tmpfs", "-o", f"size={VOLUME_MIB}m", "tmpfs", str(path))
    if done.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a small tmpfs for the store: {done.stderr.strip()}")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(small_store: Path) -> Iterator[LocalRocketMQ]:
    yield from throwaway_cluster("diskfull", brokers=1, proxy=False, broker_props={
        "storePathRootDir": small_store,
        "mappedFileSizeCommitLog": 4 * 1024 * 1024,
        # The index touches a page per hash slot it fills: keep it small.
        "maxHashSlotNum": 10_000, "maxIndexNum": 40_000,
        "timerWheelEnable": False,  # the 7-day wheel alone is 38.7 MB
        "diskSpaceWarningLevelRatio": 35,  # the least RocketMQ accepts
        "cleanFileForciblyEnable": False,  # see the module docstring
        "cleanResourceInterval": 1_000,  # check the disk every second (default 10 s)
    })  # fmt: skip


async def test_full_disk_refuses_sends_with_a_clear_error_and_loses_nothing_acknowledged(
    cluster: LocalRocketMQ, small_store: Path, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("diskfull"), unique_name("g")
    await cluster.create_topic(topic, queues=4)
    tally, stop = Tally(), anyio.Event()
    consumer = Consumer(
        group, cluster.namesrv_addr, handler=tally.handler,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, persist_offset_interval=0.5,
    )  # fmt: skip
    consumer.subscribe(topic)
    producer = Producer(unique_name("p"), cluster.namesrv_addr, send_timeout=3.0)
    async with consumer, producer:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: produce_steadily(producer, topic, tally, rate=RATE, stop=stop, size=BODY)
            )
            with anyio.fail_after(180):  # the volume reaches the warning ratio
                await tally.wait_send_errors(ServiceNotAvailableError.__name__, 3)
            full_at = len(tally.acked)
            with pytest.raises(ServiceNotAvailableError) as refused:
                await producer.send(Message(topic, b"one more"))
            assert refused.value.retriable
            assert "disk" in str(refused.value).lower()
            grown = _run("mount", "-o", f"remount,size={GROWN_MIB}m", str(small_store))
            assert grown.returncode == 0, grown.stderr
            with anyio.fail_after(60):  # the broker accepts writes again
                await tally.wait_acked(full_at + 50)
            stop.set()
        with anyio.fail_after(60):
            await tally.wait_all_consumed()
    print("disk full:", tally.summary())
    assert not tally.lost
    assert set(tally.send_errors) == {ServiceNotAvailableError.__name__}
    assert full_at * BODY > 0.3 * VOLUME_MIB * 1024 * 1024  # it was the volume that filled
