"""An invalid group name says which names are valid (issue 42): the Java client's rule
(letters, digits, '-', '_', '|', at most 255), in every client and in the admin."""

from __future__ import annotations

import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.errors import ConfigError
from aiorocket.producer import Producer

ALLOWED = "1 to 255 letters, digits, '-', '_' or '|'"


@pytest.mark.parametrize("name", ["bad group name!", "a.b", "a%b", "", "x" * 256, "g:1"])
def test_an_invalid_group_name_lists_the_allowed_characters(name: str) -> None:
    for make in (Consumer, PullConsumer, Producer):
        with pytest.raises(ConfigError) as raised:
            make(name, "127.0.0.1:9876")
        assert ALLOWED in str(raised.value) and repr(name) in str(raised.value)


@pytest.mark.anyio
async def test_the_admin_refuses_it_before_asking_a_broker() -> None:
    async with Admin("127.0.0.1:1") as admin:
        with pytest.raises(ConfigError, match="letters, digits"):
            await admin.create_group("bad group name!")


def test_valid_names_pass() -> None:
    for name in ("orders-billing_1", "CID|x", "x" * 255, "TOOLS_CONSUMER"):
        Consumer(name, "127.0.0.1:9876")
