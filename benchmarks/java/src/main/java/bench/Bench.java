package bench;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;

/**
 * The Java side of benchmarks/compare.py. Prints "READY" once started, "PROGRESS n" now
 * and then, and one final line "RESULT {json}". CPU is this JVM's process CPU time
 * (all threads: client, JIT, GC) over the measured phase.
 *
 * <pre>
 * consume NAMESRV TOPIC GROUP EXPECTED IDLE_SECONDS LATENCY(0|1)
 * produce NAMESRV TOPIC COUNT SIZE IN_FLIGHT [plain|auto]   (auto: setAutoBatch(true))
 * paced   NAMESRV TOPIC COUNT SIZE RATE [IN_FLIGHT [plain|auto]]   (default: unbounded)
 * one     NAMESRV TOPIC GROUP KEY   (one message with key KEY; prints "SENT msgId")
 * </pre>
 *
 * <p>BENCH_TRACE_TOPIC=topic: the clients write message trace records there
 * (enableMsgTrace with a customized trace topic; tests/integration/test_message_trace.py).
 */
public final class Bench {
  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

  public static void main(String[] args) throws Exception {
    switch (args[0]) {
      case "consume" -> consume(args[1], args[2], args[3], Integer.parseInt(args[4]),
          Integer.parseInt(args[5]), args[6].equals("1"));
      case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]),
          Integer.parseInt(args[4]), Integer.parseInt(args[5]),
          args.length > 6 && args[6].equals("auto"));
      case "paced" -> paced(args[1], args[2], Integer.parseInt(args[3]),
          Integer.parseInt(args[4]), Integer.parseInt(args[5]),
          args.length > 6 ? Integer.parseInt(args[6]) : 0,
          args.length > 7 && args[7].equals("auto"));
      case "one" -> one(args[1], args[2], args[3], args[4]);
      default -> throw new IllegalArgumentException(args[0]);
    }
    System.exit(0);
  }

  static long nowMicros() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
  }

  static void consume(String namesrv, String topic, String group, int expected, int idle,
      boolean latency) throws Exception {
    AtomicInteger count = new AtomicInteger();
    AtomicLong firstNs = new AtomicLong();
    AtomicLong lastNs = new AtomicLong();
    long[] lat = new long[latency ? expected : 0];
    // e2e split at the broker's store time (ms), as consume.py's: send -> stored, stored -> user
    long[] toStore = new long[lat.length];
    long[] fromStore = new long[lat.length];
    AtomicInteger samples = new AtomicInteger();
    AtomicLong steadyUs = new AtomicLong(Long.MAX_VALUE); // count messages sent 1 s after
    // the first one arrived
    java.util.concurrent.Callable<DefaultMQPushConsumer> make = () -> {
      String trace = System.getenv("BENCH_TRACE_TOPIC");
      DefaultMQPushConsumer consumer = trace == null ? new DefaultMQPushConsumer(group)
          : new DefaultMQPushConsumer(group, true, trace);
      consumer.setNamesrvAddr(namesrv);
      consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
      // BENCH_POP=1: the push consumer in POP mode (the broker's assignment; the group
      // and topic set to POP on the brokers by SET_MESSAGE_REQUEST_MODE beforehand)
      if ("1".equals(System.getenv("BENCH_POP"))) {
        consumer.setClientRebalance(false);
      }
      consumer.subscribe(topic, "*");
      consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
        for (MessageExt m : msgs) {
          long t = System.nanoTime();
          if (firstNs.compareAndSet(0, t)) {
            steadyUs.set(nowMicros() + 1_000_000);
          }
          int n = count.incrementAndGet();
          if (latency && m.getBody().length >= 8) {
            long stamp = ByteBuffer.wrap(m.getBody(), 0, 8).getLong();
            if (stamp >= steadyUs.get()) {
              int i = samples.getAndIncrement();
              if (i < lat.length) {
                long now = nowMicros();
                long stored = m.getStoreTimestamp() * 1000;
                lat[i] = now - stamp;
                toStore[i] = stored - stamp;
                fromStore[i] = now - stored;
              }
            }
          }
          if (n <= expected) {
            lastNs.set(t);
          }
        }
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
      });
      return consumer;
    };
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    DefaultMQPushConsumer consumer = make.call();
    // The subscription's version before start() (subscribe() made it): the rebalance that
    // start() begins may bump it before this thread could read it afterwards, and READY
    // would then wait for a bump that had already come (below).
    long firstVersion = 0;
    for (int attempt = 1; ; attempt++) { // start() throws when the route query times out
      try {
        SubscriptionData made = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getSubscriptionInner().get(topic);
        firstVersion = made == null ? 0 : made.getSubVersion();
        consumer.start();
        break;
      } catch (IllegalStateException | org.apache.rocketmq.client.exception.MQClientException e) {
        if (attempt == 3) {
          throw e;
        }
        System.out.println("consumer start failed, retrying: " + e);
        consumer.shutdown();
        consumer = make.call();
      }
    }
    // rocketmq-client 5.x bumps the subscription version when the first rebalance assigns
    // queues and sends a heartbeat with it only if the heartbeat lock is free (tryLock);
    // when another heartbeat holds it, the broker answers every pull "subscription not
    // latest" until the next 30 s heartbeat. Wait for the assignment and the version's
    // bump (the rebalance fills the process queues first, then bumps it), then send a
    // heartbeat until one takes the lock: it carries the new version. (Sending one as
    // soon as the queues were there raced the rebalance's own: it could go out with the
    // old version and hold the lock the rebalance's tried, and the consumer then got
    // nothing for ~30 s: compare.py's e2e case at 19:53 UTC on 2026-11-30, Goal 4,
    // round 9 in benchmarks/README.md.)
    // In POP mode the broker's assignment (QUERY_ASSIGNMENT) fills the pop process queues
    // instead: READY only once it is there, or the e2e latency case counts the start-up.
    boolean pop = "1".equals(System.getenv("BENCH_POP"));
    long assignDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    RebalanceImpl rebalance = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl();
    SubscriptionData sub = rebalance.getSubscriptionInner().get(topic);
    while (((pop ? rebalance.getPopProcessQueueTable() : rebalance.getProcessQueueTable())
        .isEmpty() || (sub != null && sub.getSubVersion() == firstVersion))
        && System.nanoTime() < assignDeadline) {
      Thread.sleep(20);
    }
    while (!consumer.getDefaultMQPushConsumerImpl().getmQClientFactory()
        .sendHeartbeatToAllBrokerWithLock() && System.nanoTime() < assignDeadline) {
      Thread.sleep(20);
    }
    System.out.println("READY");
    System.out.flush();
    int seen = 0;
    long progressAt = System.nanoTime();
    while (count.get() < expected) {
      Thread.sleep(50);
      int n = count.get();
      long now = System.nanoTime();
      if (n != seen) {
        seen = n;
        progressAt = now;
      } else if (now - progressAt > TimeUnit.SECONDS.toNanos(n == 0 ? 90 : idle)) {
        break; // stalled (or nothing at all within 90 s)
      }
      if (now / 1_000_000_000L != (now - 50_000_000L) / 1_000_000_000L) {
        System.out.println("PROGRESS " + n);
        System.out.flush();
      }
    }
    long cpu = OS.getProcessCpuTime() - cpu0;
    long end = System.nanoTime();
    int n = Math.min(count.get(), expected);
    StringBuilder sb = new StringBuilder();
    sb.append("{\"count\":").append(n)
        .append(",\"elapsed\":").append((end - t0) / 1e9)
        .append(",\"first_to_last\":").append((lastNs.get() - firstNs.get()) / 1e9)
        .append(",\"startup\":").append(firstNs.get() == 0 ? -1 : (firstNs.get() - t0) / 1e9)
        .append(",\"cpu\":").append(cpu / 1e9);
    if (latency) {
      long[] s = Arrays.copyOf(lat, Math.min(samples.get(), lat.length));
      Arrays.sort(s);
      sb.append(",\"lat_p50_ms\":").append(pct(s, 50) / 1000.0)
          .append(",\"lat_p99_ms\":").append(pct(s, 99) / 1000.0)
          .append(",\"lat_samples\":").append(s.length);
      long[] to = Arrays.copyOf(toStore, s.length);
      long[] from = Arrays.copyOf(fromStore, s.length);
      Arrays.sort(to);
      Arrays.sort(from);
      sb.append(",\"send_to_store_p99_ms\":").append(pct(to, 99) / 1000.0)
          .append(",\"store_to_user_p99_ms\":").append(pct(from, 99) / 1000.0);
    }
    sb.append('}');
    System.out.println("RESULT " + sb);
    System.out.flush();
    consumer.shutdown();
  }

  static long pct(long[] sorted, double p) {
    if (sorted.length == 0) {
      return -1;
    }
    int i = (int) Math.round(p / 100 * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
  }

  /** autoBatch: the 5.x client's own batching (sends to one queue merged into batch
   *  requests). */
  static DefaultMQProducer producer(String namesrv, boolean autoBatch) throws Exception {
    DefaultMQProducer p = new DefaultMQProducer("bench_java_producer");
    p.setNamesrvAddr(namesrv);
    p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
    p.setAutoBatch(autoBatch);
    p.start();
    return p;
  }

  /** One traced send (BENCH_TRACE_TOPIC), then shutdown, which flushes the traces. */
  static void one(String namesrv, String topic, String group, String key) throws Exception {
    String trace = System.getenv("BENCH_TRACE_TOPIC");
    DefaultMQProducer p = trace == null ? new DefaultMQProducer(group)
        : new DefaultMQProducer(group, true, trace);
    p.setNamesrvAddr(namesrv);
    p.start();
    Message m = new Message(topic, "java".getBytes(java.nio.charset.StandardCharsets.UTF_8));
    m.setKeys(key);
    SendResult r = p.send(m);
    System.out.println("SENT " + r.getMsgId());
    System.out.flush();
    p.shutdown();
  }

  static byte[] body(int size, Random rnd) {
    byte[] b = new byte[size];
    rnd.nextBytes(b);
    return b;
  }

  static void produce(String namesrv, String topic, int count, int size, int inFlight,
      boolean autoBatch) throws Exception {
    DefaultMQProducer p = producer(namesrv, autoBatch);
    byte[] payload = body(size, new Random(1));
    Semaphore slots = new Semaphore(inFlight);
    AtomicInteger failed = new AtomicInteger();
    long[] lat = new long[count];
    AtomicInteger done = new AtomicInteger();
    for (int i = 0; i < 2000; i++) { // warm-up, not measured
      slots.acquire();
      p.send(new Message(topic, payload), callback(slots, failed, null, null, 0));
    }
    slots.acquire(inFlight);
    slots.release(inFlight);
    System.out.println("READY");
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    for (int i = 0; i < count; i++) {
      slots.acquire();
      p.send(new Message(topic, payload), callback(slots, failed, lat, done, System.nanoTime()));
      if (i % 50_000 == 0) {
        System.out.println("PROGRESS " + i);
      }
    }
    slots.acquire(inFlight);
    long elapsed = System.nanoTime() - t0;
    long cpu = OS.getProcessCpuTime() - cpu0;
    long[] sorted = java.util.Arrays.copyOf(lat, done.get());
    java.util.Arrays.sort(sorted);
    System.out.println("RESULT {\"count\":" + count + ",\"elapsed\":" + elapsed / 1e9
        + ",\"cpu\":" + cpu / 1e9 + ",\"failed\":" + failed.get()
        + ",\"send_p50_ms\":" + pct(sorted, 50) / 1e6 + ",\"send_p99_ms\":"
        + pct(sorted, 99) / 1e6 + "}");
    System.out.flush();
    p.shutdown();
  }

  /** Releases a slot; records the send's latency (ns) in lat when given. */
  static SendCallback callback(Semaphore slots, AtomicInteger failed, long[] lat,
      AtomicInteger done, long startNs) {
    return new SendCallback() {
      @Override public void onSuccess(SendResult r) {
        if (lat != null) {
          lat[done.getAndIncrement()] = System.nanoTime() - startNs;
        }
        slots.release();
      }

      @Override public void onException(Throwable e) {
        failed.incrementAndGet();
        slots.release();
      }
    };
  }

  /** Sends at rate; with inFlight > 0 at most that many sends are outstanding (the pacing
   *  waits for a free slot), and the result has send latency percentiles. */
  static void paced(String namesrv, String topic, int count, int size, int rate, int inFlight,
      boolean autoBatch) throws Exception {
    DefaultMQProducer p = producer(namesrv, autoBatch);
    byte[] payload = body(size, new Random(2));
    AtomicInteger failed = new AtomicInteger();
    Semaphore slots = new Semaphore(inFlight > 0 ? inFlight : Integer.MAX_VALUE);
    long[] lat = new long[count];
    AtomicInteger done = new AtomicInteger();
    System.out.println("READY");
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    int sent = 0;
    while (sent < count) {
      long due = Math.min(count, (System.nanoTime() - t0) * rate / 1_000_000_000L + 1);
      while (sent < due) {
        byte[] b = payload.clone();
        ByteBuffer.wrap(b).putLong(0, nowMicros());
        slots.acquire();
        long now = System.nanoTime();
        // send latency counts only sends after the first second (warm-up), as aiorocket's
        boolean counted = now - t0 >= 1_000_000_000L;
        SendCallback cb = callback(slots, failed, counted ? lat : null, done, now);
        p.send(new Message(topic, b), cb);
        sent++;
      }
      LockSupport.parkNanos(200_000);
    }
    long elapsed = System.nanoTime() - t0;
    if (inFlight > 0) {
      slots.acquire(inFlight);
    } else {
      Thread.sleep(500);
    }
    long cpu = OS.getProcessCpuTime() - cpu0;
    long[] sorted = java.util.Arrays.copyOf(lat, done.get());
    java.util.Arrays.sort(sorted);
    System.out.println("RESULT {\"count\":" + count + ",\"elapsed\":" + elapsed / 1e9
        + ",\"cpu\":" + cpu / 1e9 + ",\"failed\":" + failed.get()
        + ",\"send_p50_ms\":" + pct(sorted, 50) / 1e6 + ",\"send_p99_ms\":"
        + pct(sorted, 99) / 1e6 + "}");
    System.out.flush();
    p.shutdown();
  }
}
