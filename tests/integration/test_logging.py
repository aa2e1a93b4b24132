"""What an application sees of aiorocket's logs: stdlib ``logging`` decides.

Each case runs a producer and a consumer against the real broker in a fresh interpreter,
so no logging or structlog configuration of the test session leaks in.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import structlog

from aiorocket._log import get_logger
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import sys
    import anyio
    from aiorocket import Message
    from aiorocket.consumer import ConsumeFromWhere, Consumer
    from aiorocket.producer import Producer

    SETUP

    async def main(namesrv, topic, group):
        async with Producer(group + "-p", namesrv) as producer:
            await producer.send(Message(topic, b"hello"))
        consumer = Consumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic)
        async with consumer:
            async for msg in consumer:
                await msg.ack()
                break

    anyio.run(main, *sys.argv[1:])
    """
)


def run_client(rocketmq: LocalRocketMQ, topic: str, group: str, setup: str) -> tuple[str, str]:
    code = SCRIPT.replace("SETUP", setup)
    proc = subprocess.run(
        [sys.executable, "-c", code, rocketmq.namesrv_addr, topic, group],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


@pytest.fixture
def topic(rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]) -> str:
    name = unique_name("log")
    import anyio

    anyio.run(rocketmq.create_topic, name, 2)
    return name


def test_unconfigured_application_sees_nothing_below_warning(
    rocketmq: LocalRocketMQ, topic: str, unique_name: Callable[[str], str]
) -> None:
    out, err = run_client(rocketmq, topic, unique_name("g"), "")
    assert out == ""
    assert err == ""


def test_logging_at_debug_shows_events_with_context(
    rocketmq: LocalRocketMQ, topic: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    setup = "import logging; logging.basicConfig(level=logging.DEBUG, format='%(name)s %(levelname)s %(message)s')"  # noqa: E501
    out, err = run_client(rocketmq, topic, group, setup)
    lines = err.splitlines()
    started = [ln for ln in lines if ln.startswith("aiorocket.consumer INFO consumer_started")]
    assert started and f"group={group}" in started[0] and topic in started[0], err
    assert any(ln.startswith("aiorocket.remoting.pool DEBUG connected address=") for ln in lines)
    assert any(ln.startswith("aiorocket.producer INFO producer_started group=") for ln in lines)
    assert out == ""


def test_levels_are_set_per_logger(
    rocketmq: LocalRocketMQ, topic: str, unique_name: Callable[[str], str]
) -> None:
    setup = (
        "import logging; logging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s');"
        " logging.getLogger('aiorocket').setLevel(logging.INFO)"
    )
    _, err = run_client(rocketmq, topic, unique_name("g"), setup)
    assert "consumer_started" in err
    assert "aiorocket.remoting.pool connected" not in err


def test_structlog_processor_formatter_renders_the_event_dict(
    rocketmq: LocalRocketMQ, topic: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    setup = textwrap.dedent(
        """
        import logging, structlog
        handler = logging.StreamHandler()
        handler.setFormatter(structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.add_logger_name,
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.JSONRenderer()]))
        logging.getLogger("aiorocket").addHandler(handler)
        logging.getLogger("aiorocket").setLevel(logging.INFO)
        """
    )
    _, err = run_client(rocketmq, topic, group, setup)
    events = [json.loads(line) for line in err.splitlines()]
    started = [e for e in events if e["event"] == "consumer_started"]
    assert started == [
        {"event": "consumer_started", "group": group, "client_id": started[0]["client_id"],
         "topics": sorted([topic, f"%RETRY%{group}"]), "logger": "aiorocket.consumer"}
    ]  # fmt: skip


def test_plain_formatter_shows_context_and_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    target = logging.getLogger("aiorocket.test")
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        log = get_logger("test", queue=3)
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            log.exception("boom", topic="my topic")
        log.debug("quiet", n=1)
    finally:
        target.removeHandler(handler)
        target.setLevel(logging.NOTSET)
    text = stream.getvalue()
    assert text.startswith("boom queue=3 topic='my topic'\nTraceback"), text
    assert "ZeroDivisionError" in text
    assert "quiet queue=3 n=1" in text
    assert structlog.is_configured() is False  # aiorocket never configures structlog


@pytest.mark.skipif(sys.version_info < (3, 11), reason="caller's frame found on 3.11+")
def test_records_point_at_the_calling_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiorocket")
    log = get_logger("test")
    log.debug("d")
    log.info("i")
    log.bind(x=1).warning("w")
    log.error("e")
    try:
        raise KeyError("k")
    except KeyError:
        log.exception("x")
    log.critical("c")
    assert [(r.filename, r.funcName) for r in caplog.records] == [
        ("test_logging.py", "test_records_point_at_the_calling_line")
    ] * 6


def test_capture_logs_sees_debug_events_with_context() -> None:
    with capture_logs() as events:
        get_logger("test", group="g").bind(topic="t").debug("hello", n=2)
    assert events == [{"event": "hello", "group": "g", "topic": "t", "n": 2,
                       "log_level": "debug", "logger": "aiorocket.test"}]  # fmt: skip
