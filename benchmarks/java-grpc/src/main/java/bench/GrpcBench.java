package bench;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Collections;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * The Java 5.x gRPC client's side of benchmarks/compare.py (its "grpc" case), through the
 * Proxy. Same line protocol as Bench: "READY", "PROGRESS n", "RESULT {json}"; CPU is this
 * JVM's process CPU time (all threads) over the measured phase.
 *
 * <pre>
 * consume ENDPOINT TOPIC GROUP EXPECTED IDLE_SECONDS LATENCY(0|1)
 * produce ENDPOINT TOPIC COUNT SIZE IN_FLIGHT
 * </pre>
 */
public final class GrpcBench {
  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
  private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

  public static void main(String[] args) throws Exception {
    switch (args[0]) {
      case "consume" -> consume(args[1], args[2], args[3], Integer.parseInt(args[4]),
          Integer.parseInt(args[5]), args[6].equals("1"));
      case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]),
          Integer.parseInt(args[4]), Integer.parseInt(args[5]));
      default -> throw new IllegalArgumentException(args[0]);
    }
    System.exit(0);
  }

  static ClientConfiguration config(String endpoint) {
    return ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
        .setRequestTimeout(Duration.ofSeconds(10)).build();
  }

  static long nowMicros() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
  }

  static long pct(long[] sorted, double p) {
    if (sorted.length == 0) {
      return -1;
    }
    int i = (int) Math.round(p / 100 * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
  }

  static void consume(String endpoint, String topic, String group, int expected, int idle,
      boolean latency) throws Exception {
    AtomicInteger count = new AtomicInteger();
    AtomicLong firstNs = new AtomicLong();
    AtomicLong lastNs = new AtomicLong();
    long[] lat = new long[latency ? expected : 0];
    AtomicInteger samples = new AtomicInteger();
    AtomicLong steadyUs = new AtomicLong(Long.MAX_VALUE);
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    PushConsumer consumer = PROVIDER.newPushConsumerBuilder()
        .setClientConfiguration(config(endpoint))
        .setConsumerGroup(group)
        .setSubscriptionExpressions(Collections.singletonMap(topic,
            new FilterExpression("*", FilterExpressionType.TAG)))
        .setMessageListener(view -> {
          long t = System.nanoTime();
          if (firstNs.compareAndSet(0, t)) {
            steadyUs.set(nowMicros() + 1_000_000);
          }
          int n = count.incrementAndGet();
          ByteBuffer body = view.getBody();
          if (latency && body.remaining() >= 8) {
            long stamp = body.getLong(body.position());
            if (stamp >= steadyUs.get()) {
              int i = samples.getAndIncrement();
              if (i < lat.length) {
                lat[i] = nowMicros() - stamp;
              }
            }
          }
          if (n <= expected) {
            lastNs.set(t);
          }
          return ConsumeResult.SUCCESS;
        })
        .build();
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
        break;
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
    }
    sb.append('}');
    System.out.println("RESULT " + sb);
    System.out.flush();
    Runtime.getRuntime().halt(0); // close() waits for receives in flight; nothing to flush
  }

  static void produce(String endpoint, String topic, int count, int size, int inFlight)
      throws Exception {
    Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config(endpoint))
        .setTopics(topic).build();
    byte[] payload = new byte[size];
    new Random(1).nextBytes(payload);
    Semaphore slots = new Semaphore(inFlight);
    AtomicInteger failed = new AtomicInteger();
    long[] lat = new long[count];
    AtomicInteger done = new AtomicInteger();
    for (int i = 0; i < 2000; i++) { // warm-up, not measured
      slots.acquire();
      p.sendAsync(message(topic, payload)).whenComplete((r, e) -> slots.release());
    }
    slots.acquire(inFlight);
    slots.release(inFlight);
    System.out.println("READY");
    long cpu0 = OS.getProcessCpuTime();
    long t0 = System.nanoTime();
    for (int i = 0; i < count; i++) {
      slots.acquire();
      long start = System.nanoTime();
      p.sendAsync(message(topic, payload)).whenComplete((r, e) -> {
        if (e != null) {
          failed.incrementAndGet();
        } else {
          lat[done.getAndIncrement()] = System.nanoTime() - start;
        }
        slots.release();
      });
      if (i % 50_000 == 0) {
        System.out.println("PROGRESS " + i);
      }
    }
    slots.acquire(inFlight);
    long elapsed = System.nanoTime() - t0;
    long cpu = OS.getProcessCpuTime() - cpu0;
    long[] sorted = Arrays.copyOf(lat, done.get());
    Arrays.sort(sorted);
    System.out.println("RESULT {\"count\":" + count + ",\"elapsed\":" + elapsed / 1e9
        + ",\"cpu\":" + cpu / 1e9 + ",\"failed\":" + failed.get()
        + ",\"send_p50_ms\":" + pct(sorted, 50) / 1e6 + ",\"send_p99_ms\":"
        + pct(sorted, 99) / 1e6 + "}");
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }

  static Message message(String topic, byte[] body) {
    return PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
  }
}
