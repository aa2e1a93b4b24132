"""MkDocs hooks: pages generated from the code, so the docs cannot drift from it.

* ``<!-- config-reference: package.module.Class -->`` becomes a table of the config
  dataclass's fields: name, type, default (as written in the source) and the ``#:``
  comment above the field.
* ``<!-- benchmark-chart -->`` becomes a bar chart (inline SVG) of the throughput rows of
  the median table in benchmarks/README.md.

The hooks read the source files and never import aiorocket, so that the ``docs``
dependency group alone builds the site (mkdocstrings reads the code statically too).
"""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CONFIG = re.compile(r"<!-- config-reference: ([\w.]+) -->")
CHART = "<!-- benchmark-chart -->"
CHART_ROWS = ("consume msg/s", "produce msg/s")


def config_table(path: str) -> str:
    module_name, _, class_name = path.rpartition(".")
    source = (REPO / (module_name.replace(".", "/") + ".py")).read_text()
    lines = source.splitlines()
    cls = next(
        (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name),
        None,
    )
    if cls is None:
        raise ValueError(f"config-reference: no class {class_name} in {module_name}")
    rows = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        comment: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            comment.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        default = ast.unparse(node.value) if node.value is not None else ""
        cells = [f"`{node.target.id}`", f"`{ast.unparse(node.annotation)}`", f"`{default}`",
                 " ".join(comment).replace("|", "\\|")]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def benchmark_rows() -> tuple[list[str], dict[str, list[float]]]:
    text = (REPO / "benchmarks" / "README.md").read_text()
    header: list[str] = []
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "metric" and not header:
            header = [c.strip("`") for c in cells[1:-1]]
        elif header and cells[0] in CHART_ROWS and cells[0] not in values:
            values[cells[0]] = [float(c.replace(",", "")) if c else 0.0 for c in cells[1:-1]]
    return header, values


def chart_svg() -> str:
    clients, values = benchmark_rows()
    if not values:
        raise ValueError("benchmarks/README.md has no median table to chart")
    bar_h, gap, left, width = 18, 36, 110, 460
    height = len(values) * (len(clients) * bar_h + gap) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" '
           f'height="{height}" font-family="sans-serif" font-size="12">']  # fmt: skip
    y = 0
    for metric, row in values.items():
        top = max(row)
        out.append(f'<text x="0" y="{y + 14}" font-weight="bold">{html.escape(metric)}</text>')
        y += 22
        for client, value in zip(clients, row, strict=True):
            w = 0 if not value else max(1, round(width * value / top))
            shown = f"{value:,.0f}" if value else "n/a"
            out += [
                f'<text x="0" y="{y + 13}">{html.escape(client)}</text>',
                f'<rect x="{left}" y="{y + 2}" width="{w}" height="{bar_h - 4}" fill="#3f51b5"/>',
                f'<text x="{left + w + 6}" y="{y + 13}">{shown}</text>',
            ]
            y += bar_h
        y += gap - 22
    out.append("</svg>")
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    markdown = CONFIG.sub(lambda m: config_table(m.group(1)), markdown)
    if CHART in markdown:
        markdown = markdown.replace(CHART, chart_svg())
    return markdown
