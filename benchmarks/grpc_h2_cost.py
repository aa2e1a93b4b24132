"""What HTTP/2 framing costs a unary call on the client, through h2 and written by hand
(issue 43, goal 5a: would unary calls framed without h2 gain enough to matter?).

In one process, no network: a client ``H2Connection`` configured as the gRPC transport's
(grpclib's settings, ``StableHeaderEncoder``, ``RepeatingBlockDecoder``, the headers as
one ``LazyBlock``) opens IN_FLIGHT streams, each HEADERS + DATA (1 KiB message, END_STREAM);
a server ``H2Connection`` answers each as the Proxy does (HEADERS, DATA of ~100 bytes,
trailers); the client reads the answers, routes the events as the h2-driven unary path did
and hands the bytes back to its window. Only the client's side is timed. The hand-written
side does the least an own framing would: the same HPACK encoder and decoder, frames
packed with ``struct`` and the answer's frames walked by offset, no per-frame objects, no
stream state machine, no validation: a lower bound for framing without h2.

    PYTHONPATH=. .venv/bin/python benchmarks/grpc_h2_cost.py [--calls 64000] [--in-flight 64]
"""

from __future__ import annotations

import argparse
import struct
import time

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded, TrailersReceived
from h2.settings import SettingCodes

from aiorocket.grpc._hpack import RepeatingBlockDecoder, StableHeaderEncoder

#: The name of the one pair that stands for a whole header block (``LazyBlock``).
BLOCK = b":aiorocket-header-block"


class LazyBlock:
    """A call's headers handed to ``h2.send_headers`` as the one pair ``(BLOCK,
    LazyBlock(...))``: h2 turns each name and value of a header list into bytes before it
    encodes the block; with one pair it calls ``encode`` here once, which encodes the block
    (as the client's unary path did over h2 before it framed its calls itself)."""

    __slots__ = ("encoder", "headers")

    def __init__(self, encoder: StableHeaderEncoder, headers: list[tuple[bytes, bytes]]) -> None:
        self.encoder = encoder
        self.headers = headers

    def encode(self, _encoding: str = "utf-8") -> bytes:
        return self.encoder.encode(self.headers)


class _BlockEncoder(StableHeaderEncoder):
    """``[(BLOCK, block)]`` is a block ``LazyBlock`` encoded: returned as it is."""

    def encode(self, headers, huffman=True):  # type: ignore[no-untyped-def]
        if type(headers) is list and len(headers) == 1 and headers[0][0] is BLOCK:
            return headers[0][1]
        return super().encode(headers, huffman)

_HEADERS = [
    (b":method", b"POST"), (b":scheme", b"http"),
    (b":path", b"/apache.rocketmq.v2.MessagingService/SendMessage"),
    (b":authority", b"127.0.0.1:8081"), (b"te", b"trailers"),
    (b"content-type", b"application/grpc"), (b"user-agent", b"grpc-python-grpclib/0.4.9"),
    (b"x-mq-language", b"PYTHON"), (b"x-mq-protocol", b"v2"),
    (b"x-mq-client-version", b"1.0.0"), (b"x-mq-client-id", b"host@1234#5678"),
]  # fmt: skip


def _client() -> tuple[H2Connection, H2Connection]:
    config = H2Configuration(
        client_side=True, header_encoding="ascii", validate_inbound_headers=False,
        validate_outbound_headers=False, normalize_inbound_headers=False,
        normalize_outbound_headers=False,
    )  # fmt: skip
    client = H2Connection(config=config)
    client.encoder = _BlockEncoder()  # type: ignore[assignment]
    client.decoder = RepeatingBlockDecoder()
    client.initiate_connection()
    client.increment_flow_control_window(2**22)
    server = H2Connection(H2Configuration(client_side=False, header_encoding="ascii"))
    server.initiate_connection()
    # windows as a gRPC server's (Java gRPC: 1 MiB a stream), not HTTP/2's 64 KiB default
    server.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 2**20})
    server.increment_flow_control_window(2**24)
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    client.data_to_send()
    return client, server


def _headers(n: int) -> list[tuple[bytes, bytes]]:
    return [*_HEADERS, (b"grpc-timeout", b"4000m"), (b"x-mq-request-id", b"%036d" % n)]


