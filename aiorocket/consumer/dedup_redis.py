"""A Redis store for idempotent consumption (the ``redis`` extra; asyncio only).

Shared by every member of a group, so a copy delivered to another member (a rebalance,
a broker crash's redelivery) is recognised too. One key per message key:
``<prefix><group>:<key>`` holds the claiming token (``SET NX PX``, expiring after the
claim's TTL) or ``"done"`` (expiring after ``done_ttl``). A release deletes the key
only while it still holds the caller's token (a script, so it is one step), so a late
release never frees another member's claim; a renewal (``PEXPIRE``) is guarded the same
way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sniffio

from aiorocket._extras import needs_extra
from aiorocket.consumer.dedup import Claim
from aiorocket.errors import UnsupportedTransportError

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["RedisDedupStore"]

_DONE = "done"
# Delete KEYS[1] only while it holds ARGV[1] (our token).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""
# Extend KEYS[1] to ARGV[2] ms only while it holds ARGV[1] (our token): 1, else 0.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


class RedisDedupStore:
    """Claims in Redis through a ``redis.asyncio`` client (the application's own: its
    address, pool, TLS and credentials are its choice; the store does not close it).

    Parameters
    ----------
    client:
        ``redis.asyncio.Redis(...)``; decoded responses or not, either works.
    prefix:
        Prepended to every key (default ``aiorocket:dedup:``).
    """

    def __init__(self, client: redis.asyncio.Redis, *, prefix: str = "aiorocket:dedup:") -> None:
        with needs_extra("redis", "RedisDedupStore"):
            import redis.asyncio  # noqa: F401 - the extra must be there
        self._client = client
        self._prefix = prefix
        self._release: Any = client.register_script(_RELEASE)
        self._renew: Any = client.register_script(_RENEW)

    def check_loop(self) -> None:
        """``redis.asyncio`` runs on asyncio only: a trio consumer is refused at start."""
        if sniffio.current_async_library() != "asyncio":
            raise UnsupportedTransportError(
                "RedisDedupStore needs asyncio (redis.asyncio does not run on trio)"
            )

    async def claim(self, key: str, token: str, ttl: float) -> Claim:
        name = self._prefix + key
        ms = max(1, int(ttl * 1000))
        if await self._client.set(name, token, nx=True, px=ms):
            return Claim.NEW
        held = await self._client.get(name)
        if held is None:  # expired between the two calls: try once more
            if await self._client.set(name, token, nx=True, px=ms):
                return Claim.NEW
            return Claim.IN_PROGRESS
        value = held.decode() if isinstance(held, bytes) else held
        return Claim.DONE if value == _DONE else Claim.IN_PROGRESS

    async def mark_done(self, key: str, ttl: float) -> None:
        await self._client.set(self._prefix + key, _DONE, px=max(1, int(ttl * 1000)))

    async def release(self, key: str, token: str) -> None:
        await self._release(keys=[self._prefix + key], args=[token])

    async def renew(self, key: str, token: str, ttl: float) -> bool:
        ms = max(1, int(ttl * 1000))
        return bool(await self._renew(keys=[self._prefix + key], args=[token, ms]))
