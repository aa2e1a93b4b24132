"""Transactional messages: visible to consumers only if your local transaction commits.

``send_in_transaction`` stores a half message, runs your local transaction, and ends
the transaction with its outcome (COMMIT, ROLLBACK, or UNKNOWN). When the outcome is
UNKNOWN, or ending it failed, the broker asks the producer group later: the
``transaction_checker`` answers from your own records.

Needs a transactional topic:
python -m aiorocket.testing.broker topic payments --type TRANSACTION
"""

import anyio

from aiorocket import Message, MessageExt
from aiorocket.producer import Producer, SendResult, TransactionState

paid_orders: set[str] = set()  # stands for your database


async def charge(msg: Message, half: SendResult) -> TransactionState:
    """The local transaction: runs after the half message was stored."""
    order = msg.keys[0]
    if order == "order-2":
        return TransactionState.ROLLBACK  # the card was declined: nobody sees the message
    paid_orders.add(order)
    return TransactionState.COMMIT


async def check(msg: MessageExt) -> TransactionState:
    """The broker asks about a transaction it never heard the end of."""
    return TransactionState.COMMIT if msg.keys[0] in paid_orders else TransactionState.ROLLBACK


async def main() -> None:
    async with Producer("example-payments", transaction_checker=check) as producer:
        for order in ("order-1", "order-2"):
            msg = Message("payments", b"payment of " + order.encode(), keys=[order])
            result = await producer.send_in_transaction(msg, charge)
            print(order, result.state.name, result.msg_id)


anyio.run(main)