def _answer(server: H2Connection, request_bytes: bytes, reply: bytes) -> bytes:
    for event in server.receive_data(request_bytes):
        if isinstance(event, StreamEnded):
            sid = event.stream_id
            server.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            server.send_data(sid, b"\x00" + len(reply).to_bytes(4, "big") + reply)
            server.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        elif isinstance(event, DataReceived):
            server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    return server.data_to_send()


def with_h2(calls: int, in_flight: int, message: bytes, reply: bytes) -> float:
    """Client CPU seconds of ``calls`` calls through h2."""
    client, server = _client()
    spent = 0.0
    n = 0
    for _ in range(calls // in_flight):
        t0 = time.process_time()
        for _ in range(in_flight):
            sid = client.get_next_available_stream_id()
            block = [(BLOCK, LazyBlock(client.encoder, _headers(n)))]  # type: ignore[arg-type]
            client.send_headers(sid, block)
            client.send_data(sid, message, end_stream=True)
            n += 1
        out = client.data_to_send()
        spent += time.process_time() - t0
        answers = _answer(server, out, reply)
        t0 = time.process_time()
        got = 0
        for event in client.receive_data(answers):
            kind = type(event)
            if kind is DataReceived:
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif kind is ResponseReceived or kind is TrailersReceived:
                pass
            elif kind is StreamEnded:
                got += 1
        client.data_to_send()
        spent += time.process_time() - t0
        assert got == in_flight, got
    return spent


_FRAME = struct.Struct(">HBBBI")  # length (24 bits as 16 + 8), type, flags, stream id


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    n = len(payload)
    return _FRAME.pack(n >> 8, n & 0xFF, kind, flags, sid) + payload


def by_hand(calls: int, in_flight: int, message: bytes, reply: bytes) -> float:
    """Client CPU seconds of ``calls`` calls framed by hand (the answers made by h2)."""
    client, server = _client()  # the server's answers, and a peer for the preface
    encoder = StableHeaderEncoder()
    decoder = RepeatingBlockDecoder()
    spent = 0.0
    n = 0
    sid = 1
    window = 65535
    for _ in range(calls // in_flight):
        t0 = time.process_time()
        parts = []
        for _ in range(in_flight):
            parts.append(_frame(0x1, 0x4, sid, encoder.encode(_headers(n))))
            parts.append(_frame(0x0, 0x1, sid, message))
            sid += 2
            n += 1
        out = b"".join(parts)  # what the coalesced write would send
        spent += time.process_time() - t0
        assert len(out) > in_flight * len(message)
        # The server needs h2's own request (its HPACK context is h2's): made untimed.
        request = bytearray()
        for _ in range(in_flight):
            s = client.get_next_available_stream_id()
            client.send_headers(s, [(BLOCK, LazyBlock(client.encoder, _headers(n)))])  # type: ignore[arg-type]
            client.send_data(s, message, end_stream=True)
        request += client.data_to_send()
        answers = _answer(server, bytes(request), reply)
        client.receive_data(answers)  # keep h2's peer in step (untimed)
        client.data_to_send()
        t0 = time.process_time()
        got = 0
        view = memoryview(answers)
        pos, end = 0, len(answers)
        received = 0
        state: dict[int, list[object]] = {}
        while pos < end:
            hi, lo, kind, flags, stream = _FRAME.unpack_from(view, pos)
            length = (hi << 8) | lo
            body = answers[pos + 9 : pos + 9 + length]
            pos += 9 + length
            stream &= 0x7FFFFFFF
            if kind == 0x1:  # HEADERS (no padding, no priority from the Proxy)
                state.setdefault(stream, []).append(decoder.decode(body))
                if flags & 0x1:
                    got += 1
            elif kind == 0x0:  # DATA
                state.setdefault(stream, []).append(body)
                received += length
                if flags & 0x1:
                    got += 1
        if received >= window // 2:  # a WINDOW_UPDATE, as h2 would
            _frame(0x8, 0, 0, received.to_bytes(4, "big"))
            received = 0
        spent += time.process_time() - t0
        assert got == in_flight, got
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=64000)
    ap.add_argument("--in-flight", type=int, default=64)
    args = ap.parse_args()
    message = b"\x00" + (1100).to_bytes(4, "big") + bytes(1100)
    reply = bytes(100)
    for name, fn in (("h2", with_h2), ("by hand", by_hand)):
        spent = fn(args.calls, args.in_flight, message, reply)
        print(f"{name:8s} {spent / args.calls * 1e6:6.1f} µs client CPU a call (framing, HPACK)")


if __name__ == "__main__":
    main()
