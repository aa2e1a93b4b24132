"""Topic routes (GET_ROUTEINFO_BY_TOPIC answers) and the queues derived from them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiorocket.errors import ProtocolError
from aiorocket.message import MessageQueue

__all__ = [
    "MASTER_ID",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "QueueData",
    "TopicRoute",
]

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    brokers: dict[str, BrokerData] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, topic: str, body: bytes) -> TopicRoute:
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ProtocolError(f"route of {topic!r} is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ProtocolError(f"route of {topic!r} is not a JSON object")
        try:
            queues = tuple(_queue_data(q) for q in _objects(obj, "queueDatas"))
            brokers = tuple(_broker_data(b) for b in _objects(obj, "brokerDatas"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"route of {topic!r} is malformed: {exc!r}") from None
        return cls(
            topic=topic,
            queue_datas=queues,
            broker_datas=brokers,
            order_topic_conf=obj.get("orderTopicConf"),
            brokers={b.broker_name: b for b in brokers},
        )

    def master_addr(self, broker_name: str) -> str | None:
        data = self.brokers.get(broker_name)
        return data.master_addr if data else None

    def find_addr(
        self, broker_name: str, broker_id: int = MASTER_ID, *, only_this: bool = False
    ) -> tuple[str, int] | None:
        """The address and id of ``broker_id`` of a broker group, or None.

        Unless ``only_this``, another member of the group stands in when that one is
        missing: the master, else the slave with the lowest id (Java:
        ``findBrokerAddressInSubscribe``). Reads (pulls, offsets) use this so that a
        broker group whose master is down is still served by its slaves.
        """
        data = self.brokers.get(broker_name)
        if data is None:
            return None
        addrs = data.broker_addrs
        addr = addrs.get(broker_id)
        if addr is not None:
            return addr, broker_id
        if only_this or not addrs:
            return None
        chosen = MASTER_ID if MASTER_ID in addrs else min(addrs)
        return addrs[chosen], chosen

    def read_queues(self) -> list[MessageQueue]:
        """Every readable queue, sorted as the allocators expect.

        A broker group whose master is down keeps its queues (its slaves serve them, as
        in the Java client's ``topicRouteData2TopicSubscribeInfo``): consumers that
        refreshed the route at different moments must still allocate from the same list,
        or queues end up owned twice or by nobody.
        """
        out: list[MessageQueue] = []
        for qd in self.queue_datas:
            if qd.readable:
                out.extend(
                    MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.read_queue_nums)
                )
        out.sort()
        return out

    def write_queues(self) -> list[MessageQueue]:
        """Every writable queue whose broker has a master, in broker order then queue id."""
        out: list[MessageQueue] = []
        for qd in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if qd.writable and self.master_addr(qd.broker_name):
                out.extend(
                    MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.write_queue_nums)
                )
        return out

    def all_master_addrs(self) -> dict[str, str]:
        return {b.broker_name: b.master_addr for b in self.broker_datas if b.master_addr}

    def all_addrs(self) -> set[str]:
        """Every broker address, masters and slaves (a consumer heartbeats to all)."""
        return {addr for b in self.broker_datas for addr in b.broker_addrs.values()}

    def group_addrs(self) -> dict[str, str]:
        """One address per broker group: its master, else a slave (Java: selectBrokerAddr)."""
        out: dict[str, str] = {}
        for name in self.brokers:
            found = self.find_addr(name)
            if found is not None:
                out[name] = found[0]
        return out


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """``obj[key]``: a list of JSON objects (absent or null: none); else TypeError."""
    items = obj.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise TypeError(f"{key} is not a list of objects")
    return items


def _queue_data(raw: dict[str, Any]) -> QueueData:
    return QueueData(
        broker_name=str(raw["brokerName"]),
        read_queue_nums=int(raw["readQueueNums"]),
        write_queue_nums=int(raw["writeQueueNums"]),
        perm=int(raw["perm"]),
        topic_sys_flag=int(raw.get("topicSysFlag", 0)),
    )


def _broker_data(raw: dict[str, Any]) -> BrokerData:
    raw_addrs = raw.get("brokerAddrs") or {}
    if not isinstance(raw_addrs, dict):
        raise TypeError("brokerAddrs is not an object")
    addrs = {int(k): str(v) for k, v in raw_addrs.items()}
    return BrokerData(
        cluster=str(raw.get("cluster", "")), broker_name=str(raw["brokerName"]), broker_addrs=addrs
    )
