// The Java RocketMQ 4.9.7 client's side of tests/integration/test_rmq49_java.py, compiled
// and run against the 4.9.7 cluster's jars (java -cp "<dir>:<lib>/*" Interop49 ...): the
// cluster's jars include rocketmq-client and fastjson. One JSON object per line:
//   produce NAMESRV TOPIC SPECS_JSON   -> {"sent": msgId} per message
//   consume NAMESRV TOPIC GROUP COUNT  -> {"ready": true}, then one
//       {"msgId", "body" (hex), "tag", "keys", "properties" (user), "compressed"} per message
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

public class Interop49 {
    static synchronized void emit(Map<String, Object> obj) {
        System.out.println(JSON.toJSONString(obj));
        System.out.flush();
    }

    static byte[] unhex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("produce")) {
            DefaultMQProducer producer = new DefaultMQProducer("interop49_producer");
            producer.setNamesrvAddr(args[1]);
            producer.setCompressMsgBodyOverHowmuch(4096); // the default: large bodies go zlib
            producer.start();
            for (Object o : JSON.parseArray(args[3])) {
                JSONObject spec = (JSONObject) o;
                Message msg = new Message(args[2], spec.getString("tag"), unhex(spec.getString("body")));
                msg.setKeys(spec.getJSONArray("keys").toJavaList(String.class));
                for (Map.Entry<String, Object> e : spec.getJSONObject("properties").entrySet()) {
                    msg.putUserProperty(e.getKey(), (String) e.getValue());
                }
                Map<String, Object> sent = new LinkedHashMap<>();
                sent.put("sent", producer.send(msg).getMsgId());
                emit(sent);
            }
            producer.shutdown();
            return;
        }
        int count = Integer.parseInt(args[4]);
        CountDownLatch done = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[3]);
        consumer.setNamesrvAddr(args[1]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[2], "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                Map<String, String> user = new TreeMap<>();
                for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
                    if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) {
                        user.put(e.getKey(), e.getValue());
                    }
                }
                List<String> keys = m.getKeys() == null
                    ? new ArrayList<>() : Arrays.asList(m.getKeys().split(MessageConst.KEY_SEPARATOR));
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("msgId", m.getMsgId());
                out.put("body", hex(m.getBody()));
                out.put("tag", m.getTags());
                out.put("keys", keys);
                out.put("properties", user);
                out.put("compressed", (m.getSysFlag() & MessageSysFlag.COMPRESSED_FLAG) != 0);
                emit(out);
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("ready", true);
        emit(ready);
        boolean all = done.await(90, TimeUnit.SECONDS);
        consumer.shutdown();
        System.exit(all ? 0 : 3);
    }
}
