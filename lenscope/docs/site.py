"""The documented files of a checkout (``README.md`` and every page under ``docs/``) and their rendered blocks:
write them all, or list the ones that disagree with ``data/``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lenscope.docs.blocks import Renderer, Sources
from lenscope.docs.regions import rendered, stale
from lenscope.models.atomic_files import write_text

RENDER_COMMAND = "python -m lenscope docs"


def documented_files(root: Path) -> list[Path]:
    """README.md and the markdown pages of ``docs/`` under ``root`` (a checkout), in a fixed order."""
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def sources_of(root: Path) -> Sources:
    """The results and benchmark records of the checkout at ``root``."""
    return Sources(results=root / "data" / "results", benchmarks=root / "data" / "benchmarks")


@dataclass(frozen=True)
class Disagreement:
    """A file whose rendered ``blocks`` differ from what ``data/`` gives now."""

    path: Path
    blocks: list[str]

    def __str__(self) -> str:
        return f"{self.path}: {', '.join(self.blocks)}"


def check(root: Path, render: Callable[[str], str] | None = None) -> list[Disagreement]:
    """Every documented file of ``root`` whose blocks disagree with its ``data/`` (empty: all agree)."""
    render = render or Renderer(sources_of(root))
    found = [Disagreement(p, stale(p, render)) for p in documented_files(root)]
    return [d for d in found if d.blocks]


def write(root: Path, render: Callable[[str], str] | None = None) -> list[Path]:
    """Render every block of ``root``'s documented files; returns the files that changed (each written whole)."""
    render = render or Renderer(sources_of(root))
    changed = []
    for path in documented_files(root):
        text = path.read_text(encoding="utf-8")
        new = rendered(text, render, str(path))
        if new != text:
            write_text(path, new)
            changed.append(path)
    return changed
