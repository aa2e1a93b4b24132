"""µs per received gRPC message: betterproto's decoder vs aiorocket's fast path.

Decodes one ``ReceiveMessageResponse`` as the Proxy sends it (1 KiB body, a tag, two
keys, three user properties, a receipt handle, timestamps) into the
:class:`ReceivedMessage` the application gets, by both paths:

* betterproto: ``ReceiveMessageResponse().parse`` then ``message_ext`` (the typed path);
* betterproto parse alone (without building the ReceivedMessage);
* fast: ``FastReceiveResponse.FromString`` (``aiorocket.grpc._fast``).

    .venv/bin/python benchmarks/grpc_decode.py [--size 1024] [--seconds 1.0]

Prints figures; asserts nothing (the equality of both paths is a unit test).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from aiorocket.grpc import _pb as pb
from aiorocket.grpc._fast import FastReceiveResponse
from aiorocket.grpc._received import message_ext


def sample(size: int) -> bytes:
    now = datetime.now(timezone.utc)
    msg = pb.Message(
        topic=pb.Resource(name="benchmark-topic"),
        user_properties={"trace": "abc123", "tenant": "t-42", "kind": "order"},
        system_properties=pb.SystemProperties(
            tag="TagA",
            keys=["order-1234", "user-99"],
            message_id="C0A8010A12345678ABCDEF0123456789",
            body_digest=pb.Digest(type=pb.DigestType.CRC32, checksum="1A2B3C4D"),
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.NORMAL,
            born_timestamp=now,
            born_host="10.0.0.17",
            store_timestamp=now,
            store_host="10.0.0.2:10911",
            receipt_handle="checkpoint_" + "0123456789abcdef" * 8,
            queue_id=3,
            queue_offset=123_456,
            invisible_duration=timedelta(seconds=30),
            delivery_attempt=1,
        ),
        body=bytes(range(256)) * (size // 256) + b"x" * (size % 256),
    )
    return bytes(pb.ReceiveMessageResponse(message=msg))


def per_message_us(fn: Callable[[bytes], object], wire: bytes, seconds: float) -> float:
    n = 0
    batch = 200
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn(wire)
        n += batch
        now = time.perf_counter()
        if now >= deadline:
            return (now - start) / n * 1e6


def betterproto_path(wire: bytes) -> object:
    resp = pb.ReceiveMessageResponse().parse(wire)
    _, msg = pb.oneof(resp, "content")
    return message_ext(msg, broker_name="broker-a")


def betterproto_parse(wire: bytes) -> object:
    return pb.ReceiveMessageResponse().parse(wire)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = ap.parse_args()
    wire = sample(args.size)
    print(f"ReceiveMessageResponse of {len(wire)} bytes ({args.size} B body)")
    rows = [
        ("betterproto parse + ReceivedMessage", betterproto_path),
        ("betterproto parse only", betterproto_parse),
        ("fast path (aiorocket.grpc._fast)", FastReceiveResponse.FromString),
    ]
    results = {name: per_message_us(fn, wire, args.seconds) for name, fn in rows}
    for name, us in results.items():
        print(f"  {name:<38} {us:8.1f} µs/message")
    base = results[rows[0][0]]
    fast = results[rows[2][0]]
    print(f"  fast path is {base / fast:.1f}x the typed betterproto path")


if __name__ == "__main__":
    main()
