"""Creating and changing topics in [`aiorocket.admin.Admin`][].

The broker's UPDATE_AND_CREATE_TOPIC creates a topic or silently overwrites one: a
"create" of an existing 16-queue topic with 8 queues leaves queues 8..15 unread, their
messages stranded. So ``create_topic`` creates only what is missing and refuses a topic
that exists with other settings (``TopicExistsError``); changes go through
``update_topic``, which refuses to shrink the readable queues unless told.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

from aiorocket._validate import check_topic
from aiorocket.admin._core import AdminCore
from aiorocket.admin._model import TopicChange, TopicSettings
from aiorocket.admin._names import is_system_topic
from aiorocket.errors import (
    BrokerNotFoundError,
    ConfigError,
    NoRouteError,
    RocketMQError,
    TopicNotExistError,
)
from aiorocket.protocol.route import TopicRoute

__all__ = ["PERMISSIONS", "TopicAdmin", "TopicExistsError"]

#: topic permissions by name (PermName: READ 4, WRITE 2); "none" stops a topic on a
#: broker without deleting it, "r" drains it.
PERMISSIONS = {"rw": 6, "r": 4, "w": 2, "none": 0}
_MESSAGE_TYPE = "message.type"


class TopicExistsError(ConfigError):
    """``create_topic`` of a topic that exists with other settings: change it with
    ``update_topic`` (the CLI's ``topic update``)."""


def _check_queues(n: int, what: str = "queues") -> None:
    if not 1 <= n <= 1024:
        raise ConfigError(f"{what} must be between 1 and 1024, not {n}")


def _perm_bits(perm: str | int) -> int:
    bits = PERMISSIONS.get(perm) if isinstance(perm, str) else perm
    if bits is None or bits not in PERMISSIONS.values():
        raise ConfigError(f"permission {perm!r}: use one of {', '.join(PERMISSIONS)}")
    return bits


def _settings(conf: dict[str, object]) -> TopicSettings:
    attrs = conf.get("attributes") or {}
    assert isinstance(attrs, dict)
    return TopicSettings(
        read_queues=int(str(conf.get("readQueueNums", 0))),
        write_queues=int(str(conf.get("writeQueueNums", 0))),
        perm=int(str(conf.get("perm", 6))),
        order=bool(conf.get("order", False)),
        attributes={str(k): str(v) for k, v in attrs.items()},
    )


def _differs(have: TopicSettings, want: TopicSettings, message_type: str | None) -> bool:
    if (have.read_queues, have.write_queues, have.perm, have.order) != (
        want.read_queues, want.write_queues, want.perm, want.order,
    ):  # fmt: skip
        return True
    # the type only when one is asked for: a topic created without one has the broker's
    return message_type is not None and have.attributes.get(_MESSAGE_TYPE) != message_type


def _shows(route: TopicRoute, wanted: dict[str, TopicSettings]) -> bool:
    """The route has each broker's wanted read and write queues and permission."""
    have = {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm)
            for q in route.queue_datas}  # fmt: skip
    return all(have.get(b) == (s.read_queues, s.write_queues, s.perm) for b, s in wanted.items())


