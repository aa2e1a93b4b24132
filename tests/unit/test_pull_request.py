"""A pull's header encoded once per queue (aiorocket.client.pull_request) says on the wire
exactly what the ext fields built per pull said, and is signed as a whole command by a
connection with credentials."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocket.client.broker import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from aiorocket.client.pull_request import PullHeader, PullRequest
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import CLIENT_VERSION, LANGUAGE, RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import FrameDecoder
from aiorocket.remoting.pool import ConnectionPool
from aiorocket.security import Credentials, signature
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

_TEXT = st.text(min_size=1, max_size=40)  # any characters: quotes, backslashes, non-ASCII
_OFFSET = st.integers(min_value=0, max_value=2**63 - 1)


#: a pull's changing numbers: offset, batch, sys flag, commit offset
_NUMBERS = st.tuples(
    _OFFSET,
    st.integers(min_value=1, max_value=1024),
    st.sampled_from(
        [PULL_SUSPEND | c | s for c in (0, PULL_COMMIT_OFFSET) for s in (0, PULL_SUBSCRIPTION)]
    ),
    _OFFSET,
)


def _expected(
    group: str, mq: MessageQueue, numbers: tuple[int, int, int, int], fixed: dict[str, Any]
) -> dict[str, str]:
    """The ext fields as BrokerClient.pull built them for every pull before."""
    offset, max_nums, sys_flag, commit = numbers
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": str(commit),
        "suspendTimeoutMillis": str(fixed["suspend_timeout_ms"]),
        "subVersion": str(fixed["sub_version"]),
        "bname": mq.broker_name,
    }
    if fixed["subscription"] is not None:
        ext["subscription"] = fixed["subscription"]
        ext["expressionType"] = fixed["expression_type"] or "TAG"
    return ext


@given(
    group=_TEXT,
    mq=st.builds(MessageQueue, _TEXT, _TEXT, st.integers(min_value=0, max_value=1023)),
    numbers=_NUMBERS,
    fixed=st.fixed_dictionaries(
        {
            "suspend_timeout_ms": st.integers(min_value=0, max_value=10**6),
            "sub_version": st.integers(min_value=0, max_value=2**63 - 1),
            "subscription": st.none() | _TEXT,
            "expression_type": st.none() | st.sampled_from(["TAG", "SQL92"]),
        }
    ),
    opaque=st.integers(min_value=0, max_value=0x7FFFFFFF),
)
def test_the_encoded_frame_carries_the_fields_built_per_pull(
    group: str,
    mq: MessageQueue,
    numbers: tuple[int, int, int, int],
    fixed: dict[str, Any],
    opaque: int,
) -> None:
    request = PullRequest(PullHeader(group, mq, **fixed), *numbers)
    decoder = FrameDecoder()
    (cmd,) = decoder.feed(request.frame(opaque))  # one whole frame: its length prefix is right
    assert not decoder.feed(b"")
    expected = RemotingCommand(
        code=RequestCode.PULL_MESSAGE,
        opaque=opaque,
        flag=0,
        ext_fields=_expected(group, mq, numbers, fixed),
        language=LANGUAGE,
        version=CLIENT_VERSION,
    )
    assert cmd == expected
    as_command = request.command()  # the signed path's form of the same request
    as_command.opaque = opaque
    assert as_command == expected


@pytest.mark.anyio
async def test_a_signing_connection_sends_a_pull_as_a_signed_command() -> None:
    got: list[RemotingCommand] = []

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        got.append(cmd)
        await session.send(RemotingCommand.response_to(cmd))

    mq = MessageQueue("t", "broker-a", 3)
    header = PullHeader(
        "g", mq, suspend_timeout_ms=15_000, sub_version=7, subscription="a || b",
        expression_type="TAG",
    )  # fmt: skip
    creds = Credentials("ak", "sk")
    async with FakeRemotingServer(handler) as server, ConnectionPool(credentials=creds) as pool:
        conn = await pool.get(server.address)
        with anyio.fail_after(10):
            await conn.request(PullRequest(header, 40, 32, PULL_SUSPEND, 0), 5)
    (cmd,) = got
    fields = dict(cmd.ext_fields)
    assert fields.pop("AccessKey") == "ak"
    signed = fields.pop("Signature")
    fixed = {"suspend_timeout_ms": 15_000, "sub_version": 7, "subscription": "a || b",
             "expression_type": "TAG"}  # fmt: skip
    assert fields == _expected("g", mq, (40, 32, PULL_SUSPEND, 0), fixed)
    assert signed == signature("sk", {**fields, "AccessKey": "ak"}, b"")


@pytest.mark.anyio
async def test_an_answer_s_numbers_reach_their_fields_of_the_pull_result() -> None:
    """A guard ("Round 18": ``BrokerClient.pull`` makes its result by position): each
    number of an answer is the field of its name, for an answer of each status."""
    from aiorocket.client.broker import BrokerClient
    from aiorocket.client.results import PullStatus
    from aiorocket.protocol.codes import ResponseCode

    codes = iter((ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                  ResponseCode.PULL_OFFSET_MOVED))  # fmt: skip

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        ext = {"nextBeginOffset": "11", "minOffset": "3", "maxOffset": "97",
               "suggestWhichBrokerId": "2"}  # fmt: skip
        await session.send(RemotingCommand.response_to(cmd, next(codes), ext_fields=ext))

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        client = BrokerClient(pool)
        mq = MessageQueue("t", "b", 0)
        for status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG,
                       PullStatus.OFFSET_ILLEGAL):  # fmt: skip
            r = await client.pull(server.address, "g", mq, 5)
            assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset,
                    r.suggest_which_broker_id, r.messages, r.undecodable, r.body_len,
                    r.offsets) == (status, 11, 3, 97, 2, [], [], -1, None)  # fmt: skip
