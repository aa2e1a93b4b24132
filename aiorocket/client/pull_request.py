"""PULL_MESSAGE's request with its header encoded once per queue.

From one pull of a queue to the next only four numbers of the request change (the
offset, the batch, the sys flag and the commit offset) and the opaque. Building the ext
fields, a ``RemotingCommand`` and its JSON header every time was ~170 bytecodes and four
calls a pull (benchmarks/README.md, "Round 11"): a ``PullHeader`` encodes the rest
once, and a pull's frame is one f-string of those numbers around it.
"""

from __future__ import annotations

import json
import struct

from aiorocket.errors import FrameTooLargeError
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import CLIENT_VERSION, LANGUAGE, RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import MAX_FRAME_LENGTH, SERIALIZE_JSON

__all__ = ["PullHeader", "PullRequest"]

_PULL_MESSAGE = int(RequestCode.PULL_MESSAGE)
_LENGTHS = struct.Struct(">iI")  # the frame's length, then (serialize type << 24) | header's


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class PullHeader:
    """The fields of a queue's pull requests that stay the same from pull to pull.

    ``fields``: those ext fields; ``head``: the JSON header up to the first changing
    value (the request's code, language, version and flag, and the fixed ext fields
    JSON-escaped), which ``PullRequest.frame`` completes.
    """

    __slots__ = ("fields", "head")

    def __init__(
        self,
        group: str,
        mq: MessageQueue,
        *,
        suspend_timeout_ms: int,
        sub_version: int,
        subscription: str | None,
        expression_type: str | None,
    ) -> None:
        fields = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "suspendTimeoutMillis": str(suspend_timeout_ms),
            "subVersion": str(sub_version),
            "bname": mq.broker_name,
        }
        if subscription is not None:
            fields["subscription"] = subscription
            fields["expressionType"] = expression_type or "TAG"
        self.fields = fields
        # The header as encode_header writes it, but for the order of its keys (JSON
        # objects have none): the changing values last, the opaque at the very end.
        head = _json({"code": _PULL_MESSAGE, "language": LANGUAGE, "version": CLIENT_VERSION,
                      "flag": 0})  # fmt: skip
        self.head = f'{head[:-1]},"extFields":{_json(fields)[:-1]},"queueOffset":"'


class PullRequest:
    """One pull: a request a ``Connection`` sends as ``frame(opaque)`` (or, to sign it,
    as ``command()``); see ``aiorocket.remoting.connection.EncodedRequest``."""

    __slots__ = ("_commit_offset", "_header", "_max_nums", "_offset", "_sys_flag")

    code = _PULL_MESSAGE

    def __init__(
        self, header: PullHeader, offset: int, max_nums: int, sys_flag: int, commit_offset: int
    ) -> None:
        self._header = header
        self._offset = offset
        self._max_nums = max_nums
        self._sys_flag = sys_flag
        self._commit_offset = commit_offset

    def frame(self, opaque: int) -> bytes:
        """The whole frame, length prefix included, with ``opaque``."""
        header = (
            f'{self._header.head}{self._offset}","maxMsgNums":"{self._max_nums}",'
            f'"sysFlag":"{self._sys_flag}","commitOffset":"{self._commit_offset}"}},'
            f'"opaque":{opaque}}}'
        ).encode()
        size = len(header)
        if size + 4 > MAX_FRAME_LENGTH:  # a subscription expression of megabytes
            raise FrameTooLargeError(
                f"frame of {size + 4} bytes exceeds the {MAX_FRAME_LENGTH} byte limit"
            )
        return _LENGTHS.pack(size + 4, (SERIALIZE_JSON << 24) | size) + header

    def command(self) -> RemotingCommand:
        """The same request as a command (its opaque still to be set)."""
        return RemotingCommand.request(
            self.code,
            {
                **self._header.fields,
                "queueOffset": str(self._offset),
                "maxMsgNums": str(self._max_nums),
                "sysFlag": str(self._sys_flag),
                "commitOffset": str(self._commit_offset),
            },
        )
