"""Idempotent consumption: a message whose key was handled already is not handled again.

At-least-once delivery brings duplicates (a broker crash, a redelivery after a lost
ack, a producer's retried send). With ``Consumer(..., dedup=Dedup(store))`` each handler
call first *claims* its messages' keys in a store:

- a key claimed now (``NEW``) runs the handler; its success marks the key ``DONE``
  (kept ``done_ttl`` seconds), its failure releases the claim so the retry runs it;
- a key already ``DONE`` is settled as a success without calling the handler;
- a key another call holds (``IN_PROGRESS``: another member, or a copy in flight) is
  failed back to the transport's retry, so it comes back after the holder finished
  (then it is ``DONE``) or its claim expired (``claim_ttl``: the holder crashed).

A claim shorter than a handler call may last (``claim_ttl`` below the consume timeout,
chosen so a crashed member's messages come back sooner) is *renewed* every third of
``claim_ttl`` while the call runs, so it never expires under a live handler (another
member would then handle the same message at the same time).

A claim is never the only copy of a message's fate: the message itself is settled by
the broker's rules, so a store that fails or hangs (bounded by ``store_timeout``) only
costs deduplication, never a message: the handler then runs unclaimed (logged
``dedup_store_failed``). Stores implement [`DedupStore`][aiorocket.consumer.dedup.DedupStore]:
[`MemoryDedupStore`][aiorocket.consumer.dedup.MemoryDedupStore] here, Redis in
``aiorocket.consumer.dedup_redis``.
"""

from __future__ import annotations

import enum
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.lowlevel

from aiorocket._failure_log import msg_id_of
from aiorocket.errors import ConfigError

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.received import ConsumerMessage

__all__ = ["Claim", "Dedup", "DedupStore", "MemoryDedupStore", "default_key"]


class Claim(enum.Enum):
    """What a store answers to a claim."""

    NEW = "new"  #: claimed now, by this token: run the handler
    DONE = "done"  #: handled already: settle as a success
    IN_PROGRESS = "in_progress"  #: another token holds it: retry later


class DedupStore(Protocol):
    """Where keys are claimed. Every method may raise or hang: the consumer bounds each
    call by ``Dedup.store_timeout`` and then carries on without the store.

    A store may also define ``check_loop(self) -> None``, called when the consumer
    starts, raising ``ConfigError`` where it cannot serve the running event loop;
    ``in_process = True`` when its calls never await anything (they are then made
    without a timeout and shield); and ``renew(self, key, token, ttl) -> bool``, which
    extends the claim of ``key`` to ``ttl`` seconds from now if ``token`` still holds it
    (False if it does not): needed for a ``claim_ttl`` shorter than a handler call may
    last (see ``Dedup.claim_ttl``).
    """

    async def claim(self, key: str, token: str, ttl: float) -> Claim:
        """Claim ``key`` for ``token`` for ``ttl`` seconds unless it is claimed or done."""
        ...

    async def mark_done(self, key: str, ttl: float) -> None:
        """Remember ``key`` as handled for ``ttl`` seconds."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Forget the claim of ``key`` if ``token`` still holds it (else do nothing)."""
        ...


_DONE = ""  # the token of a done key in MemoryDedupStore
#: the default claim_ttl's margin over consume_timeout: shorter claims are renewed
_CALL_MARGIN = 30.0


