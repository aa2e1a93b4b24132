"""The shell sessions of docs/cli.md: parse them, run each command as written, compare.

A session is a ```text block of ``$ command`` lines, each followed by its output and
``[exit N]``. Commands run in bash (the quoting a reader copies is the quoting tested)
with the venv's ``aiorocket`` first on PATH. Output is compared after masking what
changes between runs: ids, times, addresses, numbers, message bodies after `` | ``, and
table borders; a line ``...`` in the doc stands for any lines (a cluster-wide listing).

``python -m tests.integration.doc_commands`` rewrites the outputs of docs/cli.md with
a real run (the shared cluster, ``$AIOROCKET_NAMESRV_ADDR``).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
_BLOCK = re.compile(r"```text\n(\$ .*?)```", re.S)
_EXIT = re.compile(r"^\[exit (\d+)\]$")
_ID = re.compile(r"\b[0-9A-F]{32}\b")
_MASKS = [
    # a tail line: where it went, when, its id; the rest is the producer's random choice
    # of a queue (which messages share one)
    (re.compile(r"^(broker-[a-z]:\d+@\d+ +\S+ +[0-9A-F]{32}) .*$"), r"\1 REST"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "TIME"),
    (_ID, "ID"),
    # the local broker's directory: the shared one, or a test session's private cluster
    (re.compile(r"/\S*aiorocket-(?:test-)?broker-\S*"), "DIR"),
    (re.compile(r"\bDIR/\S*"), "DIR"),  # a path under a base directory replaced already
    (re.compile(r"\d+\.\d+\.\d+\.\d+:\d+"), "ADDR"),
    # which broker and queue a message went to is the producer's random choice
    (re.compile(r"\bbroker-[a-z]:\d+"), "QUEUE"),
    (re.compile(r'"broker": "broker-[a-z]"'), '"broker": BROKER'),
    (re.compile(r"(?<= \| ).*$"), "BODY"),
    (re.compile(r'"body": "(\\"|[^"])*"'), '"body": BODY'),
    (re.compile(r"\d[\d,.]*"), "N"),
    (re.compile(r"[─━│┃┏┓┗┛┡┩└┘┳┻╇┴┼┬├┤╋]+"), " "),
]


@dataclass
class Step:
    command: str
    output: list[str]
    exit_code: int
    #: where the step's lines are in its block (for rewriting the doc)
    block: int = 0
    lines: list[str] = field(default_factory=list)


def steps(text: str | None = None) -> list[Step]:
    """Every ``$ command`` of the doc, in order, with its documented output and exit code."""
    found: list[Step] = []
    for b, match in enumerate(_BLOCK.finditer(text if text is not None else DOC.read_text())):
        current: Step | None = None
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                current = Step(line[2:], [], 0, b)
                found.append(current)
            elif current is not None and (m := _EXIT.match(line)):
                current.exit_code = int(m.group(1))
            elif current is not None:
                current.output.append(line)
    return found


def normalize(lines: list[str], base_dir: str = "") -> list[str]:
    out = []
    for line in lines:
        if base_dir:
            line = line.replace(base_dir, "DIR")
        for pattern, mask in _MASKS:
            line = pattern.sub(mask, line)
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def matches(documented: list[str], actual: list[str]) -> bool:
    """Line by line; a documented ``...`` matches any number of lines."""
    if not documented:
        return not actual
    if documented[0] == "...":
        return any(matches(documented[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and documented[0] == actual[0] and matches(documented[1:], actual[1:])


class Ids:
    """The documented message ids and this run's, paired in the order they are printed."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def learn(self, documented: list[str], actual: list[str]) -> None:
        documented_ids = _ID.findall("\n".join(documented))
        for doc_id, real_id in zip(documented_ids, _ID.findall("\n".join(actual)), strict=False):
            self.seen.setdefault(doc_id, real_id)

    def apply(self, command: str) -> str:
        return _ID.sub(lambda m: self.seen.get(m.group(0), m.group(0)), command)


def run(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    result = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=180,
    )  # fmt: skip
    return result.returncode, result.stdout.rstrip("\n").splitlines()


def shell_env(namesrv: str, broker_dir: str) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIOROCKET_NAMESRV_ADDR": namesrv,
        "AIOROCKET_BROKER_DIR": broker_dir,
        "COLUMNS": "200",
        "NO_COLOR": "1",
        "TZ": "UTC",
    }


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


