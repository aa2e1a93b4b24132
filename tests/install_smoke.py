"""Run inside a fresh venv holding only ``pip install <repo>`` (no extras, no dev tools).

Imports every module of the installed ``aiorocket`` and constructs every public client.
A module may fail to import only for want of an optional dependency that one of the
distribution's extras declares, and its error must then say which extra to install.
Prints one JSON line with what it saw; exits non-zero on any other failure. Run from a
directory outside the repository, so that the installed package (not the source tree)
is the one imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pkgutil
import re
import sys
import traceback

DIST = "aiorocketmq"
# Distributions whose import name differs from their name.
IMPORT_NAMES = {"opentelemetry_api": "opentelemetry"}


def extra_modules() -> dict[str, str]:
    """Top-level import name -> extra, for every requirement that only an extra pulls in."""
    out: dict[str, str] = {}
    for req in importlib.metadata.requires(DIST) or []:
        m = re.match(r"\s*([A-Za-z0-9_.-]+).*;.*extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m:
            name = m.group(1).lower().replace("-", "_")
            out[IMPORT_NAMES.get(name, name)] = m.group(2)
    # aiorocket.testing.pytest_plugin is loaded by pytest only (its pytest11 entry point)
    out["pytest"] = "pytest (the runner that loads the plugin)"
    return out


def import_all() -> tuple[list[str], dict[str, str], list[str]]:
    import aiorocket

    optional = extra_modules()
    imported, needs_extra, failed = [], {}, []
    # A package that needs an extra cannot be walked into: it is reported below.
    walk = pkgutil.walk_packages(aiorocket.__path__, "aiorocket.", onerror=lambda _: None)
    names = ["aiorocket"] + [m.name for m in walk]
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top in optional:
                needs_extra[name] = optional[top]
                # It must say what to install, not only what is missing.
                hint = f"pip install '{DIST}[{optional[top]}]'"
                if top != "pytest" and hint not in str(exc):
                    failed.append(f"{name}: the error does not name {hint!r}: {exc}")
                continue
            failed.append(f"{name}: {exc!r}")
        except Exception as exc:
            failed.append(f"{name}: {exc!r}")
        else:
            imported.append(name)
    return imported, needs_extra, failed


async def construct_clients() -> list[str]:
    from aiorocket.consumer import Consumer, PullConsumer
    from aiorocket.producer import Producer

    clients = [
        Consumer("smoke-consumer", "127.0.0.1:9876"),
        PullConsumer("smoke-pull", "127.0.0.1:9876"),
        Producer("smoke-producer", "127.0.0.1:9876"),
    ]
    return [type(c).__name__ for c in clients]


def main() -> int:
    import anyio

    imported, needs_extra, failed = import_all()
    clients: list[str] = []
    try:
        clients = anyio.run(construct_clients)
    except Exception:
        failed.append(f"constructing clients: {traceback.format_exc()}")
    print(json.dumps({"imported": imported, "needs_extra": needs_extra, "clients": clients,
                      "failed": failed}))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
