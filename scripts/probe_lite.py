"""Probe the local broker's lite topics over remoting (RocketMQ 5.5 RIP-83): prints what
each request answers (LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME
and ACK_MESSAGE with liteTopic). Run: python scripts/probe_lite.py (AIOROCKET_NAMESRV_ADDR
set). Output on 5.5.0 with enableLmq/enableMultiDispatch: ctl 0 on both brokers; the pop
of the broker a subscribed lite topic is sharded to answers FOUND with the message
(INNER_MULTI_DISPATCH %LMQ%$<parent>$<lite>, INNER_MULTI_QUEUE_OFFSET 0, __LITE_TOPIC),
reviveQid 999, orderCountInfo "0"; change 0 (same popTime, new invisibleTime); ack 0;
the unsubscribed lite topic "c" is never popped. Without the two settings every pop
answers 210 (POLLING_TIMEOUT)."""

from __future__ import annotations

import json
import os
import time
import uuid

import anyio

from aiorocket import Message, Producer
from aiorocket.admin import Admin
from aiorocket.client.instance import ClientInstance
from aiorocket.protocol.message_codec import decode_messages
from aiorocket.received import PopMessage

NS = os.environ.get("AIOROCKET_NAMESRV_ADDR", "127.0.0.1:9876")


async def send(parent: str) -> None:
    async with Producer("lite-probe-p", NS) as producer:
        for lt in ("a", "b", "c"):
            # lite_topic: the producer sends it to the queue the broker shards it to
            r = await producer.send(Message(parent, f"to {lt}".encode(), lite_topic=lt))
            print("sent", lt, r)


async def main() -> None:
    tag = uuid.uuid4().hex[:6]
    parent, group = f"lite-probe-{tag}", f"lite-probe-g-{tag}"
    async with Admin(NS) as admin:
        await admin.create_topic(parent, queues=4, message_type="LITE")
        masters = await admin.masters()
        for name, addr in masters.items():
            raw = {"groupName": group, "attributes": {"+lite.bind.topic": parent}}
            await admin.requests.create_group(addr, raw)
            print("group config", name, (await admin.requests.group_configs(addr)).get(group))
    async with ClientInstance([NS]) as client:
        cid = client.client_id
        route = await client.namesrv.get_route(parent)
        addrs = {mq.broker_name: route.master_addr(mq.broker_name) for mq in route.read_queues()}
        print("brokers", addrs)
        body = {"subscriptionSet": [{
            "action": "PARTIAL_ADD", "clientId": cid, "group": group, "topic": parent,
            "liteTopicSet": ["a", "b"], "version": int(time.time() * 1000),
        }]}
        for name, addr in addrs.items():
            resp = await client.broker.call(addr, 200071, {}, json.dumps(body).encode())
            print("ctl", name, resp.code, resp.remark)
        await send(parent)
        for name, addr in addrs.items():
            ext = {"clientId": cid, "consumerGroup": group, "topic": parent, "maxMsgNum": "32",
                   "invisibleTime": "30000", "pollTime": "2000",
                   "bornTime": str(int(time.time() * 1000)), "attemptId": uuid.uuid4().hex}
            resp = await client.broker.call(addr, 200070, ext, timeout=8)
            print("pop", name, resp.code, resp.remark, resp.ext_fields)
            if resp.code == 0:
                msgs = decode_messages(resp.body, broker_name=name, message_class=PopMessage)
                for m in msgs:
                    print("  msg", m.topic, m.queue_id, m.queue_offset, m.body,
                          dict(m.properties))
                    lmq_off = int(m.properties["INNER_MULTI_QUEUE_OFFSET"])
                    ck = (f"{lmq_off} {resp.ext_fields['popTime']} "
                          f"{resp.ext_fields['invisibleTime']} {resp.ext_fields['reviveQid']} 0 "
                          f"{name} 0 {lmq_off}")
                    cext = {"consumerGroup": group, "topic": parent, "queueId": "0",
                            "extraInfo": ck, "offset": str(lmq_off), "invisibleTime": "5000",
                            "liteTopic": m.properties["__LITE_TOPIC"], "bname": name}
                    c = await client.broker.call(addr, 200053, cext)
                    print("  change", c.code, c.remark, c.ext_fields)
                    if c.code == 0:
                        ck = (f"{lmq_off} {c.ext_fields['popTime']} {c.ext_fields['invisibleTime']}"
                              f" {c.ext_fields['reviveQid']} 0 {name} 0 {lmq_off}")
                    aext = {"consumerGroup": group, "topic": parent, "queueId": "0",
                            "extraInfo": ck, "offset": str(lmq_off),
                            "liteTopic": m.properties["__LITE_TOPIC"], "bname": name}
                    a = await client.broker.call(addr, 200051, aext)
                    print("  ack", a.code, a.remark)


anyio.run(main)
