"""Rendered regions of a markdown file: the lines between ``<!-- lenscope:begin NAME -->`` and
``<!-- lenscope:end NAME -->`` belong to the block ``NAME`` and are written by code, never by hand."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

BEGIN = re.compile(r"^<!-- lenscope:begin (?P<name>[a-z0-9-]+) -->$")
END = re.compile(r"^<!-- lenscope:end (?P<name>[a-z0-9-]+) -->$")
ANY_MARKER = re.compile(r"^<!-- lenscope:(begin|end)\b")


class RegionError(ValueError):
    """A file's markers do not pair up, or name no known block."""


@dataclass(frozen=True)
class Region:
    """One block's place in a file: its name, the line of its begin marker (0-based) and its current body."""

    name: str
    line: int
    body: str


def regions(text: str, source: str = "<text>") -> Iterator[Region]:
    """The rendered regions of ``text`` in order; a marker without its pair, nested or misspelt, raises."""
    lines = text.split("\n")
    open_at: tuple[str, int] | None = None
    for number, line in enumerate(lines):
        begin, end = BEGIN.match(line), END.match(line)
        if not (begin or end):
            if ANY_MARKER.match(line):
                raise RegionError(f"{source}:{number + 1}: a marker must read `<!-- lenscope:begin NAME -->` or "
                                  f"`<!-- lenscope:end NAME -->` alone on its line (NAME: a-z, 0-9, -)")
            continue
        if begin:
            if open_at is not None:
                raise RegionError(f"{source}:{number + 1}: block {begin['name']!r} begins inside {open_at[0]!r} "
                                  f"(opened on line {open_at[1] + 1})")
            open_at = (begin["name"], number)
            continue
        if open_at is None or end["name"] != open_at[0]:
            raise RegionError(f"{source}:{number + 1}: `end {end['name']}` closes no open block of that name")
        name, start = open_at
        yield Region(name, start, "\n".join(lines[start + 1:number]))
        open_at = None
    if open_at is not None:
        raise RegionError(f"{source}:{open_at[1] + 1}: block {open_at[0]!r} is never closed")


def rendered(text: str, render: Callable[[str], str], source: str = "<text>") -> str:
    """``text`` with every region's body replaced by ``render(name)`` (the markers stay)."""
    lines = text.split("\n")
    for region in reversed(list(regions(text, source))):
        body_lines = region.body.split("\n") if region.body else []
        new = render(region.name).strip("\n")
        lines[region.line + 1:region.line + 1 + len(body_lines)] = new.split("\n") if new else []
    return "\n".join(lines)


def stale(path: Path, render: Callable[[str], str]) -> list[str]:
    """The names of ``path``'s blocks whose body differs from what ``render`` gives now."""
    text = path.read_text(encoding="utf-8")
    return [r.name for r in regions(text, str(path)) if r.body.strip("\n") != render(r.name).strip("\n")]
