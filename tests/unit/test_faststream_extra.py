"""aiorocket.faststream without the extra says which extra to install."""

from __future__ import annotations

import subprocess
import sys


def test_without_faststream_the_module_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['faststream'] = None\n"
        "try:\n"
        "    import aiorocket.faststream\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name); print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()  # fmt: skip
    assert out == [
        "faststream",
        "aiorocket.faststream needs the 'faststream' extra (faststream is missing): "
        "pip install 'aiorocketmq[faststream]'",
    ]
