"""Fetch the Apache RocketMQ server jars from Maven Central into a per-user cache.

No distribution tarball and no container: Maven resolves ``rocketmq-namesrv``,
``-broker``, ``-proxy`` and ``-tools`` (one version; a 4.x release has no ``-proxy``) with
``copy-dependencies`` into ``<cache>/<version>/lib``. The newest 5.x release that actually
resolves is used (some releases miss jars on Central) unless ``AIOROCKET_RMQ_VERSION`` (or
the caller) pins one, e.g. one of the older lines the tests cover (``TESTED_VERSIONS``). The chosen
version is remembered in ``<cache>/resolved.json``, so later runs neither probe nor need
the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CENTRAL_GROUP = "https://repo.maven.apache.org/maven2/org/apache/rocketmq"
METADATA_URL = f"{CENTRAL_GROUP}/rocketmq-broker/maven-metadata.xml"
#: Used when Maven Central's metadata cannot be read (newest first).
FALLBACK_VERSIONS = ("5.5.0", "5.3.3")
ARTIFACTS = ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-proxy", "rocketmq-tools")
#: The releases the test command runs against: the default (newest 5.x that resolves,
#: 5.5.0 here), the last 5.3 and the last 4.x that resolve from Maven Central (4.9.8 and
#: 5.3.4 do not). Their suites are marked ``broker53`` and ``broker49``.
RMQ_49, RMQ_53 = "4.9.7", "5.3.3"
TESTED_VERSIONS = ("5.5.0", RMQ_53, RMQ_49)
#: Probing stops after this many versions failed to resolve.
MAX_PROBES = 4
VERSION_ENV = "AIOROCKET_RMQ_VERSION"

POM_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.aiorocket</groupId>
  <artifactId>rmq-server-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""
_DEP = (
    "    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
    "<version>{v}</version></dependency>"
)
_VERSION_RE = re.compile(r"^5\.(\d+)\.(\d+)$")


class BrokerSetupError(RuntimeError):
    """The local RocketMQ cannot be provisioned (missing tool, unresolvable jars, ...).

    Deliberately not a [`RocketMQError`][aiorocket.errors.RocketMQError]: it is about the test
    harness's machine (Java, Maven, ports, processes), not an answer of RocketMQ, so an
    ``except RocketMQError`` in client code never swallows a broken test setup. (The test
    harness's admin requests, which are RocketMQ answers, raise ``AdminError``, a
    ``RocketMQError``.)"""


class MissingToolError(BrokerSetupError):
    """Java or Maven is not installed, or the platform is not one the harness runs on."""


@dataclass(frozen=True)
class Jars:
    version: str
    lib_dir: Path

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")


def major(version: str) -> int:
    """The major release of ``version`` ("4.9.7" -> 4; unparsable -> 5, the default line)."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 5


def artifacts(version: str) -> tuple[str, ...]:
    """The artifacts to fetch: RocketMQ 4.x has no Proxy (it came with 5.0)."""
    if major(version) >= 5:
        return ARTIFACTS
    return tuple(a for a in ARTIFACTS if a != "rocketmq-proxy")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aiorocket" / "rocketmq"


def _version_key(version: str) -> tuple[int, int]:
    m = _VERSION_RE.match(version)
    return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)


