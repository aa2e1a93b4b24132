"""The documentation site builds and its pages render the docstrings as Markdown.

The docstrings are numpy style with Markdown text (see mkdocs.yml). A Sphinx role
(``:class:`~x.Y```) shows literally on a page, and a ``>>>`` example or an RST ``::``
block is flattened into a paragraph (``>>>`` becomes nested block quotes): the checks
below find both on the built site, and are shown to find them on a page built from such
a docstring.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const|ref|doc):\s*[`~\w]")
CODE_BLOCK = re.compile(r"<pre\b.*?</pre>|<code\b.*?</code>", re.S)
TAG = re.compile(r"<[^>]+>")
PARAGRAPH = re.compile(r"<p\b[^>]*>(.*?)</p>", re.S)


def page_faults(page: str) -> list[str]:
    """What on one built page shows a docstring that did not render."""
    without_code = CODE_BLOCK.sub(" CODE ", page)
    text = html.unescape(TAG.sub("", without_code))
    faults = [f"raw role {m.group(0)!r}" for m in ROLE.finditer(text)]
    if ">>>" in text:
        faults.append("a >>> example outside a code block")
    if re.search(r"<blockquote>\s*<blockquote>", without_code):
        faults.append("nested block quotes (a flattened >>> example)")
    for para in PARAGRAPH.findall(without_code):
        body = html.unescape(TAG.sub("", para))
        if body.rstrip().endswith("::"):
            faults.append(f"an RST literal block flattened: {body[-60:]!r}")
        if re.search(r"^\.\.\.\s", body, re.M):
            faults.append(f"a continuation line of an example in a paragraph: {body[:60]!r}")
    return faults


def build(config: Path, site: Path, *, block_aiorocket: bool = False) -> None:
    # Blocking the import proves the hooks and mkdocstrings read the code statically, so
    # the `docs` dependency group alone (no aiorocket, no anyio) builds the site.
    prelude = "import sys; sys.modules['aiorocket'] = None; " if block_aiorocket else ""
    code = prelude + "from mkdocs.__main__ import cli; cli()"
    args = ["build", "--strict", "-f", str(config), "-d", str(site)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=config.parent, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build(REPO / "mkdocs.yml", out, block_aiorocket=True)
    return out


def test_built_pages_show_no_raw_role_or_flattened_example(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30
    faults = {str(p.relative_to(site)): f for p in pages if (f := page_faults(p.read_text()))}
    assert faults == {}


@pytest.mark.parametrize(
    ("page", "anchors"),
    [
        ("api/admin/index.html", ["aiorocket.admin.Admin", "aiorocket.admin.Admin.lag"]),
        ("api/grpc/index.html", ["aiorocket.grpc.PopMessage", "aiorocket.grpc.SimpleConsumer"]),
        (
            "api/spark/index.html",
            ["aiorocket.spark.register", "aiorocket.spark.source.RocketMQDataSource"],
        ),
    ],
)
def test_api_pages_exist(site: Path, page: str, anchors: list[str]) -> None:
    text = (site / page).read_text()
    for anchor in anchors:
        assert f'id="{anchor}"' in text


def test_signatures_formatted_examples_code_references_links(site: Path) -> None:
    page = (site / "api/consumer/index.html").read_text()
    consumer = page[page.index('id="aiorocket.consumer.Consumer"') :]
    consumer = consumer[: consumer.index("doc-section-title")]  # up to "Parameters:"
    blocks = [html.unescape(TAG.sub("", b)) for b in re.findall(r"<pre\b.*?</pre>", consumer, re.S)]
    # the long signature is formatted one parameter a line (ruff), not cut ...
    assert "\n    group: str,\n" in blocks[0]
    # ... the class docstring's example is a code block ...
    assert any('consumer.subscribe("orders"' in b for b in blocks[1:])
    # ... and a cross-reference a link to the documented class
    assert 'href="#aiorocket.consumer.ConsumerConfig"' in consumer


def test_the_checks_find_an_unconverted_docstring(tmp_path: Path) -> None:
    """A module documented in the Sphinx way, built with the project's options, is caught."""
    (tmp_path / "sphinxy.py").write_text(
        textwrap.dedent('''
            """Old style.

            >>> thing = Thing()
            >>> async with thing:
            ...     pass

            Layout::

                a b c
            """


            class Thing:
                """See :class:`~sphinxy.Thing` and :meth:`Thing.run`."""
        ''')
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\n::: sphinxy\n")
    project = (REPO / "mkdocs.yml").read_text()
    plugins = project[project.index("plugins:") : project.index("markdown_extensions:")]
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\ndocs_dir: docs\n{plugins}")
    build(tmp_path / "mkdocs.yml", tmp_path / "site")
    faults = page_faults((tmp_path / "site" / "index.html").read_text())
    assert any("raw role ':class:" in f for f in faults)
    assert any("raw role ':meth:" in f for f in faults)
    assert any("nested block quotes" in f for f in faults)
    assert any("literal block flattened" in f for f in faults)
