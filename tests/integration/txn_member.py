"""A transactional gRPC producer in a process of its own, for the restart scenario of
``test_grpc_transactions.py``: it sends one half message, runs a local transaction that
commits (the line ``committed <msg_id>`` on stdout, flushed), then hangs before the
transaction is ended; the test SIGKILLs it there.

``python -m tests.integration.txn_member PROXY TOPIC BODY``
"""

from __future__ import annotations

import sys

import anyio

from aiorocket.client.results import SendResult
from aiorocket.message import Message, MessageExt
from aiorocket.producer import Producer, TransactionState


async def main(proxy: str, topic: str, body: str) -> None:
    async def never_asked(msg: MessageExt) -> TransactionState:
        return TransactionState.UNKNOWN  # the process is killed before any check

    async def local_commit(msg: Message, result: SendResult) -> TransactionState:
        sys.stdout.write(f"committed {result.msg_id}\n")  # the business commit happened
        sys.stdout.flush()
        await anyio.sleep_forever()  # killed here: EndTransaction is never sent
        return TransactionState.COMMIT

    async with Producer("txn-member", proxy=proxy, topics=[topic],
                        transaction_checker=never_asked) as producer:  # fmt: skip
        await producer.send_in_transaction(Message(topic, body.encode()), local_commit)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
