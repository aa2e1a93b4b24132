"""µs per gRPC call spent on HPACK: h2's default codec (the ``hpack`` package) against
aiorocket's (``aiorocket.grpc._hpack``), one process, no Proxy needed.

* encode: the request header block of one ``SendMessage`` call as grpclib builds it
  (pseudo-headers, ``grpc-timeout``, content type, user agent and the RocketMQ metadata
  with a fresh request id);
* decode: the two header blocks of one answer (``:status`` and content type, then the
  ``grpc-status`` trailers) as a Netty server sends them once its table holds them.

    .venv/bin/python benchmarks/grpc_hpack.py [--seconds 1.0]

Prints figures; asserts nothing (the codecs' agreement is tests/unit/test_hpack.py).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import hpack

from aiorocket.grpc._hpack import RepeatingBlockDecoder, StableHeaderEncoder


def request_headers() -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/apache.rocketmq.v2.MessagingService/SendMessage"),
        (b":authority", b"127.0.0.1:8081"),
        (b"grpc-timeout", b"3999m"),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
        (b"user-agent", b"grpc-python-grpclib/0.4.9 (linux; cpython/3.11.7)"),
        (b"x-mq-language", b"PYTHON"),
        (b"x-mq-protocol", b"v2"),
        (b"x-mq-client-version", b"0.1.0"),
        (b"x-mq-client-id", b"10.0.0.1@4242#1234567890"),
        (b"x-mq-request-id", str(uuid.uuid4()).encode()),
    ]


def decode_all(decoder: hpack.Decoder, blocks: tuple[bytes, ...]) -> None:
    for block in blocks:
        decoder.decode(block, raw=True)


def per_call_us(fn: Callable[[], object], seconds: float) -> float:
    n, start = 0, time.process_time()
    while (spent := time.process_time() - start) < seconds:
        for _ in range(200):
            fn()
        n += 200
    return spent / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    theirs, ours = hpack.Encoder(), StableHeaderEncoder()
    answer = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    trailers = [(b"grpc-status", b"0")]
    # The server's first answer fills its table; later ones repeat the same bytes.
    server = hpack.Encoder()
    opening = (server.encode(answer), server.encode(trailers))
    again = (server.encode(answer), server.encode(trailers))
    plain, repeating = hpack.Decoder(), RepeatingBlockDecoder()
    for decoder in (plain, repeating):
        for block in opening:
            decoder.decode(block, raw=True)

    secs = args.seconds
    rows = [
        ("encode, hpack.Encoder", per_call_us(lambda: theirs.encode(request_headers()), secs)),
        ("encode, StableHeaderEncoder", per_call_us(lambda: ours.encode(request_headers()), secs)),
        ("building the header list alone", per_call_us(request_headers, secs)),
        ("decode, hpack.Decoder", per_call_us(lambda: decode_all(plain, again), secs)),
        ("decode, RepeatingBlockDecoder", per_call_us(lambda: decode_all(repeating, again), secs)),
    ]  # fmt: skip
    for name, us in rows:
        print(f"{name:36s} {us:7.2f} µs/call")


if __name__ == "__main__":
    main()
