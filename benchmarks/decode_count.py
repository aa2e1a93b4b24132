"""The pull decoder alone, counted: instructions and bytecodes a record (issue 43).

    python benchmarks/decode_count.py run N     # N decodes; under cachegrind, two N
    python benchmarks/decode_count.py ops N     # bytecodes a record, per function
    python benchmarks/decode_count.py run N varied   # bodies of 32 lengths (100-2,000 B)

Each decode reads a 32-record answer like the replay server's (``_replay.py``: 1 KiB
bodies, KEYS and TAGS properties, one topic) where it was received, between other bytes
(``start``/``end``, as ``BrokerClient.pull`` does), into stamped ``ConsumerMessage``s,
which are freed before the next decode: a record's decode and free. Instructions a
record, which do not depend on the machine's load (benchmarks/README.md, "Round 13"):

    PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=<out.N> python benchmarks/decode_count.py run <100|600>
    (I refs at 600 - at 100) / 16,000;  cg_diff <out.100> <out.600> | cg_annotate

``ops`` counts the bytecodes each function runs a record with a ``sys.settrace``
opcode counter (slow; the count, not the time, is the figure). ``varied``: the records'
bodies of 32 different lengths, each record laid out unlike the one before it (answers
of varied sizes: no two records alike, benchmarks/README.md, "Round 14").
"""

from __future__ import annotations

import collections
import random
import sys
from types import FrameType
from typing import Any

from aiorocket.protocol.message_codec import decode_messages
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.received import ConsumerMessage

RECORDS = 32
_BODY = bytes(range(256)) * 4
_ANSWER = b"".join(
    encode_stored_message(
        "ceil_t", _BODY, {"KEYS": "k", "TAGS": "t"}, queue_id=3, queue_offset=100_000 + i,
        commit_log_offset=50_000_000 + i * 1200, born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_005, born_host="127.0.0.1:50000",
        store_host="127.0.0.1:10911",
    )
    for i in range(RECORDS)
)  # fmt: skip
_SIZES = random.Random(43).sample(range(100, 2001), RECORDS)
_VARIED = b"".join(
    encode_stored_message(
        "ceil_t", (_BODY * 2)[:size], {"KEYS": "k", "TAGS": "t"}, queue_id=3,
        queue_offset=100_000 + i, commit_log_offset=50_000_000 + i * 1200,
        born_timestamp=1_700_000_000_000, store_timestamp=1_700_000_000_005,
        born_host="127.0.0.1:50000", store_host="127.0.0.1:10911",
    )
    for i, size in enumerate(_SIZES)
)  # fmt: skip
_STAMP: Any = (object(), 0, object())


def _in_a_read(answer: bytes) -> tuple[bytes, int, int]:
    """The answer in the bytes of a read, a frame's header before it and more after it."""
    return b"\0" * 300 + answer + b"\0" * 1000, 300, 300 + len(answer)


_READ, _START, _END = _in_a_read(_ANSWER)


def decode_once() -> list[Any]:
    return decode_messages(
        _READ, broker_name="replay-broker", message_class=ConsumerMessage, undecodable=[],
        stamp=_STAMP, start=_START, end=_END,
    )  # fmt: skip


def run(n: int) -> None:
    for _ in range(n):
        if len(decode_once()) != RECORDS:
            raise SystemExit("the answer did not decode whole")


def ops(n: int) -> None:
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            counts[frame.f_code.co_name] += 1
        return tracer

    decode_once()  # the caches warm (the topic's struct), as in a running consumer
    sys.settrace(tracer)
    run(n)
    sys.settrace(None)
    per = RECORDS * n
    print(f"bytecodes a record: {sum(counts.values()) / per:.1f}")
    for name, count in counts.most_common():
        print(f"  {name}: {count / per:.1f}")


if __name__ == "__main__":
    mode, count = sys.argv[1], int(sys.argv[2])
    if sys.argv[3:] == ["varied"]:
        _READ, _START, _END = _in_a_read(_VARIED)
    {"run": run, "ops": ops}[mode](count)
