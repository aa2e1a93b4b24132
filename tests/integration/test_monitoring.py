"""The Grafana dashboard and the Prometheus alert rules of monitoring/, against a real
Prometheus (the `prometheus` Debian package; scripts/test.sh installs it) scraping two
instances of examples/fastapi_service.py under load against the real broker.

* ``promtool check rules`` accepts the shipped rules;
* every PromQL expression of the dashboard (its panels and its variables) and the
  quantity of every alert (its expression without the threshold) returns data;
* the lag alert fires for the group whose consumer stopped consuming (its handlers
  hang) and not for the group that keeps up; the dead-letter alert fires for the group
  a poison message was dead-lettered in; the no-assigned-queues alert for the group
  whose topic does not exist.

Prometheus scrapes and evaluates every second, and the rules run with their windows
scaled from minutes to seconds (``[10m]`` -> ``[10s]``, ``for: 10m`` -> ``for: 10s``),
so the test takes about a minute; the expressions are otherwise the shipped ones.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from aiorocket import Message
from aiorocket.admin import Admin
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets
from tests.integration import test_service_examples as examples
from tests.integration.test_service_examples import Service, _free_port, eventually

pytestmark = pytest.mark.integration
services = examples.services  # the fixture starting example services as processes

MONITORING = snippets.REPO / "monitoring"
RULES = MONITORING / "aiorocket-alerts.yml"
DASHBOARD = MONITORING / "aiorocket-dashboard.json"
INTERVAL = "10s"  # Grafana's $__rate_interval, for 1 s scrapes
THRESHOLD = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[-+]?[0-9.]+(e[-+]?\d+)?\s*$")
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: apt-get install prometheus (scripts/test.sh does)"
    return path


def scaled(rules: str) -> str:
    """The rules with their windows and durations in seconds instead of minutes."""
    rules = re.sub(r"\[(\d+)m\]", r"[\1s]", rules)
    return re.sub(r"for: (\d+)m", r"for: \1s", rules)


def alert_quantities(rules: str) -> dict[str, str]:
    """Each alert's expression parts (``a > 1 and b > 0``: a and b) without thresholds."""
    out = {}
    for group in yaml.safe_load(rules)["groups"]:
        for rule in group["rules"]:
            parts = re.split(r"\n\s*and\s*\n", rule["expr"].strip())
            for i, part in enumerate(parts):
                quantity, found = THRESHOLD.subn("", part.strip())
                assert found, f"{rule['alert']}: no threshold at the end of {part!r}"
                out[f"{rule['alert']}[{i}]"] = quantity
    return out


