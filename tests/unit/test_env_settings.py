"""Settings from prefixed environment variables (aiorocket.env): typed, validated, and a
bad value names its variable."""

from __future__ import annotations

import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.env import consumer_settings, producer_settings
from aiorocket.errors import ConfigError
from aiorocket.integrations.service import RocketMQService
from aiorocket.producer import Producer
from aiorocket.protocol.message_codec import CompressionType
from aiorocket.security import Credentials


def test_typed_values() -> None:
    env = {
        "AIOROCKET_CONSUMER_CONSUME_CONCURRENCY": "50",
        "AIOROCKET_CONSUMER_SHUTDOWN_TIMEOUT": "2.5",
        "AIOROCKET_CONSUMER_ORDERLY": "yes",
        "AIOROCKET_CONSUMER_CONSUME_FROM_WHERE": "first_offset",
        "AIOROCKET_CONSUMER_PULL_THRESHOLD_FOR_ALL": "none",
        "AIOROCKET_CONSUMER_OFFSET_STORE_DIR": "/var/lib/offsets",
        "AIOROCKET_ACCESS_KEY": "ak",
        "AIOROCKET_SECRET_KEY": "sk",
        "UNRELATED": "x",
    }
    settings = consumer_settings(environ=env)
    assert settings == {
        "consume_concurrency": 50,
        "shutdown_timeout": 2.5,
        "orderly": True,
        "consume_from_where": ConsumeFromWhere.FIRST_OFFSET,
        "pull_threshold_for_all": None,
        "offset_store_dir": "/var/lib/offsets",
        "credentials": Credentials("ak", "sk"),
    }
    consumer = Consumer("g", "127.0.0.1:9876", **settings)
    assert consumer.config.consume_concurrency == 50
    produced = producer_settings(environ={"AIOROCKET_PRODUCER_COMPRESSION": "ZSTD",
                                          "AIOROCKET_PRODUCER_AUTO_BATCH": "1"})  # fmt: skip
    assert produced == {"compression": CompressionType.ZSTD, "auto_batch": True}
    assert Producer("p", "127.0.0.1:9876", **produced).config.auto_batch is True


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("AIOROCKET_CONSUMER_CONSUME_CONCURRENCY", "many", "expected an integer, got 'many'"),
        ("AIOROCKET_CONSUMER_CONSUME_CONCURRENCY", "0", "must be a positive integer"),
        ("AIOROCKET_CONSUMER_CONSUME_TIMEOUT", "soon", "expected a number"),
        ("AIOROCKET_CONSUMER_ORDERLY", "maybe", "expected a boolean"),
        ("AIOROCKET_CONSUMER_MESSAGE_MODEL", "ANYCAST", "expected one of CLUSTERING, BROADCASTING"),
        ("AIOROCKET_CONSUMER_CONSUME_CONCURENCY", "5", "unknown setting"),
    ],
)
def test_a_bad_value_names_its_variable(var: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=var) as caught:
        consumer_settings(environ={var: value})
    assert message in str(caught.value)


def test_credentials_need_both_keys() -> None:
    with pytest.raises(ConfigError, match="AIOROCKET_SECRET_KEY"):
        consumer_settings(environ={"AIOROCKET_ACCESS_KEY": "ak"})


def test_service_reads_the_environment_and_code_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOROCKET_CONSUMER_CONSUME_CONCURRENCY", "7")
    monkeypatch.setenv("AIOROCKET_CONSUMER_SHUTDOWN_TIMEOUT", "3")
    monkeypatch.setenv("AIOROCKET_PRODUCER_SEND_TIMEOUT", "9")
    service = RocketMQService("127.0.0.1:9876", producer_group="p")

    @service.subscriber("orders", group="g", shutdown_timeout=1.0)
    async def handle(msg: object) -> None: ...

    (consumer,) = service.consumers
    assert consumer.config.consume_concurrency == 7  # from the environment
    assert consumer.config.shutdown_timeout == 1.0  # the code's keyword wins
    monkeypatch.setenv("AIOROCKET_CONSUMER_PULL_BATCH_SIZE", "2000")
    with pytest.raises(ConfigError, match="AIOROCKET_CONSUMER_PULL_BATCH_SIZE"):
        RocketMQService("127.0.0.1:9876")
    assert RocketMQService("127.0.0.1:9876", from_env=False).consumer_settings == {}
