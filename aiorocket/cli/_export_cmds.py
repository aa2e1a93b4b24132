"""``aiorocket export monitoring|examples DIR``: write out the files the package ships
(the Grafana dashboard and Prometheus alert rules; the example programs), so a pip user
has what the docs point at without the repository."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import click

from aiorocket.cli._common import EXIT_USAGE, fail, out

_WHAT = {
    "monitoring": "the Grafana dashboard and the Prometheus alert rules",
    "examples": "the example programs the docs show",
}


def shipped(kind: str) -> dict[str, bytes]:
    """The files of ``kind`` (monitoring, examples) in the installed package, by name."""
    folder = files("aiorocket").joinpath("_assets").joinpath(kind)
    return {
        f.name: f.read_bytes()
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.is_file() and not f.name.startswith((".", "__"))
    }


@click.command("export")
@click.argument("kind", type=click.Choice(sorted(_WHAT)))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def export(kind: str, directory: Path, force: bool) -> None:
    """Write the shipped monitoring files (dashboard, alert rules) or the examples into
    DIRECTORY (created if missing)."""
    found = shipped(kind)
    clash = sorted(name for name in found if (directory / name).exists())
    if clash and not force:
        fail(f"{directory / clash[0]} exists (and {len(clash) - 1} more): --force overwrites",
             EXIT_USAGE)  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        (directory / name).write_bytes(data)
        out.print(str(directory / name))
    out.print(f"wrote {len(found)} file(s): {_WHAT[kind]}")