def dashboard_queries(variables: dict[str, str]) -> dict[str, str]:
    """Every query of the dashboard as PromQL, Grafana's variables replaced."""
    dash = json.loads(DASHBOARD.read_text())
    out = {}
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out[f"{panel['title']}/{target['refId']}"] = target["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            m = LABEL_VALUES.match(var["query"]["query"])
            assert m, var["query"]
            out[f"${var['name']}"] = f"group by ({m.group(2)}) ({m.group(1)})"
    for name, expr in out.items():
        for var, value in variables.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"{name}: a variable left in {expr}"
        out[name] = expr
    return out


class Prometheus:
    def __init__(self, tmp: Path, targets: list[str]) -> None:
        (tmp / "rules.yml").write_text(scaled(RULES.read_text()))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(tmp / "rules.yml")],
            "scrape_configs": [{"job_name": "orders", "metrics_path": "/metrics/",
                                "static_configs": [{"targets": targets}]}],
        }  # fmt: skip
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = _free_port()
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [_tool("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        self.log_path = tmp / "prometheus.log"

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]  # type: ignore[no-any-return]

    def alerts(self, name: str, state: str) -> list[dict[str, str]]:
        found = self.http.get("/api/v1/alerts").json()["data"]["alerts"]
        return [a["labels"] for a in found if a["labels"]["alertname"] == name
                and a["state"] == state]  # fmt: skip

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.http.close()
        self.log.close()


async def _create_group(namesrv: str, group: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_group(group)


def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run([_tool("promtool"), "check", "rules", str(RULES)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def test_alert_quantities_are_found_in_the_rules() -> None:
    """The parsing below finds both sides of the lag alert and one quantity per other."""
    names = sorted(alert_quantities(RULES.read_text()))
    assert "RocketMQConsumerLagGrowing[1]" in names and len(names) == 7


@pytest.fixture
def load(rocketmq: LocalRocketMQ) -> Iterator[Callable[[Service], None]]:
    """Orders posted to a service at about 40/s until the test ends."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def post(service: Service) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{service.port}", timeout=10) as http:
            while not stop.is_set():
                http.post("/orders", json={"item": "book", "quantity": 1}).raise_for_status()
                stop.wait(0.025)  # pacing the load

    def start(service: Service) -> None:
        threads.append(threading.Thread(target=post, args=(service,), daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for t in threads:
        t.join(15)


def test_dashboard_and_alerts_against_a_real_prometheus(
    rocketmq: LocalRocketMQ,
    services: Callable[..., Service],
    load: Callable[[Service], None],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, keeps_up, stopped = unique_name("orders"), unique_name("ga"), unique_name("gb")
    anyio.run(rocketmq.create_topic, topic, 2)
    fast = {"AIOROCKET_CONSUMER_REBALANCE_INTERVAL": "0.5", "ORDERS_LAG_INTERVAL": "1",
            "AIOROCKET_CONSUMER_PERSIST_OFFSET_INTERVAL": "1", "ORDERS_TOPIC": topic}  # fmt: skip
    # The service that keeps up; one retry (1 s later), then the dead-letter queue.
    api = services("fastapi", ORDERS_GROUP=keeps_up, AIOROCKET_CONSUMER_MAX_RECONSUME_TIMES="1",
                   AIOROCKET_CONSUMER_RETRY_DELAY_LEVEL="1", **fast)  # fmt: skip
    # A consumer of the same topic that stopped consuming: its handlers never return.
    hung = services("fastapi", ORDERS_GROUP=stopped, ORDER_PROCESSING_SECONDS="3600",
                    ORDER_SHUTDOWN_TIMEOUT="1", **fast)  # fmt: skip
    # A consumer of a topic nobody created: it joins its group, and gets no queue.
    idle_group = unique_name("gc")
    idle = services("fastapi", ORDERS_GROUP=idle_group, **{**fast, "ORDERS_TOPIC": topic + "-x"})
    # The same through the Proxy (gRPC: a pop consumer, no queues of its own): its series
    # is the Proxy's assignments, 0 for a missing topic (it had no series at all).
    idle_grpc = unique_name("gd")
    anyio.run(_create_group, rocketmq.namesrv_addr, idle_grpc)  # the Proxy serves known groups
    idle2 = services("fastapi", ORDERS_GROUP=idle_grpc, ORDERS_PROXY=rocketmq.proxy_grpc,
                     ORDERS_TOPIC=topic + "-y", ORDERS_LAG_INTERVAL="1")  # fmt: skip
    scraped = (api, hung, idle, idle2)
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{s.port}" for s in scraped])
    try:
        api.wait_listening()
        hung.wait_listening()
        idle.wait_listening()
        idle2.wait_listening()
        eventually(lambda: api.get("/health/ready").status_code == 200)
        eventually(lambda: hung.get("/health/ready").status_code == 200)
        eventually(prometheus.ready)
        load(api)
        # Prometheus has scraped the counter at 0 (the topic's first orders were handled)
        # before the poison message increments it.
        group_is = f'messaging_consumer_group_name="{keeps_up}"'
        dead = f"aiorocket_consumer_dead_lettered_total{{{group_is}}}"
        eventually(lambda: bool(prometheus.query(dead)))

        async def poison() -> None:  # not JSON: the handler raises on every attempt
            async with Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
                await producer.send(Message(topic, b"not json"))

        anyio.run(poison)
        # No `for:` on this alert, and its rate window is 5 s here: it fires for a while.
        dlq = "RocketMQMessagesDeadLettered"
        eventually(lambda: bool(prometheus.alerts(dlq, "firing")), timeout=30)
        assert {a["messaging_consumer_group_name"] for a in prometheus.alerts(dlq, "firing")} == {
            keeps_up
        }

        none = "RocketMQConsumerNoAssignedQueues"
        eventually(lambda: bool(prometheus.alerts(none, "firing")), timeout=30)
        eventually(lambda: len(prometheus.alerts(none, "firing")) == 2, timeout=30)
        assert {a["messaging_consumer_group_name"] for a in prometheus.alerts(none, "firing")} == {
            idle_group, idle_grpc
        }

        lag = "RocketMQConsumerLagGrowing"
        eventually(lambda: bool(prometheus.alerts(lag, "firing")), timeout=90)
        firing = prometheus.alerts(lag, "firing")
        assert {a["messaging_consumer_group_name"] for a in firing} == {stopped}
        assert {a["messaging_destination_name"] for a in firing} == {topic}
        assert not [a for a in prometheus.alerts(lag, "pending")
                    if a["messaging_consumer_group_name"] == keeps_up]  # fmt: skip

        variables = {"$__rate_interval": INTERVAL, "$group": f"{keeps_up}|{stopped}",
                     "$topic": topic}  # fmt: skip
        queries = {**dashboard_queries(variables), **alert_quantities(scaled(RULES.read_text()))}
        assert len(queries) > 20
        no_data = {}
        for name, expr in queries.items():
            # a window of a few seconds may not hold two samples yet: ask again a while
            deadline = time.monotonic() + 20
            while not (result := prometheus.query(expr)) and time.monotonic() < deadline:
                time.sleep(1)  # the next scrape and evaluation
            if not result:
                no_data[name] = expr
        assert no_data == {}
    finally:
        prometheus.close()
