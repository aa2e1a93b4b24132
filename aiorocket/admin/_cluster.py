"""Cluster and broker operations of [`aiorocket.admin.Admin`][]: the brokers and their
figures, broker config, topic deletion and permissions, connected producers."""

from __future__ import annotations

from typing import Any

import anyio

from aiorocket.admin._core import AdminCore
from aiorocket.admin._model import BrokerStatus, ProducerClient
from aiorocket.admin._topics import PERMISSIONS
from aiorocket.errors import BrokerNotFoundError, ConfigError, RocketMQError, TopicNotExistError
from aiorocket.protocol import fastjson
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.route import TopicRoute

__all__ = ["PERMISSIONS", "ClusterAdmin"]



def _tps(text: str) -> float:
    """The first figure of the broker's "a b c" TPS fields (the last 10 s)."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _status(
    cluster: str, name: str, broker_id: int, addr: str, table: dict[str, str]
) -> BrokerStatus:
    return BrokerStatus(
        cluster=cluster,
        name=name,
        broker_id=broker_id,
        address=addr,
        version=table.get("brokerVersionDesc", ""),
        put_tps=_tps(table.get("putTps", "")),
        get_tps=_tps(table.get("getTransferredTps", "")),
        put_today=_int(table.get("msgPutTotalTodayNow", "0")),
        got_today=_int(table.get("msgGetTotalTodayNow", "0")),
        boot_ms=_int(table.get("bootTimestamp", "0")),
        runtime=table,
    )


class ClusterAdmin(AdminCore):
    async def _clusters(self) -> list[tuple[str, str, int, str]]:
        """(cluster, broker name, broker id, address) of every broker, sorted."""
        resp = await self.client.namesrv.ask(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        obj: Any = fastjson.loads(resp.body, "cluster info") if resp.body else {}
        out = []
        for name, data in ((obj or {}).get("brokerAddrTable") or {}).items():
            for bid, addr in (data.get("brokerAddrs") or {}).items():
                out.append((str(data.get("cluster", "")), str(name), int(bid), str(addr)))
        return sorted(out)

    async def cluster(self) -> list[BrokerStatus]:
        """Every broker of the cluster(s) with its version and figures (a broker that does
        not answer is listed with ``error`` set)."""
        brokers = await self._clusters()
        results: dict[int, BrokerStatus] = {}

        async def ask(i: int, cluster: str, name: str, bid: int, addr: str) -> None:
            try:
                table = await self.requests.runtime_info(addr)
            except RocketMQError as exc:
                results[i] = BrokerStatus(cluster, name, bid, addr, error=str(exc))
                return
            results[i] = _status(cluster, name, bid, addr, table)

        async with anyio.create_task_group() as tg:
            for i, entry in enumerate(brokers):
                tg.start_soon(ask, i, *entry)
        return [results[i] for i in range(len(brokers))]

    async def _addr(self, broker: str) -> tuple[str, str, int, str]:
        """The broker named (its name: its master; or an address of the cluster)."""
        brokers = await self._clusters()
        for entry in brokers:
            if (entry[1] == broker and entry[2] == 0) or entry[3] == broker:
                return entry
        names = sorted({e[1] for e in brokers})
        raise BrokerNotFoundError(
            f"no broker {broker!r} in the cluster (it has {', '.join(names)})"
        )

    async def broker_status(self, broker: str) -> BrokerStatus:
        """The figures of one broker (by name, or address), everything it reports in
        ``runtime``."""
        cluster, name, bid, addr = await self._addr(broker)
        return _status(cluster, name, bid, addr, await self.requests.runtime_info(addr))

    async def broker_config(self, broker: str) -> dict[str, str]:
        """Every setting of one broker, sorted by key."""
        addr = (await self._addr(broker))[3]
        return dict(sorted((await self.requests.broker_config(addr)).items()))

    async def update_broker_config(
        self, key: str, value: str, *, brokers: list[str] | None = None
    ) -> dict[str, tuple[str, str]]:
        """Set ``key`` to ``value`` on these brokers (default: every master), in memory and
        in their config files. Returns broker name -> (old value, new value).

        A key the broker does not have is a [`ConfigError`][aiorocket.errors.ConfigError] (the
        broker would store it and change nothing); keys it refuses to change remotely
        (paths, ACL) raise [`AccessDeniedError`][aiorocket.errors.AccessDeniedError].
        """
        if not key or "=" in key or "\n" in key + value:
            raise ConfigError(f"invalid config key {key!r} or value {value!r}")
        targets = [await self._addr(b) for b in brokers] if brokers else [
            e for e in await self._clusters() if e[2] == 0
        ]  # fmt: skip
        changes: dict[str, tuple[str, str]] = {}
        for _, name, _, addr in targets:
            before = await self.requests.broker_config(addr)
            if key not in before:
                raise ConfigError(f"broker {name} has no config key {key!r}")
            await self.requests.update_broker_config(addr, {key: value})
            after = await self.requests.broker_config(addr)
            changes[name] = (before[key], after.get(key, ""))
        return changes

    # -- topics ----------------------------------------------------------------------------

    async def delete_topic(self, topic: str) -> list[str]:
        """Delete ``topic`` from every broker that has it and from the NameServers; its
        messages become unreachable and the groups' offsets of it are dropped. Returns
        the brokers it was deleted from."""
        route = await self.route(topic)  # TopicNotExistError for a topic that does not exist
        deleted = []
        for name, addr in sorted(route.group_addrs().items()):
            await self.requests.delete_topic_in_broker(addr, topic)
            deleted.append(name)
        for ns in self.client.namesrv.addrs:
            await self.client.broker.call(ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
        self.client.namesrv.forget(topic)
        return deleted

    async def set_topic_perm(
        self, topic: str, perm: str | int, *, brokers: list[str] | None = None
    ) -> TopicRoute:
        """Set ``topic``'s permission (``"rw"``, ``"r"``, ``"w"``, ``"none"`` or the bits)
        on these brokers (default: every broker that has it), keeping its queues, order
        flag and attributes. Returns the route once the NameServer shows the change."""
        bits = PERMISSIONS.get(perm) if isinstance(perm, str) else perm
        if bits is None or bits not in PERMISSIONS.values():
            raise ConfigError(f"permission {perm!r}: use one of {', '.join(PERMISSIONS)}")
        route = await self.route(topic)
        addrs = route.group_addrs()
        names = brokers or sorted(addrs)
        unknown = sorted(set(names) - set(addrs))
        if unknown:
            raise TopicNotExistError(17, f"topic {topic!r} is not on broker(s) {unknown}")
        for name in names:
            conf = await self.requests.topic_config(addrs[name], topic)
            attrs = conf.get("attributes") or {}
            await self.client.broker.create_topic(
                addrs[name], topic,
                read_queues=int(conf.get("readQueueNums", 0)),
                write_queues=int(conf.get("writeQueueNums", 0)),
                perm=bits, order=bool(conf.get("order", False)),
                attributes=",".join(f"+{k}={v}" for k, v in attrs.items()) or None,
            )  # fmt: skip
        with anyio.move_on_after(30):
            while True:
                route = await self.client.namesrv.query_route(topic)
                perms = {q.broker_name: q.perm for q in route.queue_datas}
                if all(perms.get(n) == bits for n in names):
                    break
                await anyio.sleep(0.2)
        return route

    # -- producers -------------------------------------------------------------------------

    async def producers(self, group: str | None = None) -> list[ProducerClient]:
        """The producers connected to the master brokers (of ``group`` only, if given),
        each once per broker it is connected to."""
        found: list[ProducerClient] = []
        for name, addr in sorted((await self.masters()).items()):
            for g, clients in (await self.requests.producers(addr)).items():
                if group is not None and g != group:
                    continue
                found += [
                    ProducerClient(
                        group=g,
                        client_id=str(c.get("clientId", "")),
                        address=str(c.get("remoteIP", "")).lstrip("/"),
                        language=str(c.get("language", "")),
                        version=int(c.get("version", 0)),
                        broker=name,
                        last_update_ms=int(c.get("lastUpdateTimestamp", 0)),
                    )
                    for c in clients
                ]
        return sorted(found, key=lambda p: (p.group, p.client_id, p.broker))
