"""Client-side queue allocation strategies (cluster-mode rebalance).

Every consumer of a group runs the same strategy over the same inputs and takes only
its own share, so nothing coordinates the split except determinism: an aiorocket
consumer sharing a group with Java consumers must compute exactly what the Java client
(``org.apache.rocketmq.client.consumer.rebalance``) computes, or queues end up consumed
twice or not at all. Each strategy here therefore reproduces the Java result for the
same inputs, down to the string order Java uses (UTF-16 code units) and the MD5 hash
ring of the consistent-hash strategy.

The Java ``RebalanceImpl`` sorts ``mqAll`` and ``cidAll`` before calling a strategy;
ours sort internally instead, so callers may pass any order (and duplicate queues
collapse, as Java's come from a set). Duplicate client ids are kept, as in Java,
because a group-member list with a duplicate must still split the way Java peers split
it.

Common rules, shared by every strategy:

* an empty or non-string ``client_id`` (or a bare string passed as ``client_ids``)
  raises [`ConfigError`][aiorocket.errors.ConfigError];
* no queues, or a ``client_id`` not among ``client_ids`` (the broker has not seen our
  heartbeat yet) gives ``[]``: Java logs and returns nothing in the second case and
  throws in the first, which its caller also turns into "nothing".
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AllocateStrategy",
    "MachineRoomResolver",
    "SeparatorMachineRoomResolver",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "md5_hash",
]


class AllocateStrategy(Protocol):
    """What the rebalancer calls once per subscribed topic.

    ``name`` is the Java strategy name, reported to the broker (QUERY_ASSIGNMENT
    ``strategyName``, consumer running info) so mixed-language groups can be compared.
    """

    @property
    def name(self) -> str: ...

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]: ...


class MachineRoomResolver(Protocol):
    """Maps brokers and consumers to machine rooms (Java ``MachineRoomResolver``).

    Both methods must return a non-empty room name; an empty one is a configuration
    error, as in Java.
    """

    def broker_room(self, queue: MessageQueue) -> str: ...

    def consumer_room(self, client_id: str) -> str: ...


# --------------------------------------------------------------------------- helpers


def _java_str_key(s: str) -> bytes:
    """Sort key that orders strings like Java's ``String.compareTo``.

    Java compares UTF-16 code units, Python compares code points; the two disagree
    when a supplementary character meets one in U+E000..U+FFFF. Big-endian UTF-16
    bytes compare exactly like the code units.
    """
    return s.encode("utf-16-be", "surrogatepass")


def _queue_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    """Java ``MessageQueue.compareTo`` order: topic, broker name, queue id."""
    return (_java_str_key(mq.topic), _java_str_key(mq.broker_name), mq.queue_id)


def _sorted_queues(queues: Iterable[MessageQueue]) -> list[MessageQueue]:
    return sorted(set(queues), key=_queue_key)


def _sorted_ids(client_ids: Sequence[str]) -> list[str]:
    if isinstance(client_ids, str):
        raise ConfigError("client_ids must be a sequence of client ids, not a string")
    return sorted(client_ids, key=_java_str_key)


def _check_client_id(client_id: str) -> None:
    if not isinstance(client_id, str) or not client_id:
        raise ConfigError(f"client_id must be a non-empty string, got {client_id!r}")


def _prepare(
    client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> tuple[list[MessageQueue], list[str], int] | None:
    """Validate and sort; ``None`` means "this client gets nothing"."""
    _check_client_id(client_id)
    cid_all = _sorted_ids(client_ids)
    mq_all = _sorted_queues(queues)
    if not mq_all:
        return None
    try:
        index = cid_all.index(client_id)  # first occurrence, like List.indexOf
    except ValueError:
        return None
    return mq_all, cid_all, index


def _java_split(s: str, sep: str) -> list[str]:
    """``String.split`` with a literal separator: trailing empty fields are dropped."""
    parts = s.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


# ------------------------------------------------------------------------ averaging


class AllocateAveragely:
    """Contiguous, near-equal slices in sorted order (Java's default, ``AVG``).

    The first ``n % c`` consumers take one extra queue; with more consumers than
    queues the surplus consumers get nothing.
    """

    __slots__ = ()
    name = "AVG"

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, cid_all, index = prepared
        n, c = len(mq_all), len(cid_all)
        mod = n % c
        extra = mod > 0 and index < mod
        avg = 1 if n <= c else n // c + (1 if extra else 0)
        start = index * avg if extra else index * avg + mod
        count = min(avg, n - start)
        return mq_all[start : start + count] if count > 0 else []

    def __repr__(self) -> str:
        return "AllocateAveragely()"


class AllocateAveragelyByCircle:
    """Round-robin deal in sorted order (``AVG_BY_CIRCLE``).

    Spreads each broker's queues across consumers instead of handing one consumer a
    whole broker, at the cost of more movement when membership changes.
    """

    __slots__ = ()
    name = "AVG_BY_CIRCLE"

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, cid_all, index = prepared
        return mq_all[index :: len(cid_all)]

    def __repr__(self) -> str:
        return "AllocateAveragelyByCircle()"


allocate_averagely: AllocateStrategy = AllocateAveragely()
allocate_averagely_by_circle: AllocateStrategy = AllocateAveragelyByCircle()


# ------------------------------------------------------------------ consistent hash


def md5_hash(key: str) -> int:
    """Java ``ConsistentHashRouter.MD5Hash``: the first 4 MD5 bytes, big-endian, unsigned.

    Java encodes with ``getBytes(UTF_8)``, which turns an unpaired surrogate into
    ``?``; ``errors="replace"`` does the same.
    """
    return int.from_bytes(hashlib.md5(key.encode("utf-8", "replace")).digest()[:4], "big")


def _java_queue_string(mq: MessageQueue) -> str:
    """Java ``MessageQueue.toString()``, the key queues are hashed by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateConsistentHash:
    """Consistent-hash ring of consumers (``CONSISTENT_HASH``).

    When one consumer joins or leaves, only the queues next to its ring points move,
    so fewer queues change hands than with averaging; the split is less even.

    Parameters
    ----------
    virtual_nodes:
        Ring points per consumer, at least 1 (Java accepts 0, which leaves every queue
        unconsumed).
    hash:
        Maps a key to an int in Java ``long`` range; peers must agree, and only the
        default (MD5, as Java's) matches a default Java consumer.
    """

    __slots__ = ("_cache", "_hash", "virtual_nodes")
    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash: Callable[[str], int] = md5_hash) -> None:
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise ConfigError(f"virtual_nodes must be an int, got {virtual_nodes!r}")
        if virtual_nodes < 1:
            raise ConfigError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self._hash = hash
        # One rebalance calls us once per topic with the same member list; keep the
        # last ring instead of re-hashing virtual_nodes * members keys each time.
        self._cache: tuple[tuple[str, ...], list[int], list[str]] | None = None

    def _ring(self, cid_all: list[str]) -> tuple[list[int], list[str]]:
        key = tuple(cid_all)
        cache = self._cache
        if cache is not None and cache[0] == key:
            return cache[1], cache[2]
        # Java builds a TreeMap in cidAll order; a hash collision overwrites the earlier
        # virtual node, and a repeated client id numbers its replicas after the ones it
        # still owns on the ring. Reproduce both so collisions resolve as in Java.
        ring: dict[int, str] = {}
        owned: dict[str, int] = {}
        for cid in cid_all:
            existing = owned.get(cid, 0)
            for i in range(self.virtual_nodes):
                h = self._hash(f"{cid}-{i + existing}")
                old = ring.get(h)
                if old is not None:
                    owned[old] -= 1
                ring[h] = cid
                owned[cid] = owned.get(cid, 0) + 1
        points = sorted(ring)
        owners = [ring[p] for p in points]
        self._cache = (key, points, owners)
        return points, owners

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, cid_all, _ = prepared
        points, owners = self._ring(cid_all)
        size = len(points)
        result: list[MessageQueue] = []
        for mq in mq_all:
            i = bisect_left(points, self._hash(_java_queue_string(mq)))
            if owners[i if i < size else 0] == client_id:
                result.append(mq)
        return result

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_nodes={self.virtual_nodes})"


