"""lenscope: interactive analysis of LLM output-length prediction (EGTP, PLP, OUTLETS)."""

from __future__ import annotations


def _version() -> str:
    """The installed distribution's version (package metadata); in a checkout run without an install, the version in
    its ``pyproject.toml`` marked ``+checkout``; else ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lenscope")
    except PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    try:
        project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text("utf-8"))
        return f"{project['project']['version']}+checkout"
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return "0+unknown"


__version__ = _version()
