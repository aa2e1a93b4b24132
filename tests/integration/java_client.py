"""Running a Java client program of tests/integration/java/ against a cluster's own jars
(they include rocketmq-client and fastjson): compiled once, run as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

JAVA_DIR = Path(__file__).with_name("java")


def compile_java(source: str, lib_dir: str, out: Path) -> str:
    """``JAVA_DIR/source`` compiled into ``out``; the classpath to run it with (skips the
    test without a JDK)."""
    javac = shutil.which("javac")
    if javac is None or shutil.which("java") is None:
        pytest.skip("a JDK (java, javac) is needed for the Java client")
    cp = f"{lib_dir}/*"
    subprocess.run([javac, "-nowarn", "-cp", cp, "-d", str(out), str(JAVA_DIR / source)],
                   check=True, capture_output=True)  # fmt: skip
    return f"{out}:{cp}"


def run_java(classpath: str, tmp: Path, main: str, *args: str) -> subprocess.Popen[str]:
    """``main`` started with ``args`` (stdout and stderr in one text pipe)."""
    exe = shutil.which("java")
    assert exe is not None
    argv = [exe, f"-Duser.home={tmp}", "-Xmx256m", "-cp", classpath, main, *args]
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_TOOL_OPTIONS", "NAMESRV_ADDR")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)  # fmt: skip