def find_java() -> str:
    """The ``java`` executable: ``$AIOROCKET_JAVA``, ``$JAVA_HOME/bin/java`` or PATH."""
    explicit = os.environ.get("AIOROCKET_JAVA")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise MissingToolError(f"AIOROCKET_JAVA={explicit} is not an executable Java")
        return explicit
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise MissingToolError(
            "Java is required to run the local RocketMQ: install a JDK/JRE 17 "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return found


def find_maven() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise MissingToolError(
            "Maven is required once to download the RocketMQ server jars: install Maven 3 "
            "(e.g. `apt-get install maven`), or pre-populate "
            f"{cache_root()}/<version>/lib"
        )
    return found


def is_complete(lib_dir: Path, version: str) -> bool:
    if not (lib_dir / ".complete").is_file():
        return False
    return all((lib_dir / f"{a}-{version}.jar").is_file() for a in artifacts(version))


def cached_versions() -> list[str]:
    """Versions with a complete lib directory in the cache, newest first."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = [p.name for p in root.iterdir() if is_complete(p / "lib", p.name)]
    return sorted(found, key=_version_key, reverse=True)


def remote_versions(timeout: float = 15.0) -> list[str]:
    """Released 5.x versions listed on Maven Central, newest first."""
    with urllib.request.urlopen(METADATA_URL, timeout=timeout) as resp:
        tree = ET.fromstring(resp.read())
    versions = [v.text.strip() for v in tree.iter("version") if v.text]
    return sorted({v for v in versions if _VERSION_RE.match(v)}, key=_version_key, reverse=True)


def missing_on_central(version: str, timeout: float = 10.0) -> list[str]:
    """Top-level artifacts whose jar is absent from Maven Central (HEAD requests).

    A cheap pre-check: a broken release (5.5.1) is skipped without Maven downloading
    ~100 MB first. Network errors count as "not known missing"; Maven decides then.
    """
    missing = []
    for a in ARTIFACTS:
        url = f"{CENTRAL_GROUP}/{a}/{version}/{a}-{version}.jar"
        req = urllib.request.Request(url, method="HEAD")
        try:
            with urllib.request.urlopen(req, timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                missing.append(a)
        except OSError:
            pass
    return missing


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    import fcntl  # POSIX: imported here so that the module imports everywhere

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remembered() -> str | None:
    try:
        data = json.loads((cache_root() / "resolved.json").read_text())
    except (OSError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def _remember(version: str, failed: list[str]) -> None:
    doc = {"version": version, "unresolvable": failed, "resolved_at": time.time()}
    (cache_root() / "resolved.json").write_text(json.dumps(doc, indent=2) + "\n")


def _log(msg: str) -> None:
    print(f"[aiorocket.testing] {msg}", file=sys.stderr, flush=True)


def download(version: str) -> Jars:
    """Run Maven copy-dependencies for ``version``; raise BrokerSetupError if it fails."""
    mvn = find_maven()
    vdir = cache_root() / version
    vdir.mkdir(parents=True, exist_ok=True)
    deps = "\n".join(_DEP.format(a=a, v=version) for a in artifacts(version))
    (vdir / "pom.xml").write_text(POM_TEMPLATE.format(deps=deps))
    partial = vdir / f"lib.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    log_path = vdir / "maven.log"
    cmd = [
        mvn, "-B", "-q", "-f", str(vdir / "pom.xml"),
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
        f"-DoutputDirectory={partial}", "-DincludeScope=runtime",
    ]  # fmt: skip
    _log(f"resolving Apache RocketMQ {version} jars with Maven (log: {log_path}) ...")
    started = time.monotonic()
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0 or not all((partial / f"{a}-{version}.jar").is_file() for a in artifacts(version)):
        shutil.rmtree(partial, ignore_errors=True)
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise BrokerSetupError(
            f"Maven could not resolve RocketMQ {version} (exit {rc}); {log_path}:\n"
            + "\n".join(tail)
        )
    (partial / ".complete").write_text(version + "\n")
    lib = vdir / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    partial.rename(lib)
    took = time.monotonic() - started
    _log(f"RocketMQ {version}: {len(list(lib.glob('*.jar')))} jars in {took:.1f}s")
    return Jars(version, lib)


def resolve(version: str | None = None, *, refresh: bool = False) -> Jars:
    """The server jars: the pinned version, the remembered one, or the newest 5.x that resolves."""
    version = version or os.environ.get(VERSION_ENV) or None
    root = cache_root()
    with _locked(root / ".lock"):
        if version is not None:
            lib = root / version / "lib"
            return Jars(version, lib) if is_complete(lib, version) else download(version)
        remembered = None if refresh else _remembered()
        if remembered is not None and is_complete(root / remembered / "lib", remembered):
            return Jars(remembered, root / remembered / "lib")
        try:
            candidates = remote_versions()
        except (OSError, ET.ParseError) as exc:
            cached = cached_versions()
            if cached:
                _log(f"Maven Central metadata unreachable ({exc}); using cached {cached[0]}")
                return Jars(cached[0], root / cached[0] / "lib")
            _log(f"Maven Central metadata unreachable ({exc}); trying {FALLBACK_VERSIONS}")
            candidates = list(FALLBACK_VERSIONS)
        failed: list[str] = []
        errors: list[str] = []
        for candidate in candidates[:MAX_PROBES]:
            lib = root / candidate / "lib"
            if is_complete(lib, candidate):
                jars = Jars(candidate, lib)
            elif missing := missing_on_central(candidate):
                _log(
                    f"RocketMQ {candidate}: {', '.join(missing)} missing on Maven Central; skipped"
                )
                failed.append(candidate)
                continue
            else:
                try:
                    jars = download(candidate)
                except MissingToolError:
                    raise
                except BrokerSetupError as exc:
                    _log(f"RocketMQ {candidate} does not resolve; trying an older release")
                    failed.append(candidate)
                    errors.append(str(exc))
                    continue
            _remember(jars.version, failed)
            return jars
        raise BrokerSetupError(
            f"no Apache RocketMQ 5.x release resolved (tried {failed}); last error:\n"
            + (errors[-1] if errors else "none")
        )