# ------------------------------------------------------------------------ by config


class AllocateByConfig:
    """A fixed, hand-picked set of queues (``CONFIG``).

    Not a partition: each consumer is configured on its own. Unlike Java, which returns
    the configured list verbatim, we return only configured queues present in
    ``queues``: the rebalancer calls once per topic, and a queue that is not (or no
    longer) in the route cannot be pulled.

    Parameters
    ----------
    queues:
        The queues this consumer takes (at least one).
    """

    __slots__ = ("queues",)
    name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        configured = frozenset(queues)
        if not configured:
            raise ConfigError("AllocateByConfig needs at least one queue")
        for mq in configured:
            if not isinstance(mq, MessageQueue):
                raise ConfigError(f"AllocateByConfig expects MessageQueue items, got {mq!r}")
        self.queues = configured

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, _, _ = prepared
        return [mq for mq in mq_all if mq in self.queues]

    def __repr__(self) -> str:
        return f"AllocateByConfig({sorted(self.queues, key=_queue_key)!r})"


# ---------------------------------------------------------------------- machine room


class AllocateByMachineRoom:
    """Only brokers named ``<idc>@<brokerName>`` whose idc is in ``consumer_idcs``
    (``MACHINE_ROOM``).

    Confines a group to its own data centres. Queues of other (or unprefixed)
    brokers go to nobody; the selected ones are split in contiguous blocks with the
    remainder dealt one each to the first consumers. Client ids are not inspected
    (Java does not either): every member is assumed to sit in one of
    ``consumer_idcs``.

    Parameters
    ----------
    consumer_idcs:
        The data centres (idc names) whose brokers' queues the group takes.
    """

    __slots__ = ("consumer_idcs",)
    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        if isinstance(consumer_idcs, str):
            raise ConfigError("consumer_idcs must be a collection of idc names, not a string")
        idcs = frozenset(consumer_idcs)
        if not idcs:
            raise ConfigError("consumer_idcs must name at least one idc")
        self.consumer_idcs = idcs

    def selects(self, mq: MessageQueue) -> bool:
        """Whether any consumer of this strategy would take ``mq``."""
        parts = _java_split(mq.broker_name, "@")
        return len(parts) == 2 and parts[0] in self.consumer_idcs

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, cid_all, index = prepared
        selected = [mq for mq in mq_all if self.selects(mq)]
        c = len(cid_all)
        per, rem = divmod(len(selected), c)
        result = selected[per * index : per * index + per]
        if rem > index:
            result.append(selected[index + per * c])
        return result

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom({sorted(self.consumer_idcs)!r})"