class MemoryDedupStore:
    """A process's own store: deduplicates redeliveries to this process only.

    Its calls never wait (``in_process``): the consumer calls it without the timeout
    and shield it puts around a remote store's, which would cost it most of its time.

    Parameters
    ----------
    max_keys:
        Keys kept at most; past it the least recently claimed are forgotten first
        (a forgotten key is handled again if its message comes back).
    clock:
        Seconds, for expiries (default ``time.monotonic``; the simulator passes its
        virtual clock).
    """

    #: its calls neither wait nor fail: no timeout or shield around them
    in_process = True

    def __init__(
        self, max_keys: int = 100_000, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_keys < 1:
            raise ConfigError("max_keys must be >= 1")
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[str, tuple[str, float]] = OrderedDict()  # token, expiry

    def __len__(self) -> int:
        return len(self._keys)

    async def claim(self, key: str, token: str, ttl: float) -> Claim:
        now = self._clock()
        keys = self._keys
        held = keys.get(key)
        if held is not None and held[1] > now:
            return Claim.DONE if held[0] == _DONE else Claim.IN_PROGRESS
        keys[key] = (token, now + ttl)
        keys.move_to_end(key)
        while len(keys) > self.max_keys:
            keys.popitem(last=False)
        return Claim.NEW

    async def mark_done(self, key: str, ttl: float) -> None:
        self._keys[key] = (_DONE, self._clock() + ttl)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)

    async def release(self, key: str, token: str) -> None:
        held = self._keys.get(key)
        if held is not None and held[0] == token:
            del self._keys[key]

    async def renew(self, key: str, token: str, ttl: float) -> bool:
        held = self._keys.get(key)
        if held is None or held[0] != token:
            return False
        self._keys[key] = (token, self._clock() + ttl)
        return True


def default_key(msg: ConsumerMessage) -> str:
    """The message's id: its ``UNIQ_KEY`` (the same in every copy the broker delivers,
    retries included), else its offset id."""
    return msg.msg_id