class TopicAdmin(AdminCore):
    async def _topic_settings(self, addr: str, topic: str) -> TopicSettings | None:
        """The topic's settings on the broker at ``addr``; None if it does not have it."""
        try:
            conf = await self.requests.topic_config(addr, topic)
        except TopicNotExistError:
            return None
        return _settings(conf) if conf else None

    async def create_topic(
        self,
        topic: str,
        *,
        queues: int = 8,
        brokers: Iterable[str] | None = None,
        perm: int = 6,
        order: bool = False,
        message_type: str | None = None,
        wait: float = 30.0,
    ) -> TopicRoute:
        """Create ``topic`` with ``queues`` read and write queues on each master broker
        (or those named in ``brokers``) and wait until the NameServer's route shows them
        (up to ``wait`` seconds). ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION;
        PRIORITY on 5.4+; LITE on 5.5+, the parent of lite topics) becomes the 5.x
        attribute ``+message.type``.

        A broker that has the topic with these settings is left alone (creating is
        idempotent); one that has it with other settings raises ``TopicExistsError``
        before anything changes: ``update_topic`` changes a topic."""
        if is_system_topic(topic):
            raise ConfigError(f"invalid topic name {topic!r}: a system topic's name")
        check_topic(topic)  # the broker's rules: characters and length
        _check_queues(queues)
        bits = _perm_bits(perm)
        kind = message_type.upper() if message_type else None
        masters = await self.masters()
        names = list(masters) if brokers is None else list(brokers)
        unknown = sorted(set(names) - set(masters))
        if unknown or not names:
            raise BrokerNotFoundError(
                f"unknown broker(s) {unknown}; the cluster has {sorted(masters)}"
            )
        want = TopicSettings(queues, queues, bits, order, {_MESSAGE_TYPE: kind} if kind else {})
        missing: list[str] = []
        for name in names:
            have = await self._topic_settings(masters[name], topic)
            if have is None:
                missing.append(name)
            elif _differs(have, want, kind):
                raise TopicExistsError(
                    f"topic {topic!r} exists on {name} with other settings ({have.describe()}; "
                    f"asked: {want.describe()}): change it with update_topic (topic update)"
                )
        attributes = f"+{_MESSAGE_TYPE}={kind}" if kind else None
        for name in missing:
            await self.client.broker.create_topic(
                masters[name], topic, read_queues=queues, write_queues=queues, perm=bits,
                order=order, attributes=attributes,
            )  # fmt: skip
        return await self._wait_route(topic, dict.fromkeys(names, want), wait)

    async def update_topic(
        self,
        topic: str,
        *,
        queues: int | None = None,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: str | int | None = None,
        brokers: Iterable[str] | None = None,
        allow_shrink: bool = False,
        dry_run: bool = False,
        wait: float = 30.0,
    ) -> list[TopicChange]:
        """Change an existing topic's queues (``queues``: read and write alike) or
        permission on the brokers that have it (or those named), keeping what is not
        given (order flag and attributes too).

        Fewer readable queues than now (or than written) leave the messages of the
        queues cut off unread: refused (``ConfigError``) unless ``allow_shrink``. Drain
        first: fewer ``write_queues``, and once the cut queues are consumed, fewer
        ``read_queues``. With ``dry_run`` nothing changes: the result says what would."""
        if queues is not None:
            if read_queues is not None or write_queues is not None:
                raise ConfigError("give queues, or read_queues / write_queues, not both")
            read_queues = write_queues = queues
        for n, what in ((read_queues, "read_queues"), (write_queues, "write_queues")):
            if n is not None:
                _check_queues(n, what)
        bits = None if perm is None else _perm_bits(perm)
        route = await self.route(topic)
        addrs = route.group_addrs()
        names = sorted(addrs) if brokers is None else list(brokers)
        unknown = sorted(set(names) - set(addrs))
        if unknown:
            raise TopicNotExistError(17, f"topic {topic!r} is not on broker(s) {unknown}")
        changes: list[TopicChange] = []
        for name in names:
            before = await self._topic_settings(addrs[name], topic)
            if before is None:
                raise TopicNotExistError(17, f"topic {topic!r} is not on broker {name}")
            after = before.replace(read_queues=read_queues, write_queues=write_queues, perm=bits)
            changes.append(TopicChange(name, before, after))
        shrinking = [c for c in changes if c.strands]
        if shrinking and not allow_shrink:
            raise ConfigError(
                f"shrinking topic {topic!r} leaves messages unread: "
                + "; ".join(c.stranded() for c in shrinking)
                + " (drain first: fewer write queues, then fewer read queues once those are "
                "consumed; or allow_shrink=True)"
            )
        if dry_run:
            return changes
        for c in changes:
            if c.before == c.after:
                continue
            await self.client.broker.create_topic(
                addrs[c.broker], topic,
                read_queues=c.after.read_queues, write_queues=c.after.write_queues,
                perm=c.after.perm, order=c.after.order,
                attributes=",".join(f"+{k}={v}" for k, v in c.after.attributes.items()) or None,
            )  # fmt: skip
        await self._wait_route(topic, {c.broker: c.after for c in changes}, wait)
        return changes

    async def _wait_route(
        self, topic: str, wanted: dict[str, TopicSettings], wait: float
    ) -> TopicRoute:
        """The route once the NameServer shows ``wanted`` (up to ``wait`` seconds)."""
        with anyio.move_on_after(wait):
            while True:
                try:
                    route = await self.route(topic)
                except RocketMQError:
                    route = None
                if route is not None and _shows(route, wanted):
                    self.client.namesrv.forget(topic)
                    return route
                await anyio.sleep(0.2)
        raise NoRouteError(f"the route of {topic!r} did not show the new queues within {wait}s")
