// The Java RocketMQ client's side of tests/integration/test_request_reply_java.py
// (rocketmq-client 5.5.0, the artifact on Maven Central, from the cluster's own jars).
// One JSON object per line on stdout (bodies ASCII text):
//   request NAMESRV TOPIC BODY TIMEOUT_MS -> {"reply": body, "topic": t, "correlation": id}
//       or {"error": class name} (DefaultMQProducer.request)
//   reply NAMESRV TOPIC GROUP COUNT       -> {"ready": true}, then {"replied": body} for each
//       of COUNT requests answered with "re:" + body (MessageUtil.createReplyMessage)
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

public class RequestReply {
    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("request")) {
            DefaultMQProducer producer = new DefaultMQProducer("java_requester");
            producer.setNamesrvAddr(args[1]);
            producer.start();
            try {
                Message reply = producer.request(new Message(args[2], args[3].getBytes()),
                    Long.parseLong(args[4]));
                emit("{\"reply\": \"" + new String(reply.getBody()) + "\", \"topic\": \""
                    + reply.getTopic() + "\", \"correlation\": \""
                    + reply.getProperty(MessageConst.PROPERTY_CORRELATION_ID) + "\"}");
            } catch (Exception e) {
                emit("{\"error\": \"" + e.getClass().getSimpleName() + "\"}");
            }
            producer.shutdown();
            System.exit(0);
        }
        DefaultMQProducer replier = new DefaultMQProducer("java_replier");
        replier.setNamesrvAddr(args[1]);
        replier.start();
        CountDownLatch done = new CountDownLatch(Integer.parseInt(args[4]));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[3]);
        consumer.setNamesrvAddr(args[1]);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[2], "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt msg : msgs) {
                byte[] body = ("re:" + new String(msg.getBody())).getBytes();
                try {
                    replier.send(MessageUtil.createReplyMessage(msg, body));
                } catch (Exception e) {
                    emit("{\"error\": \"" + e.getClass().getSimpleName() + "\"}");
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                emit("{\"replied\": \"" + new String(msg.getBody()) + "\"}");
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        emit("{\"ready\": true}");
        done.await(120, TimeUnit.SECONDS);
        consumer.shutdown();
        replier.shutdown();
        System.exit(0);
    }
}