@dataclass(frozen=True, slots=True)
class Dedup:
    """Idempotent consumption settings (``Consumer(..., dedup=Dedup(store))``).

    Parameters
    ----------
    store:
        Where keys are claimed: ``MemoryDedupStore()``, ``RedisDedupStore(client)``, yours.
    key:
        A message's key; default its id (``UNIQ_KEY``). A business key (an order id, the
        Spark sink's ``sparkDedupKey`` property) also merges copies sent twice.
    claim_ttl:
        Seconds a claim lasts: a message whose handler crashed with the process is
        handled again once it expired. None: ``consume_timeout`` plus 30 s (a handler
        call never outlives it). Shorter (a crashed member's messages come back
        sooner), the claims of a running call are renewed every ``claim_ttl / 3``
        seconds (the store needs ``renew``), so no live call loses its claim.
    done_ttl:
        Seconds a handled key is remembered (default a day).
    store_timeout:
        Seconds one store call may take before the consumer carries on without it.
    """

    store: DedupStore
    key: Callable[[ConsumerMessage], str] = default_key
    claim_ttl: float | None = None
    done_ttl: float = 24 * 3600.0
    store_timeout: float = 3.0

    def validate(self) -> None:
        for name in ("claim_ttl", "done_ttl", "store_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"Dedup.{name} must be > 0")

    def check_loop(self) -> None:
        """At the consumer's start: the store's own check of the running event loop."""
        check = getattr(self.store, "check_loop", None)
        if check is not None:
            check()


class Claims:
    """One handler call's claims: which messages to hand over and which keys we hold."""

    __slots__ = ("busy", "held", "todo")

    def __init__(self) -> None:
        #: messages to hand to the handler (the first of each key not done)
        self.todo: list[ConsumerMessage] = []
        #: keys claimed by this call, with their tokens
        self.held: dict[str, str] = {}
        #: some key is claimed by another call
        self.busy = False


class Deduplicator:
    """The runtime side of ``Dedup`` for one consumer (``Handler.call`` uses it)."""

    def __init__(self, dedup: Dedup, *, group: str, consume_timeout: float, log: Logger) -> None:
        self.store = dedup.store
        self.key = dedup.key
        self.claim_ttl = (
            dedup.claim_ttl if dedup.claim_ttl is not None else consume_timeout + _CALL_MARGIN
        )
        self.done_ttl = dedup.done_ttl
        self.timeout = dedup.store_timeout
        self._prefix = f"{group}:"  # a key is deduplicated per consumer group
        self._token_prefix = os.urandom(6).hex()
        self._count = 0
        self._log = log
        # A store that never waits needs no timer-backed scope (most of its cost).
        self._local = bool(getattr(dedup.store, "in_process", False))
        #: a handler call may outlast a claim (the consume timeout cuts it later than
        #: the claim expires): the call's claims are renewed while it runs
        self.renews = self.claim_ttl < consume_timeout + _CALL_MARGIN
        if self.renews and getattr(dedup.store, "renew", None) is None:
            raise ConfigError(
                f"Dedup.claim_ttl {self.claim_ttl:g} s is shorter than a handler call may "
                f"last (consume_timeout {consume_timeout:g} s): the claims of a running "
                f"call must be renewed, and {type(dedup.store).__name__} has no renew(); "
                "add one or make claim_ttl at least consume_timeout + 30"
            )

    def _scope(self, *, shield: bool = False) -> AbstractContextManager[object]:
        """The bound of one store call (and its shield from a cancellation)."""
        if self._local:
            return nullcontext()
        if shield:
            return anyio.CancelScope(shield=True)
        return anyio.fail_after(self.timeout)

    def _token(self) -> str:
        self._count += 1
        return f"{self._token_prefix}-{self._count}"

    async def claim(self, live: list[ConsumerMessage]) -> Claims:
        """Claim the keys of ``live``. Cancelled here, the claims made are released
        (a claim the store made but did not answer expires after ``claim_ttl``)."""
        claims = Claims()
        seen: set[str] = set()
        tried: dict[str, str] = {}
        try:
            for msg in live:
                key = self._prefix + self.key(msg)
                if key in seen:
                    continue  # a copy in the same call: settled with the first
                seen.add(key)
                token = tried[key] = self._token()
                answer = await self._claim_one(key, token, msg)
                if answer is Claim.NEW:
                    claims.held[key] = token
                    claims.todo.append(msg)
                elif answer is Claim.IN_PROGRESS:
                    claims.busy = True
                    break
        except BaseException:
            await self._release(tried)
            raise
        return claims

    async def _claim_one(self, key: str, token: str, msg: ConsumerMessage) -> Claim | None:
        """The store's answer, or None (treated as NEW, unclaimed) when it failed."""
        try:
            with self._scope():
                return await self.store.claim(key, token, self.claim_ttl)
        except Exception as exc:
            self._log.warning("dedup_store_failed", op="claim", key=key,
                              msg_id=msg_id_of(msg), error=repr(exc))  # fmt: skip
            return Claim.NEW

    async def keep(self, claims: Claims) -> None:
        """Renew ``claims`` every third of ``claim_ttl`` until cancelled (run beside a
        handler call that may outlast them). A claim another token took meanwhile (ours
        expired: the store was unreachable too long) is logged and no longer renewed; a
        store that fails is tried again at the next round."""
        held = dict(claims.held)
        renew = self.store.renew  # type: ignore[attr-defined]  # checked in __init__
        while held:
            await anyio.sleep(self.claim_ttl / 3)  # a period, not an event
            for key, token in list(held.items()):
                try:
                    with self._scope():
                        kept = await renew(key, token, self.claim_ttl)
                except Exception as exc:
                    self._log.warning("dedup_store_failed", op="renew", key=key,
                                      error=repr(exc))  # fmt: skip
                    continue
                if not kept:
                    del held[key]
                    self._log.warning("dedup_claim_lost", key=key, claim_ttl=self.claim_ttl)

    async def checkpoint(self) -> None:
        """After a shielded done mark or release: a cancellation that came meanwhile (the
        consume timeout's watchdog, a close) is raised here, while the caller still
        counts the call as running, so the message is settled as a cut call; raised at
        the caller's next await (its settle), it would leave the message unsettled."""
        if not self._local:
            await anyio.lowlevel.checkpoint_if_cancelled()

    async def done(self, claims: Claims) -> None:
        """The handler succeeded: remember every key it handled (claimed or not)."""
        with self._scope(shield=True):  # the outcome is known: record it
            for key in claims.held:
                try:
                    with self._scope():
                        await self.store.mark_done(key, self.done_ttl)
                except Exception as exc:  # the claim expires: a copy may run again
                    self._log.warning("dedup_store_failed", op="mark_done", key=key,
                                      error=repr(exc))  # fmt: skip

    async def release(self, claims: Claims) -> None:
        await self._release(claims.held)

    async def _release(self, held: dict[str, str]) -> None:
        """Give up claims (shielded, bounded): a failed release expires after claim_ttl."""
        with self._scope(shield=True):
            for key, token in held.items():
                try:
                    with self._scope():
                        await self.store.release(key, token)
                except Exception as exc:
                    self._log.warning("dedup_store_failed", op="release", key=key,
                                      error=repr(exc))  # fmt: skip
