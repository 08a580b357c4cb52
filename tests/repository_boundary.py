"""Tests read nothing outside the repository: a user's clone has no ``../shared`` (or anything else) beside it.

An audit hook (:func:`sys.addaudithook`) sees every file the test process opens or lists; a path in the
repository's parent folder but outside the repository (``../shared/traces/x.csv``, a sibling checkout) is
recorded, and the autouse fixture in ``conftest.py`` fails the test that touched it. Paths elsewhere (the
temporary folders, site-packages, the Hugging Face cache) are not the repository's neighbours and are allowed.
Subprocesses (the CLI, the streamlit server) are covered by ``.ci/run``, which runs the suite in a clone with
nothing beside it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EVENTS = {"open", "os.listdir", "os.scandir"}

touched: list[str] = []
_installed = False


def outside_repository(path: str | os.PathLike, repo: Path = REPO) -> bool:
    """Whether ``path`` (relative to the working directory) lies beside the repository rather than in it."""
    resolved = os.path.realpath(os.fspath(path))
    parent, root = str(repo.parent), str(repo)
    beside = resolved == parent or resolved.startswith(parent + os.sep)
    inside = resolved == root or resolved.startswith(root + os.sep)
    return beside and not inside


def _hook(event: str, args: tuple) -> None:
    if event in EVENTS and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0])
        if outside_repository(path):
            touched.append(path)


def install() -> None:
    """Start recording (once per process: audit hooks cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
