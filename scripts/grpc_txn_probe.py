"""What the 5.x Proxy tells a gRPC client about the end of a half message (issue 31).

    python scripts/grpc_txn_probe.py [--immunity 40] [--end-after 27]

Against the shared local cluster (its Proxy), three facts the Spark sink's exactly-once
mode would rest on, each printed with what was observed:

1. *An end the broker refuses is answered OK.* A half message with a 4 s
   ``orphaned_transaction_recovery_duration`` (the broker's
   ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is ended with COMMIT by its client after 6 s:
   the broker refuses a client's end past the immunity time, yet EndTransaction
   answers OK (the Proxy forwards the end one way, or in local mode drops the
   broker's answer), and the message never becomes visible.
2. *The Proxy's transaction data is any client's.* A second client, which did not
   send them, ends half messages by (topic, transaction id) through the same Proxy.
3. *Copies of committed half messages are checked back.* Half messages with
   ``--immunity`` seconds are committed by that second client ``--end-after`` seconds
   after they were sent (the Proxy keeps its data 30 s by default, so that is the
   latest end it accepts); a check pass of the broker (every 30 s) that ran in between
   copied each one back into the half queue, and after the immunity the broker asks a
   producer declaring the topic about the copies of messages that are visible already.
   The probe answers the first check-back of one message COMMIT: it becomes visible a
   second time. The rest are answered ROLLBACK.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiorocket.grpc import SimpleConsumer  # noqa: E402
from aiorocket.grpc import _pb as pb  # noqa: E402
from aiorocket.grpc._convert import Outgoing, prepare, to_pb_message  # noqa: E402
from aiorocket.grpc._producer import GrpcProducer  # noqa: E402
from aiorocket.message import Message, MessageExt  # noqa: E402
from aiorocket.producer import Producer, TransactionState  # noqa: E402
from aiorocket.producer.config import ProducerConfig  # noqa: E402
from aiorocket.testing.broker import LocalRocketMQ  # noqa: E402


def stamp(t0: float, text: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f}s] {text}", flush=True)


async def send_half(p: GrpcProducer, topic: str, body: bytes, immunity: int) -> tuple[str, str]:
    out: Outgoing = prepare(Message(topic, body), max_body_size=4 << 20, transactional=True)
    msg = to_pb_message(out)
    msg.system_properties.orphaned_transaction_recovery_duration = timedelta(seconds=immunity)
    resp = await p.transport.unary(
        "SendMessage", pb.SendMessageRequest(messages=[msg]), pb.SendMessageResponse
    )
    assert resp.status.code == pb.Code.OK, resp.status
    entry = resp.entries[0]
    return entry.message_id, entry.transaction_id


async def end(p: GrpcProducer, topic: str, msg_id: str, txn_id: str, commit: bool) -> str:
    req = pb.EndTransactionRequest(
        topic=pb.Resource(name=topic), message_id=msg_id, transaction_id=txn_id,
        resolution=pb.TransactionResolution.COMMIT if commit else pb.TransactionResolution.ROLLBACK,
        source=pb.TransactionSource.SOURCE_CLIENT,
    )  # fmt: skip
    resp = await p.transport.unary("EndTransaction", req, pb.EndTransactionResponse)
    return f"{pb.Code(resp.status.code).name} {resp.status.message!r}"


async def visible(proxy: str, group: str, topic: str, wait: float) -> list[str]:
    """Message ids received from ``topic`` by a fresh group within ``wait`` seconds."""
    got: list[str] = []
    async with SimpleConsumer(group, proxy, {topic: "*"}, await_duration=2) as consumer:
        with anyio.move_on_after(wait):
            while True:
                batch = await consumer.receive(32, invisible_duration=30)
                got.extend(m.msg_id for m in batch)
                if batch:
                    await consumer.ack(batch)
    return got


async def main(args: argparse.Namespace) -> None:
    cluster = LocalRocketMQ.attach()
    assert cluster is not None, "no local cluster (python -m aiorocket.testing.broker start)"
    proxy = cluster.proxy_grpc
    tag = uuid.uuid4().hex[:8]
    topic, group = f"probe_txn_{tag}", f"probe_g_{tag}"
    await cluster.create_topic(topic, queues=1, message_type="TRANSACTION")
    await cluster.create_group(group)
    settings = ProducerConfig()
    t0 = time.monotonic()
    checks: list[tuple[float, MessageExt]] = []
    committed_twice = anyio.Event()

    async def checker(msg: MessageExt) -> TransactionState:
        checks.append((time.monotonic() - t0, msg))
        if msg.msg_id == first and not committed_twice.is_set():
            committed_twice.set()
            stamp(t0, f"check-back for {msg.msg_id} (committed at {args.end_after}s): COMMIT")
            return TransactionState.COMMIT
        stamp(t0, f"check-back for {msg.msg_id}: ROLLBACK ({dict(msg.properties)})")
        return TransactionState.ROLLBACK

    sender = GrpcProducer("probe-sender", proxy, config=settings)
    ender = GrpcProducer("probe-ender", proxy, config=settings)
    await sender.start()
    await ender.start()
    try:
        # 1. a refused end answered OK
        mid, tid = await send_half(sender, topic, b"refused", 4)
        stamp(t0, f"1. half message {mid} sent, immunity 4 s")
        await anyio.sleep(6)
        answer = await end(sender, topic, mid, tid, True)
        stamp(t0, f"1. client COMMIT after 6 s -> EndTransaction {answer}")
        # 3. copies: halves sent now, committed by another client at --end-after
        halves = [await send_half(sender, topic, f"row-{i}".encode(), args.immunity)
                  for i in range(4)]  # fmt: skip
        first = halves[0][0]
        stamp(t0, f"3. four half messages sent, immunity {args.immunity} s: "
                  f"{[h[0] for h in halves]}")  # fmt: skip
        await anyio.sleep(args.end_after - 6)
        for h_mid, h_tid in halves:
            answer = await end(ender, topic, h_mid, h_tid, True)
            stamp(t0, f"2./3. COMMIT of {h_mid} by another client -> {answer}")
        again = await end(ender, topic, first, halves[0][1], True)
        stamp(t0, f"2./3. the same end again -> {again}")
        # The checker declares the topic: the Proxy sends it the check-backs.
        async with Producer(f"probe-checker-{tag}", proxy=proxy, topics=[topic],
                            transaction_checker=checker):  # fmt: skip
            with anyio.move_on_after(args.immunity + 75 - (time.monotonic() - t0)):
                await committed_twice.wait()
            await anyio.sleep(5)  # the other check-backs of the same pass
        seen = await visible(proxy, group, topic, 15)
        stamp(t0, f"visible: {sorted(seen)}")
        print()
        print(f"1. refused end answered OK, message visible: {mid in seen}")
        ours = {h[0] for h in halves}
        copies = [(t, m) for t, m in checks if m.msg_id in ours]
        print(f"3. check-backs of the 4 committed messages: {len(copies)} "
              f"at {[round(t, 1) for t, _ in copies]} s")  # fmt: skip
        print(f"   {first} visible {seen.count(first)} time(s) after a COMMIT answer")
    finally:
        await ender.close(None, None, None)
        await sender.close(None, None, None)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--immunity", type=int, default=40)
    p.add_argument("--end-after", type=float, default=27.0)
    anyio.run(main, p.parse_args())
