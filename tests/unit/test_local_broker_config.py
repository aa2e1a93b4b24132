"""The local cluster's brokers are configured as production ones should be: no topic is
created by a send (users learn the creation step); a cluster may turn it on."""

from __future__ import annotations

from pathlib import Path

from aiorocket.testing import _config


def _conf(extra: dict[str, object] | None = None) -> dict[str, str]:
    text = _config.broker_conf("broker-a", 10911, "127.0.0.1:9876", Path("/store"), extra=extra)
    return dict(line.split("=", 1) for line in text.splitlines())


def test_brokers_do_not_create_topics_by_default() -> None:
    conf = _conf()
    assert conf["autoCreateTopicEnable"] == "false"
    assert conf["autoCreateSubscriptionGroup"] == "true"


def test_a_cluster_can_turn_topic_creation_on() -> None:
    assert _conf({"autoCreateTopicEnable": True})["autoCreateTopicEnable"] == "true"
