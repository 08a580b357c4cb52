"""Tests read nothing that a user's clone lacks: ``../shared`` and any checkout beside the repository.

An audit hook (:func:`sys.addaudithook`) sees every file the test process opens or lists; a path inside
``../shared`` (``../shared/traces/x.csv``) or inside another checkout of lenscope beside the repository (a copy, a
frozen worktree) is recorded, and the autouse fixture in ``conftest.py`` fails
the test that touched it. Everything else is allowed, wherever the clone sits: beside a clone in /tmp lie pytest's
temporary folders (``/tmp/pytest-of-USER``), beside one in the home folder the model cache (``~/.cache``) and
the user's other checkouts (``~/.pyenv``, where the interpreter may live).
Subprocesses (the CLI, the streamlit server) are covered by ``.ci/run``, which runs the suite in a clone made
directly under /tmp, with nothing of the project beside it.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EVENTS = {"open", "os.listdir", "os.scandir"}
SHARED = "shared"  # the workplace's folder beside the checkout, which no user's clone has

touched: list[str] = []
_installed = False


@cache
def _checkout(folder: str) -> bool:
    """Whether ``folder`` is another checkout of lenscope: a git checkout (a ``.git`` folder, or a worktree's
    ``.git`` file) with lenscope's top level (``app.py``, ``pages/``, ``lenscope/``). Other checkouts beside a clone
    are a user's own (``~/.pyenv`` is one, holding the interpreter). Read with ``stat`` alone: opening a file here
    would call the hook again."""
    return (os.path.lexists(os.path.join(folder, ".git")) and os.path.isfile(os.path.join(folder, "app.py"))
            and all(os.path.isdir(os.path.join(folder, d)) for d in ("pages", "lenscope")))


def neighbour(path: str | os.PathLike, repo: Path = REPO) -> bool:
    """Whether ``path`` (relative to the working directory) lies in ``repo``'s ``../shared`` or in a checkout
    beside ``repo``: what a test must not read."""
    resolved = os.path.realpath(os.fspath(path))
    parent, root = str(repo.parent), str(repo)
    if resolved == root or resolved.startswith(root + os.sep) or not resolved.startswith(parent + os.sep):
        return False
    first = resolved[len(parent) + 1:].split(os.sep, 1)[0]
    return first == SHARED or _checkout(os.path.join(parent, first))


def _hook(event: str, args: tuple) -> None:
    if event in EVENTS and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0])
        if neighbour(path):
            touched.append(path)


def install() -> None:
    """Start recording (once per process: audit hooks cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
