"""How the CLI reads a topic without a group of its own: a manually assigned pull
consumer in the tools group (``TOOLS_CONSUMER``, which every broker has), committing
nothing, that gives up when its pulls keep failing instead of retrying silently."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import anyio

from aiorocket.admin import TOOLS_GROUP, Admin
from aiorocket.consumer import PullConsumer
from aiorocket.errors import RocketMQError
from aiorocket.message import MessageQueue

__all__ = ["PullFailures", "reader"]


async def reader(
    admin: Admin, namesrv: str, queues: Sequence[MessageQueue], *, timeout: float,
    long_poll: float = 2.0,
) -> PullConsumer:  # fmt: skip
    """A pull consumer of ``queues`` in the tools group, after checking each of their
    brokers has that group (else one error saying how to create it)."""
    await admin.require_reader_group(mq.broker_name for mq in queues)
    return PullConsumer(
        TOOLS_GROUP, namesrv, auto_commit=False, request_timeout=timeout,
        long_poll_timeout=long_poll,
    )  # fmt: skip


class PullFailures(logging.Handler):
    """Watches the consumer's ``pull_failed`` events: ``check()`` raises the last error
    once pulls have failed for ``window`` seconds with no message read in between
    (``progress()``). An idle follow (long polls that find nothing) never fails."""

    def __init__(self, window: float) -> None:
        super().__init__(logging.WARNING)
        self.window = window
        self._since: float | None = None
        self._last = ""

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg if isinstance(record.msg, dict) else {}
        if event.get("event") == "pull_failed":
            self._last = str(event.get("error", ""))
            if self._since is None:
                self._since = time.monotonic()

    def progress(self) -> None:
        self._since = None

    def check(self) -> None:
        if self._since is not None and time.monotonic() - self._since >= self.window:
            raise RocketMQError(f"pulls keep failing ({self.window:.0f} s): {self._last}")

    async def watch(self) -> None:
        """``check()`` every second, until cancelled (beside a loop that cannot)."""
        while True:
            await anyio.sleep(1.0)
            self.check()

    @contextmanager
    def watching(self) -> Iterator[PullFailures]:
        # The CLI silences the library's log unless -v: the consumer's logger still
        # hands its warnings to this handler (and only to it, then).
        log = logging.getLogger("aiorocket.consumer")
        level, propagate = log.level, log.propagate
        if not log.isEnabledFor(logging.WARNING):
            log.setLevel(logging.WARNING)
            log.propagate = False
        log.addHandler(self)
        try:
            yield self
        finally:
            log.removeHandler(self)
            log.setLevel(level)
            log.propagate = propagate
