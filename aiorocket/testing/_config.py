"""Config files and JVM command lines of the local RocketMQ processes."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

CLUSTER = "DefaultCluster"
LOOPBACK = "127.0.0.1"
#: Heap per JVM: small on purpose (CI boxes, shared 2-core machines). Override with
#: AIOROCKET_RMQ_JAVA_OPTS, appended last so that its -Xmx/-Xms win.
HEAP = {"namesrv": "256m", "proxy": "768m", "broker": "512m"}
JVM_OPTS = (
    "-XX:+UseSerialGC",
    "-XX:MaxDirectMemorySize=512m",
    "-XX:-OmitStackTraceInFastThrow",
    "-Dfile.encoding=UTF-8",
    # The shaded logback otherwise dumps ~170 status lines into stdout at start-up.
    "-Dlogback.statusListenerClass="
    "org.apache.rocketmq.logging.ch.qos.logback.core.status.NopStatusListener",
)
MAIN = {
    "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
    "proxy": "org.apache.rocketmq.proxy.ProxyStartup",
    "broker": "org.apache.rocketmq.broker.BrokerStartup",
}
#: The process's main log under <user.home>/logs/rocketmqlogs/.
MAIN_LOG = {"namesrv": "namesrv.log", "proxy": "proxy.log", "broker": "broker.log"}


def props(values: dict[str, object]) -> str:
    """A Java properties file (booleans lower-case)."""
    out = []
    for key, value in values.items():
        out.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}\n")
    return "".join(out)


def namesrv_conf(port: int) -> str:
    return props({"listenPort": port, "bindAddress": LOOPBACK})


def broker_conf(name: str, port: int, namesrv: str, store: Path, cluster: str = CLUSTER,
                extra: dict[str, object] | None = None, major: int = 5) -> str:  # fmt: skip
    """broker.conf of a master broker on loopback, tuned for tests (+ ``extra`` settings);
    ``major`` 4 leaves out the keys of features a 4.x broker does not have."""
    return props({
        "brokerClusterName": cluster, "brokerName": name, "brokerId": 0,
        "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
        "namesrvAddr": namesrv, "brokerIP1": LOOPBACK, "bindAddress": LOOPBACK,
        "listenPort": port, "storePathRootDir": store,
        # Off, as production should run: a send to a missing topic fails (NoRouteError)
        # instead of creating a 4-queue topic on one broker, so the docs' and examples'
        # creation step is exercised. A test that needs auto-creation turns it on.
        "autoCreateTopicEnable": False, "autoCreateSubscriptionGroup": True,
        "enablePropertyFilter": True,  # SQL92 filters (4.x and 5.x: off by default)
        # RMQ_SYS_TRACE_TOPIC, where clients write message trace records by default
        # (aiorocket trace=True, Java enableMsgTrace): off by default, and a system topic
        # cannot be created by request (docs/trace.md)
        "traceTopicEnable": True,
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,  # default 1 GiB
        # Writes are refused above diskSpaceWarningLevelRatio, which is clamped to <= 90.
        "diskSpaceWarningLevelRatio": 90, "diskSpaceCleanForciblyRatio": 90,
        "diskMaxUsedSpaceRatio": 95,
        # A busy shared CI box must not turn into SYSTEM_BUSY answers.
        "waitTimeMillsInSendQueue": 1000, "osPageCacheBusyTimeOutMills": 5000,
        **(_BROKER_5X if major >= 5 else {}),
        **(extra or {}),
    })  # fmt: skip


#: broker.conf keys of 5.x features (a 4.x broker ignores unknown keys, but its conf
#: should say only what it does).
_BROKER_5X: dict[str, object] = {
    "timerWheelEnable": True,  # 5.x timer (arbitrary delay) messages; default anyway
    "recallMessageEnable": True,  # Producer.recall (5.3.2+; off by default)
    # Lite topics (5.5+): a lite message reaches its lite topic's queue (an LMQ) by
    # multi-dispatch; both are off by default, and then lite consumers get nothing.
    "enableLmq": True, "enableMultiDispatch": True,
    # RocketMQ 5.5.0's TransactionalOpBatchService spins a whole core, for good, once
    # a half-topic queue's op batch has been idle for transactionOpBatchInterval: its
    # loop takes that queue's last write time as the next wake-up, which is already
    # past. Writing each op at once (max size 1) and never waking on the timer keeps
    # it out of that state; every benchmark after a transaction test depended on it.
    # The price: ServiceThread.waitForRunning loses a wakeup() that falls between its
    # hasNotified test and waitPoint.reset(), and then this thread sleeps the whole
    # interval (24.8 days) while END_TRANSACTION keeps queueing op records (20000, then
    # each written at once after a 100 ms wait): the transactions ended meanwhile are
    # checked back although ended (seen under load on 2026-11-29; tests must allow it).
    "transactionOpMsgMaxSize": 1, "transactionOpBatchInterval": 2**31 - 1,
    # Every timerFlushIntervalMs (default 1 s) the timer store compares its whole
    # 7-day wheel (38.7 MB) byte by byte with the mapped file before msync: a burst of
    # 20-110 ms on one core, every second, traffic or not. On 2 shared cores it was
    # the main source of the end-to-end latency tail. Flushing every 10 min keeps timer
    # messages working; a crashed broker recovers from an older checkpoint.
    "timerFlushIntervalMs": 600_000,
}  # fmt: skip


def proxy_json(
    namesrv: str, broker_conf_path: Path, grpc: int, remoting: int,
    extra: dict[str, object] | None = None,
) -> str:  # fmt: skip
    """rmq-proxy.json for ``ProxyStartup -pm local`` (proxy + broker in one JVM), with
    ``extra`` keys (e.g. the Proxy's own ``authenticationEnabled``)."""
    cfg = {
        "rocketMQClusterName": CLUSTER, "namesrvAddr": namesrv, "proxyMode": "local",
        "brokerConfigPath": str(broker_conf_path), "grpcServerPort": grpc,
        "remotingListenPort": remoting, "localServeAddr": LOOPBACK,
        "remotingAccessAddr": LOOPBACK, "enablePrintJstack": False,
        # Negative route-cache entries last this long (default 20 s): pitfall 8.
        "topicRouteServiceCacheRefreshSeconds": 5,
        # Messages a push consumer receives with auto-renewal are invisible 10 s (the
        # smallest the Proxy allows; default 60 s) and renewed 7 s before that ends
        # (slack for a loaded machine), checked every second: a consumer that dies hands
        # its messages back sooner, and tests exercise the renewal in seconds.
        "defaultInvisibleTimeMills": 10_000, "renewAheadTimeMillis": 7_000,
        "renewSchedulePeriodMillis": 1_000,
        # An ack that meets a renewal of the same message waits for it (default 3 s)
        # rather than going to the broker with the handle the renewal replaces, which the
        # broker accepts and ignores (the message came back after its ack under load).
        "lockTimeoutMsInHandleGroup": 10_000,
        **(extra or {}),
    }  # fmt: skip
    return json.dumps(cfg, indent=2) + "\n"


#: RocketMQ 4.x configures its (unshaded) logback from ROCKETMQ_HOME/conf/logback_<kind>.xml
#: and exits at start-up when the file is missing; 5.x reads the one in its jars.
LOGBACK_4X = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/logs/rocketmqlogs/{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %p %t %c{{0}} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""
#: JVM options of a 4.x process on Java 17 instead of the 5.x ones: its logback is not
#: shaded, and it reflects into java.nio to unmap the store's files.
JVM_OPTS_4X = (
    *JVM_OPTS[:-1],
    "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
)


def logback_files(major: int) -> dict[str, str]:
    """The files a ``major`` release needs in ROCKETMQ_HOME/conf (none for 5.x)."""
    if major >= 5:
        return {}
    return {f"logback_{kind}.xml": LOGBACK_4X.format(log=MAIN_LOG[kind])
            for kind in ("namesrv", "broker")}  # fmt: skip


def jvm_argv(java: str, kind: str, classpath: str, home: Path, rocketmq_home: Path,
             args: list[str], system_props: dict[str, str] | None = None,
             major: int = 5) -> list[str]:  # fmt: skip
    heap = HEAP[kind]
    return [
        java, "-server", f"-Xms{heap}", f"-Xmx{heap}", *(JVM_OPTS if major >= 5 else JVM_OPTS_4X),
        f"-Duser.home={home}",  # logs -> <home>/logs/rocketmqlogs
        f"-Drocketmq.home.dir={rocketmq_home}",
        f"-Drmq.logback.configurationFile=rmq.{kind}.logback.xml",
        *(f"-D{k}={v}" for k, v in (system_props or {}).items()),
        *shlex.split(os.environ.get("AIOROCKET_RMQ_JAVA_OPTS", "")),
        "-cp", classpath, MAIN[kind], *args,
    ]  # fmt: skip


def jvm_env(rocketmq_home: Path) -> dict[str, str]:
    drop = ("NAMESRV_ADDR", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["ROCKETMQ_HOME"] = str(rocketmq_home)
    return env
