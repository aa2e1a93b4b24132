"""The layers of the package (docs/architecture.md) as an importer meets them.

`lint-imports` (scripts/test.sh) checks the import graph; these check what an import
actually loads. Each runs in a fresh interpreter: this one has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aiorocket

REPO = Path(__file__).resolve().parents[2]

#: Packages and modules above the protocol layer: none of them may come with a low import.
ABOVE_PROTOCOL = ("consumer", "producer", "grpc", "client", "remoting", "admin", "cli",
                  "integrations", "spark", "testing", "env", "_transport", "security",
                  "namespace")  # fmt: skip


def loaded_by(statement: str) -> list[str]:
    """The aiorocket modules that a fresh interpreter has loaded after ``statement``."""
    code = textwrap.dedent(f"""
        import json, sys
        {statement}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "aiorocket")))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    loaded: list[str] = json.loads(proc.stdout)
    return loaded


def above_protocol(modules: list[str]) -> list[str]:
    return [m for m in modules if m.count(".") and m.split(".")[1] in ABOVE_PROTOCOL]


def test_the_frame_codec_loads_only_the_core_and_the_protocol() -> None:
    loaded = loaded_by("import aiorocket.protocol.frame")
    assert "aiorocket.protocol.frame" in loaded
    assert above_protocol(loaded) == []
    # (74 modules before the root package loaded its clients lazily)
    assert len(loaded) < 20, loaded


@pytest.mark.parametrize("module", ["aiorocket.errors", "aiorocket.message", "aiorocket"])
def test_the_core_loads_no_client(module: str) -> None:
    loaded = loaded_by(f"import {module}")
    assert above_protocol(loaded) == []
    assert not [m for m in loaded if m.startswith("aiorocket.protocol.")], loaded


def test_a_client_named_on_the_root_package_is_loaded_when_first_used() -> None:
    loaded = loaded_by("import aiorocket; aiorocket.Producer")
    assert "aiorocket.producer.producer" in loaded
    assert not [m for m in loaded if m.startswith("aiorocket.consumer")], loaded


def test_every_name_of_the_root_package_resolves_to_its_defining_object() -> None:
    from aiorocket import consumer, errors, message, producer
    from aiorocket._version import __version__

    assert aiorocket.__version__ is __version__
    for name in set(aiorocket.__all__) - {"__version__"}:
        value = getattr(aiorocket, name)
        homes = [m for m in (consumer, producer, errors, message) if name in m.__all__]
        assert homes, f"{name} is exported by no public module"
        assert all(getattr(m, name) is value for m in homes), name
    assert set(aiorocket.__all__) <= set(dir(aiorocket))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        aiorocket.Nope  # noqa: B018
