"""The docs pages as the app shows them (the Docs page, :mod:`pages`): read from ``docs/``, with links between pages
pointing into the app and mkdocs-only syntax (markers, admonitions, the API reference's directives) turned into
plain markdown. The same file is the site's page and the app's: nothing is written twice."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from lenscope.store.settings import APP_ROOT

DOCS_ROOT = APP_ROOT / "docs"
APP_PAGE = "Docs"  # pages/8_Docs.py's URL
NAV_ENTRY = re.compile(r"^\s*-\s+(?P<title>[^:]+):\s+(?P<path>\S+\.md)\s*$")
LINK = re.compile(r"\]\((?P<target>[^)\s:]+\.md)(?P<anchor>#[^)\s]*)?\)")
IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]+)\)\s*$")
ADMONITION = re.compile(r'^(!!!|\?\?\?\+?)\s+\w+(?:\s+"(?P<title>[^"]*)")?\s*$')


def page_url(slug: str, anchor: str = "") -> str:
    """The app's URL of the docs page ``slug`` (``guide/token-entropy``), relative to any page of the app."""
    return f"./{APP_PAGE}?page={slug}{anchor}"


def nav(root: Path = DOCS_ROOT) -> dict[str, str]:
    """slug -> title of every page in ``mkdocs.yml``'s nav order (beside ``root``), then any page it leaves out."""
    found: dict[str, str] = {}
    config = root.parent / "mkdocs.yml"
    if config.is_file():
        for line in config.read_text(encoding="utf-8").splitlines():
            if m := NAV_ENTRY.match(line):
                found[m["path"].removesuffix(".md")] = m["title"].strip()
    for path in sorted(root.rglob("*.md")):
        found.setdefault(path.relative_to(root).with_suffix("").as_posix(), path.stem.replace("-", " ").capitalize())
    return {slug: title for slug, title in found.items() if (root / f"{slug}.md").is_file()}


@dataclass(frozen=True)
class Part:
    """A run of markdown, or an image file (``image`` set) with its caption."""

    markdown: str = ""
    image: Path | None = None


def _link(slug: str, match: re.Match) -> str:
    target = posixpath.normpath(posixpath.join(posixpath.dirname(slug), match["target"])).removesuffix(".md")
    return f"]({page_url(target, match['anchor'] or '')})"


def page_parts(slug: str, root: Path = DOCS_ROOT) -> list[Part]:
    """The page ``slug`` as parts the app draws in order; an unknown slug raises ``FileNotFoundError``."""
    if slug not in nav(root):
        raise FileNotFoundError(f"no docs page {slug!r}")
    path = root / f"{slug}.md"
    parts: list[Part] = []
    lines: list[str] = []
    quoting = skipping = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if (quoting or skipping) and (line.startswith("    ") or not line.strip()):
            if quoting:
                lines.append(("> " + line[4:]).rstrip())
            continue
        quoting = skipping = False
        if line.startswith("<!-- lenscope:"):
            continue
        if m := ADMONITION.match(line):
            quoting = True
            lines.append(f"> **{m['title']}**" if m["title"] else ">")
        elif line.startswith(":::"):
            skipping = True
            lines.append(f"*`{line[3:].strip()}`: its reference is in the built site (`make docs`).*")
        elif m := IMAGE.match(line):
            parts.append(Part("\n".join(lines)))
            lines = []
            parts.append(Part(m["alt"], (path.parent / m["path"]).resolve()))
        else:
            lines.append(LINK.sub(lambda match: _link(slug, match), line))
    parts.append(Part("\n".join(lines)))
    return [p for p in parts if p.image is not None or p.markdown.strip()]
