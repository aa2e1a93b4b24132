"""The code blocks of the README and the docs, as the tests run them.

Every ```python block must run as written (in a fresh interpreter, with
``AIOROCKET_NAMESRV_ADDR`` set); a block that only includes a file of examples/
(``--8<-- "examples/x.py"``) is left to the examples' own test. Topics (and groups)
are created by the ``python -m aiorocket.testing.broker topic|group ...`` lines of the
```sh blocks, as a reader would.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aiorocket.testing import _cli
from aiorocket.testing.broker import LocalRocketMQ
from tests.forked import ForkServer

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INCLUDE = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.MULTILINE)
BROKER_CLI = "python -m aiorocket.testing.broker"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def include_only(self) -> bool:
        return INCLUDE.sub("", self.code).strip() == ""


def blocks(path: Path, lang: str) -> list[Block]:
    text = path.read_text()
    return [
        Block(path, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == lang
    ]


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path, "python") if not b.include_only]


def topic_commands(path: Path) -> list[list[str]]:
    """The arguments of each ``... broker topic|group`` command of the sh blocks."""
    out = []
    for block in blocks(path, "sh"):
        for line in block.code.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith((f"{BROKER_CLI} topic ", f"{BROKER_CLI} group ")):
                out.append(shlex.split(line[len(BROKER_CLI) :]))
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def run_python(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float, forks: ForkServer | None
) -> subprocess.CompletedProcess[str]:
    """``argv`` (``[python, "-c", code]`` or ``[python, path]``) in a child of ``forks``
    when given (tests/forked.py), else in an interpreter of its own."""
    if forks is not None:
        return forks.run(argv, env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def run_block(
    block: Block, env: dict[str, str], cwd: Path, python: str, forks: ForkServer | None = None
) -> None:
    """``python -c CODE`` with ``block``'s code; in a child of ``forks`` when given (and
    the block starts no JVM: its Spark needs its own interpreter)."""
    # A block that starts Spark (a JVM and Python workers) needs minutes on loaded cores.
    spark = "pyspark" in block.code
    proc = run_python([python, "-c", block.code], env, cwd, 360 if spark else 120,
                      None if spark else forks)  # fmt: skip
    assert proc.returncode == 0, f"{block.where} failed:\n{proc.stdout}\n{proc.stderr}"


def env_for(rocketmq: LocalRocketMQ) -> dict[str, str]:
    """What ``eval "$(python -m aiorocket.testing.broker status --env)"`` exports."""
    return {
        **os.environ,
        "AIOROCKET_NAMESRV_ADDR": rocketmq.namesrv_addr,
        "AIOROCKET_PROXY_GRPC": rocketmq.proxy_grpc,
        "AIOROCKET_PROXY_REMOTING": rocketmq.proxy_remoting,
        "AIOROCKET_BROKER_ADDRS": ";".join(rocketmq.broker_addrs.values()),
    }


def create_documented_topics(rocketmq: LocalRocketMQ) -> None:
    """The topics the docs tell a reader to create (the README's quick start, ...)."""
    for doc in doc_files():
        for args in topic_commands(doc):
            assert _cli.run([*args, "--dir", str(rocketmq.base_dir)]) == 0, args
