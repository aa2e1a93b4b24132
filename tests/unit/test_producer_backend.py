"""The producer forwards to one engine chosen at construction; what only the other
transport has raises UnsupportedTransportError naming it (the gRPC side against the fake
Proxy, the remoting side without a broker)."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.errors import ClientClosedError, ConfigError, UnsupportedTransportError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_grpc_producer_refuses_the_remoting_features_by_name() -> None:
    async with FakeProxy() as proxy, Producer("pg", proxy=proxy.endpoint) as producer:
        for feature in ("client", "fault", "membership", "checks"):
            with pytest.raises(UnsupportedTransportError, match="only on the remoting"):
                getattr(producer, feature)
        with pytest.raises(UnsupportedTransportError, match="only on the remoting"):
            await producer.send_oneway(Message("t", b"x"))
        with pytest.raises(UnsupportedTransportError, match="selector"):
            await producer.send_batch([Message("t", b"x")], selector=lambda qs, m, a: qs[0])
        got: list[str] = []
        async with anyio.create_task_group() as tg:
            msg = Message("t", b"y")
            await producer.start_send(tg, msg, on_result=lambda r: got.append(r.msg_id))
        assert len(got) == 1 and [m.body for m in proxy.sent] == [b"y"]
        assert producer.in_flight == 0
    with pytest.raises(ClientClosedError):
        await producer.send(Message("t", b"z"))



async def test_declared_topics_are_in_the_first_settings() -> None:
    async with FakeProxy() as proxy, Producer("pg", proxy=proxy.endpoint, topics=["a", "b", "a"]):
        (first, *_) = proxy.settings_received
        assert [t.name for t in first.publishing.topics] == ["a", "b"]


def test_topics_must_be_a_list_of_valid_names() -> None:
    with pytest.raises(ConfigError, match="list"):
        Producer("pg", "127.0.0.1:9876", topics="orders")
    with pytest.raises(ConfigError, match="topic"):
        Producer("pg", "127.0.0.1:9876", topics=["bad topic"])
