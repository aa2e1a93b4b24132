"""Print the requirements of pyproject.toml's dependency groups (PEP 735), one a line.

Used by bootstrap.sh only when the venv's pip is too old for ``pip install --group``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        sys.exit("pip >= 25.1 (or the tomli package) is needed to install dependency groups")


def requirements(groups: dict[str, list[Any]], name: str, seen: tuple[str, ...] = ()) -> list[str]:
    if name in seen:
        sys.exit(f"dependency group {name!r} includes itself")
    out: list[str] = []
    for item in groups[name]:
        if isinstance(item, dict):
            out += requirements(groups, item["include-group"], (*seen, name))
        else:
            out.append(item)
    return out


def main() -> None:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    groups = tomllib.loads(pyproject.read_text())["dependency-groups"]
    for name in sys.argv[1:]:
        print(*requirements(groups, name), sep="\n")


if __name__ == "__main__":
    main()