class SeparatorMachineRoomResolver:
    """Room = text before the first ``separator`` of a broker name or client id.

    Suits the ``<idc>@<brokerName>`` broker naming of ``AllocateByMachineRoom``.
    Note that a default client id is ``<ip>@<instance>``, so client ids need the room
    as their first field (a custom client id) for this to say anything useful. A name
    without the separator has no room and makes ``AllocateMachineRoomNearby``
    raise ConfigError.
    """

    __slots__ = ("separator",)

    def __init__(self, separator: str = "@") -> None:
        if not separator:
            raise ConfigError("separator must be non-empty")
        self.separator = separator

    def _room(self, name: str) -> str:
        room, sep, _ = name.partition(self.separator)
        return room if sep else ""

    def broker_room(self, queue: MessageQueue) -> str:
        return self._room(queue.broker_name)

    def consumer_room(self, client_id: str) -> str:
        return self._room(client_id)

    def __repr__(self) -> str:
        return f"SeparatorMachineRoomResolver({self.separator!r})"


class AllocateMachineRoomNearby:
    """Prefer consumers in the broker's own room (``MACHINE_ROOM_NEARBY-<inner>``).

    Queues of a room that has live consumers are split by ``inner`` among those
    consumers only, which keeps traffic inside the room; queues of a room with no
    consumer are split by ``inner`` among all consumers, so nothing is left behind.
    The name carries the inner strategy's, as in Java.

    Parameters
    ----------
    inner:
        The strategy splitting each room's queues among its consumers.
    resolver:
        Names the room of a broker and of a consumer (client id).
    """

    __slots__ = ("inner", "resolver")

    def __init__(self, inner: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        if inner is None or resolver is None:
            raise ConfigError("AllocateMachineRoomNearby needs an inner strategy and a resolver")
        self.inner = inner
        self.resolver = resolver

    @property
    def name(self) -> str:
        return f"MACHINE_ROOM_NEARBY-{self.inner.name}"

    def __call__(
        self,
        group: str,
        client_id: str,
        queues: Sequence[MessageQueue],
        client_ids: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(client_id, queues, client_ids)
        if prepared is None:
            return []
        mq_all, cid_all, _ = prepared
        resolver = self.resolver

        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = resolver.broker_room(mq)
            if not room:
                raise ConfigError(f"machine room resolver gave no room for queue {mq}")
            room_queues.setdefault(room, []).append(mq)

        room_clients: dict[str, list[str]] = {}
        for cid in cid_all:
            room = resolver.consumer_room(cid)
            if not room:
                raise ConfigError(f"machine room resolver gave no room for client {cid!r}")
            room_clients.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = resolver.consumer_room(client_id)
        local = room_queues.pop(my_room, None)
        if local:
            result.extend(self.inner(group, client_id, local, room_clients[my_room]))
        # Java walks a TreeMap, so orphaned rooms are visited in sorted order.
        for room in sorted(room_queues, key=_java_str_key):
            if room not in room_clients:
                result.extend(self.inner(group, client_id, room_queues[room], cid_all))
        return result

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby({self.inner!r}, {self.resolver!r})"
