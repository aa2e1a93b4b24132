"""Clients given no NameServer address read ``$AIOROCKET_NAMESRV_ADDR``."""

from __future__ import annotations

import pytest

from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.errors import ConfigError
from aiorocket.producer import Producer

pytestmark = pytest.mark.anyio

CLIENTS = [Consumer, PullConsumer, Producer]


def addrs(client: Consumer | PullConsumer | Producer) -> list[str]:
    if isinstance(client, PullConsumer):
        return list(client._engine._namesrv)
    if isinstance(client, Consumer):
        return list(client._backend._namesrv)  # type: ignore[attr-defined]
    return list(client._remoting._namesrv)  # type: ignore[union-attr]


@pytest.mark.parametrize("cls", CLIENTS)
async def test_address_from_the_environment(
    cls: type[Consumer | PullConsumer | Producer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert addrs(cls("g")) == ["10.0.0.1:9876", "10.0.0.2:9876"]


@pytest.mark.parametrize("cls", CLIENTS)
async def test_an_explicit_address_wins(
    cls: type[Consumer | PullConsumer | Producer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV_ADDR", "10.0.0.1:9876")
    assert addrs(cls("g", "127.0.0.1:9999")) == ["127.0.0.1:9999"]


@pytest.mark.parametrize("cls", CLIENTS)
@pytest.mark.parametrize("value", [None, "", "  "])
async def test_no_address_anywhere_is_a_config_error(
    cls: type[Consumer | PullConsumer | Producer],
    value: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if value is None:
        monkeypatch.delenv("AIOROCKET_NAMESRV_ADDR", raising=False)
    else:
        monkeypatch.setenv("AIOROCKET_NAMESRV_ADDR", value)
    with pytest.raises(ConfigError, match="AIOROCKET_NAMESRV_ADDR"):
        cls("g")


async def test_a_malformed_address_from_the_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV_ADDR", "localhost")
    with pytest.raises(ConfigError, match="not host:port"):
        Producer("g")
