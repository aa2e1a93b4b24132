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


def test_a_4x_cluster_gets_no_proxy_no_5x_keys_and_its_logback_files() -> None:
    from aiorocket.testing import _maven

    conf = dict(
        line.split("=", 1)
        for line in _config.broker_conf(
            "broker-a", 10911, "127.0.0.1:9876", Path("/store"), major=4
        ).splitlines()
    )
    assert conf["enablePropertyFilter"] == "true"  # SQL92 on 4.x too
    assert not {"timerWheelEnable", "recallMessageEnable", "enableLmq"} & conf.keys()
    assert "timerWheelEnable" in _conf()
    assert set(_config.logback_files(4)) == {"logback_namesrv.xml", "logback_broker.xml"}
    assert _config.logback_files(5) == {}
    assert "rocketmq-proxy" not in _maven.artifacts("4.9.7")
    assert "rocketmq-proxy" in _maven.artifacts("5.3.3")
    argv = _config.jvm_argv("java", "broker", "cp", Path("/h"), Path("/r"), [], major=4)
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in argv
