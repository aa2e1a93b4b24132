"""Consumer group configuration and progress in [`aiorocket.admin.Admin`][]: the
subscription group config (create, update, delete) and every group's lag at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from aiorocket._settings import check_group
from aiorocket._validate import check_topic
from aiorocket.admin._core import AdminCore
from aiorocket.admin._model import CustomizedRetry, ExponentialRetry, GroupConfig, GroupProgress
from aiorocket.admin._names import is_system_group
from aiorocket.client.lite import LITE_BIND_TOPIC, LITE_QUOTA, LITE_SUB_MODEL
from aiorocket.errors import BrokerNotFoundError, ConfigError, GroupNotFoundError, RocketMQError

__all__ = ["GroupAdmin", "group_config_of"]

def _policy(raw: dict[str, Any] | None) -> ExponentialRetry | CustomizedRetry | None:
    if not raw:
        return None
    if raw.get("type") == "EXPONENTIAL":
        exp = raw.get("exponentialRetryPolicy") or {}
        default = ExponentialRetry()
        return ExponentialRetry(
            int(exp.get("initial", default.initial_ms)),
            int(exp.get("max", default.max_ms)),
            int(exp.get("multiplier", default.multiplier)),
        )
    custom = raw.get("customizedRetryPolicy") or {}
    return CustomizedRetry(tuple(int(x) for x in custom.get("next") or ()))


def _policy_json(policy: ExponentialRetry | CustomizedRetry) -> dict[str, Any]:
    if isinstance(policy, ExponentialRetry):
        if policy.initial_ms <= 0 or policy.max_ms < policy.initial_ms or policy.multiplier < 1:
            raise ConfigError(f"invalid exponential retry policy {policy}")
        return {
            "type": "EXPONENTIAL",
            "exponentialRetryPolicy": {
                "initial": policy.initial_ms, "max": policy.max_ms,
                "multiplier": policy.multiplier,
            },
        }  # fmt: skip
    if not policy.delays_ms or any(d <= 0 for d in policy.delays_ms):
        raise ConfigError(f"a customized retry policy needs positive delays, not {policy}")
    return {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": list(policy.delays_ms)}}


def group_config_of(raw: dict[str, Any], brokers: tuple[str, ...] = ()) -> GroupConfig:
    """A broker's SubscriptionGroupConfig document as a
    [`GroupConfig`][aiorocket.admin.GroupConfig]."""
    return GroupConfig(
        group=str(raw.get("groupName", "")),
        consume_enable=bool(raw.get("consumeEnable", True)),
        broadcast_enable=bool(raw.get("consumeBroadcastEnable", True)),
        orderly=bool(raw.get("consumeMessageOrderly", False)),
        retry_max_times=int(raw.get("retryMaxTimes", 16)),
        retry_queues=int(raw.get("retryQueueNums", 1)),
        consume_timeout_minutes=int(raw.get("consumeTimeoutMinute", 15)),
        retry_policy=_policy(raw.get("groupRetryPolicy")),
        attributes={str(k): str(v) for k, v in (raw.get("attributes") or {}).items()},
        brokers=brokers,
        raw=raw,
    )


def _attribute_changes(
    current: dict[str, Any] | None, wanted: Mapping[str, object]
) -> dict[str, str]:
    """The attributes of an UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: each as an addition
    (``+key``; the broker takes no other form for a new group), the current ones kept."""
    merged = {str(k).lstrip("+"): str(v) for k, v in (current or {}).items()}
    merged.update({k: str(v) for k, v in wanted.items() if v is not None})
    return {f"+{k}": v for k, v in merged.items()}


class GroupAdmin(AdminCore):
    async def group_config(self, group: str) -> GroupConfig:
        """The group's subscription group config (as the first broker that has it holds
        it; ``brokers`` lists them all). GroupNotFoundError when none has it."""
        known = await self._require_group(group)
        name = sorted(known)[0]
        raw = (await self.requests.group_configs(known[name]))[group]
        return group_config_of(raw, tuple(sorted(known)))

    async def create_group(
        self,
        group: str,
        *,
        retry_max_times: int | None = None,
        orderly: bool | None = None,
        consume_enable: bool | None = None,
        broadcast_enable: bool | None = None,
        consume_timeout_minutes: int | None = None,
        retry_policy: ExponentialRetry | CustomizedRetry | None = None,
        lite_bind_topic: str | None = None,
        lite_quota: int | None = None,
        lite_exclusive: bool | None = None,
        brokers: list[str] | None = None,
        must_exist: bool = False,
    ) -> GroupConfig:
        """Create the consumer group on every master broker (or ``brokers``), or update
        it where it exists: the fields given change, the others keep their value (the
        broker's defaults for a new group). ``must_exist``: GroupNotFoundError instead of
        creating (what [`update_group`][aiorocket.admin.Admin.update_group] does).

        ``lite_bind_topic`` makes a lite group (RocketMQ 5.5+): bound to that parent
        topic of message type LITE, which its lite consumers' ``bind_topic`` must name;
        ``lite_quota``: lite subscriptions allowed per client (-1: no limit; the
        broker's default is 2000); ``lite_exclusive``: a lite topic belongs to the member
        that subscribed to it last (the broker unsubscribes the others), instead of being
        shared by its subscribers."""
        check_group(group, "consumer")
        if retry_max_times is not None and not -1 <= retry_max_times <= 1000:
            raise ConfigError(f"retry_max_times must be -1..1000, not {retry_max_times}")
        if consume_timeout_minutes is not None and consume_timeout_minutes < 1:
            raise ConfigError("consume_timeout_minutes must be at least 1")
        if lite_bind_topic is not None:
            check_topic(lite_bind_topic)
        if lite_quota is not None and lite_quota < -1:
            raise ConfigError(f"lite_quota must be -1 (no limit) or more, not {lite_quota}")
        model = None if lite_exclusive is None else "Exclusive" if lite_exclusive else "Shared"
        attributes = {
            LITE_BIND_TOPIC: lite_bind_topic, LITE_QUOTA: lite_quota, LITE_SUB_MODEL: model,
        }  # fmt: skip
        masters = await self.masters()
        names = brokers or sorted(masters)
        unknown = sorted(set(names) - set(masters))
        if unknown:
            raise BrokerNotFoundError(
                f"unknown broker(s) {unknown}; the cluster has {sorted(masters)}"
            )
        existing = {n: (await self.requests.group_configs(masters[n])).get(group) for n in names}
        if must_exist and not any(existing.values()):
            raise GroupNotFoundError(26, f"consumer group {group!r} does not exist")
        changes: dict[str, Any] = {
            "retryMaxTimes": retry_max_times,
            "consumeMessageOrderly": orderly,
            "consumeEnable": consume_enable,
            "consumeBroadcastEnable": broadcast_enable,
            "consumeTimeoutMinute": consume_timeout_minutes,
            "groupRetryPolicy": None if retry_policy is None else _policy_json(retry_policy),
        }
        raw: dict[str, Any] = {}
        for name in names:
            raw = dict(existing[name] or {"groupName": group})
            raw.update({k: v for k, v in changes.items() if v is not None})
            raw["attributes"] = _attribute_changes(raw.get("attributes"), attributes)
            await self.requests.create_group(masters[name], raw)
        return await self.group_config(group)

    async def update_group(self, group: str, **changes: Any) -> GroupConfig:
        """Change fields of an existing group's config (the keywords of
        [`create_group`][aiorocket.admin.Admin.create_group]) on every broker that has it."""
        return await self.create_group(group, must_exist=True, **changes)

    async def delete_group(
        self, group: str, *, clean_offsets: bool = True, missing_ok: bool = False
    ) -> list[str]:
        """Delete the group's config from every master broker that has it, and its
        committed offsets (``clean_offsets``). Returns those brokers."""
        try:
            known = await self._require_group(group)
        except GroupNotFoundError:
            if missing_ok:
                return []
            raise
        for addr in known.values():
            await self.requests.delete_group(addr, group, clean_offset=clean_offsets)
        return sorted(known)

    async def progress(self, *, include_system: bool = False) -> list[GroupProgress]:
        """Every consumer group's lag over all its topics, the most behind first.

        Groups without committed offsets show lag 0 and no topics."""
        masters = await self.masters()
        groups: dict[str, list[str]] = {}
        for name, addr in sorted(masters.items()):
            for g in await self.requests.group_configs(addr):
                groups.setdefault(g, []).append(name)
        wanted = sorted(g for g in groups if include_system or not is_system_group(g))
        results: dict[str, GroupProgress] = {}
        limiter = anyio.CapacityLimiter(8)

        async def one(group: str) -> None:
            lag, last, topics = 0, 0, set()
            async with limiter:
                for name in groups[group]:
                    try:
                        stats = await self.requests.consume_stats(masters[name], group)
                    except RocketMQError:
                        continue  # no offsets on that broker
                    for mq, s in stats.items():
                        if mq.broker_name != name:
                            continue
                        topics.add(mq.topic)
                        lag += max(s.broker_offset - max(s.consumer_offset, 0), 0)
                        last = max(last, s.last_timestamp_ms)
                members = await self._members(masters[groups[group][0]], group)
            results[group] = GroupProgress(group, lag, tuple(sorted(topics)), members, last)

        async with anyio.create_task_group() as tg:
            for g in wanted:
                tg.start_soon(one, g)
        return sorted(results.values(), key=lambda p: (-p.lag, p.group))

    async def _members(self, addr: str, group: str) -> int:
        try:
            return len(await self.client.broker.get_consumer_ids(addr, group))
        except RocketMQError:
            return -1
