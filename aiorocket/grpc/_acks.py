"""Batched acks of the push consumer: one AckMessage per topic for what settled together.

``add`` only queues the ack; the flusher sends what queued within ``delay`` seconds in
requests of at most ``MAX_ENTRIES`` entries (the Proxy acks and answers each entry on
its own). A failed ack is logged, not retried: the message becomes visible again when
its invisible duration ends and is delivered again (at least once).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import anyio

from aiorocket._log import get_logger
from aiorocket.errors import RocketMQError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._encode import FastAckResponse, ack_request
from aiorocket.grpc._transport import check_status

if TYPE_CHECKING:
    from aiorocket.grpc._push_message import PopMessage
    from aiorocket.grpc._simple import SimpleConsumer

__all__ = ["AckBatcher"]

MAX_ENTRIES = 64


class AckBatcher:
    def __init__(self, consumer: SimpleConsumer, delay: float) -> None:
        self.consumer = consumer
        self.delay = delay
        self._pending: dict[str, list[PopMessage]] = defaultdict(list)
        self._wake = anyio.Event()
        self.log = get_logger("grpc.acks", group=consumer.group)

    def add(self, msg: PopMessage) -> None:
        self._pending[msg.topic].append(msg)
        self._wake.set()

    async def run(self) -> None:
        """The flusher task (owned by the push consumer's task group)."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self.delay:
                await anyio.sleep(self.delay)
            await self.flush()

    async def flush(self) -> None:
        """Send everything queued now (also called once more when closing)."""
        while self._pending:
            batches, self._pending = self._pending, defaultdict(list)
            for topic, msgs in batches.items():
                for i in range(0, len(msgs), MAX_ENTRIES):
                    chunk = msgs[i : i + MAX_ENTRIES]
                    try:
                        await self._ack(topic, chunk)
                    except RocketMQError as err:
                        self.log.warning("ack_failed", topic=topic, n=len(chunk), error=str(err))

    async def _ack(self, topic: str, msgs: list[PopMessage]) -> None:
        c = self.consumer
        handles = [(m.message_id, m.receipt_handle) for m in msgs]
        req = ack_request(c.transport.namespace, c.group, topic, handles)
        resp = await c.transport.unary("AckMessage", req, FastAckResponse)
        check_status(resp.status, "AckMessage")
        for entry in resp.entries:
            if entry.status.code not in (0, pb.Code.OK):
                self.log.warning(
                    "ack_entry_failed", topic=topic, code=entry.status.code,
                    error=entry.status.message,
                )  # fmt: skip
