"""Shared helpers for integration tests against the real local RocketMQ."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket._unique_id import create_unique_id
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import SendResult
from aiorocket.errors import BrokerResponseError
from aiorocket.message import Message, MessageQueue
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.message_codec import encode_properties
from aiorocket.testing.broker import BrokerStartError, LocalRocketMQ
from tests.threads_left import outlives_its_test


async def send_raw(
    client: ClientInstance,
    mq: MessageQueue,
    msg: Message,
    *,
    sys_flag: int = 0,
    body: bytes | None = None,
) -> SendResult:
    """One SEND_MESSAGE_V2 straight to ``mq`` (no producer logic)."""
    route = await client.namesrv.get_route(mq.topic)
    addr = route.master_addr(mq.broker_name)
    assert addr is not None
    uniq = create_unique_id()
    props = msg.wire_properties()
    props["UNIQ_KEY"] = uniq
    for attempt in range(10):
        try:
            return await client.broker.send_message(
                addr,
                mq,
                msg.body if body is None else body,
                encode_properties(props),
                producer_group="it-producer",
                msg_id=uniq,
                sys_flag=sys_flag,
            )
        except BrokerResponseError as exc:
            # A loaded broker sheds load with SYSTEM_BUSY; the message was not stored.
            if exc.code != ResponseCode.SYSTEM_BUSY or attempt == 9:
                raise
            await anyio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 30.0,
    every: float = 0.1,
) -> None:
    """Poll ``check`` until it holds; for broker state that offers no event to wait on."""
    with anyio.fail_after(timeout):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await anyio.sleep(every)


async def send_many(
    client: ClientInstance, topic: str, messages: list[Message]
) -> list[SendResult]:
    """Send ``messages`` round-robin over every writable queue of ``topic``."""
    route = await client.namesrv.query_route(topic)
    queues = route.write_queues()
    return [await send_raw(client, queues[i % len(queues)], m) for i, m in enumerate(messages)]


async def wait_dispatched(client: ClientInstance, topic: str, results: list[SendResult]) -> None:
    """Wait until the brokers' consume queues show every sent message (built asynchronously)."""
    route = await client.namesrv.query_route(topic)
    need: dict[MessageQueue, int] = {}
    for r in results:
        need[r.queue] = max(need.get(r.queue, 0), r.queue_offset + 1)

    async def done() -> bool:
        for mq, n in need.items():
            addr = route.master_addr(mq.broker_name)
            assert addr is not None
            if await client.broker.get_max_offset(addr, mq) < n:
                return False
        return True

    await eventually(done)


async def one_queue_topic(
    rocketmq: LocalRocketMQ, topic: str, group: str, *, orderly: bool = False
) -> None:
    """Create ``topic`` with a single queue (on the first broker) and ``group``."""
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await rocketmq.create_group(group, orderly=orderly)


class EarlyCluster:
    """A throw-away cluster in a fresh directory, started with
    ``LocalRocketMQ.start(**start)`` in a thread of its own from the moment this is made:
    a module whose test waits on a broker's clock (its first file cleaner and disk check
    run 60 s after it started, fixed in RocketMQ 5.5) declares ``PRESTART = (prefix,
    start)`` and gets its cluster started as the first test of its directory sets up
    (tests/conftest.py), its clock running while the tests before it do."""

    def __init__(self, prefix: str, **start: Any) -> None:
        self.base = Path(tempfile.mkdtemp(prefix=f"aiorocket-{prefix}-"))
        self.inst = LocalRocketMQ(self.base)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(start,), daemon=True,
                                        name=f"start-{prefix}")  # fmt: skip
        outlives_its_test(self._thread)  # close() or the module's fixture joins it
        self._thread.start()

    def _start(self, start: dict[str, Any]) -> None:
        try:
            self.inst.start(**start)
        except BaseException as exc:  # re-raised where the cluster is used
            self._error = exc

    def close(self) -> None:
        self._thread.join()
        self.inst.stop(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def use(self) -> Iterator[LocalRocketMQ]:
        """For a module fixture (``yield from``): the cluster once it is ready, stopped
        and removed afterwards. One that does not start fails the test with the reason,
        not a traceback."""
        self._thread.join()
        try:
            if isinstance(self._error, BrokerStartError):
                pytest.fail(f"throw-away cluster failed to start: {self._error}", pytrace=False)
            if self._error is not None:
                raise self._error
            yield self.inst
        finally:
            self.close()


#: module name -> its PRESTART cluster, started ahead (tests/conftest.py).
EARLY: dict[str, EarlyCluster] = {}


def prestarted(module: Any) -> Iterator[LocalRocketMQ]:
    """For the module fixture of a module that declares ``PRESTART``: its cluster,
    started ahead if the session did, else now."""
    early = EARLY.pop(module.__name__, None)
    if early is None:
        prefix, start = module.PRESTART
        early = EarlyCluster(prefix, **start)
    yield from early.use()


def throwaway_cluster(prefix: str, **start: Any) -> Iterator[LocalRocketMQ]:
    """For a module fixture (``yield from``): a cluster of its own in a fresh directory,
    started with ``LocalRocketMQ.start(**start)``, stopped and removed afterwards. A
    cluster that does not start fails the test with the reason, not a traceback."""
    yield from EarlyCluster(prefix, **start).use()
