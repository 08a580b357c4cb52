"""The mkdocs hook of ``mkdocs.yml``: before building, every rendered table of README.md and docs/ must agree with
``data/results`` and ``data/benchmarks``, or the build fails naming the tables (fix: ``python -m lenscope docs``)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

from lenscope.docs.regions import RegionError
from lenscope.docs.site import RENDER_COMMAND, check


def on_pre_build(config) -> None:
    """Fail the build when a rendered table is out of date, or a marker is malformed or names no block."""
    try:
        stale = check(Path(config["config_file_path"]).parent)
    except RegionError as exc:
        raise PluginError(str(exc)) from exc
    if stale:
        raise PluginError("rendered tables disagree with data/: " + "; ".join(map(str, stale))
                          + f" (run `{RENDER_COMMAND}`)")
