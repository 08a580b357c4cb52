"""The app's Docs page reads docs/ as it is: links between pages stay in the app, mkdocs-only syntax becomes plain
markdown, and every page the app links to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lenscope.docs.pages import nav, page_parts, page_url

REPO = Path(__file__).resolve().parents[3]


def _docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (tmp_path / "mkdocs.yml").write_text("nav:\n  - Home: index.md\n  - Guide:\n      - Entropy: guide/entropy.md\n")
    (root / "index.md").write_text("# Home\n")
    (root / "shot.png").write_bytes(b"png")
    (root / "guide" / "entropy.md").write_text(
        "# Entropy\nSee [the home](../index.md) and [a part](other.md#part).\n"
        "<!-- lenscope:begin claims -->\n| a |\n|---|\n<!-- lenscope:end claims -->\n"
        '!!! note "Read this"\n    inside the note\n\n    still inside\nafter\n'
        "![a shot](../shot.png)\n"
        "::: lenscope.api\n    options:\n      members: [x]\nend\n")
    (root / "guide" / "other.md").write_text("# Other\n")
    return root


def test_nav_follows_mkdocs_then_lists_the_rest(tmp_path: Path) -> None:
    root = _docs(tmp_path)
    assert list(nav(root).items()) == [("index", "Home"), ("guide/entropy", "Entropy"), ("guide/other", "Other")]


def test_a_page_reads_as_plain_markdown_with_links_into_the_app(tmp_path: Path) -> None:
    root = _docs(tmp_path)
    parts = page_parts("guide/entropy", root)
    text = parts[0].markdown
    assert f"]({page_url('index')})" in text and f"]({page_url('guide/other', '#part')})" in text
    assert "lenscope:begin" not in text and "| a |" in text
    assert "> **Read this**\n> inside the note\n>\n> still inside" in text and "\nafter" in text
    assert parts[1].image == (root / "shot.png").resolve() and parts[1].markdown == "a shot"
    assert "`lenscope.api`" in parts[2].markdown and "members" not in parts[2].markdown
    assert parts[2].markdown.rstrip().endswith("end")
    with pytest.raises(FileNotFoundError, match="no docs page 'nope'"):
        page_parts("nope", root)


def test_every_docs_link_of_the_app_names_a_page() -> None:
    sources = [REPO / "app.py", *(REPO / "pages").glob("*.py"), *(REPO / "lenscope" / "app").glob("*.py")]
    linked = {m for p in sources for m in re.findall(r'docs_link\("([^"]+)"', p.read_text())}
    assert linked and linked <= set(nav(REPO / "docs"))