def rewrite(results: dict[int, tuple[int, list[str]]]) -> str:
    """docs/cli.md with each step's output replaced by ``results[step index]``."""
    text = DOC.read_text()
    index = 0

    def block(match: re.Match[str]) -> str:
        nonlocal index
        body: list[str] = []
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                code, lines = results[index]
                body += [line, *lines, f"[exit {code}]"]
                index += 1
        return "```text\n" + "\n".join(body) + "\n```"

    return _BLOCK.sub(block, text)


# -- the state the doc's sessions assume, and what runs beside some commands ---------------

TOPICS = ["shop-orders", "shop-temp", "shop-chat", "%DLQ%shop-refunds", "%RETRY%shop-refunds"]
GROUPS = ["shop-billing", "shop-audit", "shop-refunds", "shop-mailer", "shop-chat-readers"]


async def fresh_state(namesrv: str) -> None:
    """The doc starts from nothing: its topics and groups deleted."""
    from aiorocket.admin import Admin
    from aiorocket.errors import TopicNotExistError

    async with Admin(namesrv) as admin:
        for topic in TOPICS:
            with contextlib.suppress(TopicNotExistError):
                await admin.delete_topic(topic)
        for group in GROUPS:
            await admin.delete_group(group, missing_ok=True)


@contextlib.asynccontextmanager
async def running_producer(namesrv: str) -> AsyncIterator[None]:
    from aiorocket.message import Message
    from aiorocket.producer import Producer

    async with Producer("shop-checkout", namesrv, client_id="shop-checkout-1") as producer:
        await producer.send(Message("shop-orders", b"{}"))  # connected to a broker
        yield


@contextlib.asynccontextmanager
async def running_mailer(namesrv: str) -> AsyncIterator[None]:
    from aiorocket.consumer import ConsumeFromWhere, Consumer

    consumer = Consumer("shop-mailer", namesrv, handler=lambda msg: None,
                        client_id="shop-mailer-1", long_poll_timeout=1.0,
                        consume_from_where=ConsumeFromWhere.LAST_OFFSET)  # fmt: skip
    consumer.subscribe("shop-orders")
    async with consumer:
        yield


@contextlib.asynccontextmanager
async def dead_letters(namesrv: str) -> AsyncIterator[None]:
    """shop-refunds fails on each paid order once, and they go to its DLQ (no retries)."""
    from aiorocket.admin import Admin
    from aiorocket.consumer import ConsumeFromWhere, Consumer

    from .helpers import eventually

    def refuse(msg: object) -> None:
        raise RuntimeError("refund service down")

    # long_poll_timeout: the broker answers held pulls soon after the consumer closed
    # (each answer creates the group again, which the next run's fresh start deletes)
    consumer = Consumer("shop-refunds", namesrv, handler=refuse, max_reconsume_times=0,
                        long_poll_timeout=1.0,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe("shop-orders", "paid")
    async with consumer, Admin(namesrv) as admin:

        async def both_dead() -> bool:
            return len(await admin.dead_letters("shop-refunds")) == 2

        await eventually(both_dead, timeout=60)
    yield


HOOKS = {
    "producer list": running_producer,
    "consume-directly": running_mailer,
    "dlq list shop-refunds": dead_letters,
}


def run_all(namesrv: str, broker_dir: str, cwd: Path) -> list[tuple[Step, int, list[str]]]:
    """Run every step of the doc from a fresh state; (step, exit code, output lines)."""
    import anyio
    import anyio.from_thread

    anyio.run(fresh_state, namesrv)
    env = shell_env(namesrv, broker_dir)
    ids = Ids()
    results = []
    with anyio.from_thread.start_blocking_portal() as portal:
        for step in steps():
            hook = next((h for key, h in HOOKS.items() if key in step.command), None)
            beside = (
                portal.wrap_async_context_manager(hook(namesrv)) if hook else nothing()
            )
            with beside:
                code, lines = run(ids.apply(step.command), cwd, env)
            ids.learn(step.output, lines)
            results.append((step, code, lines))
    return results


if __name__ == "__main__":
    import tempfile

    from aiorocket.testing.broker import LocalRocketMQ

    inst = LocalRocketMQ.attach()
    assert inst is not None, "start the local broker first"
    with tempfile.TemporaryDirectory() as tmp:
        done = run_all(inst.namesrv_addr, str(inst.base_dir), Path(tmp))
    DOC.write_text(rewrite({i: (code, lines) for i, (_, code, lines) in enumerate(done)}))
    print(f"rewrote {len(done)} outputs of {DOC}")
