"""examples/faststream_service.py (shown in docs/faststream.md): its test with
TestRocketBroker, in memory and, the same code, against the real broker
(``with_real=True``); and ``faststream run`` of it as a real process, stopped by SIGTERM
while handlers run: they finish (drain), and a second instance bills the rest."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere
from aiorocket.faststream import RocketMessage, TestRocketBroker
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastStream runs on asyncio


# --8<-- [start:fixture]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "faststream_service.py"


def load_example(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """A fresh copy of the example module, configured by ``env`` as at its start."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"fs_example_{uuid.uuid4().hex}", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["memory", "real"])
def service(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
    unique_name: Callable[[str], str],
) -> Iterator[tuple[ModuleType, bool]]:  # fmt: skip
    """The example in memory, or on the real broker with fresh topics and group."""
    real = request.param == "real"
    if not real:
        yield load_example(monkeypatch), False
        return
    request.applymarker(pytest.mark.integration)
    rocketmq: LocalRocketMQ = request.getfixturevalue("rocketmq")
    env = {"ORDERS_TOPIC": unique_name("orders"), "INVOICES_TOPIC": unique_name("invoices"),
           "ORDERS_GROUP": unique_name("billing"),
           "AIOROCKET_NAMESRV_ADDR": rocketmq.namesrv_addr}  # fmt: skip
    for topic in (env["ORDERS_TOPIC"], env["INVOICES_TOPIC"]):
        anyio.run(rocketmq.create_topic, topic, 2)
    yield load_example(monkeypatch, **env), True
# --8<-- [end:fixture]


# --8<-- [start:test]
@pytest.mark.anyio
async def test_a_paid_order_is_billed(service: tuple[ModuleType, bool]) -> None:
    app, real = service  # the example module; in memory, or the real broker
    broker, order = app.broker, app.Order(id=1, customer="ada", amount=10.0)
    issued: list[tuple[Any, str | None, list[str]]] = []
    audited = asyncio.Event()

    @broker.subscriber(app.INVOICES, group=f"{app.GROUP}-audit",
                       consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    async def audit(invoice: app.Invoice, message: RocketMessage) -> None:
        issued.append((invoice, message.raw_message.tags, message.raw_message.keys))
        audited.set()

    async with TestRocketBroker(broker, with_real=real) as br:
        await br.publish(order, app.ORDERS, tags="paid")
        await app.bill.wait_call(timeout=30)
        await asyncio.wait_for(audited.wait(), 30)
        app.bill.mock.assert_called_once_with({"id": 1, "customer": "ada", "amount": 10.0})
    assert issued == [(app.Invoice(order_id=1, customer="ada", total=12.0), "issued", ["1"])]
# --8<-- [end:test]


@pytest.mark.anyio
async def test_an_unpaid_or_invalid_order_is_not_billed_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = load_example(monkeypatch)
    async with TestRocketBroker(app.broker) as br:
        await br.publish({"id": 2, "customer": "bob", "amount": 5.0}, app.ORDERS, tags="open")
        assert app.bill.mock.call_count == 0  # another tag: not this subscriber's
        with pytest.raises(ValueError, match="amount"):  # the model refuses it
            await br.publish({"id": 3, "customer": "bob", "amount": -1}, app.ORDERS,
                             tags="paid")  # fmt: skip


def _journal(path: Path) -> tuple[set[str], set[str]]:
    lines = path.read_text().split("\n") if path.exists() else []
    started = {line.split()[1] for line in lines if line.startswith("started ")}
    billed = {line.split()[1] for line in lines if line.startswith("billed ")}
    return started, billed


def _wait(check: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path,
          timeout: float) -> None:  # fmt: skip
    """Poll ``check`` until true; fails if the process ends first or after ``timeout``
    (a guard: what the test shows is the order of events, not how long they took)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)  # another process's progress: polled, no event to await


@contextmanager
def _service(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The service process, killed (and reaped) on the way out if it still runs: a
    failed wait or assertion leaves no service consuming the session's cluster."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.integration
def test_faststream_run_drains_on_sigterm_and_the_next_instance_bills_the_rest(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The drain waits for the running handlers (5 s each), not for its bound: the
    bound (``graceful_timeout``) is 600 s, past the 120 s the exit is awaited, so a
    drain that waited it out fails there, and one that cut the handlers leaves orders
    started but not billed. The start-up waits are guards of 300 s: a loaded machine
    (load 30+) took over a minute to start the service's interpreter and join."""
    orders, invoices = unique_name("orders"), unique_name("invoices")
    for topic in (orders, invoices):
        anyio.run(rocketmq.create_topic, topic, 2)
    env = {**os.environ, "AIOROCKET_NAMESRV_ADDR": rocketmq.namesrv_addr,
           "ORDERS_TOPIC": orders, "INVOICES_TOPIC": invoices,
           "ORDERS_GROUP": unique_name("billing"), "GRACEFUL_TIMEOUT": "600"}  # fmt: skip

    async def send_orders() -> None:
        async with Producer("fs-example-orders", rocketmq.namesrv_addr) as producer:
            for i in range(40):
                body = b'{"id": %d, "customer": "c%d", "amount": 10}' % (i, i)
                await producer.send(Message(orders, body, tags="paid"))

    anyio.run(send_orders)
    cmd = [sys.executable, "-m", "faststream", "run", "faststream_service:app",
           "--app-dir", str(EXAMPLE.parent)]  # fmt: skip

    def run(journal: Path, log: Path, seconds: str) -> ContextManager[subprocess.Popen[bytes]]:
        return _service(cmd, {**env, "ORDERS_JOURNAL": str(journal),
                              "ORDER_PROCESSING_SECONDS": seconds}, log)  # fmt: skip

    first_journal, first_log = tmp_path / "first.journal", tmp_path / "first.log"
    with run(first_journal, first_log, "5") as first:
        # 8 handlers at a time, 5 s each: SIGTERM once the first 8 are billed and more
        # run (the last of the 40 would be billed 20 s later).
        _wait(lambda: len(_journal(first_journal)[1]) >= 8, first, first_log, timeout=300)
        first.send_signal(signal.SIGTERM)
        assert first.wait(120) == 0, first_log.read_text()  # the bound: 600 s
    started, billed = _journal(first_journal)
    assert started == billed  # every handler that started finished: drained, not cut
    assert len(billed) < 40

    second_journal, second_log = tmp_path / "second.journal", tmp_path / "second.log"
    with run(second_journal, second_log, "0") as second:
        everything = {str(i) for i in range(40)}
        _wait(lambda: billed | _journal(second_journal)[1] >= everything, second, second_log,
              timeout=300)  # fmt: skip
        second.send_signal(signal.SIGTERM)
        assert second.wait(120) == 0, second_log.read_text()
